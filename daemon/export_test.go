package daemon

import "testing"

// UsePasswdFile has the daemons t starts read path as the passwd database.
func UsePasswdFile(t testing.TB, path string) {
	old := passwdFile
	passwdFile = path
	t.Cleanup(func() { passwdFile = old })
}

// LoopbackDeliveries counts the notifications d has handed to its own
// connections in process.
func LoopbackDeliveries(d *Daemon) int64 { return d.loopbacks.delivered.Load() }
