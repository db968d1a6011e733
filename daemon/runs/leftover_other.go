//go:build !linux

package runs

import (
	"bytes"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// endLeftoverGroup ends process group pgid if it still belongs to run
// runID, and returns how many processes it signalled (0 or 1: the group as
// a whole). On macOS children do not die with the daemon, so a crash leaves
// the agent running. A pgid is only a number the kernel may have reused, so
// the group is ended only when its leader's environment (read with the
// kern.procargs2 sysctl, which works for this user's own processes) carries
// CARD_RUN_ID=<runID>. If the leader is gone but members survive, nothing
// can prove they are ours and they are left alone (and logged by the caller).
func endLeftoverGroup(pgid int, runID string) int {
	if pgid <= 1 || runID == "" || !leaderIsRun(pgid, runID) {
		return 0
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(killGrace)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pgid, 0) != nil {
			return 1
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return 1
}

func leaderIsRun(pid int, runID string) bool {
	b, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("\x00"+RunIDEnv+"="+runID+"\x00"))
}
