package substrate_test

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

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/substrate"
)

// startupEnv is the environment a daemon would have read at startup.
func startupEnv() map[string]string { return proc.EnvMap(os.Environ()) }

func newLocal(t *testing.T) *substrate.Local {
	t.Helper()
	l := substrate.NewLocal(startupEnv())
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestLocalReadWriteRoundTripsAndByteWindows(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	path := filepath.Join(t.TempDir(), "hello.txt")
	assert.Equal(t, "local", l.Name())
	assert.True(t, l.IsLocal())

	require.NoError(t, l.WriteText(ctx, path, "hello world"))
	got, err := l.ReadText(ctx, path)
	require.NoError(t, err)
	assert.Equal(t, "hello world", got)

	all, err := l.ReadBytes(ctx, path, 0, substrate.ToEnd)
	require.NoError(t, err)
	assert.Equal(t, []byte("hello world"), all)
	win, err := l.ReadBytes(ctx, path, 6, 5)
	require.NoError(t, err)
	assert.Equal(t, []byte("world"), win)
	past, err := l.ReadBytes(ctx, path, 100, 5)
	require.NoError(t, err)
	assert.Empty(t, past)

	require.NoError(t, l.WriteBytes(ctx, path, []byte{0, 1, 2}))
	raw, err := l.ReadBytes(ctx, path, 0, substrate.ToEnd)
	require.NoError(t, err)
	assert.Equal(t, []byte{0, 1, 2}, raw, "a write truncates")
}

func TestLocalWritesCreateMissingParentDirectories(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	path := filepath.Join(t.TempDir(), "a", "b", "c.txt")
	require.NoError(t, l.WriteText(ctx, path, "deep"))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "deep", string(b))
}

func TestLocalRefusesARelativePathAndNamesIt(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	_, err := l.ReadText(ctx, "notes/todo.txt")
	require.ErrorContains(t, err, `"notes/todo.txt" is relative`)
	require.ErrorContains(t, l.WriteText(ctx, "x.txt", "x"), `"x.txt"`)
	st := l.PathState(ctx, "x.txt")
	assert.Equal(t, api.PathUnknown, st.Status, "a relative path is not confirmed missing")
	assert.Equal(t, "/a/b", l.DisplayPath("/a/./b/"))
}

func TestLocalReadErrorsNameThePath(t *testing.T) {
	_, err := newLocal(t).ReadText(context.Background(), "/definitely/not/here.txt")
	require.ErrorContains(t, err, "/definitely/not/here.txt")
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestLocalPathStateTreatsADanglingSymlinkAsExisting(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.txt")
	dangling := filepath.Join(dir, "dangling.txt")
	require.NoError(t, os.Symlink(missing, dangling))

	assert.Equal(t, api.PathState{Status: api.PathMissing}, l.PathState(ctx, missing))
	assert.Equal(t, api.PathState{Status: api.PathExists}, l.PathState(ctx, dangling))
	assert.Equal(t, api.PathExists, l.PathState(ctx, dir).Status)
}

func TestLocalPathStateUnderAnUnreadableParentIsUnknownNotMissing(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads through directory permissions; the decision itself is covered by TestOnlyNotFoundProvesAPathMissing")
	}
	dir := t.TempDir()
	locked := filepath.Join(dir, "locked")
	require.NoError(t, os.Mkdir(locked, 0o000))
	t.Cleanup(func() { _ = os.Chmod(locked, 0o700) })
	st := newLocal(t).PathState(context.Background(), filepath.Join(locked, "x"))
	assert.Equal(t, api.PathUnknown, st.Status)
	assert.Contains(t, st.Reason, locked)
}

func TestLocalRunCommandCapturesOutputAndExitCode(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	out, err := l.RunCommand(ctx, "echo hi", 0)
	require.NoError(t, err)
	assert.Equal(t, "hi", strings.TrimSpace(out.Stdout))
	assert.Equal(t, 0, out.ExitCode)

	out, err = l.RunCommand(ctx, "echo oops >&2; exit 3", 0)
	require.NoError(t, err, "a failing command is a result, not an error")
	assert.Equal(t, "oops\n", out.Stderr)
	assert.Equal(t, 3, out.ExitCode)
}

func TestLocalRunCommandRunsInTheConfiguredDirectory(t *testing.T) {
	l := newLocal(t)
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	assert.Equal(t, home, l.Dir, "the default working directory is the user's home")

	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	l.Dir = dir
	out, err := l.RunCommand(context.Background(), "pwd -P", 0)
	require.NoError(t, err)
	assert.Equal(t, dir, strings.TrimSpace(out.Stdout))
}

func TestLocalTimeoutEndsTheWholeProcessGroupAndSaysSo(t *testing.T) {
	l := newLocal(t)
	l.KillGrace = 200 * time.Millisecond
	start := time.Now()
	// The background sleep is a grandchild in the group; it must die too.
	out, err := l.RunCommand(context.Background(), "sleep 30 & echo $!; trap '' TERM; sleep 30", 300*time.Millisecond)
	var te *substrate.TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, 300*time.Millisecond, te.After)
	assert.Contains(t, err.Error(), `"sleep 30 & echo $!; trap '' TERM; sleep 30" timed out after 300ms`)
	assert.Less(t, time.Since(start), 5*time.Second)

	pid, perr := strconv.Atoi(strings.TrimSpace(out.Stdout))
	require.NoError(t, perr, "partial output is kept: %q", out.Stdout)
	require.Eventually(t, func() bool { return !proc.Alive(pid) }, 2*time.Second, 20*time.Millisecond,
		"background child %d survived the timeout", pid)
}

func TestLocalLeavesNoBackgroundJobBehindAfterACommandExits(t *testing.T) {
	out, err := newLocal(t).RunCommand(context.Background(), "sleep 30 >/dev/null 2>&1 & echo $!", 0)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(out.Stdout))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !proc.Alive(pid) }, 2*time.Second, 20*time.Millisecond)
}

func TestLocalCancelStopsTheCommand(t *testing.T) {
	l := newLocal(t)
	l.KillGrace = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := l.RunCommand(ctx, "sleep 30", time.Minute)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline, not the command's timeout")
	var te *substrate.TimeoutError
	assert.False(t, errors.As(err, &te))
	assert.Contains(t, err.Error(), `"sleep 30"`)
}

func TestLocalCapsCommandOutput(t *testing.T) {
	l := newLocal(t)
	l.MaxOutput = 1000
	out, err := l.RunCommand(context.Background(), "head -c 100000 /dev/zero | tr '\\0' a", 0)
	require.NoError(t, err)
	assert.Less(t, len(out.Stdout), 1200)
	assert.Contains(t, out.Stdout, "99000 bytes dropped")
	assert.Equal(t, 0, out.ExitCode)
}

func TestLocalRefusesAnEmptyCommand(t *testing.T) {
	_, err := newLocal(t).RunCommand(context.Background(), "  ", 0)
	require.ErrorContains(t, err, "empty command")
}

func TestLocalByteWindowsClipToTheFileLikeTheReference(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	path := filepath.Join(t.TempDir(), "w.txt")
	require.NoError(t, os.WriteFile(path, []byte("hello world"), 0o600))
	cases := []struct {
		off, n int64
		want   string
	}{
		{0, substrate.ToEnd, "hello world"},
		{6, 5, "world"},
		{6, substrate.ToEnd, "world"},
		{6, 1 << 40, "world"},
		{11, substrate.ToEnd, ""},
		{50, 3, ""},
		{0, 0, ""},
	}
	for _, tc := range cases {
		got, err := l.ReadBytes(ctx, path, tc.off, tc.n)
		require.NoError(t, err, "offset %d length %d", tc.off, tc.n)
		assert.Equal(t, tc.want, string(got), "offset %d length %d", tc.off, tc.n)
	}
	_, err := l.ReadBytes(ctx, path, -1, 2)
	require.ErrorContains(t, err, "negative offset")
}

func TestLocalRefusesAReadLargerThanItsCapAndPointsAtWindows(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	l.MaxRead = 8
	path := filepath.Join(t.TempDir(), "big.txt")
	require.NoError(t, os.WriteFile(path, []byte("0123456789abcdef"), 0o600))

	_, err := l.ReadText(ctx, path)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "read it in windows")
	_, err = l.ReadBytes(ctx, path, 0, substrate.ToEnd)
	require.ErrorContains(t, err, "exceed 8 bytes")

	win, err := l.ReadBytes(ctx, path, 8, 8)
	require.NoError(t, err, "a window within the cap is fine")
	assert.Equal(t, "89abcdef", string(win))
	_, err = l.ReadText(ctx, filepath.Dir(path))
	require.ErrorContains(t, err, "not a regular file (a directory)")
}

func TestLocalPathRefusalsAreInvalidParams(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	for _, p := range []string{"", "rel/x", "/a\x00b"} {
		_, err := l.ReadText(ctx, p)
		require.ErrorIs(t, err, substrate.ErrInvalidPath, "%q", p)
	}
}

func TestLocalRefusesToReadANamedPipeInsteadOfHanging(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	_, err := newLocal(t).ReadText(context.Background(), fifo)
	require.ErrorContains(t, err, "not a regular file (a named pipe)")
}

func TestLocalReadTextRefusesInvalidUTF8AndGeneratedFilesStillRead(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	bin := filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.WriteFile(bin, []byte{0xff, 0xfe, 'a'}, 0o600))
	_, err := l.ReadText(ctx, bin)
	require.ErrorContains(t, err, "not valid UTF-8")
	b, err := l.ReadBytes(ctx, bin, 0, substrate.ToEnd)
	require.NoError(t, err)
	assert.Equal(t, []byte{0xff, 0xfe, 'a'}, b)

	if _, err := os.Stat("/proc/self/status"); err == nil {
		status, err := l.ReadText(ctx, "/proc/self/status")
		require.NoError(t, err)
		assert.Contains(t, status, "Pid:", "a file reporting size 0 is still read")
	}
}

// daemonOnly are variables of the daemon's own environment that no command,
// terminal or bridge may inherit.
var daemonOnly = map[string]string{
	"NOTIFY_SOCKET":  "/run/systemd/notify",
	"CAR_INVOKED_BY": "claude-code",
	"CARD_RUN_ID":    "run_from_a_parent_daemon",
	"GIT_DIR":        "/elsewhere/.git",
}

// withDaemonOnly is the startup environment plus daemonOnly and a variable
// the children must keep.
func withDaemonOnly() map[string]string {
	env := startupEnv()
	for k, v := range daemonOnly {
		env[k] = v
	}
	env["CARD_TEST_KEEP"] = "kept"
	return env
}

// assertStripped checks an `env` listing: the daemon's own variables are
// gone, the ordinary one is there, and nothing set in the live process
// environment after startup leaked in.
func assertStripped(t *testing.T, listing string) {
	t.Helper()
	vars := proc.EnvMap(strings.Split(strings.ReplaceAll(listing, "\r", ""), "\n"))
	for k := range daemonOnly {
		assert.NotContains(t, vars, k, "a child must not inherit %s", k)
	}
	assert.Equal(t, "kept", vars["CARD_TEST_KEEP"])
	assert.NotContains(t, vars, "CARD_TEST_LIVE_ONLY", "the environment is the one read at startup, not the live one")
}

func TestCommandsAndTerminalsGetTheStrippedStartupEnvironment(t *testing.T) {
	ctx := context.Background()
	l := substrate.NewLocal(withDaemonOnly())
	t.Cleanup(func() { _ = l.Close() })
	t.Setenv("CARD_TEST_LIVE_ONLY", "1")
	for k, v := range daemonOnly {
		t.Setenv(k, v)
	}

	out, err := l.RunCommand(ctx, "env", 10*time.Second)
	require.NoError(t, err)
	assertStripped(t, out.Stdout)

	pid, err := l.PTYStart(ctx, "env; echo END-OF-''ENV; sleep 30")
	require.NoError(t, err)
	listing := readUntil(t, l, pid, "END-OF-ENV")
	assertStripped(t, listing)
	assert.Contains(t, listing, "TERM=", "a terminal always has a TERM")
}
