package substrate_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/substrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bare is a substrate that supplies no PTY of its own.
type bare struct {
	substrate.Substrate
	substrate.NoPTY
}

func (b bare) PTYStart(ctx context.Context, cmd string) (int, error) {
	return b.NoPTY.PTYStart(ctx, cmd)
}
func (b bare) PTYInput(ctx context.Context, pid int, d string) error {
	return b.NoPTY.PTYInput(ctx, pid, d)
}
func (b bare) PTYRead(ctx context.Context, pid int) (string, error) { return b.NoPTY.PTYRead(ctx, pid) }
func (b bare) PTYResize(ctx context.Context, pid int, r, c uint16) error {
	return b.NoPTY.PTYResize(ctx, pid, r, c)
}
func (b bare) PTYKill(ctx context.Context, pid int) error { return b.NoPTY.PTYKill(ctx, pid) }

func TestPTYDefaultsToAClearNotSupportedError(t *testing.T) {
	ctx := context.Background()
	var s substrate.Substrate = bare{}
	_, err := s.PTYStart(ctx, "sh")
	require.ErrorIs(t, err, substrate.ErrNotSupported)
	assert.Contains(t, err.Error(), `pty_start "sh"`)
	require.ErrorIs(t, s.PTYInput(ctx, 7, "x"), substrate.ErrNotSupported)
	_, err = s.PTYRead(ctx, 7)
	require.ErrorIs(t, err, substrate.ErrNotSupported)
	require.ErrorIs(t, s.PTYResize(ctx, 7, 1, 1), substrate.ErrNotSupported)
	err = s.PTYKill(ctx, 7)
	require.ErrorIs(t, err, substrate.ErrNotSupported)
	assert.Contains(t, err.Error(), "pty 7")
}

// readUntil polls PTYRead until the accumulated output contains want.
func readUntil(t *testing.T, s substrate.Substrate, pid int, want string) string {
	t.Helper()
	var all strings.Builder
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		out, err := s.PTYRead(context.Background(), pid)
		require.NoError(t, err)
		all.WriteString(out)
		if strings.Contains(all.String(), want) {
			return all.String()
		}
	}
	t.Fatalf("pty %d never printed %q; got %q", pid, want, all.String())
	return ""
}

func TestLocalPTYRunsAnInteractiveShell(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	pid, err := l.PTYStart(ctx, "sh")
	require.NoError(t, err)
	assert.Positive(t, pid)

	require.NoError(t, l.PTYInput(ctx, pid, "echo sum-$((40+2))\n"))
	readUntil(t, l, pid, "sum-42")

	require.NoError(t, l.PTYResize(ctx, pid, 40, 100))
	require.NoError(t, l.PTYInput(ctx, pid, "stty size\n"))
	readUntil(t, l, pid, "40 100")

	require.NoError(t, l.PTYKill(ctx, pid))
	_, err = l.PTYRead(ctx, pid)
	require.ErrorContains(t, err, "no open pty")
	require.ErrorContains(t, l.PTYInput(ctx, pid, "x"), "no open pty")
}

func TestLocalPTYReportsItsExitOnceDrainedAndIsReaped(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	pid, err := l.PTYStart(ctx, "echo bye; exit 4")
	require.NoError(t, err)
	var all strings.Builder
	var exitErr error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		out, err := l.PTYRead(ctx, pid)
		all.WriteString(out)
		if err != nil {
			exitErr = err
			break
		}
	}
	assert.Contains(t, all.String(), "bye")
	require.Error(t, exitErr)
	assert.Contains(t, exitErr.Error(), "has exited (exit status 4)")
	_, err = l.PTYRead(ctx, pid)
	require.ErrorContains(t, err, "no open pty", "the session was forgotten once its exit was read")
}

func TestLocalPTYReadDoesNotBlockWhenNothingIsBuffered(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	pid, err := l.PTYStart(ctx, "sleep 30")
	require.NoError(t, err)
	start := time.Now()
	out, err := l.PTYRead(ctx, pid)
	require.NoError(t, err)
	assert.Empty(t, out)
	assert.Less(t, time.Since(start), time.Second)
}

func TestLocalPTYRejectsAZeroSize(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	pid, err := l.PTYStart(ctx, "sleep 30")
	require.NoError(t, err)
	require.ErrorContains(t, l.PTYResize(ctx, pid, 0, 80), "must be positive")
}

func TestClosingLocalEndsEveryOpenPTY(t *testing.T) {
	ctx := context.Background()
	l := substrate.NewLocal(startupEnv())
	l.KillGrace = 100 * time.Millisecond
	var pids []int
	for range 3 {
		pid, err := l.PTYStart(ctx, "trap '' TERM HUP; sleep 30")
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	require.NoError(t, l.Close())
	for _, pid := range pids {
		assert.False(t, proc.Alive(pid), "pty %d outlived Close", pid)
	}
}

// groupAndSession reads the process group and session of pid from /proc
// (zeros when it is gone).
func groupAndSession(pid int) (pgrp, sid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	pgrp, _ = strconv.Atoi(f[2])
	sid, _ = strconv.Atoi(f[3])
	return pgrp, sid
}

func sessionOf(pid int) int {
	_, sid := groupAndSession(pid)
	return sid
}

// TestPTYKillEndsEveryProcessOfTheSessionAndNeverWaitsOnTheReader is the
// terminal that used to hang pty_kill: a shell with job control puts itself
// and each job in a process group of its own, and a child that called setsid
// left the session while holding the terminal open. Ending the leader's group
// left them all holding the pty, and pty_kill waited on the reader forever.
func TestPTYKillEndsEveryProcessOfTheSessionAndNeverWaitsOnTheReader(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("reads sessions from /proc; on %s pty_kill ends the leader's group only", runtime.GOOS)
	}
	// jobs starts a setsid child that records its pid and keeps the terminal
	// open, and a background job, then says READY (typed as RE''ADY, so the
	// terminal's echo of the input does not match).
	jobs := func(pidFile string) string {
		return "setsid sh -c 'echo $$ > " + pidFile + "; exec sleep 1000' &\n" +
			"sleep 1000 & echo JOB=$!\n" +
			"echo SHELL=$$ RE''ADY\n"
	}
	cases := []struct {
		name string
		// start is the pty's command for the jobs script; typed means the
		// script is typed into it instead.
		start func(script string) string
		typed bool
	}{
		{"an interactive shell in a group of its own", func(string) string { return "sh" }, true},
		{"a script with job control that ignores SIGTERM and SIGHUP", func(script string) string {
			return "trap '' TERM HUP; set -m\n" + script + "wait"
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := newLocal(t)
			l.KillGrace = 300 * time.Millisecond
			escapedFile := filepath.Join(t.TempDir(), "escaped.pid")
			script := jobs(escapedFile)
			pid, err := l.PTYStart(ctx, tc.start(script))
			require.NoError(t, err)
			// The setsid child is outside the session Close ends; make sure a
			// failing run does not leave it behind.
			t.Cleanup(func() {
				if b, err := os.ReadFile(escapedFile); err == nil {
					if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 1 {
						_ = syscall.Kill(p, syscall.SIGKILL)
					}
				}
			})
			if tc.typed {
				require.NoError(t, l.PTYInput(ctx, pid, script))
			}
			out := readUntil(t, l, pid, "READY")
			m := regexp.MustCompile(`JOB=(\d+)`).FindStringSubmatch(out)
			require.NotNil(t, m, out)
			job, _ := strconv.Atoi(m[1])
			sh := regexp.MustCompile(`SHELL=(\d+) READY`).FindStringSubmatch(out)
			require.NotNil(t, sh, out)
			shell, _ := strconv.Atoi(sh[1])
			var escaped int
			require.Eventually(t, func() bool {
				b, err := os.ReadFile(escapedFile)
				escaped, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil && escaped > 0 && sessionOf(escaped) != pid
			}, 5*time.Second, 10*time.Millisecond, "the setsid child never started")
			jobGroup, jobSession := groupAndSession(job)
			require.Equal(t, pid, jobSession, "the job is in the terminal's session")
			require.NotEqual(t, pid, jobGroup, "the job leads a group of its own")

			require.True(t, proc.Alive(pid), "the terminal's own program still runs when it is killed")
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- l.PTYKill(ctx, pid) }()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("pty_kill did not return within 10 s")
			}
			took := time.Since(start)
			t.Logf("pty_kill took %s", took)
			assert.Less(t, took, l.KillGrace+proc.KillWait+time.Second, "pty_kill returned promptly")
			for what, p := range map[string]int{"the shell": shell, "the job": job, "the setsid child": escaped, "the leader": pid} {
				assert.False(t, proc.Alive(p), "%s (pid %d) survived pty_kill", what, p)
			}
			left, ok := proc.SessionMembers(pid, "")
			require.True(t, ok)
			assert.Empty(t, left, "no process of the terminal's session survives")
			_, err = l.PTYRead(ctx, pid)
			require.ErrorContains(t, err, "no open pty")
		})
	}
}
