//go:build linux

package spawn

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so a deadline or
// cancel can end it with everything it started, and asks the kernel to
// SIGKILL it if the daemon dies: a crashed daemon must not leave an agent
// working unobserved. (Pdeathsig fires when the spawning OS thread exits;
// Go only retires threads of goroutines that called LockOSThread, which
// this package never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// groupMembersLive scans /proc for a member of the group that is not a
// zombie. kill(-pgid, 0) counts zombies, and a grandchild reparented to an
// init that reaps slowly (containers) would otherwise hold a run open for
// the whole grace period after it is already dead.
func groupMembersLive(pgid int) bool {
	members, ok := GroupMembers(pgid)
	return !ok || len(members) > 0
}

// GroupMembers lists the live (not zombie) processes of process group pgid,
// read from /proc; ok is false when /proc cannot be read, so a caller that
// must not give up on a group early can treat that as "maybe alive".
func GroupMembers(pgid int) (pids []int, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command's closing paren: state ppid pgrp ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids, true
}
