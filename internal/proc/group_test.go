//go:build unix

package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// parentEnv makes the test binary a parent that starts `sleep` with
// NewGroupKilledWithParent, prints its pid and waits to be killed.
const parentEnv = "CARD_PROC_TEST_PARENT"

func TestMain(m *testing.M) {
	if os.Getenv(parentEnv) == "1" {
		cmd := exec.Command("/bin/sleep", "1000")
		cmd.Env = []string{}
		cmd.SysProcAttr = NewGroupKilledWithParent()
		if err := cmd.Start(); err != nil {
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		_ = cmd.Wait()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// needProc skips a test of what only /proc can show: zombies told apart,
// sessions and environments of other processes listed, Pdeathsig.
func needProc(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("needs Linux's /proc (and Pdeathsig); %s ends leftovers at the daemon's next start instead", runtime.GOOS)
	}
}

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

func TestAliveTellsARunningProcessFromAZombieAndFromNone(t *testing.T) {
	cmd, r := startScript(t, "echo $$; exec sleep 1000")
	pid := readPID(t, r)
	assert.True(t, Alive(pid))
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	if runtime.GOOS == "linux" {
		// Not reaped yet: a zombie, which runs nothing.
		require.Eventually(t, func() bool { return !Alive(pid) }, 2*time.Second, 5*time.Millisecond)
		assert.NoError(t, syscall.Kill(pid, 0), "the zombie still exists")
	}
	_ = cmd.Wait()
	assert.False(t, Alive(pid))
	assert.False(t, Alive(0))
	assert.True(t, Alive(os.Getpid()))
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

// statField reads field n (1-based, as in proc(5)) of /proc/<pid>/stat.
func statField(t *testing.T, pid, n int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	v, err := strconv.Atoi(f[n-3])
	require.NoError(t, err)
	return v
}

func TestAChildStartedKilledWithParentDiesWithItsParent(t *testing.T) {
	needProc(t)
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), parentEnv+"=1")
	out, err := parent.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, parent.Start())
	killForCleanup(t, parent.Process.Pid)
	child := readPID(t, bufio.NewReader(out))
	require.True(t, Alive(child))

	require.NoError(t, parent.Process.Kill())
	_ = parent.Wait()
	eventuallyGone(t, child, "the child of a killed parent")
}

func TestGroupMembersSkipsAZombieLeader(t *testing.T) {
	needProc(t)
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{}
	require.NoError(t, Start(cmd))
	pgid := cmd.Process.Pid
	// Not reaped yet: the leader is a zombie, still counted by kill(-pgid, 0).
	deadline := time.Now().Add(2 * time.Second)
	for !gone(pgid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, syscall.Kill(-pgid, 0), "the zombie still holds the group id")
	members, ok := GroupMembers(pgid)
	assert.True(t, ok)
	assert.Empty(t, members)
	assert.False(t, GroupAlive(pgid), "a zombie runs nothing")
	require.NoError(t, cmd.Wait())
}

func TestGroupMembersListsTheLiveProcessesOfTheGroup(t *testing.T) {
	needProc(t)
	cmd, r := startScript(t, "sleep 1000 & echo $!; echo $$; wait")
	child, leader := readPID(t, r), readPID(t, r)
	members, ok := GroupMembers(cmd.Process.Pid)
	require.True(t, ok)
	assert.ElementsMatch(t, []int{leader, child}, members)
	assert.True(t, EndGroup(context.Background(), cmd.Process.Pid, time.Second, reap(cmd)))
}

// TestEndSessionEndsJobsInOtherGroupsAndChildrenThatLeftTheSession is the
// terminal case: a shell with job control puts each job in a process group
// of its own, and a child that called setsid leaves the session while still
// holding the terminal. Ending the leader's group alone leaves both, and the
// terminal never reports EOF.
func TestEndSessionEndsJobsInOtherGroupsAndChildrenThatLeftTheSession(t *testing.T) {
	needProc(t)
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) is not installed")
	}
	cmd := exec.Command("/bin/sh", "-c", "trap '' TERM HUP; setsid sleep 1000 & echo $!; set -m; sleep 1000 & echo $!; echo $$; wait")
	cmd.Env = NewEnv(map[string]string{"PATH": "/usr/bin:/bin"}).List()
	ptmx, err := pty.Start(cmd)
	require.NoError(t, err)
	defer ptmx.Close()
	tty := cmd.Stdin.(*os.File).Name()
	killForCleanup(t, -cmd.Process.Pid)
	r := bufio.NewReader(ptmx)
	escaped, job, leader := readPID(t, r), readPID(t, r), readPID(t, r)
	reaped := reap(cmd)

	sid := cmd.Process.Pid
	require.Equal(t, sid, leader)
	require.NotEqual(t, sid, statField(t, job, 5), "the job leads a group of its own")
	require.Equal(t, sid, statField(t, job, 6), "the job is in the terminal's session")
	// $! is printed before the child has run setsid; give it the moment.
	require.Eventually(t, func() bool { return statField(t, escaped, 6) != sid }, 2*time.Second, 5*time.Millisecond,
		"the setsid child left the session")
	members, ok := SessionMembers(sid, tty)
	require.True(t, ok)
	assert.ElementsMatch(t, []int{leader, job, escaped}, members)

	start := time.Now()
	assert.True(t, EndSession(context.Background(), sid, tty, 200*time.Millisecond, reaped))
	assert.Less(t, time.Since(start), 200*time.Millisecond+KillWait)
	for what, pid := range map[string]int{"the leader (ignores SIGTERM)": leader, "the job in its own group": job, "the setsid child": escaped} {
		assert.True(t, gone(pid), "%s (pid %d) survived", what, pid)
	}
	left, _ := SessionMembers(sid, tty)
	assert.Empty(t, left)
}

func TestEndSessionFindsAHolderOfTheTerminalAfterTheLeaderIsGone(t *testing.T) {
	needProc(t)
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) is not installed")
	}
	cmd := exec.Command("/bin/sh", "-c", "setsid sh -c 'echo $$; exec sleep 1000' & sleep 0.3")
	cmd.Env = NewEnv(map[string]string{"PATH": "/usr/bin:/bin"}).List()
	ptmx, err := pty.Start(cmd)
	require.NoError(t, err)
	defer ptmx.Close()
	tty := cmd.Stdin.(*os.File).Name()
	escaped := readPID(t, bufio.NewReader(ptmx))
	_ = cmd.Wait()
	require.True(t, Alive(escaped), "the setsid child outlived the leader")

	assert.True(t, EndSession(context.Background(), cmd.Process.Pid, tty, 0, nil))
	assert.True(t, gone(escaped), "a process still holding the terminal is part of it")
}

func TestSessionMembersNeverListsTheDaemonItself(t *testing.T) {
	needProc(t)
	self := os.Getpid()
	sid, err := unix.Getsid(0)
	require.NoError(t, err)
	members, ok := SessionMembers(sid, "")
	require.True(t, ok)
	assert.NotContains(t, members, self)
}

func TestEndTaggedGroupEndsOnlyTheProcessesThatCarryTheTag(t *testing.T) {
	needProc(t)
	cmd := exec.Command("/bin/sh", "-c", "env -u CARD_TEST_TAG sleep 1000 & echo $!; sleep 1000 & echo $!; wait")
	cmd.Env = NewEnv(map[string]string{"PATH": "/usr/bin:/bin"}).Set("CARD_TEST_TAG", "run_7").List()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, Start(cmd))
	killForCleanup(t, -cmd.Process.Pid)
	r := bufio.NewReader(out)
	untagged, tagged := readPID(t, r), readPID(t, r)
	reaped := reap(cmd)
	pgid := cmd.Process.Pid

	assert.Zero(t, EndTaggedGroup(pgid, "CARD_TEST_TAG", "run_8", 100*time.Millisecond), "another run's id matches nothing")
	assert.False(t, gone(tagged))

	assert.Equal(t, 2, EndTaggedGroup(pgid, "CARD_TEST_TAG", "run_7", 100*time.Millisecond), "the shell and its tagged child")
	<-reaped
	assert.True(t, gone(cmd.Process.Pid))
	assert.True(t, gone(tagged))
	assert.False(t, gone(untagged), "a process without the run's id is not the run's")
	assert.True(t, EndGroup(context.Background(), pgid, 0, nil))
	assert.True(t, gone(untagged))
}

func TestEndTaggedEndsEveryProcessWhoseTagIsLeftOverAndNoOther(t *testing.T) {
	needProc(t)
	start := func(tag string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command("/bin/sleep", "1000")
		e := NewEnv(map[string]string{"PATH": "/usr/bin:/bin"})
		if tag != "" {
			e.Set("CARD_TEST_PROBE", tag)
		}
		cmd.Env = e.List()
		require.NoError(t, Start(cmd))
		killForCleanup(t, -cmd.Process.Pid)
		return cmd
	}
	cases := []struct {
		tag      string
		leftover bool
	}{
		{"/home/u/.card|start-1", true},
		{"/home/u/.card|start-2", true},
		{"/home/u/.card|start-3", false}, // the caller's own start
		{"/home/v/.card|start-1", false}, // another home's daemon
		{"", false},
	}
	cmds := make([]*exec.Cmd, len(cases))
	reaped := make([]<-chan struct{}, len(cases))
	for i, tc := range cases {
		cmds[i] = start(tc.tag)
		reaped[i] = reap(cmds[i])
	}
	leftover := func(v string) bool {
		return strings.HasPrefix(v, "/home/u/.card|") && v != "/home/u/.card|start-3"
	}
	assert.Equal(t, 2, EndTagged("CARD_TEST_PROBE", leftover, 100*time.Millisecond))
	for i, tc := range cases {
		if tc.leftover {
			<-reaped[i]
		}
		assert.Equal(t, tc.leftover, gone(cmds[i].Process.Pid), "the process tagged %q", tc.tag)
	}
	assert.Zero(t, EndTagged("CARD_TEST_PROBE", leftover, 100*time.Millisecond), "nothing left over is left")
}

func TestAnEnvironValueIsFoundOnlyUnderItsWholeName(t *testing.T) {
	env := []byte("CARD_PROBEX=no\x00PATH=/bin\x00CARD_PROBE=h|1\x00LAST=x")
	cases := []struct {
		name, want string
		ok         bool
	}{
		{"CARD_PROBE", "h|1", true},
		{"CARD_PROBEX", "no", true},
		{"LAST", "x", true},
		{"CARD_PROB", "", false},
		{"HOME", "", false},
	}
	for _, tc := range cases {
		got, ok := environValue(env, tc.name)
		assert.Equal(t, tc.ok, ok, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
}

// What a daemon's start pays to look for a dead daemon's probes when there
// are none: one read of each process's environment.
func BenchmarkEndTaggedFindingNothing(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads /proc")
	}
	n, _ := scanProcs(func(procStat) bool { return true })
	b.ReportMetric(float64(len(n)), "procs")
	for b.Loop() {
		EndTagged("CARD_TEST_NOTHING", func(string) bool { return true }, time.Millisecond)
	}
}
