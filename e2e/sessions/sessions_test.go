// Package sessions_test runs conversations through the real daemon with the
// real agent CLIs, each pointed at a vendor-API stand-in on loopback that
// answers with the number of user messages the model call carried: turn
// two's request carrying turn one is the proof that a session's turns are
// one conversation, and a SIGKILL of the daemon between turns must not
// break it.
//
// Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1); see standin.CLI.
package sessions_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// cli is one real CLI and how to point it at a stand-in: the stand-in, the
// daemon's extra environment and its [adapters.<id>] table.
type cli struct {
	id, bin string
	setup   func(t *testing.T, home, path string, script standin.Script) (*standin.Server, []string, map[string]any)
}

var clis = []cli{
	{"claude-code", "claude", func(t *testing.T, home, path string, script standin.Script) (*standin.Server, []string, map[string]any) {
		s := standin.NewAnthropic(t, script)
		return s, s.ClaudeEnv(home, path), nil
	}},
	{"codex", "codex", func(t *testing.T, home, path string, script standin.Script) (*standin.Server, []string, map[string]any) {
		s := standin.NewOpenAI(t, script)
		args, env := s.CodexExtras()
		return s, []string{"NO_COLOR=1"}, map[string]any{"args": args, "env": env}
	}},
	{"gemini", "gemini", func(t *testing.T, home, path string, script standin.Script) (*standin.Server, []string, map[string]any) {
		s := standin.NewGemini(t, script)
		env, err := s.GeminiSetup(home, path)
		require.NoError(t, err)
		return s, env, map[string]any{"args": []string{"--skip-trust"}}
	}},
	{"copilot", "copilot", func(t *testing.T, home, path string, script standin.Script) (*standin.Server, []string, map[string]any) {
		s := standin.NewAnthropic(t, script)
		return s, nil, map[string]any{"env": standin.AdapterEnv(s.CopilotEnv(home, path))}
	}},
	{"droid", "droid", func(t *testing.T, home, path string, script standin.Script) (*standin.Server, []string, map[string]any) {
		s := standin.NewAnthropic(t, script)
		env, args, err := s.DroidSetup(home, path)
		require.NoError(t, err)
		return s, nil, map[string]any{"args": args, "env": standin.AdapterEnv(env)}
	}},
	{"pi", "pi", func(t *testing.T, home, path string, script standin.Script) (*standin.Server, []string, map[string]any) {
		s := standin.NewAnthropic(t, script)
		env, args, err := s.PiSetup(home, path)
		require.NoError(t, err)
		return s, nil, map[string]any{"args": args, "env": standin.AdapterEnv(env)}
	}},
}

var (
	buildMu sync.Mutex
	cardBin string
)

// card builds ./cmd/card for the test, or reuses the build of an earlier
// one still running (its temp dir holds it): call it from a parent test,
// not a subtest, so the binary outlives the subtests.
func card(t *testing.T) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if _, err := os.Stat(cardBin); cardBin == "" || err != nil {
		cardBin = daemontest.Build(t)
	}
	return cardBin
}

// conversation is one adapter's daemon (a `card serve` process) with its
// stand-in.
type conversation struct {
	c       cli
	server  *standin.Server
	opts    daemontest.Options
	proc    *daemontest.Process
	project string
	events  *collected
}

type collected struct {
	mu  sync.Mutex
	evs []api.SessionEvent
}

func (c *collected) add(ev api.SessionEvent) { c.mu.Lock(); c.evs = append(c.evs, ev); c.mu.Unlock() }
func (c *collected) all() []api.SessionEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.evs)
}

func start(t *testing.T, c cli, script standin.Script, copts client.Options) *conversation {
	t.Helper()
	return startWith(t, c, script, copts, nil)
}

// startWith is start with a [sessions] table for the daemon.
func startWith(t *testing.T, c cli, script standin.Script, copts client.Options, sessionsCfg map[string]any) *conversation {
	t.Helper()
	bin := standin.CLI(t, c.bin)
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node must be on PATH to run the npm-installed CLIs")
	path := strings.Join([]string{filepath.Dir(bin), filepath.Dir(node), "/usr/local/bin", "/usr/bin", "/bin"}, ":")
	home := t.TempDir()
	server, environ, adapterCfg := c.setup(t, home, path, script)
	cfg := map[string]any{"login_shell_path": false, "probe_timeout_secs": 90}
	if adapterCfg != nil {
		cfg["adapters"] = map[string]any{c.id: adapterCfg}
	}
	if sessionsCfg != nil {
		cfg["sessions"] = sessionsCfg
	}
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	conv := &conversation{c: c, server: server, project: filepath.Join(home, "project"), events: &collected{}}
	require.NoError(t, os.MkdirAll(conv.project, 0o755))
	conv.opts = daemontest.Options{Warm: true, Config: buf.String(), Agents: map[string]string{c.id: bin},
		Environ: append([]string{"HOME=" + home, "PATH=" + path, "LANG=C.UTF-8"}, environ...), Client: copts}
	conv.proc = daemontest.Serve(t, card(t), conv.opts)
	return conv
}

// restart SIGKILLs the daemon and starts a new one on the same home.
func (conv *conversation) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, conv.proc.Cmd.Process.Signal(syscall.SIGKILL))
	conv.proc.Wait(t, 10*time.Second)
	conv.opts.Home = conv.proc.Home
	conv.proc = daemontest.Serve(t, card(t), conv.opts)
}

func (conv *conversation) subscribe(t *testing.T, id string, after int64) {
	t.Helper()
	_, err := conv.proc.Client.SubscribeSession(daemontest.Context(t), api.SessionSubscribeParams{SessionID: id, AfterSeq: after}, conv.events.add)
	require.NoError(t, err)
}

// turn prompts the session and waits for the turn's terminal event.
func (conv *conversation) turn(t *testing.T, id, task string) api.SessionEvent {
	t.Helper()
	res, err := conv.proc.Client.PromptSession(daemontest.Context(t), api.SessionPromptParams{SessionID: id, Task: task})
	require.NoError(t, err)
	var end api.SessionEvent
	require.Eventually(t, func() bool {
		for _, ev := range conv.events.all() {
			if ev.Turn == res.Turn && client.Terminal(ev.Event) {
				end = ev
				return true
			}
		}
		return false
	}, 3*time.Minute, 50*time.Millisecond, "turn %d of %s never ended", res.Turn, conv.c.id)
	require.NotNil(t, end.Event.Result)
	if end.Event.Status != api.StatusSucceeded {
		for _, ev := range conv.events.all() {
			if ev.Turn == res.Turn {
				t.Logf("turn %d event: %s %s %s %s", ev.Turn, ev.Event.Kind, ev.Event.Text, ev.Event.Error, ev.Event.Raw)
			}
		}
	}
	require.Equal(t, api.StatusSucceeded, end.Event.Status, "%s turn %d: %+v", conv.c.id, res.Turn, end.Event.Result.Error)
	return end
}

// userMessages reads the stand-in's answer: how many user messages the
// turn's last model call carried.
func userMessages(t *testing.T, end api.SessionEvent) int {
	t.Helper()
	answer := strings.TrimSpace(end.Event.Result.Answer)
	i := strings.LastIndex(answer, "user messages: ")
	require.GreaterOrEqual(t, i, 0, "the answer %q is not the stand-in's count", answer)
	n, err := strconv.Atoi(strings.Fields(answer[i+len("user messages: "):])[0])
	require.NoError(t, err)
	return n
}

// lastCallHas says whether the stand-in's last model call carries text.
func (conv *conversation) lastCallHas(text string) bool {
	calls := conv.server.ModelCalls()
	return len(calls) > 0 && bytes.Contains(calls[len(calls)-1].Body, []byte(text))
}

func TestEachRealCLIsSecondTurnCarriesTheFirstAndSurvivesASIGKILL(t *testing.T) {
	standin.CLI(t, "claude")
	card(t) // built in this test's temp dir, which outlives its subtests
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			conv := start(t, c, standin.Script{AnswerUserMessages: true}, client.Options{})
			ctx := daemontest.Context(t)
			s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{
				AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, TimeoutSecs: 180, AcknowledgeUnenforcedReadOnly: c.id == "pi"},
			})
			require.NoError(t, err)
			conv.subscribe(t, s.SessionID, 0)
			one := userMessages(t, conv.turn(t, s.SessionID, "Remember the word avocado."))
			two := userMessages(t, conv.turn(t, s.SessionID, "Which word did I ask you to remember?"))
			assert.Greater(t, two, one, "turn two's request does not carry turn one")
			assert.True(t, conv.lastCallHas("avocado"), "turn two's request does not carry turn one's prompt")
			got, err := conv.proc.Client.Session(ctx, s.SessionID)
			require.NoError(t, err)
			assert.True(t, got.Warm, "the second turn ran on the session's warm agent")

			// Past here the conversation needs the CLI's own history: the
			// warm agent dies with the daemon, and turn three resumes it
			// (a new agent resuming the session: Droid's
			// droid.load_session, Pi's session file card names).
			require.NotEmpty(t, got.AgentSessionID)
			// A CLI writes a turn into its own history after it prints the
			// answer; a daemon killed in that instant takes the agent with
			// it, and the turn is missing from what a cold turn resumes
			// (Claude Code 2.1.197: two runs in three with no pause). The
			// window is documented with sessions; this test proves the
			// crash after it.
			time.Sleep(time.Second)
			conv.kill(t)
			conv.events = &collected{}
			conv.subscribe(t, s.SessionID, got.NextSeq-1)
			three := userMessages(t, conv.turn(t, s.SessionID, "And once more: which word?"))
			assert.Greater(t, three, two, "turn three, after the SIGKILL, does not carry the turns before it")
			assert.True(t, conv.lastCallHas("avocado"))
			t.Logf("%s: user messages per turn %d, %d, %d; CLI session %s", c.id, one, two, three, got.AgentSessionID)
		})
	}
}

// A warm agent that sat idle past [sessions] idle_secs is ended; the next
// turn starts a new one that resumes the CLI's session, so it still
// carries the turns before it.
func TestEachRealCLIsTurnAfterItsWarmAgentIdledOutCarriesTheTurnsBefore(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			conv := startWith(t, c, standin.Script{AnswerUserMessages: true}, client.Options{}, map[string]any{"idle_secs": 2})
			ctx := daemontest.Context(t)
			s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{
				AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, TimeoutSecs: 180, AcknowledgeUnenforcedReadOnly: c.id == "pi"},
			})
			require.NoError(t, err)
			conv.subscribe(t, s.SessionID, 0)
			one := userMessages(t, conv.turn(t, s.SessionID, "Remember the word avocado."))
			first, err := conv.proc.Client.Session(ctx, s.SessionID)
			require.NoError(t, err)
			require.True(t, first.Warm)
			require.Eventually(t, func() bool {
				got, err := conv.proc.Client.Session(ctx, s.SessionID)
				return err == nil && !got.Warm
			}, time.Minute, 100*time.Millisecond, "the idle warm agent was not ended")
			two := userMessages(t, conv.turn(t, s.SessionID, "Which word did I ask you to remember?"))
			assert.Greater(t, two, one, "turn two, after the warm agent idled out, does not carry turn one")
			assert.True(t, conv.lastCallHas("avocado"), "turn two's request does not carry turn one's prompt")
			got, err := conv.proc.Client.Session(ctx, s.SessionID)
			require.NoError(t, err)
			if c.id != "gemini" {
				// Gemini CLI 0.61.0's session/load finds no session, so a
				// Gemini turn that resumes one runs one-shot.
				assert.True(t, got.Warm, "turn two started a new warm agent")
				assert.NotEqual(t, first.Pid, got.Pid)
			}
			assert.Equal(t, first.AgentSessionID, got.AgentSessionID)
			t.Logf("%s: user messages per turn %d, %d; CLI session %s", c.id, one, two, got.AgentSessionID)
		})
	}
}

func TestARealClaudeSessionAsksAndItsAllowAlwaysHoldsForTheNextTurn(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	bash := func(file string) standin.ToolCall {
		return standin.ToolCall{Name: "Bash", Input: map[string]any{"command": "echo hello > " + file, "description": "Write a file"}}
	}
	var mu sync.Mutex
	var asked []api.ApproveParams
	conv := start(t, clis[0], standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{bash("one.txt")}},
		client.Options{OnApprove: func(_ context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
			mu.Lock()
			asked = append(asked, q)
			mu.Unlock()
			return api.ApproveAnswer{Decision: api.DecisionAllowAlways}, nil
		}})
	ctx := daemontest.Context(t)
	s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: conv.project, PermissionMode: "ask", TimeoutSecs: 180}})
	require.NoError(t, err)
	conv.subscribe(t, s.SessionID, 0)
	conv.turn(t, s.SessionID, "Please create the file one.txt.")
	assert.FileExists(t, filepath.Join(conv.project, "one.txt"))
	mu.Lock()
	require.Len(t, asked, 1, "turn one asks")
	assert.Equal(t, "Bash", asked[0].Tool.Name)
	mu.Unlock()
	// Turn two's conversation holds turn one's tool result: its model
	// calls the second tool.
	conv.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{bash("one.txt"), bash("two.txt")}})
	end := conv.turn(t, s.SessionID, "Now create two.txt.")
	assert.FileExists(t, filepath.Join(conv.project, "two.txt"))
	mu.Lock()
	assert.Len(t, asked, 1, "turn two's Bash call was allowed by turn one's allow_always, without asking")
	mu.Unlock()
	var byRule bool
	for _, ev := range conv.events.all() {
		if ev.Turn == end.Turn && ev.Event.Kind == api.EventApprovalDecided && ev.Event.Approval != nil {
			byRule = byRule || ev.Event.Approval.By == api.ByRule
		}
	}
	if !byRule {
		for _, ev := range conv.events.all() {
			t.Logf("turn %d: %s %v %s", ev.Turn, ev.Event.Kind, ev.Event.Approval, ev.Event.Text)
		}
	}
	assert.True(t, byRule, "turn two's decision is recorded as the session's rule")
}

func TestTwoRealSessionsOfEachCLIAtOnceKeepTheirConversationsApart(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) { twoSessionsApart(t, c) })
	}
}

func twoSessionsApart(t *testing.T, c cli) {
	conv := start(t, c, standin.Script{AnswerUserMessages: true}, client.Options{})
	ctx := daemontest.Context(t)
	words := map[string]string{"A": "avocado", "B": "banana"}
	ids := map[string]string{}
	for name := range words {
		s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{
			AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, TimeoutSecs: 180, AcknowledgeUnenforcedReadOnly: c.id == "pi"},
		})
		require.NoError(t, err)
		ids[name] = s.SessionID
		conv.subscribe(t, s.SessionID, 0)
	}
	var wg sync.WaitGroup
	for name, word := range words {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, task := range []string{"Remember the word " + word + ".", "Which word, session " + name + "?"} {
				res, err := conv.proc.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: ids[name], Task: task})
				if !assert.NoError(t, err) {
					return
				}
				assert.Eventually(t, func() bool {
					for _, ev := range conv.events.all() {
						if ev.SessionID == ids[name] && ev.Turn == res.Turn && client.Terminal(ev.Event) {
							return true
						}
					}
					return false
				}, 3*time.Minute, 50*time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for name, word := range words {
		other := words["A"]
		if name == "A" {
			other = words["B"]
		}
		found := false
		for _, call := range conv.server.ModelCalls() {
			if bytes.Contains(call.Body, []byte("Which word, session "+name+"?")) {
				found = true
				assert.Contains(t, string(call.Body), word, "session %s's turn two does not carry its own turn one", name)
				assert.NotContains(t, string(call.Body), other, "session %s's turn two carries the other session's", name)
			}
		}
		assert.True(t, found, "no model call of session %s's turn two", name)
	}
	a, err := conv.proc.Client.Session(ctx, ids["A"])
	require.NoError(t, err)
	b, err := conv.proc.Client.Session(ctx, ids["B"])
	require.NoError(t, err)
	assert.NotEqual(t, a.AgentSessionID, b.AgentSessionID)
}

func TestThreePromptsQueuedBehindARealTurnOfEachCLIRunInOrderEachCarryingTheOnesBefore(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) { queuedInOrder(t, c) })
	}
}

func queuedInOrder(t *testing.T, c cli) {
	conv := start(t, c, standin.Script{AnswerUserMessages: true, DeltaDelay: 300 * time.Millisecond}, client.Options{})
	ctx := daemontest.Context(t)
	s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{
		AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, TimeoutSecs: 180, AcknowledgeUnenforcedReadOnly: c.id == "pi"},
	})
	require.NoError(t, err)
	conv.subscribe(t, s.SessionID, 0)
	first, err := conv.proc.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "Prompt one."})
	require.NoError(t, err)
	require.False(t, first.Queued)
	var wg sync.WaitGroup
	for i := 2; i <= 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := conv.proc.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: fmt.Sprintf("Prompt %d.", i)})
			assert.NoError(t, err)
			assert.True(t, res.Queued, "prompt %d did not wait behind the running turn", i)
		}()
	}
	wg.Wait()
	var ends []api.SessionEvent
	require.Eventually(t, func() bool {
		ends = ends[:0]
		for _, ev := range conv.events.all() {
			if client.Terminal(ev.Event) {
				ends = append(ends, ev)
			}
		}
		return len(ends) == 4
	}, 3*time.Minute, 50*time.Millisecond)
	// Droid adds a user message of its own to the first turn: the count
	// is taken from turn one's.
	var base int
	for i, end := range ends {
		assert.Equal(t, i+1, end.Turn)
		require.Equal(t, api.StatusSucceeded, end.Event.Status, "turn %d: %+v", end.Turn, end.Event.Result.Error)
		if i == 0 {
			base = userMessages(t, end) - 1
		}
		assert.Equal(t, base+i+1, userMessages(t, end), "turn %d's request carries the %d turns before it", end.Turn, i)
	}
}

func TestCancellingARealTurnOfEachCLIRunsThePromptQueuedBehindIt(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	for _, c := range clis {
		// In parallel: each waits out most of a slow answer's pause.
		t.Run(c.id, func(t *testing.T) { t.Parallel(); cancelRunsTheQueued(t, c) })
	}
}

func cancelRunsTheQueued(t *testing.T, c cli) {
	conv := start(t, c, standin.Script{AnswerUserMessages: true, DeltaDelay: 20 * time.Second}, client.Options{})
	ctx := daemontest.Context(t)
	s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{
		AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, TimeoutSecs: 180, AcknowledgeUnenforcedReadOnly: c.id == "pi"},
	})
	require.NoError(t, err)
	conv.subscribe(t, s.SessionID, 0)
	_, err = conv.proc.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "A slow answer, please."})
	require.NoError(t, err)
	// The turn is under way once its model call is: the stand-in then
	// holds the answer's second piece 20 s.
	require.Eventually(t, func() bool {
		for _, call := range conv.server.ModelCalls() {
			if bytes.Contains(call.Body, []byte("A slow answer, please.")) {
				return true
			}
		}
		return false
	}, 2*time.Minute, 20*time.Millisecond, "turn one's model call never came")
	conv.server.SetScript(standin.Script{AnswerUserMessages: true})
	two, err := conv.proc.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "Then a quick one."})
	require.NoError(t, err)
	require.True(t, two.Queued)
	start := time.Now()
	res, err := conv.proc.Client.CancelTurn(ctx, api.SessionCancelParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.True(t, res.Cancelled)
	assert.Less(t, time.Since(start), 5*time.Second, "the cancel took longer than a run's")
	var ends []api.SessionEvent
	require.Eventually(t, func() bool {
		ends = ends[:0]
		for _, ev := range conv.events.all() {
			if client.Terminal(ev.Event) {
				ends = append(ends, ev)
			}
		}
		return len(ends) == 2
	}, 3*time.Minute, 50*time.Millisecond)
	assert.Equal(t, api.StatusCancelled, ends[0].Event.Status)
	require.Equal(t, api.StatusSucceeded, ends[1].Event.Status, "%+v", ends[1].Event.Result.Error)
	t.Logf("the turn after the cancelled one carried %d user messages", userMessages(t, ends[1]))
}
