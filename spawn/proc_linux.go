//go:build linux

package spawn

import "syscall"

// sysProcAttr puts the child in its own process group, so a deadline or
// cancel can end it with everything it started, and asks the kernel to
// SIGKILL it if the daemon dies: a crashed daemon must not leave an agent
// working unobserved. (Pdeathsig fires when the spawning OS thread exits;
// Go only retires threads of goroutines that called LockOSThread, which
// this package never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
