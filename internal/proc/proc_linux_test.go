//go:build linux

package proc

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

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

func TestNewGroupKilledWithParentAsksForSigkill(t *testing.T) {
	a := NewGroupKilledWithParent()
	assert.True(t, a.Setpgid)
	assert.Equal(t, syscall.SIGKILL, a.Pdeathsig)
}

func TestGroupMembersSkipsAZombieLeader(t *testing.T) {
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

func TestSessionMembersNeverListsTheDaemonItself(t *testing.T) {
	self := os.Getpid()
	sid, err := unix.Getsid(0)
	require.NoError(t, err)
	members, ok := SessionMembers(sid, "")
	require.True(t, ok)
	assert.NotContains(t, members, self)
}

func TestEndTaggedGroupEndsOnlyTheProcessesThatCarryTheTag(t *testing.T) {
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
