package daemon

// setupDiscover registers the discover methods; it is filled in by the issue that owns
// them and kept as its own file so those changes do not collide.
func (d *Daemon) setupDiscover() error { return nil }
