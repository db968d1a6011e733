package spawn

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// ProtocolDroidRPC is Droid's stream-jsonrpc (`droid exec --input-format
// stream-jsonrpc --output-format stream-jsonrpc`): JSON-RPC 2.0 one message
// per line, each also carrying factoryApiVersion and its type (request,
// response or notification). As Droid 0.225.2 (protocol 1.220.0) speaks it,
// with card the client, the agent's opening, then one turn after another
// in its session:
//
//	→ droid.initialize_session {machineId, cwd, autonomyLevel: off,
//	  interactionMode: auto, modelId?, reasoningEffort?}, or to continue
//	  a session droid.load_session {sessionId} and then
//	  droid.update_session_settings {autonomyLevel: off,
//	  interactionMode: auto, modelId?, reasoningEffort?}
//	→ droid.add_user_message {text}
//	← droid.session_notification {notification: {type, …}} while the turn
//	  runs: tool_call, tool_result, assistant_text_delta,
//	  session_token_usage_changed, …, agent_turn_completed (the turn's end)
//	← droid.request_permission {toolUses, options}, answered
//	  {selectedOption: proceed_once | cancel}
//	→ droid.interrupt_session stops a running turn
//
// A deny is "cancel": Droid then records the call as cancelled by the user
// and ends the turn without calling the model again. card never answers a
// question with a JSON-RPC error: Droid takes one for an invalid message
// and keeps waiting for an answer that never comes. card's own request ids
// are strings: Droid answers a numeric id with "Invalid JSON-RPC message"
// (id null) and never serves the request.
const ProtocolDroidRPC Protocol = "droid-stream-jsonrpc"

// droidAPIVersion is the factoryApiVersion card speaks.
const droidAPIVersion = "1.0.0"

// droidStream is the line stream with Droid's envelope added to what card
// writes.
type droidStream struct{ *lineStream }

// WriteObject implements jsonrpc2.ObjectStream.
func (s droidStream) WriteObject(obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	typ := "response"
	if _, ok := m["method"]; ok {
		typ = "notification"
		if _, ok := m["id"]; ok {
			typ = "request"
		}
	}
	m["type"], _ = json.Marshal(typ)
	m["factoryApiVersion"], _ = json.Marshal(droidAPIVersion)
	return s.lineStream.WriteObject(m)
}

type (
	droidNotification struct {
		Type      string          `json:"type"`
		ToolUse   *droidToolUse   `json:"toolUse"`
		ToolUseID string          `json:"toolUseId"`
		Content   json.RawMessage `json:"content"`
		IsError   bool            `json:"isError"`
		MessageID string          `json:"messageId"`
		TextDelta string          `json:"textDelta"`
		Reason    string          `json:"reason"`
		Attempt   int             `json:"attempt"`
		Message   json.RawMessage `json:"message"`
		Error     json.RawMessage `json:"error"`
		TokenUse  *droidTokens    `json:"tokenUsage"`
		// CumulativeUse is the session's total, on agent_turn_completed.
		CumulativeUse *droidTokens `json:"cumulativeTokenUsage"`
	}
	droidTokens struct {
		InputTokens     int64 `json:"inputTokens"`
		OutputTokens    int64 `json:"outputTokens"`
		CacheReadTokens int64 `json:"cacheReadTokens"`
	}
	droidToolUse struct {
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	droidPermission struct {
		ToolUses []struct {
			ToolUse          droidToolUse    `json:"toolUse"`
			ConfirmationType string          `json:"confirmationType"`
			Details          json.RawMessage `json:"details"`
		} `json:"toolUses"`
		Options []struct {
			Value string `json:"value"`
		} `json:"options"`
	}
	// droidInit is droid.initialize_session's params. The autonomy level
	// and interaction mode are set, not left to the user's settings: "off"
	// is the level at which Droid asks before anything but a read, and
	// "auto" keeps it out of spec mode, whose plan approval is a question
	// card does not ask.
	droidInit struct {
		MachineID       string `json:"machineId"`
		Cwd             string `json:"cwd"`
		AutonomyLevel   string `json:"autonomyLevel"`
		InteractionMode string `json:"interactionMode"`
		ModelID         string `json:"modelId,omitempty"`
		ReasoningEffort string `json:"reasoningEffort,omitempty"`
	}
	droidAnswer struct {
		SelectedOption string `json:"selectedOption"`
	}
	// droidSettings is droid.update_session_settings' params: after
	// droid.load_session card sets the boundary of droidInit again
	// rather than trust what the session file says.
	droidSettings struct {
		AutonomyLevel   string `json:"autonomyLevel"`
		InteractionMode string `json:"interactionMode"`
		ModelID         string `json:"modelId,omitempty"`
		ReasoningEffort string `json:"reasoningEffort,omitempty"`
	}
)

// droidClient is card's side of Droid's stream-jsonrpc.
type droidClient struct {
	rpcClient
	init droidInit
	// resume is the Droid session the opening loads (droid.load_session)
	// instead of opening a new one; "" for a new one.
	resume string

	of *turn
	st droidTurn
}

// droidTurn is what one turn reads of Droid.
type droidTurn struct {
	reading
	ended     bool   // agent_turn_completed came
	answerMsg string // the assistant message the answer is from
}

func (t droidTokens) usage() api.Usage {
	return api.Usage{InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, CachedInputTokens: t.CacheReadTokens}
}

func newDroidClient(plan Plan) protocol {
	c := &droidClient{rpcClient: rpcClient{idPrefix: "card-", adapter: agent.Droid, classify: droidFailure}, init: droidInit{MachineID: "card", AutonomyLevel: "off", InteractionMode: "auto"}}
	if sp := plan.Session; sp != nil {
		c.init.ModelID, c.init.ReasoningEffort, c.resume = sp.Model, sp.Effort, sp.resume
	}
	if c.resume != "" {
		// The loaded session's totals count its earlier turns.
		c.used = plan.UsageBase
	}
	return c
}

func (c *droidClient) open(a *runner) {
	c.rpcClient.open(a, c.handle, func(s *lineStream) jsonrpc2.ObjectStream { return droidStream{s} })
}

// turnOf is the turn's reading of Droid, fresh for a turn it has not read
// for yet; called with mu held.
func (c *droidClient) turnOf(t *turn) *droidTurn {
	if c.of != t {
		c.of, c.st = t, droidTurn{}
	}
	return &c.st
}

// opening opens Droid's session in the agent's cwd, or loads the one to
// continue.
//
// Loading goes over this channel because `droid exec -s ID` (0.225.2)
// first fetches the session from Factory's API and exits 1, printing
// nothing, when that fails (offline, or with only a custom model and no
// Factory account), while droid.load_session reads the session file under
// ~/.factory/sessions. The loaded session keeps its own settings; card
// sets autonomy "off" and interaction "auto" (and the request's model
// and effort) again with droid.update_session_settings, so the boundary
// is card's whatever the file says.
func (c *droidClient) opening(t *turn) bool {
	c.mu.Lock()
	c.turnOf(t)
	c.mu.Unlock()
	c.init.Cwd = c.a.plan.Dir
	var init struct {
		SessionID string `json:"sessionId"`
		Settings  struct {
			ModelID string `json:"modelId"`
		} `json:"settings"`
	}
	if c.resume != "" {
		if !c.call(t.ctx, t, "droid.load_session", map[string]string{"sessionId": c.resume}, &init) {
			return false
		}
		set := droidSettings{AutonomyLevel: c.init.AutonomyLevel, InteractionMode: c.init.InteractionMode,
			ModelID: c.init.ModelID, ReasoningEffort: c.init.ReasoningEffort}
		var updated json.RawMessage
		if !c.call(t.ctx, t, "droid.update_session_settings", set, &updated) {
			return false
		}
		init.SessionID = c.resume
		if set.ModelID != "" {
			init.Settings.ModelID = set.ModelID
		}
	} else if !c.call(t.ctx, t, "droid.initialize_session", c.init, &init) {
		return false
	}
	c.opened(t, init.SessionID, init.Settings.ModelID)
	return true
}

// begin sends the turn's prompt; the turn ends with agent_turn_completed.
func (c *droidClient) begin(t *turn) {
	c.resumed(t)
	var added json.RawMessage
	if !c.call(c.a.life, t, "droid.add_user_message", map[string]any{"text": t.spec.Prompt}, &added) {
		t.endIfFailed()
		return
	}
	t.setStep("the turn (agent_turn_completed)")
}

// interrupt sends droid.interrupt_session.
func (c *droidClient) interrupt(*turn) bool {
	var res struct{}
	return c.brief("droid.interrupt_session", map[string]any{}, &res, c.a.child.lim.KillGrace) == nil
}

func (c *droidClient) steer(*turn, string) error { return ErrNoSteer }

// droidQuestions are Droid's questions, each with its no. The model's
// questions to the user (droid.ask_user, AskUser) are answered cancelled,
// in the shape Droid reads, since an error would leave Droid waiting: card
// asks allow or deny about tool calls and nothing else.
var droidQuestions = map[string]any{
	"droid.request_permission": droidAnswer{SelectedOption: "cancel"},
	"droid.ask_user":           map[string]any{"cancelled": true, "answers": []any{}},
}

// handle serves one message of Droid: to the running turn, or, between
// turns, a question answered no (never an error, which Droid would wait
// on) and anything else dropped.
func (c *droidClient) handle(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	t, params := c.running(hctx, req, droidQuestions)
	var p struct {
		Notification json.RawMessage `json:"notification"`
	}
	var n droidNotification
	switch {
	case t == nil:
	case req.Method == "droid.request_permission" && !req.Notif:
		var p droidPermission
		_ = decodeParams(params, &p)
		c.ask(t, req.ID, droidQuestions[req.Method], func(ctx context.Context) any { return c.permission(ctx, t, p) })
	case req.Method == "droid.ask_user" && !req.Notif:
		_ = conn.Reply(hctx, req.ID, droidQuestions[req.Method])
	case !req.Notif:
		// Droid 0.225.2 sends no other request; an error is the only
		// answer JSON-RPC has for a method card does not know.
		c.notServed(hctx, req, "")
	case req.Method != "droid.session_notification" || !decodeParams(params, &p) || !decodeParams(p.Notification, &n) || n.Type == "":
		t.emit(otherEvent(req.Method, params))
	default:
		c.mu.Lock()
		defer c.mu.Unlock()
		c.notification(t, n, p.Notification)
	}
}

// notification reads one session notification for the turn, with mu held.
func (c *droidClient) notification(t *turn, n droidNotification, raw json.RawMessage) {
	st := c.turnOf(t)
	switch n.Type {
	case "tool_call":
		// Sent as the input streams in (first {}), then whole: the last
		// one seen is the call's input.
		if n.ToolUse != nil {
			if tl := st.tools.get(n.ToolUse.ID); tl != nil && !tl.announced {
				tl.name, tl.input = n.ToolUse.Name, n.ToolUse.Input
			}
		}
	case "tool_execution_phase_changed":
		if tl := st.tools.get(n.ToolUseID); tl != nil {
			t.emit(st.announce(n.ToolUseID, tl)...)
		}
	case "tool_result":
		tl := st.tools.get(n.ToolUseID)
		if tl == nil || tl.done {
			return
		}
		t.emit(st.announce(n.ToolUseID, tl)...)
		tl.done = true
		t.emit(Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: n.ToolUseID}, Output: clip(droidText(n.Content), maxOutput), IsError: n.IsError})
	case "assistant_text_delta":
		if n.MessageID != st.answerMsg {
			// The answer is the last assistant message, not every "let me
			// look" before a tool call.
			st.answer, st.answerMsg = answerBuf{}, n.MessageID
		}
		st.answer.add(n.TextDelta)
		t.emit(Event{Kind: api.EventText, Text: n.TextDelta, Delta: true})
	case "session_token_usage_changed":
		// One per model call.
		if n.TokenUse != nil {
			st.turns++
			st.usageTotal = n.TokenUse.usage()
			st.usage = usageMinus(st.usageTotal, c.used)
		}
	case "agent_turn_completed":
		if st.ended {
			return
		}
		st.ended = true
		// The turn's own usage and the session's total come with its end
		// too, and they are what counts: Droid 0.225.2 now and then leaves
		// out a turn's session_token_usage_changed (seen on the second
		// turn of a warm agent, about one run in four).
		if n.CumulativeUse != nil && n.CumulativeUse.usage() != (api.Usage{}) {
			st.usageTotal = n.CumulativeUse.usage()
			st.usage = usageMinus(st.usageTotal, c.used)
		}
		if n.TokenUse != nil && n.TokenUse.usage() != (api.Usage{}) {
			st.usage = n.TokenUse.usage()
		}
		if st.turns == 0 && st.usage != (api.Usage{}) {
			st.turns = 1
		}
		if st.usage != (api.Usage{}) {
			u := st.usage
			t.emit(Event{Kind: api.EventUsage, Usage: &u})
		}
		if n.Reason != "" && n.Reason != "completed" {
			msg := fmt.Sprintf("droid ended the turn: %s", n.Reason)
			if st.lastError != "" {
				msg += ": " + st.lastError
			}
			t.setFailure(droidFailure(msg, 0))
		}
		t.complete()
	case "llm_retry":
		st.retries++
		attempt := n.Attempt
		if attempt == 0 {
			attempt = st.retries
		}
		t.emit(Event{Kind: api.EventRetry, Attempt: attempt, Error: clip(n.Reason, 2048)})
	case "error", "session_error", "agent_error":
		msg := droidText(n.Message)
		if msg == "" {
			msg = droidText(n.Error)
		}
		if msg == "" {
			msg = string(raw)
		}
		st.lastError = clip(msg, 2048)
		t.emit(Event{Kind: api.EventError, Error: st.lastError})
	case "droid_working_state_changed", "settings_updated", "mcp_status_changed", "permission_resolved", "tool_progress_update",
		"create_message", "assistant_text_complete", "update_message":
		// State, menus and the message log: the events above carry what a
		// run's record needs.
	default:
		t.emit(otherEvent(n.Type, raw))
	}
}

// announce is the shared announce, with a call Droid left unnamed named
// "tool".
func (st *droidTurn) announce(id string, t *sessionTool) []Event {
	evs := st.tools.announce(id, t)
	for _, e := range evs {
		if e.Tool.Name == "" {
			e.Tool.Name = "tool"
		}
	}
	return evs
}

// droidText is a content or message field as text: a string, or the text
// of its blocks.
func droidText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil {
		var parts []string
		for _, b := range blocks {
			parts = append(parts, b.Text)
		}
		return strings.Join(parts, "")
	}
	var o struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Message
}

// permission puts each tool use of one droid.request_permission to the
// approver: Droid asks about a batch with one answer, so the batch runs
// only if every call in it is allowed.
func (c *droidClient) permission(ctx context.Context, t *turn, p droidPermission) any {
	offers := func(v string) bool {
		for _, o := range p.Options {
			if o.Value == v {
				return true
			}
		}
		return false
	}
	if len(p.ToolUses) == 0 || !offers("proceed_once") {
		return droidAnswer{SelectedOption: "cancel"}
	}
	for _, u := range p.ToolUses {
		c.mu.Lock()
		st := c.turnOf(t)
		if tl := st.tools.get(u.ToolUse.ID); tl != nil {
			if !tl.announced {
				tl.name, tl.input = u.ToolUse.Name, u.ToolUse.Input
			}
			t.emit(st.announce(u.ToolUse.ID, tl)...)
		}
		c.mu.Unlock()
		d := t.approve(ctx, Question{Tool: u.ToolUse.Name, Input: u.ToolUse.Input, ToolUseID: u.ToolUse.ID,
			Summary: summarize(u.ToolUse.Name, u.ToolUse.Input)})
		if !d.Allow {
			return droidAnswer{SelectedOption: "cancel"}
		}
	}
	return droidAnswer{SelectedOption: "proceed_once"}
}

// droidFailure classifies an error Droid reported by its message.
func droidFailure(msg string, _ int64) *api.RunError {
	return failure(classifyMessage(msg), clip(msg, 2048))
}

func (c *droidClient) finish(t *turn, exit *ExitInfo) api.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Droid reports the session's total (seen with 0.225.2: 10/5, 20/10,
	// 30/15 for three alike turns).
	return c.result(t, &c.turnOf(t).reading, exit, rpcWords, nil, true)
}

// buildDroidWarm keeps Droid warm over its stream-jsonrpc. read_only
// runs the ask plan's session (autonomy "off": Droid runs its reads
// unasked and asks before every Execute, Create, Edit and ApplyPatch) with
// every question denied, since read_only has nobody to ask: the same
// boundary, narrower if anything (a denied call ends Droid's turn). Ask
// mode is the ask plan as it is. Edit is refused as in every Droid run,
// and bypass is not kept warm (its flag was not seen to act in this mode).
func buildDroidWarm(bin string, req Request) (Plan, error) {
	mode := req.EffectiveMode()
	if mode == ModeBypass {
		return Plan{}, fmt.Errorf("%s: bypass is not kept warm over stream-jsonrpc: %w", req.Adapter, ErrNoWarmChannel)
	}
	if _, err := buildOneShot(bin, req); err != nil { // every check of a one-shot request
		return Plan{}, err
	}
	p, err := buildDroidAsk(bin, req)
	if err != nil {
		return Plan{}, err
	}
	if mode != ModeAsk {
		p.Ask = nil
	}
	p.MaxAPIRetries, p.Stall = req.APIRetries(), req.Watchdog()
	return p, nil
}

// Droid in ask mode, as checked against Droid 0.225.2 (protocol 1.220.0)
// with a loopback model stand-in:
//
//   - exec --input-format stream-jsonrpc --output-format stream-jsonrpc:
//     Droid asks with droid.request_permission. Its one-shot stream-json
//     mode cannot ask: a blocked action fails.
//   - The session is opened with autonomyLevel "off" and interactionMode
//     "auto" in droid.initialize_session, whatever the user's own settings
//     say: at "off" Droid runs Read, LS, Grep and Glob unasked (also
//     outside the working dir, as in read_only) and asks for every
//     Execute, even `cat`, and every Create, Edit and ApplyPatch.
//   - -m and -r on argv are ignored in this mode (a run with -m used
//     Droid's default model; `droid exec --help`: "CLI flags do not
//     configure JSON-RPC sessions"): the model and the reasoning effort go
//     in droid.initialize_session, and a -m/--model or -r/--reasoning-effort
//     the operator put in the adapter's args is carried there too, so it
//     holds in every channel as it does one-shot.
//   - resume loads the session with droid.load_session, never on argv.
//   - system_prompt and allowed_tools are refused: the argv flags that
//     carry them in read_only were not seen to act in this mode.
func buildDroidAsk(bin string, req Request) (Plan, error) {
	if err := refuse(agent.Droid,
		refusal{req.AllowedTools != nil, "allowed_tools", "in ask mode Droid's own autonomy level decides what is asked; send allowed_tools in read_only"},
		refusal{req.SystemPrompt != "", "system_prompt", "in ask mode Droid takes no --append-system-prompt-file; send system_prompt in read_only"},
	); err != nil {
		return Plan{}, err
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := []string{"exec"}
	args = append(args, req.Extras.Args...)
	args = append(args, "--input-format", "stream-jsonrpc", "--output-format", "stream-jsonrpc")
	model, effort := req.Model, req.Effort
	if model == "" {
		model = argValue(req.Extras.Args, "-m", "--model")
	}
	if effort == "" {
		effort = argValue(req.Extras.Args, "-r", "--reasoning-effort")
	}
	p.Args = args
	p.Ask = &AskPlan{Channel: AskViaSession}
	p.Session = &SessionPlan{Protocol: ProtocolDroidRPC, Adapter: agent.Droid, Model: model, Effort: effort, resume: req.Resume}
	return p, nil
}

// argValue is the value of the last of flags in args ("-m X" or
// "--model=X"), or "".
func argValue(args []string, flags ...string) string {
	var v string
	for i, a := range args {
		for _, f := range flags {
			switch {
			case a == f && i+1 < len(args):
				v = args[i+1]
			case strings.HasPrefix(a, f+"="):
				v = strings.TrimPrefix(a, f+"=")
			}
		}
	}
	return v
}
