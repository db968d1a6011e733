//go:build unix && !linux

package proc

import (
	"bytes"
	"context"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NewGroupKilledWithParent is NewGroup: there is no Pdeathsig here. The
// daemon records each agent's group and ends a leftover one at its next
// start (EndTaggedGroup).
func NewGroupKilledWithParent() *syscall.SysProcAttr { return NewGroup() }

// Alive reports whether pid exists. Without /proc a zombie cannot be told
// apart, and counts.
func Alive(pid int) bool { return exists(pid) }

// GroupMembers cannot list a group without /proc; ok is false, and callers
// trust kill(-pgid, 0) instead.
func GroupMembers(int) ([]int, bool) { return nil, false }

// SessionMembers cannot list a session without /proc; ok is false, and
// EndSession ends the leader's group instead.
func SessionMembers(int, string) ([]int, bool) { return nil, false }

// EndTaggedGroup ends process group pgid if it still belongs to the run
// name=value names, and returns how many processes it signalled (0 or 1: the
// group as a whole). A pgid is only a number the kernel may have reused, so
// the group is ended only when its leader's environment (read with the
// kern.procargs2 sysctl, which works for this user's own processes) carries
// name=value. If the leader is gone but members survive, nothing can prove
// they are the run's and they are left alone.
func EndTaggedGroup(pgid int, name, value string, grace time.Duration) int {
	if pgid <= 1 || name == "" || value == "" {
		return 0
	}
	b, err := unix.SysctlRaw("kern.procargs2", pgid)
	if err != nil || !bytes.Contains(b, []byte("\x00"+name+"="+value+"\x00")) {
		return 0
	}
	EndGroup(context.Background(), pgid, grace, nil)
	return 1
}

// EndTagged cannot find a process by its environment without /proc (every
// process's kern.procargs2 would have to be read); it ends nothing and
// returns 0.
func EndTagged(string, func(string) bool, time.Duration) int { return 0 }
