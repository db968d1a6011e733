//go:build !linux && !darwin

package client

import (
	"errors"
	"os"
	"syscall"
)

// verifyListener where card has no way to read sockets or processes
// (neither Linux nor macOS) checks only that the pid daemon.json names is
// running and may be signalled by this user, which for anyone but root
// means it is this user's. Neither the port's owner nor the executable is
// checked.
func verifyListener(home string, t target) error {
	p := process{running: true, uid: os.Geteuid()}
	switch err := syscall.Kill(t.pid, 0); {
	case errors.Is(err, syscall.ESRCH):
		p.running = false
	case errors.Is(err, syscall.EPERM):
		p.uid = -1
	}
	return judgeProcess(home, t, os.Geteuid(), p)
}
