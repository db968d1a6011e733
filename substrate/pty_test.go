package substrate_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
		assert.False(t, processAlive(pid), "pty %d outlived Close", pid)
	}
}
