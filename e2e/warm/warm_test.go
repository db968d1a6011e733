// Package warm_test checks card's warm agents against the real agent CLIs
// from npm, each pointed at a loopback stand-in of its vendor's API: two
// turns on one process whose second model request carries the first turn,
// a cancelled turn, the read-only boundary held over the warm channel, and
// Close leaving no process. Like every real-CLI test it runs only with
// CARD_E2E=1 (or CARD_E2E_REQUIRED=1); see standin.CLI.
package warm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/spawn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cli is one real CLI and how it meets its stand-in.
type cli struct {
	id, bin string
	// serve starts the stand-in and returns the child's whole
	// environment and the operator's extra args.
	serve func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, []string)
	// write is the model's call of the CLI's own file-writing tool.
	write func(path string) standin.ToolCall
}

var clis = []cli{
	{id: agent.ClaudeCode, bin: "claude",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, []string) {
			s := standin.NewAnthropic(t, script)
			return s, s.ClaudeEnv(home, os.Getenv("PATH")), nil
		},
		write: func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "Write", Input: map[string]any{"file_path": p, "content": "planted\n"}}
		}},
	{id: agent.Gemini, bin: "gemini",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, []string) {
			s := standin.NewGemini(t, script)
			env, err := s.GeminiSetup(home, os.Getenv("PATH"))
			require.NoError(t, err)
			// Workspace trust is the operator's call (spawn never passes it).
			return s, env, []string{"--skip-trust"}
		},
		write: func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "write_file", Input: map[string]any{"file_path": p, "content": "planted\n"}}
		}},
	{id: agent.Codex, bin: "codex",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, []string) {
			s := standin.NewOpenAI(t, script)
			args, env := s.CodexExtras()
			full := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "NO_COLOR=1"}
			for k, v := range env {
				full = append(full, k+"="+v)
			}
			return s, full, args
		},
		write: func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "exec_command", Input: map[string]any{"cmd": "printf 'planted\\n' > " + p}}
		}},
	{id: agent.Pi, bin: "pi",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, []string) {
			s := standin.NewAnthropic(t, script)
			env, args, err := s.PiSetup(home, os.Getenv("PATH"))
			require.NoError(t, err)
			full := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
			for k, v := range standin.AdapterEnv(env) {
				full = append(full, k+"="+v)
			}
			return s, full, args
		},
		write: func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "write", Input: map[string]any{"path": p, "content": "planted\n"}}
		}},
	{id: agent.Droid, bin: "droid",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, []string) {
			s := standin.NewAnthropic(t, script)
			env, args, err := s.DroidSetup(home, os.Getenv("PATH"))
			require.NoError(t, err)
			full := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
			for k, v := range standin.AdapterEnv(env) {
				full = append(full, k+"="+v)
			}
			return s, full, args
		},
		write: func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "Create", Input: map[string]any{"file_path": p, "content": "planted\n"}}
		}},
	{id: agent.Copilot, bin: "copilot",
		serve: func(t *testing.T, script standin.Script, home string) (*standin.Server, []string, []string) {
			s := standin.NewAnthropic(t, script)
			return s, s.CopilotEnv(home, os.Getenv("PATH")), nil
		},
		write: func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "create", Input: map[string]any{"path": p, "file_text": "planted\n"}}
		}},
}

// agentUp is a warm agent of c started against a stand-in with script.
type agentUp struct {
	w      *spawn.Warm
	s      *standin.Server
	cwd    string
	starts int
}

func startAgent(t *testing.T, c cli, script standin.Script, mode spawn.Mode) *agentUp {
	t.Helper()
	bin := standin.CLI(t, c.bin)
	home, cwd := t.TempDir(), t.TempDir()
	cwd, _ = filepath.EvalSymlinks(cwd)
	s, env, extra := c.serve(t, script, home)
	plan, err := spawn.BuildWarm(bin, spawn.Request{Adapter: c.id, Cwd: cwd, Mode: mode, Extras: spawn.Extras{Args: extra}})
	require.NoError(t, err)
	a := &agentUp{s: s, cwd: cwd}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a.w, err = spawn.StartWarm(ctx, spawn.WarmSpec{Plan: plan, BaseEnv: append(env, "CAR_INVOKED_BY=card"),
		Limits: spawn.Limits{KillGrace: 3 * time.Second}, OnStart: func(int, int) { a.starts++ }})
	require.NoError(t, err)
	t.Cleanup(a.w.Close)
	return a
}

func (a *agentUp) turn(t *testing.T, ctx context.Context, prompt string, onEvent func(spawn.Event)) (api.Result, error) {
	t.Helper()
	var mu sync.Mutex
	return a.w.Turn(ctx, spawn.TurnSpec{Prompt: prompt, OnEvent: func(e spawn.Event) {
		mu.Lock()
		defer mu.Unlock()
		if onEvent != nil {
			onEvent(e)
		}
	}})
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The second turn runs in the process the first ran in, and its request to
// the vendor carries the first turn's prompt: the agent remembers.
func TestASecondTurnRunsInTheSameProcessAndCarriesTheFirst(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			a := startAgent(t, c, standin.Script{Answer: "NOTED"}, spawn.ModeReadOnly)
			pid := a.w.Pid()
			res, err := a.turn(t, timeout(t, 120*time.Second), "Remember the word PELICAN-SEVEN.", nil)
			require.NoError(t, err)
			assert.Contains(t, res.Answer, "NOTED")
			firstCost := res.CostUSD
			first := len(a.s.ModelCalls())
			require.Positive(t, first)
			res, err = a.turn(t, timeout(t, 120*time.Second), "Which word did I ask you to remember?", nil)
			require.NoError(t, err)
			assert.Contains(t, res.Answer, "NOTED")
			if c.id != agent.ClaudeCode {
				// The stand-in's usage is the same each turn: so is a
				// turn's, though Copilot and Droid report the session's.
				assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 5}, res.Usage, "a turn's usage is its own")
			}
			if firstCost != nil && res.CostUSD != nil {
				// The stand-in's usage is the same each turn: so is a
				// turn's cost (Claude reports the process's total).
				assert.InDelta(t, *firstCost, *res.CostUSD, *firstCost/10, "a turn's cost is its own")
			}
			calls := a.s.ModelCalls()
			require.Greater(t, len(calls), first, "the second turn called the model")
			last := string(calls[len(calls)-1].Body)
			assert.Contains(t, last, "PELICAN-SEVEN", "the second turn's request carries the first turn")
			assert.Contains(t, last, "Which word did I ask you to remember?")
			assert.Equal(t, pid, a.w.Pid())
			assert.Equal(t, 1, a.starts, "one process for both turns")
			assert.True(t, proc.Alive(pid))
			assert.True(t, a.w.Alive())
			if c.id != agent.Pi { // this Pi agent was given no session to keep
				assert.NotEmpty(t, a.w.AgentSessionID())
			}
			a.w.Close()
			assert.False(t, proc.GroupAlive(pid), "Close left part of the agent's group running")
		})
	}
}

// A turn cancelled while the model is writing ends as cancelled, promptly;
// the agent either takes the next turn in the same process or is gone, and
// never lingers half-alive.
func TestACancelledRealTurnEndsAndTheAgentTakesTheNext(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			answer := "one two three four five six seven eight nine ten eleven twelve"
			a := startAgent(t, c, standin.Script{Answer: answer, DeltaDelay: 400 * time.Millisecond}, spawn.ModeReadOnly)
			pid := a.w.Pid()
			ctx, cancel := context.WithCancel(timeout(t, 120*time.Second))
			var once sync.Once
			start := time.Now()
			_, err := a.turn(t, ctx, "Count to twelve.", func(e spawn.Event) {
				if e.Kind == api.EventText {
					once.Do(cancel)
				}
			})
			cancel()
			var e *spawn.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, api.KindCancelled, e.Kind, "%v", err)
			took := time.Since(start)
			t.Logf("%s: cancelled turn took %s, agent alive after: %v (%s)", c.id, took, a.w.Alive(), e.Message)
			require.True(t, a.w.Alive(), "the cancel was taken inside the protocol: %v", err)
			res, err := a.turn(t, timeout(t, 120*time.Second), "Again, please.", nil)
			require.NoError(t, err)
			assert.Contains(t, res.Answer, "twelve")
			assert.Equal(t, pid, a.w.Pid())
			assert.Equal(t, 1, a.starts)
		})
	}
}

// Each mode's boundary holds over the warm channel as in a one-shot run: a
// model that asks, in each of two turns, to write a file in the working
// dir and then one beside it writes nothing in read_only, and in edit
// writes only the one inside (which shows the model's calls do reach the
// CLI's tool, so the read_only case could fail).
func TestAWarmTurnHoldsItsModesBoundary(t *testing.T) {
	for _, c := range clis {
		for _, mode := range []spawn.Mode{spawn.ModeReadOnly, spawn.ModeEdit} {
			t.Run(c.id+"/"+string(mode), func(t *testing.T) {
				t.Parallel()
				if c.id == agent.Droid && mode == spawn.ModeEdit {
					// Refused in every Droid run (its edit cannot be kept
					// inside the working dir).
					_, err := spawn.BuildWarm(standin.CLI(t, c.bin), spawn.Request{Adapter: c.id, Cwd: t.TempDir(), Mode: mode})
					var fe *api.FieldError
					require.ErrorAs(t, err, &fe)
					return
				}
				if c.id == agent.Copilot && mode == spawn.ModeEdit {
					// Over ACP its --allow-tool write wrote outside the
					// working dir (this test, before the refusal).
					_, err := spawn.BuildWarm(standin.CLI(t, c.bin), spawn.Request{Adapter: c.id, Cwd: t.TempDir(), Mode: mode})
					require.ErrorIs(t, err, spawn.ErrNoWarmChannel)
					return
				}
				cwd, outside := t.TempDir(), t.TempDir()
				cwd, _ = filepath.EvalSymlinks(cwd)
				inside := filepath.Join(cwd, "planted-inside.txt")
				out := filepath.Join(outside, "planted-outside.txt")
				a := startAgentIn(t, c, cwd, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.write(inside), c.write(out)}}, mode)
				for _, p := range []string{"Write the file, please.", "Now write the other one."} {
					_, err := a.turn(t, timeout(t, 120*time.Second), p, nil)
					require.NoError(t, err)
				}
				offered := false
				for _, r := range a.s.ModelCalls() {
					offered = offered || strings.Contains(string(r.Body), `"`+c.write("").Name+`"`)
				}
				t.Logf("%s/%s: write tool offered: %v; tool results the model saw: %q", c.id, mode, offered, a.s.ToolResults())
				assert.NoFileExists(t, out, "%s wrote outside the working dir", mode)
				if mode == spawn.ModeReadOnly {
					assert.NoFileExists(t, inside, "read_only wrote in the working dir")
				} else {
					assert.FileExists(t, inside, "edit mode could not write in the working dir: the test proves nothing")
				}
				assert.Equal(t, 1, a.starts)
			})
		}
	}
}

// startAgentIn is startAgent with a given cwd.
func startAgentIn(t *testing.T, c cli, cwd string, script standin.Script, mode spawn.Mode) *agentUp {
	t.Helper()
	bin := standin.CLI(t, c.bin)
	home := t.TempDir()
	s, env, extra := c.serve(t, script, home)
	plan, err := spawn.BuildWarm(bin, spawn.Request{Adapter: c.id, Cwd: cwd, Mode: mode, Extras: spawn.Extras{Args: extra}})
	require.NoError(t, err)
	a := &agentUp{s: s, cwd: cwd}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a.w, err = spawn.StartWarm(ctx, spawn.WarmSpec{Plan: plan, BaseEnv: append(env, "CAR_INVOKED_BY=card"),
		Limits: spawn.Limits{KillGrace: 3 * time.Second}, OnStart: func(int, int) { a.starts++ }})
	require.NoError(t, err)
	t.Cleanup(a.w.Close)
	return a
}

// Once the warm agent is gone, the conversation goes on cold: a one-shot
// run resuming the CLI's own session by the id the warm agent reported,
// and a new warm agent resuming it (Claude's --resume, ACP's session/load,
// Codex's thread/resume, Droid's droid.load_session, Pi's session file
// card names), each still carry turn one.
func TestAColdTurnAfterTheWarmAgentEndedResumesItsSession(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			bin := standin.CLI(t, c.bin)
			home, cwd := t.TempDir(), t.TempDir()
			cwd, _ = filepath.EvalSymlinks(cwd)
			s, env, extra := c.serve(t, standin.Script{Answer: "NOTED"}, home)
			env = append(env, "CAR_INVOKED_BY=card")
			req := spawn.Request{Adapter: c.id, Cwd: cwd, Extras: spawn.Extras{Args: extra}}
			if spawn.CardNamesSession(c.id) {
				// Pi writes the conversation to the file card names.
				req.SessionID, req.AgentSessionDir = "0b6ac262-e252-479b-b742-908a5f1addfb", t.TempDir()
			}
			plan, err := spawn.BuildWarm(bin, req)
			require.NoError(t, err)
			w, err := spawn.StartWarm(timeout(t, 90*time.Second), spawn.WarmSpec{Plan: plan, BaseEnv: env})
			require.NoError(t, err)
			_, err = w.Turn(timeout(t, 120*time.Second), spawn.TurnSpec{Prompt: "Remember the word HERON-NINE."})
			require.NoError(t, err)
			sid := w.AgentSessionID()
			require.NotEmpty(t, sid)
			w.Close()

			req.SessionID, req.Resume = "", sid
			one, err := spawn.Build(bin, req)
			require.NoError(t, err)
			a, _ := spawn.Lookup(c.id)
			res, err := spawn.Run(timeout(t, 120*time.Second), spawn.RunSpec{Plan: one, Prompt: "Which word was it?", BaseEnv: env, Parser: a.NewParser()})
			require.NoError(t, err)
			assert.Contains(t, res.Answer, "NOTED")
			calls := s.ModelCalls()
			last := string(calls[len(calls)-1].Body)
			assert.Contains(t, last, "HERON-NINE", "the cold turn resumed the warm agent's session")
			assert.Contains(t, last, "Which word was it?")

			plan, err = spawn.BuildWarm(bin, req)
			if c.id == agent.Gemini {
				// Its session/load finds no session (Gemini CLI 0.61.0):
				// refused, a cold Gemini turn is one-shot.
				var fe *api.FieldError
				require.ErrorAs(t, err, &fe)
				return
			}
			require.NoError(t, err)
			w, err = spawn.StartWarm(timeout(t, 90*time.Second), spawn.WarmSpec{Plan: plan, BaseEnv: env})
			require.NoError(t, err)
			defer w.Close()
			_, err = w.Turn(timeout(t, 120*time.Second), spawn.TurnSpec{Prompt: "And once more: which word?"})
			require.NoError(t, err)
			calls = s.ModelCalls()
			last = string(calls[len(calls)-1].Body)
			assert.Contains(t, last, "HERON-NINE", "a warm agent resuming the session carries turn one")
			assert.Contains(t, last, "And once more: which word?")
			assert.Equal(t, sid, w.AgentSessionID())
		})
	}
}

// Steer adds input to the running turn where the CLI's channel has a way
// (Codex's turn/steer, Pi's steer command): the steered text reaches the
// model within the same turn (a model call made before the turn ends
// carries it), and the next turn runs as usual. The other CLIs refuse it.
func TestSteerJoinsTheRunningTurnWhereTheCLIHasAWay(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			a := startAgent(t, c, standin.Script{Answer: "one two three four five six seven eight", DeltaDelay: 300 * time.Millisecond}, spawn.ModeReadOnly)
			var once sync.Once
			steered := make(chan error, 1)
			res, err := a.turn(t, timeout(t, 120*time.Second), "Count to eight.", func(e spawn.Event) {
				if e.Kind == api.EventText {
					// Off the event callback: Steer waits for the
					// agent's answer, which the callback's reader brings.
					once.Do(func() { go func() { steered <- a.w.Steer(context.Background(), "Also say BANANA-THREE.") }() })
				}
			})
			require.NoError(t, err)
			serr := <-steered
			if c.id != agent.Codex && c.id != agent.Pi {
				assert.ErrorIs(t, serr, spawn.ErrNoSteer)
				return
			}
			require.NoError(t, serr)
			inTurn := false
			for _, r := range a.s.ModelCalls() {
				inTurn = inTurn || strings.Contains(string(r.Body), "BANANA-THREE")
			}
			assert.True(t, inTurn, "the steered text reached the model before the turn ended")
			t.Logf("%s: steered turn answered %q after %d model calls", c.id, res.Answer, len(a.s.ModelCalls()))
			_, err = a.turn(t, timeout(t, 120*time.Second), "Next.", nil)
			require.NoError(t, err)
		})
	}
}
