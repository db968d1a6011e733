package standin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cliPath finds a real CLI: CARD_E2E_BIN_DIR, else e2e/agents/node_modules/.bin
// next to this package. A missing CLI skips loudly, or fails when CI says the
// CLIs must be there (CARD_E2E_REQUIRED=1), so CI can never pass by skipping.
//
// Real-CLI runs take seconds each (tens on a loaded machine), so they run
// only when asked: CARD_E2E=1, or CARD_E2E_REQUIRED=1 in CI. The default
// `go test` then stays fast and still exercises every stand-in over HTTP.
// The tests run in parallel with each other: each has its own server and HOME.
func cliPath(t *testing.T, name string) string {
	t.Helper()
	if os.Getenv("CARD_E2E") != "1" && os.Getenv("CARD_E2E_REQUIRED") != "1" {
		t.Skip("real-CLI end-to-end test skipped: set CARD_E2E=1 to run " + name + " against its stand-in")
	}
	t.Parallel()
	dir := os.Getenv("CARD_E2E_BIN_DIR")
	if dir == "" {
		abs, err := filepath.Abs(filepath.Join("..", "agents", "node_modules", ".bin"))
		require.NoError(t, err)
		dir = abs
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		msg := "REAL CLI MISSING: " + p + " (run `npm install` in e2e/agents or set CARD_E2E_BIN_DIR); end-to-end test NOT RUN"
		if os.Getenv("CARD_E2E_REQUIRED") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// cliResult is what one run of a real CLI left behind.
type cliResult struct {
	Stdout, Stderr string
	Exit           int
	Took           time.Duration
}

func (r cliResult) String() string {
	return "exit=" + itoa(r.Exit) + " took=" + r.Took.Round(time.Millisecond).String() +
		"\n--- stdout\n" + r.Stdout + "\n--- stderr\n" + r.Stderr
}

func itoa(i int) string { return strconv.Itoa(i) }

// capped keeps at most limit bytes, so a CLI stuck in a loop cannot fill memory.
type capped struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.limit - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// runCLI runs one real CLI the way card will: explicit working dir, complete
// env, prompt on stdin, own process group, a deadline that ends the whole
// group (SIGTERM, then SIGKILL), capped output, and no child left behind.
func runCLI(t *testing.T, timeout time.Duration, dir string, env []string, stdin string, bin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb = &capped{limit: 4 << 20}, &capped{limit: 1 << 20}
	cmd.Stdout, cmd.Stderr = out, errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	begin := time.Now()
	require.NoError(t, cmd.Start(), "start %s", bin)
	err := cmd.Wait()
	// Node CLIs spawn helpers (ripgrep, MCP servers); whatever is left in the
	// group after the leader exits would outlive the test.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	res := cliResult{Stdout: out.String(), Stderr: errb.String(), Took: time.Since(begin), Exit: cmd.ProcessState.ExitCode()}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s did not run to an exit: %v\n%s", bin, err, res)
	}
	require.NoError(t, ctx.Err(), "%s ran past its %s deadline\n%s", bin, timeout, res)
	return res
}

// sandbox makes an empty HOME and a project dir under it, like a fresh user account.
func sandbox(t *testing.T) (home, project string) {
	home = t.TempDir()
	project = filepath.Join(home, "project")
	require.NoError(t, os.MkdirAll(project, 0o755))
	return home, project
}

// nodePath is the PATH handed to the CLIs: the npm launchers are node scripts.
func nodePath() string { return os.Getenv("PATH") }

// capture writes a run's output under $CARD_STANDIN_CAPTURE (when set) as
// <name>.jsonl and <name>.stderr, with the temp HOME rewritten to /home/user
// like the shared fixtures. This is how e2e/fixtures/cli was produced.
func capture(t *testing.T, name, home string, res cliResult) {
	dir := os.Getenv("CARD_STANDIN_CAPTURE")
	if dir == "" {
		return
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	write := func(suffix, text string) {
		if strings.TrimSpace(text) == "" {
			return
		}
		text = scrubHome(text, home)
		// Stack traces name the install dir; make it the usual global one.
		if mods, err := filepath.Abs(filepath.Join("..", "agents", "node_modules")); err == nil {
			text = strings.ReplaceAll(text, mods, "/usr/lib/node_modules")
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+suffix), []byte(text), 0o644))
	}
	write(".jsonl", res.Stdout)
	write(".stderr", res.Stderr)
	summary := "exit=" + strconv.Itoa(res.Exit) + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".exit"), []byte(summary), 0o644))
}

// scrubHome replaces the temp HOME, and Claude's dashed form of it used in
// project keys, with /home/user.
func scrubHome(s, home string) string {
	s = strings.ReplaceAll(s, home, "/home/user")
	dashed := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, home)
	return strings.ReplaceAll(s, dashed, "-home-user")
}

func contains(body []byte, s string) bool { return strings.Contains(string(body), s) }
