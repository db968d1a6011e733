package client

import (
	"os"

	"golang.org/x/sys/unix"
)

// verifyListener on macOS checks the process daemon.json names, through
// sysctl kern.proc.pid: it is running, its effective uid is this user's, and
// its command name is the daemon's executable's. What is NOT checked: who
// owns the socket listening on the port. macOS lists sockets with their
// owners only through libproc or the binary pcblist sysctl, neither of
// which is reachable here without cgo. So a daemon that died while another
// program of this user got its pid, and another user bound its port, is
// not caught; the token is new at every start, so what could be taken that
// way is the token of a daemon that is no longer running.
func verifyListener(home string, t target) error {
	return judgeProcess(home, t, os.Geteuid(), readProcess(t.pid))
}

func readProcess(pid int) process {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	// A pid that names no process answers with nothing, which the call
	// reports as an error.
	if err != nil || kp.Proc.P_pid != int32(pid) {
		return process{}
	}
	const zombie = 5 // SZOMB in <sys/proc.h>
	comm := kp.Proc.P_comm[:]
	for i, c := range comm {
		if c == 0 {
			comm = comm[:i]
			break
		}
	}
	return process{running: kp.Proc.P_stat != zombie, uid: int(kp.Eproc.Ucred.Uid), exe: string(comm)}
}
