//go:build unix

package spawn

import (
	"errors"
	"syscall"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// signalGroup signals every process in the group led by pgid.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return errors.New("refusing to signal process group <= 1")
	}
	return syscall.Kill(-pgid, sig)
}

// groupAlive reports whether any live (non-zombie) process is still in the
// group.
func groupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	err := syscall.Kill(-pgid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return groupMembersLive(pgid)
}
