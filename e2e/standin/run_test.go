package standin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/internal/proc"
)

// cliPath is CLI plus t.Parallel: each real-CLI test has its own server and
// HOME, and running them side by side keeps the opt-in suite under a minute.
func cliPath(t *testing.T, name string) string {
	t.Helper()
	p := CLI(t, name)
	t.Parallel()
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
	// Capped, so a CLI stuck in a loop cannot fill memory.
	out, errb := &proc.Capped{Head: 4 << 20}, &proc.Capped{Head: 1 << 20}
	cmd.Stdout, cmd.Stderr = out, errb
	cmd.SysProcAttr = proc.NewGroup()
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
