package acpclient

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

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/testskip"
)

// An editor that exits closes card acp's stdin. With the real Claude Code
// kept warm by a first turn: card acp exits 0 with nothing on stderr, the
// session's warm agent ends within seconds instead of after idle_secs (an
// hour here), its process gone, and the session stays open, its next turn
// resuming the conversation.
func TestWhenTheEditorExitsCardACPEndsItsSessionsWarmAgentAndKeepsTheSession(t *testing.T) {
	if os.Getenv("CARD_E2E") != "1" && !testskip.Required() {
		testskip.Skip(t, testskip.RealCLIsOff, "real-CLI end-to-end test through card acp skipped")
	}
	cliBin := standin.CLI(t, "claude")
	bin := daemontest.Build(t)
	s := standin.NewAnthropic(t, standin.Script{AnswerUserMessages: true})
	env := s.ClaudeEnv(t.TempDir(), os.Getenv("PATH"))
	p := daemontest.Serve(t, bin, daemontest.Options{Warm: true, Config: "login_shell_path = false\n[sessions]\nidle_secs = 3600\n",
		Environ: env, Agents: map[string]string{agent.ClaudeCode: cliBin}})
	cwd := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(cwd, 0o755))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "acp", agent.ClaudeCode, "--home", p.Home, "--mode", "read_only")
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	// ask sends one request and reads up to its answer.
	ask := func(id int, method, params string) string {
		_, err := fmt.Fprintf(stdin, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", id, method, params)
		require.NoError(t, err)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, fmt.Sprintf(`"id":%d,`, id)) || strings.HasSuffix(line, fmt.Sprintf(`"id":%d}`, id)) {
				return line
			}
		}
		t.Fatalf("no answer to %s; stderr: %s", method, stderr.String())
		return ""
	}
	ask(1, "initialize", `{"protocolVersion":1,"clientCapabilities":{}}`)
	created := ask(2, "session/new", fmt.Sprintf(`{"cwd":%q,"mcpServers":[]}`, cwd))
	require.Contains(t, created, `"sessionId":"ses_`, created)
	i := strings.Index(created, `"sessionId":"`) + len(`"sessionId":"`)
	id := created[i : i+strings.Index(created[i:], `"`)]
	answer := ask(3, "session/prompt", fmt.Sprintf(`{"sessionId":%q,"prompt":[{"type":"text","text":"Remember the word avocado."}]}`, id))
	require.Contains(t, answer, `"stopReason":"end_turn"`, answer)

	c := p.Client
	dctx := daemontest.Context(t)
	before, err := c.Session(dctx, id)
	require.NoError(t, err)
	require.True(t, before.Warm, "the turn left a warm agent")
	require.NotZero(t, before.Pid)

	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), "card acp did not exit 0; stderr: %s", stderr.String())
	assert.Empty(t, stderr.String(), "an editor that exited was told something went wrong")
	require.Eventually(t, func() bool {
		got, err := c.Session(dctx, id)
		return err == nil && !got.Warm
	}, 20*time.Second, 50*time.Millisecond, "the warm agent outlived the editor")
	require.Eventually(t, func() bool { return syscall.Kill(before.Pid, 0) != nil }, 20*time.Second, 50*time.Millisecond,
		"the warm agent's process %d is still there", before.Pid)

	after, err := c.Session(dctx, id)
	require.NoError(t, err)
	assert.Equal(t, api.SessionIdle, after.State, "the session stays open for the next editor")
	res, err := c.PromptSession(dctx, api.SessionPromptParams{SessionID: id, Task: "Which word did I ask you to remember?"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		run, err := c.Run(dctx, res.RunID)
		return err == nil && run.Status == api.StatusSucceeded
	}, 2*time.Minute, 100*time.Millisecond, "the next turn did not succeed")
	calls := s.ModelCalls()
	assert.Contains(t, string(calls[len(calls)-1].Body), "avocado", "the next turn resumed the conversation")
}
