// Package invoke_test runs the real agent CLIs from npm through the real
// daemon's agents.invoke, each pointed at a vendor-API stand-in on loopback:
// the stand-in's answer must come back in the result and as streamed text,
// and an API 401 / 429 must come back as the right error kind.
//
// Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1, which CI sets and which turns a missing CLI into a
// failure); see standin.CLI.
package invoke_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// setup is one CLI pointed at one stand-in: the daemon's environment and
// its card.toml [adapters.<id>] table.
type setup struct {
	adapter    string
	environ    []string
	adapterCfg map[string]any
	// server is the stand-in the CLI is pointed at.
	server *standin.Server
	// config is more of card.toml (a [budget] table).
	config map[string]any
}

type session struct {
	c      *client.Client
	cwd    string
	events *daemontest.Events
	// arrived is when each event reached the client, by run and seq.
	arrived *arrivals
}

// startDaemon runs a real daemon in-process with s's environment; the CLI
// is pinned with its CAR_<ID>_BIN variable.
func startDaemon(t *testing.T, s setup) *session {
	t.Helper()
	cfg := map[string]any{"login_shell_path": false}
	if s.adapterCfg != nil {
		cfg["adapters"] = map[string]any{s.adapter: s.adapterCfg}
	}
	for k, v := range s.config {
		cfg[k] = v
	}
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	sess := &session{cwd: filepath.Join(t.TempDir(), "project"), events: daemontest.NewEvents(), arrived: newArrivals()}
	require.NoError(t, os.MkdirAll(sess.cwd, 0o755))
	sess.c = daemontest.Start(t, daemontest.Options{Config: buf.String(), Environ: s.environ,
		Client: client.Options{OnEvent: func(ev api.AgentEvent) {
			sess.arrived.note(ev)
			sess.events.Add(ev)
		}}}).Client
	return sess
}

// run invokes adapter with streaming and waits for the terminal event.
func (s *session) run(t *testing.T, adapter, task string) []api.AgentEvent {
	t.Helper()
	acc, err := s.c.Stream(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: adapter, Cwd: s.cwd, TimeoutSecs: 120}, Task: task}, nil)
	require.NoError(t, err)
	evs := s.events.WaitEnd(t, acc.RunID, 150*time.Second)
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Seq)
	}
	return evs
}

func streamedText(evs []api.AgentEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Kind == "text" {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}

type cliCase struct {
	adapter, bin string
	// newServer starts the stand-in and returns the daemon's setup. With
	// agentRetries the CLI keeps its own retry defaults where a test
	// harness would otherwise turn them off (Codex's provider knobs,
	// Gemini's maxAttempts), as a user's CLI has them.
	newServer func(t *testing.T, bin string, script standin.Script, agentRetries bool) setup
}

func cases() []cliCase {
	base := func(home, bin, pinVar string) []string {
		return []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), pinVar + "=" + bin}
	}
	return []cliCase{
		{adapter: "claude-code", bin: "claude", newServer: func(t *testing.T, bin string, script standin.Script, _ bool) setup {
			// ClaudeEnv's CLAUDE_CODE_MAX_RETRIES=0 is overridden by the
			// request's bound on every run.
			s := standin.NewAnthropic(t, script)
			home := t.TempDir()
			env := append(s.ClaudeEnv(home, os.Getenv("PATH")), "CAR_CLAUDE_CODE_BIN="+bin)
			return setup{adapter: "claude-code", environ: env, server: s}
		}},
		{adapter: "codex", bin: "codex", newServer: func(t *testing.T, bin string, script standin.Script, agentRetries bool) setup {
			s := standin.NewOpenAI(t, script)
			args, env := s.CodexExtras()
			if agentRetries {
				args, env = s.CodexExtrasRetrying()
			}
			return setup{adapter: "codex", environ: append(base(t.TempDir(), bin, "CAR_CODEX_BIN"), "NO_COLOR=1"),
				adapterCfg: map[string]any{"args": args, "env": env}, server: s}
		}},
		{adapter: "gemini", bin: "gemini", newServer: func(t *testing.T, bin string, script standin.Script, agentRetries bool) setup {
			s := standin.NewGemini(t, script)
			home := t.TempDir()
			setupGemini := s.GeminiSetup
			if agentRetries {
				setupGemini = s.GeminiSetupRetrying
			}
			env, err := setupGemini(home, os.Getenv("PATH"))
			require.NoError(t, err)
			// Workspace trust is the operator's call (spawn never passes it).
			return setup{adapter: "gemini", environ: append(env, "CAR_GEMINI_BIN="+bin),
				adapterCfg: map[string]any{"args": []string{"--skip-trust"}}, server: s}
		}},
	}
}

func TestARealAgentAnswersThroughTheDaemon(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.adapter, func(t *testing.T) {
			bin := standin.CLI(t, tc.bin)
			t.Parallel()
			answer := "PONG via card from the " + tc.adapter + " stand-in"
			sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Answer: answer}, false))
			evs := sess.run(t, tc.adapter, "say pong")
			last := evs[len(evs)-1]
			require.NotNil(t, last.Result)
			require.Equal(t, api.EventDone, last.Kind, "status %s, error %+v", last.Status, last.Result.Error)
			assert.Equal(t, api.StatusSucceeded, last.Status)
			assert.Equal(t, answer, strings.TrimSpace(last.Result.Answer))
			assert.Equal(t, answer, strings.TrimSpace(streamedText(evs)), "the answer also arrives as streamed text")

			run, err := sess.c.Run(daemontest.Context(t), last.RunID)
			require.NoError(t, err)
			assert.Equal(t, api.StatusSucceeded, run.Status)
			assert.Equal(t, answer, strings.TrimSpace(run.Answer))
		})
	}
}

func TestAnAPIErrorComesBackAsTheRightErrorKind(t *testing.T) {
	for _, tc := range cases() {
		for _, e := range []struct {
			status int
			kind   string
		}{{http.StatusUnauthorized, "auth"}, {http.StatusTooManyRequests, "rate_limit"}} {
			t.Run(tc.adapter+"/"+http.StatusText(e.status), func(t *testing.T) {
				bin := standin.CLI(t, tc.bin)
				t.Parallel()
				sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Status: e.status}, false))
				evs := sess.run(t, tc.adapter, "say pong")
				last := evs[len(evs)-1]
				assert.Equal(t, api.EventRunError, last.Kind)
				assert.Equal(t, api.StatusFailed, last.Status)
				require.NotNil(t, last.Result)
				require.NotNil(t, last.Result.Error, "a failed run says why")
				assert.Equal(t, e.kind, last.Result.Error.Kind, last.Result.Error.Message)
			})
		}
	}
}
