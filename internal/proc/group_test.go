//go:build unix

package proc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gone reports whether pid no longer runs anything: no such process, or a
// zombie waiting for its reaper (PID 1 in a container may reap late).
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// eventuallyGone allows a killed process the moment the kernel needs to
// finish it.
func eventuallyGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) is still running", what, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killForCleanup makes sure a process (or, negative, a group) a failing test
// left behind does not outlive it.
func killForCleanup(t *testing.T, pids ...int) {
	t.Cleanup(func() {
		for _, p := range pids {
			if p > 1 || p < -1 {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
}

// startScript runs script with sh in its own process group and returns the
// command and a reader of its stdout lines (the script prints pids).
func startScript(t *testing.T, script string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = NewEnv(map[string]string{"PATH": "/usr/bin:/bin"}).List()
	cmd.Dir = t.TempDir()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, Start(cmd))
	killForCleanup(t, -cmd.Process.Pid)
	return cmd, bufio.NewReader(out)
}

func readPID(t *testing.T, r *bufio.Reader) int {
	t.Helper()
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, "line %q", line)
	killForCleanup(t, pid)
	return pid
}

// reap waits for cmd in the background; the channel closes once it is
// reaped.
func reap(cmd *exec.Cmd) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return done
}

func TestStartRefusesANilEnvironment(t *testing.T) {
	cmd := exec.Command("/bin/true")
	err := Start(cmd)
	require.ErrorContains(t, err, "live environment")
	assert.Nil(t, cmd.Process, "nothing was started")
}

func TestStartMakesTheChildLeadItsOwnGroup(t *testing.T) {
	cmd, r := startScript(t, "echo $$; sleep 1000")
	pid := readPID(t, r)
	pgid, err := syscall.Getpgid(pid)
	require.NoError(t, err)
	assert.Equal(t, pid, pgid)
	assert.NotEqual(t, syscall.Getpgrp(), pgid)
	assert.True(t, EndGroup(context.Background(), pgid, time.Second, reap(cmd)))
	eventuallyGone(t, pid, "the leader")
}

func TestEndGroupKillsAGroupThatIgnoresSigtermAfterTheGrace(t *testing.T) {
	cmd, r := startScript(t, "trap '' TERM; sleep 1000 & echo $!; echo $$; wait")
	child, leader := readPID(t, r), readPID(t, r)
	start := time.Now()
	ok := EndGroup(context.Background(), cmd.Process.Pid, 300*time.Millisecond, reap(cmd))
	took := time.Since(start)
	assert.True(t, ok)
	assert.GreaterOrEqual(t, took, 300*time.Millisecond, "SIGKILL waits for the grace")
	assert.Less(t, took, 300*time.Millisecond+KillWait)
	assert.True(t, gone(leader), "the leader ignored SIGTERM and is gone")
	assert.True(t, gone(child), "the background child is gone")
	assert.False(t, GroupAlive(cmd.Process.Pid))
}

func TestEndGroupReturnsAsSoonAsTheGroupObeysSigterm(t *testing.T) {
	cmd, r := startScript(t, "sleep 1000 & echo $!; wait")
	child := readPID(t, r)
	start := time.Now()
	assert.True(t, EndGroup(context.Background(), cmd.Process.Pid, 10*time.Second, reap(cmd)))
	assert.Less(t, time.Since(start), 5*time.Second, "no wait for the whole grace")
	assert.True(t, gone(child))
}

func TestEndGroupSkipsTheGraceWhenItsContextEnds(t *testing.T) {
	cmd, r := startScript(t, "trap '' TERM; echo $$; while :; do sleep 1; done")
	leader := readPID(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	assert.True(t, EndGroup(ctx, cmd.Process.Pid, time.Minute, reap(cmd)))
	assert.Less(t, time.Since(start), 100*time.Millisecond+KillWait)
	assert.True(t, gone(leader))
}

func TestEndGroupRefusesTheGroupsThatMeanEveryone(t *testing.T) {
	for _, pgid := range []int{-1, 0, 1} {
		assert.Error(t, SignalGroup(pgid, 0))
		assert.True(t, EndGroup(context.Background(), pgid, time.Second, nil), "nothing to end")
		assert.False(t, GroupAlive(pgid))
	}
}

func TestSignalGroupTakesAGoneGroupAsDone(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{}
	require.NoError(t, Start(cmd))
	require.NoError(t, cmd.Wait())
	assert.NoError(t, SignalGroup(cmd.Process.Pid, syscall.SIGKILL))
}

func TestWaitEndsTheWholeGroupWhenTheContextEnds(t *testing.T) {
	cmd, r := startScript(t, "sleep 1000 & echo $!; echo $$; sleep 1000")
	child, leader := readPID(t, r), readPID(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := Wait(ctx, cmd, time.Second)
	assert.Error(t, err, "killed by a signal")
	assert.Less(t, time.Since(start), time.Second+KillWait)
	assert.True(t, gone(leader))
	assert.True(t, gone(child))
}

func TestWaitReportsAStoppedCommandAsFailedEvenWhenItExitsZero(t *testing.T) {
	cmd, r := startScript(t, "trap 'exit 0' TERM; echo $$; while :; do sleep 0.05; done")
	readPID(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := Wait(ctx, cmd, time.Second)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 0, cmd.ProcessState.ExitCode(), "the shell caught SIGTERM and exited 0")
}

func TestWaitKillsWhatTheLeaderLeftInItsGroup(t *testing.T) {
	cmd, r := startScript(t, "sleep 1000 >/dev/null 2>&1 & echo $!")
	child := readPID(t, r)
	_, _ = io.Copy(io.Discard, r)
	require.NoError(t, Wait(context.Background(), cmd, time.Second))
	assert.True(t, gone(child), "a background job does not outlive its command")
}

func TestWaitIsBoundedWhenAProcessThatLeftTheGroupHoldsTheOutput(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) is not installed")
	}
	cmd := exec.Command("/bin/sh", "-c", "setsid sleep 1000 & echo $!")
	cmd.Env = NewEnv(map[string]string{"PATH": "/usr/bin:/bin"}).List()
	out := &Capped{Head: 64}
	cmd.Stdout = out
	require.NoError(t, Start(cmd))
	start := time.Now()
	err := Wait(context.Background(), cmd, 200*time.Millisecond)
	assert.ErrorIs(t, err, exec.ErrWaitDelay)
	assert.Less(t, time.Since(start), 200*time.Millisecond+KillWait)
	escaped, perr := strconv.Atoi(strings.TrimSpace(out.String()))
	require.NoError(t, perr)
	killForCleanup(t, escaped)
	assert.False(t, gone(escaped), "it left the group, so it is not the group's to end")
}

func TestWaitRefusesACommandThatWasNotStarted(t *testing.T) {
	assert.ErrorIs(t, Wait(context.Background(), exec.Command("/bin/true"), time.Second), ErrNotStarted)
}
