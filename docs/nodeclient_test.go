package docs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/testskip"
)

const nodeClientDir = "examples/node-client"

// nodeClient finds node and the client's installed dependencies, or skips
// loudly (fails under CARD_E2E_REQUIRED=1, as CI sets).
func nodeClient(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testskip.Skip(t, testskip.Gap{Why: "no node on PATH for the Node example client", Enable: "install Node.js 20+", Install: true},
			"SKIPPING the Node client test: no `node` on PATH")
	}
	// The example runs on the TypeScript package, linked from
	// clients/typescript: that needs its own install and build.
	if _, err := os.Stat(filepath.Join(nodeClientDir, "node_modules", "@card-dev", "client", "dist", "esm", "index.js")); err != nil {
		testskip.Skip(t, testskip.Gap{Why: "the Node example client's dependencies not installed, or the TypeScript package not built",
			Enable: "(cd clients/typescript && npm ci) && npm ci --prefix docs/examples/node-client", Install: true},
			"SKIPPING the Node client test: its dependencies are not installed")
	}
	return node
}

// runClient starts the client against home in its own process group, with
// a deadline, and hands each stdout line to onLine with the client's stdin
// (the person at the terminal).
func runClient(t *testing.T, node, home string, onLine func(cmd *exec.Cmd, stdin io.Writer, line string), args ...string) (stdout string, exitCode int) {
	t.Helper()
	stdout, _, exitCode = runClientStderr(t, node, home, onLine, args...)
	return stdout, exitCode
}

// runClientStderr is runClient that also returns what the client wrote to
// stderr.
func runClientStderr(t *testing.T, node, home string, onLine func(cmd *exec.Cmd, stdin io.Writer, line string), args ...string) (stdout, errout string, exitCode int) {
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
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	require.NoError(t, cmd.Start())
	var out strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if onLine != nil {
			onLine(cmd, stdin, sc.Text())
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
	return out.String(), stderr.String(), code
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
	out, code := runClient(t, node, home, func(cmd *exec.Cmd, _ io.Writer, line string) {
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

// startAskDaemon is startDaemon with a Claude Code that asks card's
// permission tool the way the real one does.
func startAskDaemon(t *testing.T, home string) {
	t.Helper()
	daemontest.Start(t, daemontest.Options{
		Home:     home,
		Config:   "login_shell_path = false\n",
		Agents:   map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
		Environ:  []string{"HOME=" + home},
		Logger:   zap.NewNop(),
		NoClient: true,
	})
}

// The person at the terminal answers each question; the agent runs what
// they allow and is told what they deny.
func TestNodeClientAsksThePersonAtTheTerminalAndAnswers(t *testing.T) {
	node := nodeClient(t)
	for _, tc := range []struct {
		name, typed string
		file        bool
		decided     string
	}{
		{"yes", "y", true, "allow by client"},
		{"always", "a", true, "allow_always by client"},
		{"no", "n", false, "deny by client (Denied at the terminal.)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			startAskDaemon(t, home)
			work := t.TempDir()
			task := `TOOL Bash {"command":"echo hello > asked.txt"}`
			questions := 0
			out, code := runClient(t, node, home, func(_ *exec.Cmd, stdin io.Writer, line string) {
				if strings.HasPrefix(line, "approve? ") {
					questions++
					_, err := io.WriteString(stdin, "what?\n"+tc.typed+"\n") // a wrong key is asked again
					require.NoError(t, err)
				}
			}, "--ask", "--cwd", work, task)
			assert.Equal(t, 0, code, out)
			assert.Equal(t, 1, questions, out)
			assert.Regexp(t, `(?m)^approve\? run run_\w+ \(claude-code\) wants Bash: echo hello > asked.txt$`, out)
			assert.Contains(t, out, "  please answer y, a or n\n")
			assert.Regexp(t, `(?m)^event \d+ approval apr_1 asked: Bash: echo hello > asked.txt$`, out)
			assert.Regexp(t, `(?m)^event \d+ tool_use: Bash$`, out, "the tool's name, from tool.name")
			assert.Contains(t, out, "approval apr_1: "+tc.decided+"\n")
			if tc.file {
				assert.FileExists(t, filepath.Join(work, "asked.txt"))
			} else {
				assert.NoFileExists(t, filepath.Join(work, "asked.txt"))
				assert.Contains(t, out, "Denied at the terminal.", "the agent was told")
			}
			assert.Regexp(t, `(?m)^run run_\w+: succeeded: DONE`, out)
		})
	}
}

// Nobody answers in time: the daemon withdraws the question and the
// terminal stops asking it.
func TestNodeClientDropsAQuestionTheDaemonWithdraws(t *testing.T) {
	node := nodeClient(t)
	home := t.TempDir()
	startAskDaemon(t, home)
	work := t.TempDir()
	out, code := runClient(t, node, home, nil, "--ask", "--approval-timeout", "1", "--cwd", work,
		`TOOL Bash {"command":"echo hello > late.txt"}`)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "approval apr_1: withdrawn (answered elsewhere or expired)\n")
	assert.Contains(t, out, "approval apr_1: deny by timeout")
	assert.NoFileExists(t, filepath.Join(work, "late.txt"))
}

// The Node client makes the same checks as card's own before it sends the
// token: here the port is held by this user, but not by the process
// daemon.json names, so it must refuse without connecting.
func TestNodeClientRefusesToSendTheTokenToAPortItsDaemonDoesNotHold(t *testing.T) {
	node := nodeClient(t)
	if runtime.GOOS != "linux" {
		t.Skip("the socket checks read /proc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var connections atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			connections.Add(1)
			c.Close()
		}
	}()
	sleeper := exec.Command("sleep", "60")
	require.NoError(t, sleeper.Start())
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()

	home := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.Mkdir(home, 0o700))
	disc := fmt.Sprintf(`{"url":"ws://%s/rpc","pid":%d}`, ln.Addr(), sleeper.Process.Pid)
	require.NoError(t, os.WriteFile(filepath.Join(home, "daemon.json"), []byte(disc), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(home, "token"), []byte(strings.Repeat("7", 64)+"\n"), 0o600))

	_, stderr, code := runClientStderr(t, node, home, nil, "--cwd", home, "hello")
	assert.Equal(t, 1, code)
	port := ln.Addr().(*net.TCPAddr).Port
	assert.Contains(t, stderr, fmt.Sprintf("pid %d, which daemon.json names, does not hold the socket listening on port %d: not sending the token", sleeper.Process.Pid, port))
	assert.Zero(t, connections.Load(), "the client connected before it refused")

	// A daemon.json whose pid is gone is no daemon (exit 3).
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	disc = fmt.Sprintf(`{"url":"ws://%s/rpc","pid":%d}`, ln.Addr(), dead.Process.Pid)
	require.NoError(t, os.WriteFile(filepath.Join(home, "daemon.json"), []byte(disc), 0o600))
	_, stderr, code = runClientStderr(t, node, home, nil, "--cwd", home, "hello")
	assert.Equal(t, 3, code, stderr)
}

func TestNodeClientRefusesAHomeThatIsALink(t *testing.T) {
	node := nodeClient(t)
	real := t.TempDir()
	startDaemon(t, real)
	link := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.Symlink(real, link))
	_, stderr, code := runClientStderr(t, node, link, nil, "--cwd", real, "hello")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "is a symbolic link")
}
