package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
)

// stopServe makes card serve, run in this process, stop when the returned
// func is called instead of at a signal.
func stopServe(t *testing.T) func() {
	ctx, cancel := context.WithCancel(context.Background())
	prev := serveUntil
	serveUntil = func() (context.Context, context.CancelFunc) { return ctx, cancel }
	t.Cleanup(func() { serveUntil = prev; cancel() })
	return cancel
}

// On a terminal card serve says, in words, where it listens, where a
// client finds the token and what to type next, with the --home in use.
func TestServeOnATerminalSaysWhereItListensAndWhereTheTokenIs(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	home := filepath.Join(t.TempDir(), "card")
	stop := stopServe(t)
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	defer tty.Close()
	done := make(chan int, 1)
	go func() { done <- run([]string{"serve", "--home", home, "--addr", "127.0.0.1:0"}, nil, tty, tty) }()

	var seen strings.Builder
	lines := bufio.NewScanner(ptmx)
	deadline := time.AfterFunc(20*time.Second, func() { ptmx.Close() })
	defer deadline.Stop()
	for lines.Scan() {
		seen.WriteString(lines.Text() + "\n")
		if strings.Contains(lines.Text(), "Ctrl-C stops it") {
			break
		}
	}
	stop()
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code)
	case <-time.After(20 * time.Second):
		t.Fatal("card serve did not stop")
	}
	_, err = daemon.ReadDiscovery(home)
	require.Error(t, err, "daemon.json is gone after a clean stop")
	out := seen.String()
	assert.Regexp(t, `card \S+ is listening on ws://127\.0\.0\.1:\d+/rpc \(pid \d+\)`, out)
	assert.Contains(t, out, "token:  "+filepath.Join(home, "token"))
	assert.Contains(t, out, "card info --home "+home)
	assert.NotContains(t, out, `"level"`, "readable lines on a terminal, not JSON")
}

// Where a supervisor reads it, card serve logs JSON and every duration
// carries its unit.
func TestServeLogsJSONWithUnitsWhenNotOnATerminal(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	home := filepath.Join(t.TempDir(), "card")
	stop := stopServe(t)
	var errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"serve", "--home", home, "--addr", "127.0.0.1:0"}, nil, &bytes.Buffer{}, &errOut)
	}()
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), `"detected agents"`) }, 20*time.Second, 20*time.Millisecond)
	stop()
	require.Equal(t, exitOK, <-done)
	out := errOut.String()
	assert.Regexp(t, `"took":"[0-9.]+(ns|µs|ms|s)"`, out)
	assert.Regexp(t, `"grace":"10s"`, out)
	assert.NotContains(t, out, "is listening on", "no words for a person in a supervisor's log")
}

// A port that is taken is the one thing said: no "detected agents" first,
// no "stopped" after a daemon that never started.
func TestServeOnATakenPortSaysOnlyThat(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var errOut bytes.Buffer
	code := run([]string{"serve", "--home", filepath.Join(t.TempDir(), "card"), "--addr", ln.Addr().String()}, nil, &bytes.Buffer{}, &errOut)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut.String(), "address already in use (pick another with --addr or addr in card.toml)")
	assert.NotContains(t, errOut.String(), "detected agents")
	assert.NotContains(t, errOut.String(), "card stopped")
}

// syncBuffer is a bytes.Buffer the daemon's logger may write while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A second daemon for a home one already serves is refused (exit 4), as
// serve's help says.
func TestServeForAHomeAlreadyServedIsRefused(t *testing.T) {
	home := cliDaemon(t)
	var errOut bytes.Buffer
	code := run([]string{"serve", "--home", home, "--addr", "127.0.0.1:0"}, nil, &bytes.Buffer{}, &errOut)
	assert.Equal(t, exitRefused, code)
	assert.Contains(t, errOut.String(), "already serving home "+home)
}

// A misspelt [budget] key stops `card serve` before it listens, naming the
// key and what was meant: a budget the daemon silently ignored would let
// the runs spend past it.
func TestServeWithAMisspeltBudgetKeyRefusesToStartAndSaysWhatWasMeant(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	home := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.MkdirAll(home, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, "card.toml"), []byte("[budget]\ndaily_usd = 5\nmonthy_usd = 50\n"), 0o600))
	var errOut bytes.Buffer
	code := run([]string{"serve", "--home", home, "--addr", "127.0.0.1:0"}, nil, &bytes.Buffer{}, &errOut)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut.String(), "budget.monthy_usd")
	assert.Contains(t, errOut.String(), `did you mean "monthly_usd"`)
	assert.NotContains(t, errOut.String(), "detected agents", "it never started")
}
