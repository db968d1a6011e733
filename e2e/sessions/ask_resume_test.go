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
	"github.com/card-dev/card/internal/proc"
)

// askWrite is the model's call of each CLI's own file-writing tool, a call
// its ask mode puts to card.
var askWrite = map[string]func(path string) standin.ToolCall{
	"codex": func(p string) standin.ToolCall {
		return standin.ToolCall{Name: "exec_command", Input: map[string]any{"cmd": "printf 'planted\\n' > " + p}}
	},
	"copilot": func(p string) standin.ToolCall {
		return standin.ToolCall{Name: "create", Input: map[string]any{"path": p, "file_text": "planted\n"}}
	},
	"gemini": func(p string) standin.ToolCall {
		return standin.ToolCall{Name: "write_file", Input: map[string]any{"file_path": p, "content": "planted\n"}}
	},
}

// asked records the questions card put to the client, and allows each.
type asked struct {
	mu sync.Mutex
	qs []api.ApproveParams
}

func (a *asked) approve(_ context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
	a.mu.Lock()
	a.qs = append(a.qs, q)
	a.mu.Unlock()
	return api.ApproveAnswer{Decision: api.DecisionAllow}, nil
}

func (a *asked) count() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.qs) }

// startIdle is start with the daemon's [sessions] idle_secs set: a warm
// agent then ends after that long without a turn.
func startIdle(t *testing.T, c cli, script standin.Script, copts client.Options, idleSecs int) *conversation {
	t.Helper()
	conv := start(t, c, script, copts)
	var cfg map[string]any
	_, err := toml.Decode(conv.opts.Config, &cfg)
	require.NoError(t, err)
	cfg["sessions"] = map[string]any{"idle_secs": idleSecs}
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	conv.opts.Config = buf.String()
	conv.restart(t)
	return conv
}

// restart stops the daemon (SIGTERM) and starts a new one on the same
// home, with conv.opts.Config.
func (conv *conversation) restart(t *testing.T) {
	t.Helper()
	require.NoError(t, conv.proc.Cmd.Process.Signal(syscall.SIGTERM))
	conv.proc.Wait(t, 30*time.Second)
	conv.opts.Home = conv.proc.Home
	conv.proc = daemontest.Serve(t, card(t), conv.opts)
}

// awaitUnpacked waits until no Copilot is unpacking itself into the
// test's home: the daemon's start-up probes run every CLI on PATH, and a
// SIGKILL of the daemon, or the end of the test, in the middle of it would
// leave one writing there as the test removes the home.
func (conv *conversation) awaitUnpacked(t *testing.T) {
	t.Helper()
	pattern := filepath.Join(filepath.Dir(conv.project), ".cache", "copilot", "pkg", "*", ".extracting-*")
	quiet := 0
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(pattern)
		if slices.ContainsFunc(m, unpacking) {
			quiet = 0
			return false
		}
		quiet++
		return quiet >= 4
	}, 2*time.Minute, 250*time.Millisecond, "a Copilot probe kept unpacking itself")
}

// unpacking says whether the Copilot that made an unpacking directory is
// still at it. Copilot 1.0.102 names it .extracting-VERSION-PID-MILLIS-N;
// one whose process is gone (a probe ended with the SIGKILLed daemon's
// group) stays behind for good and writes nothing more.
func unpacking(dir string) bool {
	f := strings.Split(strings.TrimPrefix(filepath.Base(dir), ".extracting-"), "-")
	if len(f) < 4 {
		return true // another naming: assume it is at work
	}
	pid, err := strconv.Atoi(f[len(f)-3])
	if err != nil || pid <= 0 {
		return true
	}
	return proc.Alive(pid)
}

// killQuietly SIGKILLs the daemon once nothing unpacks in the home, and
// has the test wait for the same at its end.
func (conv *conversation) killQuietly(t *testing.T) {
	t.Helper()
	conv.awaitUnpacked(t)
	conv.kill(t)
	t.Cleanup(func() { conv.awaitUnpacked(t) })
}

// A conversation in ask mode outlives its warm agent for the CLIs whose
// ask channel can continue a session (Codex's thread/resume, Copilot's
// session/load): turn one runs warm, the warm agent ends (its idle
// timeout, or a SIGKILL of the daemon taking it along), and turn two,
// started cold on a new process, still carries turn one and still puts
// its tool call to card's broker before the call runs.
func TestARealAskSessionsColdTurnRemembersTheWarmOneAndStillAsks(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	for _, c := range clis {
		write, ok := askWrite[c.id]
		if !ok {
			continue
		}
		for _, end := range []string{"idle", "sigkill"} {
			if c.id == "gemini" && end == "idle" {
				continue // its refusal does not depend on how the agent ended
			}
			t.Run(c.id+"/"+end, func(t *testing.T) {
				var a asked
				copts := client.Options{OnApprove: a.approve}
				var conv *conversation
				if end == "idle" {
					conv = startIdle(t, c, standin.Script{AnswerUserMessages: true}, copts, 2)
				} else {
					conv = start(t, c, standin.Script{AnswerUserMessages: true}, copts)
				}
				ctx := daemontest.Context(t)
				s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, PermissionMode: "ask", TimeoutSecs: 180}})
				require.NoError(t, err)
				conv.subscribe(t, s.SessionID, 0)
				one := userMessages(t, conv.turn(t, s.SessionID, "Remember the word avocado."))
				got, err := conv.proc.Client.Session(ctx, s.SessionID)
				require.NoError(t, err)
				require.NotEmpty(t, got.AgentSessionID)

				if c.id == "gemini" {
					// Gemini CLI 0.61.0's session/load overwrites or later
					// deletes the session it loads: card refuses the cold
					// turn, saying why, rather than lose the conversation.
					conv.killQuietly(t)
					_, err := conv.proc.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "Which word?"})
					require.Error(t, err)
					assert.Contains(t, err.Error(), "loses a session")
					return
				}

				switch end {
				case "idle":
					require.Eventually(t, func() bool {
						s, err := conv.proc.Client.Session(ctx, s.SessionID)
						return err == nil && !s.Warm
					}, 30*time.Second, 100*time.Millisecond, "the warm agent never ended at its idle timeout")
				case "sigkill":
					// As in the SIGKILL test of the other modes: the CLI
					// writes its history just after it prints the answer.
					time.Sleep(time.Second)
					conv.killQuietly(t)
					conv.events = &collected{}
					conv.subscribe(t, s.SessionID, got.NextSeq-1)
				}
				before := a.count()
				file := filepath.Join(conv.project, "planted.txt")
				conv.server.SetScript(standin.Script{AnswerUserMessages: true, ToolCalls: []standin.ToolCall{write(file)}})
				endTwo := conv.turn(t, s.SessionID, "Which word did I ask you to remember? Write planted.txt too.")
				two := userMessages(t, endTwo)
				assert.Greater(t, two, one, "turn two's request does not carry turn one")
				assert.True(t, conv.lastCallHas("avocado"), "turn two's request does not carry turn one's prompt")
				assert.Equal(t, before+1, a.count(), "the cold turn's tool call was put to card's broker")
				assert.FileExists(t, file, "the allowed call ran")
				b, _ := os.ReadFile(file)
				assert.Equal(t, "planted", strings.TrimSpace(string(b)))
				after, err := conv.proc.Client.Session(ctx, s.SessionID)
				require.NoError(t, err)
				assert.Equal(t, got.AgentSessionID, after.AgentSessionID, "the CLI's own session went on")
				t.Logf("%s after %s: user messages %d then %d; CLI session %s; warm again %v", c.id, end, one, two, got.AgentSessionID, after.Warm)
			})
		}
	}
}

// The real Gemini CLI in ask mode, whose conversation card cannot resume
// in a new process: turn two goes over the warm agent that holds it (the
// same process), carries turn one, and still puts its tool call to card's
// broker.
func TestARealGeminiAskSessionGoesOnOverItsWarmAgent(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	var c cli
	for _, x := range clis {
		if x.id == "gemini" {
			c = x
		}
	}
	require.Equal(t, "gemini", c.id)
	var a asked
	conv := start(t, c, standin.Script{AnswerUserMessages: true}, client.Options{OnApprove: a.approve})
	t.Cleanup(func() { conv.awaitUnpacked(t) })
	ctx := daemontest.Context(t)
	s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, PermissionMode: "ask", TimeoutSecs: 180}})
	require.NoError(t, err)
	conv.subscribe(t, s.SessionID, 0)
	one := userMessages(t, conv.turn(t, s.SessionID, "Remember the word avocado."))
	got, err := conv.proc.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	require.True(t, got.Warm, "turn one left no warm agent")

	file := filepath.Join(conv.project, "planted.txt")
	conv.server.SetScript(standin.Script{AnswerUserMessages: true, ToolCalls: []standin.ToolCall{askWrite["gemini"](file)}})
	two := userMessages(t, conv.turn(t, s.SessionID, "Which word did I ask you to remember? Write planted.txt too."))
	assert.Greater(t, two, one, "turn two's request does not carry turn one")
	assert.True(t, conv.lastCallHas("avocado"), "turn two's request does not carry turn one's prompt")
	assert.Equal(t, 1, a.count(), "the tool call was put to card's broker")
	assert.FileExists(t, file, "the allowed call ran")
	after, err := conv.proc.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, got.Pid, after.Pid, "turn two went over the same warm agent")
	t.Logf("gemini ask: user messages %d then %d over pid %d", one, two, after.Pid)
}

// askWriteAll is askWrite with Claude Code's, Droid's and Pi's own
// shell tools: each CLI's call that its ask mode puts to card.
func askWriteAll(id string) func(path string) standin.ToolCall {
	switch id {
	case "claude-code":
		return func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "Bash", Input: map[string]any{"command": "printf 'planted\\n' > " + p, "description": "Write a file"}}
		}
	case "droid":
		return func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "Execute", Input: map[string]any{"command": "printf 'planted\\n' > " + p,
				"summary": "Write a file", "riskLevel": "low", "riskLevelReason": "writes one file in the project"}}
		}
	case "pi":
		return func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "bash", Input: map[string]any{"command": "printf 'planted\\n' > " + p}}
		}
	}
	return askWrite[id]
}

// Approvals within a session, for each real CLI in ask mode: turn one's
// tool call is asked and allowed, and runs; turn two, over the same warm
// agent, asks again for its own call, is denied, and the file is never
// written.
func TestEachRealCLIAsksInEveryTurnOfAnAskSession(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			write := askWriteAll(c.id)
			require.NotNil(t, write, "no ask-mode tool call for %s", c.id)
			var mu sync.Mutex
			var qs []api.ApproveParams
			approve := func(_ context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
				mu.Lock()
				defer mu.Unlock()
				qs = append(qs, q)
				if len(qs) == 1 {
					return api.ApproveAnswer{Decision: api.DecisionAllow}, nil
				}
				return api.ApproveAnswer{Decision: api.DecisionDeny, Message: "not this one"}, nil
			}
			conv := start(t, c, standin.Script{Answer: "DONE"}, client.Options{OnApprove: approve})
			t.Cleanup(func() { conv.awaitUnpacked(t) })
			one := filepath.Join(conv.project, "one.txt")
			two := filepath.Join(conv.project, "two.txt")
			conv.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{write(one)}})
			ctx := daemontest.Context(t)
			s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, PermissionMode: "ask", TimeoutSecs: 180}})
			require.NoError(t, err)
			conv.subscribe(t, s.SessionID, 0)
			end := conv.turn(t, s.SessionID, "Please create one.txt.")
			require.Equal(t, api.StatusSucceeded, end.Event.Status, "%+v", end.Event.Result)
			assert.FileExists(t, one, "the allowed call ran")
			first, err := conv.proc.Client.Session(ctx, s.SessionID)
			require.NoError(t, err)

			conv.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{write(one), write(two)}})
			conv.turn(t, s.SessionID, "Now create two.txt.")
			assert.NoFileExists(t, two, "the denied call ran")
			mu.Lock()
			assert.Len(t, qs, 2, "each turn's call was asked")
			mu.Unlock()
			after, err := conv.proc.Client.Session(ctx, s.SessionID)
			require.NoError(t, err)
			if first.Warm {
				assert.Equal(t, first.Pid, after.Pid, "turn two went over the same warm agent")
			}
			t.Logf("%s: asked %d times; warm %v pid %d → %d", c.id, len(qs), first.Warm, first.Pid, after.Pid)
		})
	}
}

func TestAnUnpackingDirectoryCountsOnlyWhileItsCopilotLives(t *testing.T) {
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	cases := []struct {
		name string
		dir  string
		want bool
	}{
		{"its process still runs", fmt.Sprintf(".extracting-1.0.102-%d-1796195509521-1", os.Getpid()), true},
		{"its process is gone", fmt.Sprintf(".extracting-1.0.102-%d-1796195509521-1", gone.Process.Pid), false},
		{"a version with a dash, process gone", fmt.Sprintf(".extracting-1.1.0-beta.2-%d-1796195509521-3", gone.Process.Pid), false},
		{"a naming this test does not know", ".extracting-tmp", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, unpacking(filepath.Join(t.TempDir(), tc.dir)))
		})
	}
}
