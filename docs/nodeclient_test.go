package docs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const nodeClientDir = "examples/node-client"

// nodeClient finds node and the client's installed dependencies, or skips
// loudly (fails under CARD_E2E_REQUIRED=1, as CI sets).
func nodeClient(t *testing.T) string {
	t.Helper()
	missing := func(format string, args ...any) {
		msg := "SKIPPING the Node client test: " + strings.TrimSpace(fmt.Sprintf(format, args...))
		if os.Getenv("CARD_E2E_REQUIRED") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("no `node` on PATH; install Node.js 20+")
	}
	if _, err := os.Stat(filepath.Join(nodeClientDir, "node_modules", "ws", "package.json")); err != nil {
		missing("the client's dependencies are not installed; run `npm ci --prefix docs/examples/node-client`")
	}
	return node
}

// runClient starts the client against home in its own process group, with
// a deadline, and hands each stdout line to onLine.
func runClient(t *testing.T, node, home string, onLine func(cmd *exec.Cmd, line string), args ...string) (stdout string, exitCode int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"client.js"}, args...)...)
	cmd.Dir = nodeClientDir
	cmd.Env = append(os.Environ(), "CARD_HOME="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var out strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if onLine != nil {
			onLine(cmd, sc.Text())
		}
	}
	err = cmd.Wait()
	require.NoError(t, ctx.Err(), "the client did not finish within its deadline:\n%s\n%s", out.String(), stderr.String())
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	if stderr.Len() > 0 {
		t.Logf("client stderr:\n%s", stderr.String())
	}
	return out.String(), code
}

func TestNodeClientDetectsChecksHealthAndStreamsARun(t *testing.T) {
	node := nodeClient(t)
	home := t.TempDir()
	startDaemon(t, home)

	out, code := runClient(t, node, home, nil, "--cwd", home, "Reply with PONG.")
	assert.Equal(t, 0, code, out)
	assert.Regexp(t, `(?m)^card \S+ \(protocol 1\.\d+\) at ws://127\.0\.0\.1:\d+/rpc$`, out)
	assert.Regexp(t, `(?m)^detect: claude-code 2\.1\.197 runnable .*fake-claude\.sh$`, out)
	assert.Contains(t, out, "health: claude-code ready\n")
	assert.NotContains(t, out, "health: codex", "health without an id answers for the detected adapters only")
	assert.Regexp(t, `(?m)^run run_\w+: started claude-code$`, out)
	// Events arrive in order, and the answer comes last.
	session := strings.Index(out, "event 1 session")
	text := strings.Index(out, "event 2 text: PONG from fake anthropic")
	end := strings.Index(out, ": succeeded: PONG from fake anthropic")
	require.True(t, session >= 0 && text > session && end > text, "events out of order or missing:\n%s", out)
}

func TestNodeClientCancelsItsRunOnCtrlC(t *testing.T) {
	node := nodeClient(t)
	home := t.TempDir()
	startDaemon(t, home)

	interrupted := false
	out, code := runClient(t, node, home, func(cmd *exec.Cmd, line string) {
		// The fake agent sleeps after its first event when the task says SLOW.
		if strings.HasPrefix(line, "event 1 session") && !interrupted {
			interrupted = true
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		}
	}, "--cwd", home, "SLOW: take your time.")
	require.True(t, interrupted, "the run never streamed its first event:\n%s", out)
	assert.Equal(t, 130, code, out)
	assert.Regexp(t, `(?m)^cancelling run run_\w+`, out)
	assert.Regexp(t, `(?m)^run run_\w+: cancelled$`, out)
	assert.Contains(t, out, "cancel: cancelled\n")
	assert.NotContains(t, out, "PONG", "the run went on after the cancel")
}
