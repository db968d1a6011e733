//go:build unix && !linux

package spawn

import "syscall"

// sysProcAttr puts the child in its own process group. macOS has no
// Pdeathsig: the daemon records the group (RunSpec.OnStart) and ends a
// leftover one at its next startup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
