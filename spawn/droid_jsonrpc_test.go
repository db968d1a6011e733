package spawn

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Droid asks in stream-jsonrpc: the ask plan runs `droid exec` with
// stream-jsonrpc both ways, and the model comes from the request or from
// the operator's -m, since Droid takes it only in initialize_session there.
func TestDroidAskPlanRunsStreamJSONRPCAndCarriesTheModelIntoTheSession(t *testing.T) {
	p, err := Build("/usr/bin/droid", Request{Adapter: agent.Droid, Mode: ModeAsk, Cwd: cwd, Effort: "low",
		Extras: Extras{Args: []string{"-m", "custom:x-0"}}})
	require.NoError(t, err)
	assert.Equal(t, &SessionPlan{Protocol: ProtocolDroidRPC, Adapter: agent.Droid, Model: "custom:x-0", Effort: "low"}, p.Session)
	assert.Equal(t, &AskPlan{Channel: AskViaSession}, p.Ask)
	assert.Equal(t, []string{"exec", "-m", "custom:x-0", "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc"}, p.Args)
	assert.NotContains(t, p.Args, "--auto", "Droid asks at autonomy off")
	assert.NotContains(t, p.Args, "--skip-permissions-unsafe")

	p, err = Build("/usr/bin/droid", Request{Adapter: agent.Droid, Mode: ModeAsk, Cwd: cwd, Model: "custom:y-0",
		Extras: Extras{Args: []string{"--model=custom:x-0"}}})
	require.NoError(t, err)
	assert.Equal(t, "custom:y-0", p.Session.Model, "the request's model wins over the operator's default")

	for _, req := range []Request{
		{AllowedTools: []string{"Read"}},
		{SystemPrompt: "be brief", SystemPromptAppend: true},
		{MaxTurns: 3},
	} {
		req.Adapter, req.Mode, req.Cwd = agent.Droid, ModeAsk, cwd
		_, err := Build("/usr/bin/droid", req)
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe, "%+v", req)
	}
	p, err = Build("/usr/bin/droid", Request{Adapter: agent.Droid, Mode: ModeReadOnly, Cwd: cwd})
	require.NoError(t, err)
	assert.Nil(t, p.Session, "read_only stays one-shot stream-json")
}

// Droid continues a session by loading it over stream-jsonrpc, in ask mode
// and in read_only (where every question is denied), since `droid exec -s`
// exits 1 when Factory's API cannot be reached; the id never reaches argv.
// A read_only resume with what only argv carries keeps -s.
func TestADroidResumeLoadsTheSessionOverStreamJSONRPCUnlessArgvMustCarryMore(t *testing.T) {
	const id = "0b6ac262-e252-479b-b742-908a5f1addfb"
	for _, mode := range []Mode{ModeAsk, ModeReadOnly} {
		p, err := Build("/usr/bin/droid", Request{Adapter: agent.Droid, Mode: mode, Cwd: cwd, Resume: id, Model: "custom:x-0"})
		require.NoError(t, err, mode)
		require.NotNil(t, p.Session, mode)
		assert.Equal(t, id, p.Session.resume, mode)
		assert.Equal(t, "custom:x-0", p.Session.Model, mode)
		assert.Equal(t, []string{"exec", "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc"}, p.Args, mode)
		assert.Equal(t, mode == ModeAsk, p.Ask != nil, mode)
	}
	for _, req := range []Request{
		{AllowedTools: []string{"Read"}},
		{SystemPrompt: "be brief", SystemPromptAppend: true},
	} {
		req.Adapter, req.Cwd, req.Resume = agent.Droid, cwd, id
		p, err := Build("/usr/bin/droid", req)
		require.NoError(t, err)
		assert.Nil(t, p.Session, "%+v", req)
		assert.Contains(t, strings.Join(p.Args, " "), "-s "+id)
	}
}

// A resumed turn loads the session, sets card's boundary on it again, and
// reports the session it continued.
func TestADroidTurnThatResumesLoadsTheSessionAndSetsItsBoundaryAgain(t *testing.T) {
	plan := droidProtocol.plan("turn")
	plan.Session.resume = "s-old"
	r := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, evs, _, err := sessionRun(t, ctx, plan, r, Limits{KillGrace: 300 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, "s-old", res.SessionID)
	assert.Equal(t, "DONE after proceed_once | loaded s-old, autonomy off, auto, custom:x-0 | Please create the file.", res.Answer)
	assert.Contains(t, evs, Event{Kind: api.EventSession, SessionID: "s-old", Model: "custom:x-0"})

	plan = droidProtocol.plan("turn")
	plan.Session.resume = "s-missing"
	res, _, _, err = sessionRun(t, ctx, plan, r, Limits{KillGrace: 300 * time.Millisecond})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Message, "droid.load_session with error -32004: Session not found")
	assert.True(t, res.IsError)
}

// fakeDroid is a fake `droid exec` in stream-jsonrpc, writing lines as
// Droid 0.225.2 does (envelope with type and factoryApiVersion, a uuid id
// on its own requests). Like the real one it takes only string ids and
// keeps waiting after an error response to its question. Scripts:
//
//	turn    runs a Read unasked, asks about an Execute; writes made.txt if
//	        it is allowed, then answers with text; a cancel ends the turn
//	        with the call cancelled and no text.
//	die     exits 3 after the user message is accepted.
//	silent  starts a grandchild (pid in grandchild.pid), answers nothing.
//	noise   fakeNoise, then as turn.
func fakeDroid(script string) int {
	if script == "silent" {
		return fakeSilent()
	}
	if script == "noise" {
		fakeNoise()
		script = "turn"
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	say := func(s string) { fmt.Println(s) }
	const env = `"jsonrpc":"2.0","factoryApiVersion":"1.0.0","factoryProtocolVersion":"1.220.0"`
	note := func(n string) {
		say(`{` + env + `,"type":"notification","method":"droid.session_notification","params":{"sessionId":"s-1","notification":` + n + `},"_meta":{"traceparent":"00-1"}}`)
	}
	var model, loaded string
	for in.Scan() {
		var m struct {
			ID         json.RawMessage `json:"id"`
			Type       string          `json:"type"`
			FactoryAPI string          `json:"factoryApiVersion"`
			Method     string          `json:"method"`
			Params     json.RawMessage `json:"params"`
		}
		_ = json.Unmarshal(in.Bytes(), &m)
		var id string
		if json.Unmarshal(m.ID, &id) != nil || m.Type != "request" || m.FactoryAPI != "1.0.0" {
			say(`{` + env + `,"type":"response","id":null,"error":{"code":-32700,"message":"Invalid JSON-RPC message"}}`)
			continue
		}
		switch m.Method {
		case "droid.initialize_session":
			var p struct{ MachineID, Cwd, AutonomyLevel, InteractionMode, ModelID string }
			_ = json.Unmarshal(m.Params, &p)
			if p.AutonomyLevel != "off" || p.InteractionMode != "auto" || p.Cwd == "" {
				say(fmt.Sprintf(`{%s,"type":"response","id":%q,"error":{"code":-32602,"message":"unexpected params"}}`, env, id))
				continue
			}
			model = p.ModelID
			note(`{"type":"mcp_status_changed","servers":[]}`)
			say("a log line that is not JSON")
			say(fmt.Sprintf(`{%s,"type":"response","id":%q,"result":{"sessionId":"s-1","session":{"messages":[]},"settings":{"modelId":%q,"autonomyLevel":"off"}}}`, env, id, model))
		case "droid.load_session":
			var p struct{ SessionID string }
			_ = json.Unmarshal(m.Params, &p)
			if p.SessionID != "s-old" {
				say(fmt.Sprintf(`{%s,"type":"response","id":%q,"error":{"code":-32004,"message":"Session not found"}}`, env, id))
				continue
			}
			// The session file's own settings, which card sets again.
			say(fmt.Sprintf(`{%s,"type":"response","id":%q,"result":{"session":{"messages":[]},"settings":{"modelId":"custom:old-0","autonomyLevel":"high","interactionMode":"spec"}}}`, env, id))
			loaded = "loaded " + p.SessionID
		case "droid.update_session_settings":
			var p struct{ AutonomyLevel, InteractionMode, ModelID string }
			_ = json.Unmarshal(m.Params, &p)
			loaded += fmt.Sprintf(", autonomy %s, %s, %s", p.AutonomyLevel, p.InteractionMode, p.ModelID)
			say(fmt.Sprintf(`{%s,"type":"response","id":%q,"result":{}}`, env, id))
		case "droid.add_user_message":
			var p struct{ Text string }
			_ = json.Unmarshal(m.Params, &p)
			say(fmt.Sprintf(`{%s,"type":"response","id":%q,"result":{}}`, env, id))
			if script == "die" {
				fmt.Fprintln(os.Stderr, "fatal: the fake droid fell over")
				os.Exit(3)
			}
			if loaded != "" {
				p.Text = loaded + " | " + p.Text
			}
			fakeDroidTurn(in, say, note, env, p.Text)
		}
	}
	return 0
}

func fakeDroidTurn(in *bufio.Scanner, say func(string), note func(string), env, said string) {
	note(`{"type":"droid_working_state_changed","newState":"streaming_assistant_message"}`)
	note(`{"type":"assistant_text_delta","messageId":"m-0","blockIndex":0,"textDelta":"Let me look."}`)
	// A read runs unasked.
	note(`{"type":"tool_call","toolUse":{"type":"tool_use","id":"toolu_read","name":"Read","input":{}}}`)
	note(`{"type":"tool_call","toolUse":{"type":"tool_use","id":"toolu_read","name":"Read","input":{"file_path":"/p/a.txt"}}}`)
	note(`{"type":"tool_execution_phase_changed","toolUseId":"toolu_read","toolName":"Read","phase":"executing"}`)
	note(`{"type":"tool_result","toolUseId":"toolu_read","content":"old","isError":false}`)
	note(`{"type":"session_token_usage_changed","tokenUsage":{"inputTokens":10,"outputTokens":5,"cacheReadTokens":1}}`)
	in1 := `{"command":"echo hello > made.txt","riskLevel":"low","riskLevelReason":"writes a file","summary":"Write a file"}`
	note(`{"type":"tool_call","toolUse":{"type":"tool_use","id":"toolu_1","name":"Execute","input":{}}}`)
	note(`{"type":"tool_call","toolUse":{"type":"tool_use","id":"toolu_1","name":"Execute","input":` + in1 + `}}`)
	note(`{"type":"tool_execution_phase_changed","toolUseId":"toolu_1","toolName":"Execute","phase":"queued"}`)
	const q = "9177317d-5a4e-4d2e-9e8f-1b2c3d4e5f60"
	say(`{"type":"request",` + env + `,"method":"droid.request_permission","id":"` + q + `","params":{"toolUses":[{"toolUse":{"type":"tool_use","id":"toolu_1","name":"Execute","input":` + in1 +
		`},"confirmationType":"exec","details":{"type":"exec","fullCommand":"echo hello > made.txt"}}],"options":[{"label":"Yes, allow","value":"proceed_once"},{"label":"Always","value":"proceed_always"},{"label":"No, cancel","value":"cancel"}]}}`)
	var selected string
	for in.Scan() {
		var a struct {
			ID     string `json:"id"`
			Type   string `json:"type"`
			Result *struct {
				SelectedOption string `json:"selectedOption"`
			} `json:"result"`
		}
		if json.Unmarshal(in.Bytes(), &a) != nil || a.ID != q {
			continue
		}
		if a.Type != "response" || a.Result == nil {
			// Droid takes an error as an invalid message and keeps
			// waiting for the answer.
			say(`{` + env + `,"type":"response","id":null,"error":{"code":-32700,"message":"Invalid JSON-RPC message"}}`)
			continue
		}
		selected = a.Result.SelectedOption
		break
	}
	note(`{"type":"permission_resolved","requestId":"` + q + `","toolUseIds":["toolu_1"],"selectedOption":"` + selected + `"}`)
	if selected != "proceed_once" {
		note(`{"type":"tool_result","toolUseId":"toolu_1","content":"Error: Tool execution cancelled by user","isError":true}`)
		note(`{"type":"agent_turn_completed","reason":"completed","turnId":"t-1"}`)
		return
	}
	_ = os.WriteFile("made.txt", []byte("hello\n"), 0o600)
	note(`{"type":"tool_execution_phase_changed","toolUseId":"toolu_1","toolName":"Execute","phase":"executing"}`)
	note(`{"type":"tool_result","toolUseId":"toolu_1","content":"Command completed successfully\n\n[Process exited with code 0]","isError":false}`)
	note(`{"type":"llm_retry","attempt":1,"reason":"overloaded"}`)
	text, _ := json.Marshal("DONE after " + selected + " | " + said)
	note(`{"type":"assistant_text_delta","messageId":"m-1","blockIndex":0,"textDelta":` + string(text) + `}`)
	note(`{"type":"assistant_text_complete","messageId":"m-1","blockIndex":0}`)
	note(`{"type":"session_token_usage_changed","tokenUsage":{"inputTokens":20,"outputTokens":10,"cacheReadTokens":2}}`)
	note(`{"type":"agent_turn_completed","reason":"completed","turnId":"t-1"}`)
	note(`{"type":"droid_working_state_changed","newState":"idle"}`)
}

// droidRun runs the fake Droid with script through the real runner, as
// Droid's ask plan would run it.
func droidRun(t *testing.T, ctx context.Context, script string, approver Approver, lim Limits) (api.Result, []Event, string, error) {
	return sessionRun(t, ctx, droidProtocol.plan(script), approver, lim)
}

func TestADroidTurnPutsTheExecuteToTheApproverAndAnswersProceedOrCancel(t *testing.T) {
	for _, allow := range []bool{true, false} {
		r := &recorder{answer: func(Question) Decision { return Decision{Allow: allow, Message: "no"} }}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, evs, work, err := droidRun(t, ctx, "turn", r, Limits{KillGrace: 300 * time.Millisecond})
		cancel()
		require.NoError(t, err, "allow=%v", allow)
		require.Len(t, r.asked, 1, "the Read ran unasked")
		q := r.asked[0]
		assert.Equal(t, "Execute", q.Tool)
		assert.Equal(t, "toolu_1", q.ToolUseID)
		assert.Equal(t, "Execute: echo hello > made.txt", q.Summary)
		assert.JSONEq(t, `{"command":"echo hello > made.txt","riskLevel":"low","riskLevelReason":"writes a file","summary":"Write a file"}`, string(q.Input))
		assert.Equal(t, "s-1", res.SessionID)
		assert.Equal(t, 2, res.ToolCalls)
		assert.Equal(t, Event{Kind: api.EventSession, SessionID: "s-1", Model: "custom:x-0"}, evs[1], "the model asked for in initialize_session")
		assert.Equal(t, Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "Read", ID: "toolu_read", Input: json.RawMessage(`{"file_path":"/p/a.txt"}`)}}, evs[3],
			"a tool is announced once, with its whole input")
		if allow {
			assert.FileExists(t, filepath.Join(work, "made.txt"))
			assert.Equal(t, "DONE after proceed_once | Please create the file.", res.Answer, "the answer is the last message, the prompt went in add_user_message")
			assert.Equal(t, api.Usage{InputTokens: 20, OutputTokens: 10, CachedInputTokens: 2}, res.Usage)
			assert.Equal(t, 2, res.Turns)
			assert.Equal(t, []string{api.EventOther, api.EventSession, api.EventText, api.EventToolUse, api.EventToolResult, api.EventToolUse, api.EventToolResult, api.EventRetry, api.EventText, api.EventUsage}, kinds(evs))
			assert.Equal(t, Event{Kind: api.EventRetry, Attempt: 1, MaxAttempts: DefaultMaxAPIRetries, Error: "overloaded"}, evs[7])
		} else {
			assert.NoFileExists(t, filepath.Join(work, "made.txt"))
			assert.Equal(t, "Let me look.", res.Answer, "a cancel ends Droid's turn without another model call")
			assert.Equal(t, Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: "toolu_1"}, Output: "Error: Tool execution cancelled by user", IsError: true}, evs[6])
		}
	}
}

// A turn's usage comes from its agent_turn_completed, which carries the
// turn's tokens and the session's total, whether or not Droid sent the
// turn's session_token_usage_changed first (Droid 0.225.2 sometimes does
// not), and whatever the session spent before the turn.
func TestADroidTurnsUsageIsItsOwnEvenWithoutItsUsageNotification(t *testing.T) {
	const done = `{"type":"agent_turn_completed","reason":"completed","tokenUsage":{"inputTokens":10,"outputTokens":5,"cacheReadTokens":1},"cumulativeTokenUsage":{"inputTokens":30,"outputTokens":15,"cacheReadTokens":3}}`
	cases := []struct {
		name  string
		base  api.Usage // the session's total before the turn, for a warm agent
		notes []string
	}{
		{"the usage notification left out, second turn of a warm agent", api.Usage{InputTokens: 20, OutputTokens: 10, CachedInputTokens: 2}, []string{done}},
		{"the usage notification sent, second turn of a warm agent", api.Usage{InputTokens: 20, OutputTokens: 10, CachedInputTokens: 2}, []string{`{"type":"session_token_usage_changed","tokenUsage":{"inputTokens":30,"outputTokens":15,"cacheReadTokens":3}}`, done}},
		{"a cold turn resuming a session whose history cost tokens before", api.Usage{}, []string{done}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newDroidClient(Plan{Session: &SessionPlan{Adapter: "droid"}}).(*droidClient)
			c.used = tc.base
			var evs []Event
			tu := readingTurn(func(e ...Event) { evs = append(evs, e...) }, nil)
			for _, raw := range tc.notes {
				var n droidNotification
				require.NoError(t, json.Unmarshal([]byte(raw), &n))
				c.notification(tu, n, json.RawMessage(raw))
			}
			want := api.Usage{InputTokens: 10, OutputTokens: 5, CachedInputTokens: 1}
			require.Equal(t, []string{api.EventUsage}, kinds(evs))
			assert.Equal(t, want, *evs[0].Usage)
			assert.Equal(t, want, c.finish(tu, &ExitInfo{}).Usage)
			assert.Equal(t, api.Usage{InputTokens: 30, OutputTokens: 15, CachedInputTokens: 3}, c.used, "the next turn's base")
			assert.Equal(t, 1, c.finish(tu, &ExitInfo{}).Turns)
		})
	}
}
