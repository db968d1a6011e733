package acpagents

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/e2e/standin"
)

// One turn from a fresh HOME with no account: what each agent offers in
// initialize and session/new, the stand-in's answer streamed back as
// agent_message_chunk, and where each reports the turn's tokens and cost.
func TestEachAgentAnswersAPromptFromTheStandInOverACP(t *testing.T) {
	for _, c := range []struct {
		cli     agentCLI
		offered func(t *testing.T, init acp.InitializeResponse, ns acp.NewSessionResponse)
		usage   func(t *testing.T, a *agentProc, res acp.PromptResponse)
	}{
		{opencode,
			func(t *testing.T, init acp.InitializeResponse, ns acp.NewSessionResponse) {
				assert.NotNil(t, init.AgentCapabilities.SessionCapabilities.Close)
				require.Len(t, init.AuthMethods, 1)
				assert.Equal(t, "opencode-login", init.AuthMethods[0].ID, "a terminal login it cannot run headless")
				assert.Nil(t, ns.Modes, "its modes come only as the mode config option")
				mode, modes := selectValues(t, ns.ConfigOptions, "mode")
				assert.Equal(t, "build", mode)
				assert.Equal(t, []string{"build", "plan"}, modes)
				model, models := selectValues(t, ns.ConfigOptions, "model")
				assert.Equal(t, standin.OpenCodeProvider+"/"+standin.PlainModel, model)
				assert.Contains(t, models, "opencode/big-pickle", "OpenCode Zen's free models are offered with no account")
			},
			func(t *testing.T, a *agentProc, res acp.PromptResponse) {
				require.NotNil(t, res.Usage, "OpenCode puts the turn's tokens in the prompt's answer")
				assert.Equal(t, acp.PromptUsage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15}, *res.Usage)
				ups, _ := a.snapshot()
				var usage *acp.UsageUpdate
				for _, u := range ups {
					if u.Update.Kind == acp.UpdateUsage {
						usage = u.Update.Usage
					}
				}
				require.NotNil(t, usage, "a model with a context limit gets a usage_update")
				assert.EqualValues(t, 200000, usage.Size)
				require.NotNil(t, usage.Cost)
				// 10 input and 5 output tokens at 3 and 15 USD per million.
				assert.InDelta(t, 0.000105, usage.Cost.Amount, 1e-9)
				assert.Equal(t, "USD", usage.Cost.Currency)
			}},
		{qwen,
			func(t *testing.T, init acp.InitializeResponse, ns acp.NewSessionResponse) {
				assert.Nil(t, init.AgentCapabilities.SessionCapabilities.Close)
				require.Len(t, init.AuthMethods, 1)
				assert.Equal(t, "openai", init.AuthMethods[0].ID)
				require.NotNil(t, ns.Modes)
				assert.Equal(t, "auto", ns.Modes.CurrentModeID, "a new session starts in the LLM-classifier mode")
				var ids []string
				for _, m := range ns.Modes.AvailableModes {
					ids = append(ids, m.ID)
				}
				assert.Equal(t, []string{"plan", "default", "auto-edit", "auto", "yolo"}, ids)
				mode, _ := selectValues(t, ns.ConfigOptions, "mode")
				assert.Equal(t, "auto", mode)
				require.NotNil(t, ns.Models)
				assert.Contains(t, ns.Models.CurrentModelID, standin.PlainModel)
			},
			func(t *testing.T, a *agentProc, res acp.PromptResponse) {
				assert.Nil(t, res.Usage, "Qwen Code's prompt answer carries no usage")
				ups, _ := a.snapshot()
				var last acp.SessionNotification
				for _, u := range ups {
					if u.Update.Kind == acp.UpdateAgentMessageChunk {
						last = u
					}
				}
				require.NotNil(t, last.Update.Chunk)
				assert.Empty(t, last.Update.Chunk.Content.Text, "the usage rides on an empty last chunk")
				var meta struct {
					Usage acp.PromptUsage `json:"usage"`
				}
				require.NoError(t, json.Unmarshal(last.Update.Chunk.Meta, &meta))
				assert.EqualValues(t, 10, meta.Usage.InputTokens)
				assert.EqualValues(t, 5, meta.Usage.OutputTokens)
			}},
	} {
		t.Run(c.cli.name, func(t *testing.T) {
			t.Parallel()
			s := standin.NewOpenAI(t, standin.Script{})
			pl := newPlace(t)
			a := c.cli.run(t, s, pl, nil, policy{})
			init := a.initialize()
			assert.Equal(t, acp.ProtocolVersion, init.ProtocolVersion)
			caps := init.AgentCapabilities
			assert.True(t, caps.LoadSession)
			assert.True(t, caps.PromptCapabilities.Image)
			assert.True(t, caps.PromptCapabilities.EmbeddedContext)
			assert.True(t, caps.MCPCapabilities.HTTP)
			assert.NotNil(t, caps.SessionCapabilities.Resume)
			assert.NotNil(t, caps.SessionCapabilities.List)
			require.NotNil(t, init.AgentInfo)
			assert.NotEmpty(t, init.AgentInfo.Version)
			ns := a.newSession(pl.cwd)
			c.offered(t, init, ns)

			res := a.prompt(ns.SessionID, "say pong")
			assert.Equal(t, acp.StopEndTurn, res.StopReason)
			assert.Equal(t, "PONG from card stand-in", a.text(ns.SessionID, 0))
			assert.True(t, bodyHas(mainCalls(s), "say pong"), "the prompt reached the stand-in")
			c.usage(t, a, res)

			exit, took, exited := a.closeStdin(10 * time.Second)
			assert.True(t, exited, "it exits when its stdin closes")
			assert.Equal(t, 0, exit)
			assert.Less(t, took, 5*time.Second)
			a.capture(c.cli.name + "-acp-success")
		})
	}
}

// A session reopened by a new process carries its earlier turns to the
// model: session/resume without replaying them, session/load replaying
// them as user_message_chunk and agent_message_chunk before it answers.
// Each answer says how many user messages its model call carried.
func TestAReopenedSessionCarriesItsEarlierTurnsToTheModel(t *testing.T) {
	for _, c := range []agentCLI{opencode, qwen} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := standin.NewOpenAI(t, standin.Script{AnswerUserMessages: true})
			pl := newPlace(t)

			first := c.run(t, s, pl, nil, policy{})
			first.initialize()
			sid := first.newSession(pl.cwd).SessionID
			first.prompt(sid, "first")
			require.Equal(t, "user messages: 1", first.text(sid, 0))
			_, _, exited := first.closeStdin(10 * time.Second)
			require.True(t, exited)

			second := c.run(t, s, pl, nil, policy{})
			second.initialize()
			var resumed acp.ResumeSessionResponse
			require.NoError(t, second.call(acp.MethodSessionResume, acp.ResumeSessionRequest{SessionID: sid, Cwd: pl.cwd}, &resumed))
			before, _ := second.snapshot()
			for _, u := range before {
				assert.NotEqual(t, acp.UpdateUserMessageChunk, u.Update.Kind, "resume replays nothing")
			}
			second.prompt(sid, "second")
			assert.Equal(t, "user messages: 2", second.text(sid, 0))
			_, _, exited = second.closeStdin(10 * time.Second)
			require.True(t, exited)

			third := c.run(t, s, pl, nil, policy{})
			third.initialize()
			require.NoError(t, third.call(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: sid, Cwd: pl.cwd}, nil))
			replay, _ := third.snapshot()
			var said []string
			for _, u := range replay {
				if u.Update.Kind == acp.UpdateUserMessageChunk {
					said = append(said, u.Update.Chunk.Content.Text)
				}
			}
			assert.Equal(t, []string{"first", "second"}, said, "load replays the user's turns")
			assert.Contains(t, third.text(sid, 0), "user messages: 2", "and the agent's answers")
			from := len(replay)
			third.prompt(sid, "third")
			assert.Equal(t, "user messages: 3", third.text(sid, from))
			third.capture(c.name + "-acp-load")
		})
	}
}

// session/cancel ends a turn waiting on the model with stopReason
// cancelled, and the same process takes the next prompt.
func TestCancelEndsTheTurnAsCancelledAndTheAgentTakesTheNextPrompt(t *testing.T) {
	for _, c := range []agentCLI{opencode, qwen} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := standin.NewOpenAI(t, standin.Script{Stall: true})
			pl := newPlace(t)
			a := c.run(t, s, pl, nil, policy{})
			a.initialize()
			sid := a.newSession(pl.cwd).SessionID
			ch, err := a.request(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: []acp.ContentBlock{acp.TextBlock("wait for it")}})
			require.NoError(t, err)
			a.waitUntil("the turn's model call", func() bool { return len(mainCalls(s)) > 0 })
			begin := time.Now()
			a.notify(acp.MethodSessionCancel, acp.CancelNotification{SessionID: sid})
			var res acp.PromptResponse
			require.NoError(t, a.wait(ch, acp.MethodSessionPrompt, &res))
			assert.Equal(t, acp.StopCancelled, res.StopReason)
			assert.Less(t, time.Since(begin), 5*time.Second)
			if res.Usage != nil {
				assert.Zero(t, res.Usage.OutputTokens, "a cancelled turn reports no tokens")
			}

			s.SetScript(standin.Script{})
			from, _ := a.snapshot()
			next := a.prompt(sid, "say pong")
			assert.Equal(t, acp.StopEndTurn, next.StopReason)
			assert.Equal(t, "PONG from card stand-in", a.text(sid, len(from)))
			a.capture(c.name + "-acp-cancel")
		})
	}
}

// A model API that refuses the key fails the prompt with a JSON-RPC
// internal error carrying the API's message: neither agent asks to sign
// in again, and neither retries a 401.
func TestAnAPIRefusalFailsThePromptWithAnInternalError(t *testing.T) {
	for _, c := range []struct {
		cli  agentCLI
		data func(t *testing.T, data json.RawMessage)
	}{
		{opencode, func(t *testing.T, data json.RawMessage) {
			var d struct{ Service, ErrorName string }
			require.NoError(t, json.Unmarshal(data, &d))
			assert.Equal(t, "APIError", d.ErrorName)
		}},
		{qwen, func(t *testing.T, data json.RawMessage) {
			var d struct{ Details string }
			require.NoError(t, json.Unmarshal(data, &d))
			assert.Equal(t, "401 Incorrect API key provided (card stand-in).", d.Details)
		}},
	} {
		t.Run(c.cli.name, func(t *testing.T) {
			t.Parallel()
			s := standin.NewOpenAI(t, standin.Script{Status: 401})
			pl := newPlace(t)
			a := c.cli.run(t, s, pl, nil, policy{})
			a.initialize()
			sid := a.newSession(pl.cwd).SessionID
			err := a.call(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: []acp.ContentBlock{acp.TextBlock("say pong")}}, nil)
			var rpcErr *acp.Error
			require.ErrorAs(t, err, &rpcErr)
			assert.Equal(t, acp.CodeInternalError, rpcErr.Code)
			c.data(t, rpcErr.Data)
			assert.Len(t, mainCalls(s), 1, "a 401 is not retried")
			a.capture(c.cli.name + "-acp-401")
		})
	}
}

// With no credentials at all, Qwen Code refuses session/new with
// auth_required and its auth methods, before any network call; OpenCode
// opens the session on OpenCode Zen's free model, which needs no account
// (and the network), so its session/new cannot tell signed out.
func TestWithNoCredentialsQwenRefusesTheSessionAndOpenCodeOffersItsFreeModel(t *testing.T) {
	t.Run("qwen", func(t *testing.T) {
		t.Parallel()
		pl := newPlace(t)
		bin := standin.CLI(t, "qwen")
		a := start(t, bin, qwen.args, pl.cwd, pl.home, []string{"HOME=" + pl.home, "PATH=" + os.Getenv("PATH"), "NO_COLOR=1"}, policy{})
		a.initialize()
		err := a.call(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: pl.cwd}, nil)
		var rpcErr *acp.Error
		require.ErrorAs(t, err, &rpcErr)
		assert.Equal(t, acp.CodeAuthRequired, rpcErr.Code)
		assert.Contains(t, rpcErr.Message, "Authentication required")
		var data struct{ AuthMethods []acp.AuthMethod }
		require.NoError(t, json.Unmarshal(rpcErr.Data, &data))
		require.Len(t, data.AuthMethods, 1)
		assert.Equal(t, "openai", data.AuthMethods[0].ID)
		a.capture("qwen-acp-no-auth")
	})
	t.Run("opencode", func(t *testing.T) {
		t.Parallel()
		pl := newPlace(t)
		bin := standin.CLI(t, "opencode")
		// The models.dev fetch off keeps the run offline; nothing is
		// prompted, since the free model is on the network.
		a := start(t, bin, opencode.args, pl.cwd, pl.home, []string{"HOME=" + pl.home, "PATH=" + os.Getenv("PATH"), "NO_COLOR=1",
			"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_SERVER_PASSWORD=" + standin.OpenCodePassword}, policy{})
		a.initialize()
		ns := a.newSession(pl.cwd)
		model, _ := selectValues(t, ns.ConfigOptions, "model")
		assert.Equal(t, "opencode/big-pickle", model)
		a.capture("opencode-acp-no-auth")
	})
}
