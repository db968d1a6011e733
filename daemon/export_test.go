package daemon

import (
	"testing"
	"time"
)

// UsePasswdFile has the daemons t starts read path as the passwd database.
func UsePasswdFile(t testing.TB, path string) {
	old := passwdFile
	passwdFile = path
	t.Cleanup(func() { passwdFile = old })
}

// RPCConnections is how many connections d's /rpc endpoint has open.
func RPCConnections(d *Daemon) int { return d.rpcSrv.ActiveConnections() }

// HoldRunsAfterTheirLastEvent has every run of d wait for hold between its
// terminal event and the answer of its outcome, so a test can act in that
// moment.
func HoldRunsAfterTheirLastEvent(t testing.TB, d *Daemon, hold time.Duration) {
	d.runs.SetFinishingHook(func(string) { time.Sleep(hold) })
	t.Cleanup(func() { d.runs.SetFinishingHook(nil) })
}
