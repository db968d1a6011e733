package acpclient

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/testskip"
)

// firstChunk is an ACP client that notes when the first
// agent_message_chunk of the current prompt arrives.
type firstChunk struct {
	sdkClient
	mu    sync.Mutex
	first chan time.Time
}

func (c *firstChunk) SessionUpdate(ctx context.Context, n acpsdk.SessionNotification) error {
	if n.Update.AgentMessageChunk != nil {
		c.mu.Lock()
		if c.first != nil {
			c.first <- time.Now()
			c.first = nil
		}
		c.mu.Unlock()
	}
	return nil
}

// timeTurns runs prompts on one session of the agent on stdin/stdout of
// cmd and returns, per turn, the time from sending session/prompt to the
// first agent_message_chunk.
func timeTurns(t *testing.T, cmd *exec.Cmd, cwd string, meta map[string]any, turns int) []time.Duration {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	cl := &firstChunk{}
	conn := acpsdk.NewClientSideConnection(cl, stdin, stdout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err = conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber})
	require.NoError(t, err)
	sess, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{}, Meta: meta})
	require.NoError(t, err)
	var out []time.Duration
	for i := 0; i < turns; i++ {
		ch := make(chan time.Time, 1)
		cl.mu.Lock()
		cl.first = ch
		cl.mu.Unlock()
		sent := time.Now()
		_, err := conn.Prompt(ctx, acpsdk.PromptRequest{SessionId: sess.SessionId, Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock("say hi")}})
		require.NoError(t, err)
		select {
		case at := <-ch:
			out = append(out, at.Sub(sent))
		case <-time.After(5 * time.Second):
			t.Fatalf("turn %d had no agent_message_chunk", i+1)
		}
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestFirstChunkThroughCardACPAgainstGeminiDirectly measures, in one run
// with one stand-in, the first agent_message_chunk of a turn through
// `card acp gemini` and from `gemini --acp` spoken to directly.
func TestFirstChunkThroughCardACPAgainstGeminiDirectly(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Gap{Why: "a benchmark against the real Gemini CLI", Enable: "CARD_BENCH=1"}, "")
	}
	const turns = 7
	gem := standin.CLI(t, "gemini")
	model := standin.NewGemini(t, standin.Script{Answer: "hi there"})
	env, err := model.GeminiSetup(t.TempDir(), os.Getenv("PATH"))
	require.NoError(t, err)
	cwd := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(cwd, 0o755))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	direct := exec.CommandContext(ctx, gem, "--acp")
	direct.Dir = cwd
	direct.Env = append(os.Environ(), env...)
	d := timeTurns(t, direct, cwd, nil, turns)

	bin := daemontest.Build(t)
	p := daemontest.Serve(t, bin, daemontest.Options{Warm: true, Config: "login_shell_path = false\n[adapters.gemini]\nargs = [\"--skip-trust\"]\n", Environ: env,
		Agents: map[string]string{agent.Gemini: gem}, NoClient: true})
	viaCard := exec.CommandContext(ctx, bin, "acp", agent.Gemini, "--home", p.Home, "--mode", "read_only")
	viaCard.Env = os.Environ()
	c := timeTurns(t, viaCard, cwd, nil, turns)

	t.Logf("first agent_message_chunk, %d turns each: gemini --acp median %v (all %v); card acp gemini median %v (all %v)",
		turns, median(d), d, median(c), c)
}

// streamClient counts a turn's agent_message_chunks and notes the first and
// the last.
type streamClient struct {
	sdkClient
	mu          sync.Mutex
	n           int
	first, last time.Time
}

func (c *streamClient) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	if n.Update.AgentMessageChunk != nil {
		c.mu.Lock()
		now := time.Now()
		if c.n == 0 {
			c.first = now
		}
		c.last = now
		c.n++
		c.mu.Unlock()
	}
	return nil
}

// streamTurn runs one long turn on the agent of cmd and returns how many
// chunks came, the span from the first to the last, and the whole turn.
func streamTurn(t *testing.T, cmd *exec.Cmd, cwd string) (chunks int, span, whole time.Duration) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	cl := &streamClient{}
	conn := acpsdk.NewClientSideConnection(cl, stdin, stdout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err = conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber})
	require.NoError(t, err)
	sess, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{}})
	require.NoError(t, err)
	sent := time.Now()
	_, err = conn.Prompt(ctx, acpsdk.PromptRequest{SessionId: sess.SessionId, Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock("go on")}})
	require.NoError(t, err)
	done := time.Now()
	time.Sleep(200 * time.Millisecond) // updates the SDK hands over after the answer
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.n, cl.last.Sub(cl.first), done.Sub(sent)
}

// longTurn is one 5,000-chunk turn as cli streams it over ACP itself and
// then through `card acp id` on a warm daemon, in one run: the chunks each
// path sent, first to last chunk, and the whole turn. warmUp runs a turn
// of the CLI's own first, outside the figures.
type longTurn struct {
	n           int
	span, whole time.Duration
}

func compareLongTurn(t *testing.T, id, cli string, env []string, config string, warmUp bool) (direct, viaCard longTurn) {
	t.Helper()
	cwd := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(cwd, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	own := func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, cli, "--acp")
		cmd.Dir = cwd
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}
	if warmUp {
		streamTurn(t, own(), cwd)
	}
	direct.n, direct.span, direct.whole = streamTurn(t, own(), cwd)

	bin := daemontest.Build(t)
	p := daemontest.Serve(t, bin, daemontest.Options{Warm: true, Config: config,
		Environ: env, Agents: map[string]string{id: cli}, NoClient: true})
	cmd := exec.CommandContext(ctx, bin, "acp", id, "--home", p.Home, "--mode", "read_only")
	cmd.Env = os.Environ()
	viaCard.n, viaCard.span, viaCard.whole = streamTurn(t, cmd, cwd)
	return direct, viaCard
}

// TestAFiveThousandChunkTurnThroughCardACPAgainstGeminiDirectly streams a
// 5,000-word answer (the stand-in sends a delta per word) through both
// paths, in one run.
func TestAFiveThousandChunkTurnThroughCardACPAgainstGeminiDirectly(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Gap{Why: "a benchmark against the real Gemini CLI", Enable: "CARD_BENCH=1"}, "")
	}
	gem := standin.CLI(t, "gemini")
	answer := strings.TrimSpace(strings.Repeat("word ", 5000))
	model := standin.NewGemini(t, standin.Script{Answer: answer})
	env, err := model.GeminiSetup(t.TempDir(), os.Getenv("PATH"))
	require.NoError(t, err)
	d, c := compareLongTurn(t, agent.Gemini, gem, env, "login_shell_path = false\n[adapters.gemini]\nargs = [\"--skip-trust\"]\n", false)
	t.Logf("5,000-word answer: gemini --acp %d chunks, first→last %v, turn %v; card acp gemini %d chunks, first→last %v, turn %v",
		d.n, d.span, d.whole, c.n, c.span, c.whole)
}

// TestAFiveThousandChunkTurnThroughCardACPAgainstCopilotDirectly is the
// same long turn with Copilot CLI, whose ACP mode (unlike Gemini's) passes
// on each delta of the model's stream as its own agent_message_chunk: a
// turn of thousands of chunks through card against the CLI's own.
func TestAFiveThousandChunkTurnThroughCardACPAgainstCopilotDirectly(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Gap{Why: "a benchmark against the real Copilot CLI", Enable: "CARD_BENCH=1"}, "")
	}
	cop := standin.CLI(t, "copilot")
	answer := strings.TrimSpace(strings.Repeat("word ", 5000))
	model := standin.NewAnthropic(t, standin.Script{Answer: answer})
	env := model.CopilotEnv(t.TempDir(), os.Getenv("PATH"))
	// Copilot unpacks itself on its first run in a new home: a turn of
	// its own first, outside the figures.
	d, c := compareLongTurn(t, agent.Copilot, cop, env, "login_shell_path = false\n", true)
	t.Logf("5,000-word answer: copilot --acp %d chunks, first→last %v, turn %v; card acp copilot %d chunks, first→last %v, turn %v (%.2fx first→last)",
		d.n, d.span, d.whole, c.n, c.span, c.whole, float64(c.span)/float64(d.span))
}
