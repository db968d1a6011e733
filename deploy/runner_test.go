//go:build unix

package deploy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExecRunnerReturnsOutputAndExitCodeOfAFailedCommand(t *testing.T) {
	out, err := ExecRunner{}.Run(context.Background(), Command{Name: "sh", Args: []string{"-c", "echo no bus >&2; exit 3"}})
	assert.Equal(t, "no bus\n", string(out))
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 3, ce.ExitCode)
	assert.Contains(t, err.Error(), "`sh -c 'echo no bus >&2; exit 3'` failed")
	assert.Contains(t, err.Error(), "no bus")
}

func TestExecRunnerPassesTheSessionButNotCardsOwnNotifySocket(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/4242")
	t.Setenv("NOTIFY_SOCKET", "/run/systemd/notify")
	out, err := ExecRunner{}.Run(context.Background(), Command{Name: "sh", Args: []string{"-c", `echo "$XDG_RUNTIME_DIR ${NOTIFY_SOCKET-unset}"`}})
	require.NoError(t, err)
	assert.Equal(t, "/run/user/4242 unset\n", string(out), "systemctl --user needs the session; systemd's socket is card's own")
}

func TestExecRunnerNamesAMissingProgram(t *testing.T) {
	_, err := ExecRunner{}.Run(context.Background(), Command{Name: "card-no-such-program"})
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, -1, ce.ExitCode)
	assert.Contains(t, err.Error(), "card-no-such-program")
}

func TestExecRunnerRunsInTheGivenDirectory(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	out, err := ExecRunner{Dir: dir}.Run(context.Background(), Command{Name: "pwd"})
	require.NoError(t, err)
	assert.Equal(t, dir, strings.TrimSpace(string(out)))
}

func TestExecRunnerKeepsOnlyTheFirstBytesOfAFlood(t *testing.T) {
	out, err := ExecRunner{MaxOutput: 100}.Run(context.Background(), Command{Name: "sh", Args: []string{"-c", "head -c 1000000 /dev/zero"}})
	require.NoError(t, err, "a flood must not turn into a failure (no SIGPIPE)")
	assert.Len(t, out, 100)
}

func TestExecRunnerKillsTheWholeProcessGroupAtTheDeadline(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	script := "sleep 60 & echo $! > " + pidFile + "; trap '' TERM; wait"
	start := time.Now()
	_, err := ExecRunner{Timeout: 300 * time.Millisecond, Grace: 200 * time.Millisecond}.Run(context.Background(),
		Command{Name: "sh", Args: []string{"-c", script}})
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "the error must say it timed out: %v", err)
	assert.Less(t, time.Since(start), 5*time.Second)

	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}, 5*time.Second, 20*time.Millisecond, "the background sleep %d must not outlive the command", pid)
}
