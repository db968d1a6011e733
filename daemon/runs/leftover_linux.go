//go:build linux

package runs

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/card-dev/card/spawn"
)

// endLeftoverGroup ends the processes of process group pgid that belong to
// run runID, and returns how many it signalled. A pgid is only a number: by
// the time a crashed daemon restarts, the kernel may have given it to an
// unrelated process group, so a process counts as the run's only when its
// environment carries CARD_RUN_ID=<runID>, which card set on the agent and
// every process it started inherits. Only processes of this user are
// readable, which is also the set card may signal.
func endLeftoverGroup(pgid int, runID string) int {
	if pgid <= 1 || runID == "" {
		return 0
	}
	pids := leftoverPIDs(pgid, runID)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(killGrace)
	for len(leftoverPIDs(pgid, runID)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range leftoverPIDs(pgid, runID) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// leftoverPIDs lists live (non-zombie) processes in group pgid whose
// environment names runID.
func leftoverPIDs(pgid int, runID string) []int {
	members, _ := spawn.GroupMembers(pgid)
	want := []byte(RunIDEnv + "=" + runID + "\x00")
	var out []int
	for _, pid := range members {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			continue
		}
		if bytes.HasPrefix(env, want) || bytes.Contains(env, append([]byte{0}, want...)) {
			out = append(out, pid)
		}
	}
	return out
}
