package daemon

// setupRuns registers the runs methods; it is filled in by the issue that owns
// them and kept as its own file so those changes do not collide.
func (d *Daemon) setupRuns() error { return nil }
