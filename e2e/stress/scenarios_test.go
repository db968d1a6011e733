package stress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/proc"
)

// The deterministic sequence that killed the daemon every time with SIGFPE:
// the real CLIs on its PATH, card.toml giving Codex and Gemini provider
// args, the stand-ins' environment; one agents.detect; each CLI's --version
// run by hand (about ten seconds, well past the moment the daemon used to
// advise away pages of its own mappings); then agents.detect with refresh,
// whose probes start the threads that died.
func TestDetectingAgainAfterTheCLIsRanNeverKillsTheDaemon(t *testing.T) {
	names := []string{"claude", "codex", "gemini", "copilot", "droid", "pi", "opencode", "qwen"}
	var binDir string
	for _, n := range names {
		binDir = filepath.Dir(standin.CLI(t, n))
	}
	binDir = outsideScratch(t, binDir, names)
	bin := card(t)
	busy(t)
	anthropic := standin.NewAnthropic(t, standin.Script{})
	openai := standin.NewOpenAI(t, standin.Script{})
	gemini := standin.NewGemini(t, standin.Script{})
	codexArgs, codexEnv := openai.CodexExtras()
	cfg := map[string]any{"login_shell_path": false, "adapters": map[string]any{
		"codex":  map[string]any{"args": codexArgs, "env": codexEnv},
		"gemini": map[string]any{"args": []string{"--skip-trust"}},
	}}
	var conf strings.Builder
	require.NoError(t, toml.NewEncoder(&conf).Encode(cfg))
	n := rounds(2)
	died := 0
	for round := range n {
		home := t.TempDir()
		environ := []string{"HOME=" + home, "PATH=" + binDir + ":/usr/bin:/bin",
			"ANTHROPIC_BASE_URL=" + anthropic.URL, "ANTHROPIC_API_KEY=" + standin.APIKey,
			"OPENAI_API_KEY=" + standin.APIKey, "GEMINI_API_KEY=" + standin.APIKey, "GOOGLE_GEMINI_BASE_URL=" + gemini.URL}
		p := daemontest.Serve(t, bin, daemontest.Options{Config: conf.String(), Environ: environ})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		specs, err := p.Client.Detect(ctx, api.DetectParams{})
		require.NoError(t, err)
		assert.Len(t, specs, len(names), "round %d: every installed CLI is found", round)
		for _, name := range names {
			cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), "--version")
			cmd.Env, cmd.Dir = environ, home
			_ = cmd.Run() // its answer is not the point; the time it takes is
		}
		_, err = p.Client.Detect(ctx, api.DetectParams{Refresh: true})
		cancel()
		if err != nil {
			t.Errorf("round %d: agents.detect with refresh: %v", round, err)
		}
		time.Sleep(200 * time.Millisecond)
		if !survived(t, p, round) {
			died++
		}
	}
	t.Logf("detect-after-the-CLIs scenario: %d rounds, %d deaths", n, died)
}

// The queued-prompt scenario that killed the daemon in 1–4 rounds of 10 and
// ran the prompts out of order in 5 of 8: a session over a fake Claude Code
// speaking stream-json input (a warm agent), two turns, then three
// sessions.prompt requests sent back to back on one connection, each turn
// taking three seconds. Every round: no death, the three answers name
// turns 3, 4 and 5 in the order sent, and the agent read the prompts in
// that order.
func TestQueuedPromptsNeverKillTheDaemonAndRunInTheOrderSent(t *testing.T) {
	skipUnlessOn(t)
	bin := card(t)
	busy(t)
	n := rounds(2)
	died := 0
	for round := range n {
		fake := daemontest.WarmClaude(t)
		home := t.TempDir()
		cwd := filepath.Join(home, "project")
		require.NoError(t, os.MkdirAll(cwd, 0o755))
		p := daemontest.Serve(t, bin, daemontest.Options{Warm: true, Config: "login_shell_path = false\n",
			Agents: map[string]string{"claude-code": fake}, Environ: []string{"HOME=" + home}})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		s, err := p.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd}, Warm: true})
		require.NoError(t, err)
		var mu sync.Mutex
		ended := map[int]api.Status{}
		_, err = p.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, func(ev api.SessionEvent) {
			if client.Terminal(ev.Event) && ev.Event.Result != nil {
				mu.Lock()
				ended[ev.Turn] = ev.Event.Result.Status
				mu.Unlock()
			}
		})
		require.NoError(t, err)
		waitTurns := func(k int) {
			require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(ended) >= k }, 90*time.Second, 20*time.Millisecond,
				"round %d: %d turns ended", round, k)
		}
		for i, task := range []string{"one", "two"} {
			_, err := p.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: task})
			require.NoError(t, err)
			waitTurns(i + 1)
		}
		var frames []string
		for i, task := range []string{"three SLEEP3", "four SLEEP3", "five SLEEP3"} {
			frames = append(frames, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sessions.prompt","params":{"session_id":%q,"task":%q}}`, i+1, s.SessionID, task))
		}
		answers := sendBackToBack(t, p, frames)
		for i := range 3 {
			var a api.SessionPromptResult
			require.NoError(t, json.Unmarshal(answers[i+1], &a))
			assert.Equal(t, i+3, a.Turn, "round %d: the prompt sent %d is turn %d", round, i+1, i+3)
		}
		waitTurns(5)
		cancel()
		mu.Lock()
		for turn := 1; turn <= 5; turn++ {
			assert.Equal(t, api.StatusSucceeded, ended[turn], "round %d: turn %d", round, turn)
		}
		mu.Unlock()
		assert.Equal(t, []string{"one", "two", "three SLEEP3", "four SLEEP3", "five SLEEP3"}, daemontest.PromptsRead(t, fake),
			"round %d: the agent read the prompts in the order they were sent", round)
		if !survived(t, p, round) {
			died++
		}
	}
	t.Logf("queued-prompt scenario: %d rounds, %d deaths", n, died)
}

// outsideScratch is a directory of the named CLIs detection will take: dir
// itself, or, when the checkout sits in a world-writable scratch directory
// (a clone under /tmp), one outside it holding a script for each that execs
// the real CLI, since detection never takes a binary from a scratch
// directory, and a daemon finding none would prove nothing here.
func outsideScratch(t *testing.T, dir string, names []string) string {
	t.Helper()
	if !daemontest.InScratch(dir) {
		return dir
	}
	out := filepath.Join(daemontest.UserHome(t), "bin")
	require.NoError(t, os.MkdirAll(out, 0o700))
	for _, n := range names {
		script := fmt.Sprintf("#!/bin/sh\nexec %q \"$@\"\n", filepath.Join(dir, n))
		require.NoError(t, proc.WriteExecutable(filepath.Join(out, n), []byte(script)))
	}
	return out
}
