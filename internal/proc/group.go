//go:build unix

package proc

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// KillWait bounds the wait for a process group (or session) to be gone after
// SIGKILL. SIGKILL takes effect at once; the bound is for what cannot be
// signalled or cannot die yet (a member owned by another user after a setuid
// exec, a process stuck in the kernel on a dead network mount), so that ending
// a group never hangs its caller.
const KillWait = 2 * time.Second

// pollEvery is how often a group is checked while waiting for it to go.
const pollEvery = 10 * time.Millisecond

// NewGroup starts a child as the leader of a new process group whose id is
// the child's pid, so a deadline or cancel can end it with everything it
// started.
func NewGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// SignalGroup sends sig to every process of group pgid. A group that is
// already gone is not an error. pgid <= 1 is refused: kill(-1) signals every
// process the user owns and kill(0) the daemon's own group.
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return errors.New("proc: refusing to signal process group <= 1")
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// exists reports whether pid is a process, zombies included. EPERM means it
// exists but belongs to someone else.
func exists(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// GroupAlive reports whether a process of group pgid that is not a zombie is
// left. Where there is no /proc a zombie counts (kill cannot tell them
// apart), which is why EndGroup also waits for the caller's reap.
func GroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	if err := syscall.Kill(-pgid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	members, ok := GroupMembers(pgid)
	return !ok || len(members) > 0
}

// EndGroup ends process group pgid and waits until it is gone: SIGTERM; then,
// when a member is still alive after grace (or ctx ends first), SIGKILL and a
// wait bounded by KillWait. grace <= 0 goes straight to SIGKILL. reaped, when
// not nil, is closed by the caller once it has reaped the group's leader; the
// group counts as gone only after that, since an unreaped leader is still a
// member where there is no /proc. It returns whether the group is gone.
func EndGroup(ctx context.Context, pgid int, grace time.Duration, reaped <-chan struct{}) bool {
	if pgid <= 1 {
		return true
	}
	return end(ctx, grace, reaped,
		func(sig syscall.Signal) { _ = SignalGroup(pgid, sig) },
		func() bool { return GroupAlive(pgid) })
}

// EndSession ends a terminal: every process of session sid and every process
// that still holds tty (the terminal's device, "" for none) open, with the
// same SIGTERM → grace → SIGKILL → bounded wait as EndGroup. reaped is as for
// EndGroup. Where the session cannot be listed (no /proc) only the leader's
// group (its id is sid) is ended; the kernel's SIGHUP to the terminal's
// foreground group when the leader dies reaches a job in the foreground. It
// returns whether everything is gone.
func EndSession(ctx context.Context, sid int, tty string, grace time.Duration, reaped <-chan struct{}) bool {
	if sid <= 1 {
		return true
	}
	// Finding the tty's holders reads every process's descriptors, too much
	// to repeat on every check of the wait: it is done first and when
	// signalling, and the checks in between look at the session and at the
	// processes found then.
	signalled, ok := SessionMembers(sid, tty)
	if !ok {
		return EndGroup(ctx, sid, grace, reaped)
	}
	return end(ctx, grace, reaped,
		func(sig syscall.Signal) {
			signalled, _ = SessionMembers(sid, tty)
			for _, pid := range signalled {
				_ = syscall.Kill(pid, sig)
			}
		},
		func() bool {
			if members, _ := SessionMembers(sid, ""); len(members) > 0 {
				return true
			}
			for _, pid := range signalled {
				if Alive(pid) {
					return true
				}
			}
			return false
		})
}

// end is the one SIGTERM → grace → SIGKILL → bounded wait sequence, over a
// way to signal the processes and a way to tell whether any is left.
func end(ctx context.Context, grace time.Duration, reaped <-chan struct{}, signal func(syscall.Signal), alive func() bool) bool {
	gone := func() bool { return !alive() && closedOrNil(reaped) }
	if gone() {
		return true
	}
	if grace > 0 {
		signal(syscall.SIGTERM)
		if waitUntil(ctx, grace, gone, nil) {
			return true
		}
	}
	signal(syscall.SIGKILL)
	// Signalling again on every check catches a process forked after the
	// first SIGKILL was sent (per-pid signalling cannot be atomic).
	return waitUntil(context.Background(), KillWait, gone, func() { signal(syscall.SIGKILL) })
}

// waitUntil polls done until it is true (true), d passes or ctx ends
// (false). each, when set, runs before every check after the first.
func waitUntil(ctx context.Context, d time.Duration, done func() bool, each func()) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		if done() {
			return true
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return done()
		case <-ctx.Done():
			return done()
		}
		if each != nil {
			each()
		}
	}
}

func closedOrNil(c <-chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// ErrNotStarted is returned by Wait for a command Start did not start.
var ErrNotStarted = errors.New("proc: command was not started")

// Start starts cmd as the leader of a new process group (when the caller set
// no SysProcAttr of its own) with an environment that is never the daemon's
// live one: a nil cmd.Env is refused. Pair it with Wait.
func Start(cmd *exec.Cmd) error {
	if cmd.Env == nil {
		return errors.New("proc: cmd.Env is nil, which would hand the child the daemon's live environment; build one with NewEnv")
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = NewGroup()
	}
	return cmd.Start()
}

// Wait waits for a cmd started by Start and returns its Wait error once the
// whole group is gone. When ctx ends first the group is ended (SIGTERM, grace,
// SIGKILL) and the error is never nil (ctx.Err() when the command exited 0);
// when the leader exits first, whatever it left in its group is
// killed, so no background job outlives the command. cmd.WaitDelay, when
// zero, becomes grace (KillWait when grace is zero): a process that left the
// group while holding an output pipe cannot keep Wait waiting for output.
func Wait(ctx context.Context, cmd *exec.Cmd, grace time.Duration) error {
	if cmd.Process == nil {
		return ErrNotStarted
	}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = grace
		if grace <= 0 {
			cmd.WaitDelay = KillWait
		}
	}
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	var err error
	go func() {
		err = cmd.Wait()
		close(done)
	}()
	stopped := false
	select {
	case <-done:
	case <-ctx.Done():
		stopped = true
		EndGroup(context.Background(), pgid, grace, done)
	}
	EndGroup(context.Background(), pgid, 0, done)
	<-done
	if stopped && err == nil {
		// A command that was stopped did not succeed, even when it caught
		// SIGTERM and exited 0.
		err = ctx.Err()
	}
	return err
}
