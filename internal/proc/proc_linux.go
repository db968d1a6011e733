//go:build linux

package proc

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NewGroupKilledWithParent is NewGroup plus a SIGKILL from the kernel when the
// daemon dies: a crashed daemon must not leave an agent working unobserved.
// (Pdeathsig fires when the spawning OS thread exits; Go only retires threads
// of goroutines that called LockOSThread, which card never does.)
func NewGroupKilledWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// procStat is what /proc/<pid>/stat says about a process's place in the
// process tree.
type procStat struct {
	pid, pgrp, sid int
	state          byte
}

// readStat parses /proc/<pid>/stat. The fields that matter follow the
// command's closing paren (the command may itself contain parens and
// spaces): state ppid pgrp session ...
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return procStat{}, false
	}
	pgrp, err1 := strconv.Atoi(f[2])
	sid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{pid: pid, pgrp: pgrp, sid: sid, state: f[0][0]}, true
}

// zombie is a process that has exited and waits for its parent to reap it:
// it runs nothing and holds nothing open.
func (p procStat) zombie() bool { return p.state == 'Z' || p.state == 'X' }

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	if !exists(pid) {
		return false
	}
	st, ok := readStat(pid)
	return !ok || !st.zombie()
}

// scanProcs lists the live (not zombie) processes for which keep is true;
// ok is false when /proc cannot be read, so a caller that must not give up on
// a group early can treat that as "maybe alive". Counting a zombie would let
// a slow reaper (PID 1 in a container) hold a caller for its whole grace
// period.
func scanProcs(keep func(procStat) bool) (pids []int, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		st, ok := readStat(pid)
		if ok && !st.zombie() && keep(st) {
			pids = append(pids, pid)
		}
	}
	return pids, true
}

// GroupMembers lists the live (not zombie) processes of process group pgid,
// read from /proc; ok is false when /proc cannot be read.
func GroupMembers(pgid int) (pids []int, ok bool) {
	return scanProcs(func(p procStat) bool { return p.pgrp == pgid })
}

// SessionMembers lists the live processes of session sid and, when tty names
// a terminal device, every other live process that still has it open. A
// terminal's shell puts jobs in process groups of their own (job control), so
// the leader's group is not the terminal; and a child that called setsid has
// left the session but still holds the terminal open, and with it the
// terminal's output. The daemon's own process is never listed.
func SessionMembers(sid int, tty string) (pids []int, ok bool) {
	self := os.Getpid()
	return scanProcs(func(p procStat) bool {
		if p.pid == self {
			return false
		}
		return p.sid == sid || (tty != "" && holds(p.pid, tty))
	})
}

// holds reports whether process pid has path open. It reads the fd links
// without following them, so a descriptor on a hung network mount cannot
// stall the scan.
func holds(pid int, path string) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(dir + e.Name()); err == nil && l == path {
			return true
		}
	}
	return false
}

// EndTaggedGroup ends the processes of group pgid whose environment carries
// name=value, and returns how many it signalled. A pgid recorded before a
// crash is only a number: by the time the daemon restarts the kernel may
// have given it to an unrelated group, so a process counts only when its
// environment names the run (every process an agent starts inherits it).
// Only this user's processes are readable, which is also the set card may
// signal.
func EndTaggedGroup(pgid int, name, value string, grace time.Duration) int {
	if pgid <= 1 || name == "" || value == "" {
		return 0
	}
	want := []byte(name + "=" + value + "\x00")
	tagged := func() []int {
		members, _ := GroupMembers(pgid)
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
	first := tagged()
	if len(first) == 0 {
		return 0
	}
	end(context.Background(), grace, nil,
		func(sig syscall.Signal) {
			for _, pid := range tagged() {
				_ = syscall.Kill(pid, sig)
			}
		},
		func() bool { return len(tagged()) > 0 })
	return len(first)
}

// EndTagged ends every process whose environment sets name to a value
// leftover says is left over, and returns how many it signalled. There is
// no recorded group to start from: it reads the environment of every
// process /proc lists. Only this user's are readable, which is also the set
// card may signal; the calling process is never ended.
func EndTagged(name string, leftover func(value string) bool, grace time.Duration) int {
	if name == "" {
		return 0
	}
	self := os.Getpid()
	tagged := func() []int {
		pids, _ := scanProcs(func(p procStat) bool {
			if p.pid == self {
				return false
			}
			env, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/environ")
			if err != nil {
				return false
			}
			v, ok := environValue(env, name)
			return ok && leftover(v)
		})
		return pids
	}
	first := tagged()
	if len(first) == 0 {
		return 0
	}
	end(context.Background(), grace, nil,
		func(sig syscall.Signal) {
			for _, pid := range tagged() {
				_ = syscall.Kill(pid, sig)
			}
		},
		func() bool { return len(tagged()) > 0 })
	return len(first)
}
