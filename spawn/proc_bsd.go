//go:build unix && !linux

package spawn

import "syscall"

// sysProcAttr puts the child in its own process group. macOS has no
// Pdeathsig: the daemon records the group (RunSpec.OnStart) and ends a
// leftover one at its next startup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// groupMembersLive trusts kill(-pgid, 0) where there is no /proc.
func groupMembersLive(int) bool { return true }
