package spawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sourcegraph/jsonrpc2"
)

// ProtocolDroidRPC is Droid's stream-jsonrpc (`droid exec --input-format
// stream-jsonrpc --output-format stream-jsonrpc`): JSON-RPC 2.0 one message
// per line, each also carrying factoryApiVersion and its type (request,
// response or notification).
const ProtocolDroidRPC Protocol = "droid-stream-jsonrpc"

// The stream-jsonrpc conversation, as Droid 0.225.2 (protocol 1.220.0)
// speaks it; card is the client. One turn is
//
//	→ droid.initialize_session {machineId, cwd, autonomyLevel: off,
//	  interactionMode: auto, modelId?, reasoningEffort?}, or to continue
//	  a session droid.load_session {sessionId} and then
//	  droid.update_session_settings {autonomyLevel: off,
//	  interactionMode: auto, modelId?, reasoningEffort?}
//	→ droid.add_user_message {text}
//	← droid.session_notification {notification: {type, …}} while the turn
//	  runs: tool_call, tool_result, assistant_text_delta,
//	  session_token_usage_changed, …, agent_turn_completed
//	← droid.request_permission {toolUses, options}, answered
//	  {selectedOption: proceed_once | cancel}
//
// A deny is "cancel": Droid then records the call as cancelled by the user
// and ends the turn without calling the model again. card never answers a
// question with a JSON-RPC error: Droid takes one for an invalid message
// and keeps waiting for an answer that never comes. card's own request ids
// are strings: Droid answers a numeric id with "Invalid JSON-RPC message"
// (id null) and never serves the request.

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

// droidConversation is one stream-jsonrpc turn.
type droidConversation struct {
	rpcTurn
	init droidInit
	// resume is the Droid session the turn loads (droid.load_session)
	// instead of opening a new one; "" for a new one.
	resume string

	sessionID string
	model     string
	answer    answerBuf
	answerMsg string // the assistant message the answer is from
	tools     sessionTools
	turns     int
	retries   int
	usage     Usage
	lastError string
	// usageTotal is the session's total as Droid reports it (seen with
	// 0.225.2: 10/5, 20/10, 30/15 for three alike turns); usageBase, for
	// a warm agent's turn, the total before it.
	usageTotal, usageBase Usage
}

func (t droidTokens) usage() Usage {
	return Usage{InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, CachedInputTokens: t.CacheReadTokens}
}

func newDroidConversation(sp SessionPlan) (conversation, error) {
	init := droidInit{MachineID: "card", AutonomyLevel: "off", InteractionMode: "auto", ModelID: sp.Model, ReasoningEffort: sp.Effort}
	return &droidConversation{init: init, resume: sp.resume, usageBase: resumedBase(sp), rpcTurn: newRPCTurn(sp.Adapter, "card-", rpcWords)}, nil
}

func (c *droidConversation) converse(ctx context.Context, t turn) {
	stream := droidStream{newLineStream(t.Lines, t.Stdin, func(line []byte) { t.Emit(otherEvent("", line)) })}
	c.open(ctx, stream, func(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
		c.handle(hctx, conn, req, t)
	})
	defer c.close()

	if !c.handshake(t) {
		return
	}
	if !c.addMessage(t) {
		return
	}
	c.awaitEnd("the turn (agent_turn_completed)")
}

// handshake opens Droid's session in the turn's cwd, or loads the one
// to continue; false when Droid did not answer it. A warm agent opens it
// once, for every turn after.
//
// Loading goes over this channel because `droid exec -s ID` (0.225.2)
// first fetches the session from Factory's API and exits 1, printing
// nothing, when that fails (offline, or with only a custom model and no
// Factory account), while droid.load_session reads the session file under
// ~/.factory/sessions. The loaded session keeps its own settings; card
// sets autonomy "off" and interaction "auto" (and the request's model
// and effort) again with droid.update_session_settings, so the boundary
// is card's whatever the file says.
func (c *droidConversation) handshake(t turn) bool {
	c.init.Cwd = t.Cwd
	var init struct {
		SessionID string `json:"sessionId"`
		Settings  struct {
			ModelID string `json:"modelId"`
		} `json:"settings"`
	}
	if c.resume != "" {
		if !c.call("droid.load_session", map[string]string{"sessionId": c.resume}, &init, c.fail) {
			return false
		}
		set := droidSettings{AutonomyLevel: c.init.AutonomyLevel, InteractionMode: c.init.InteractionMode,
			ModelID: c.init.ModelID, ReasoningEffort: c.init.ReasoningEffort}
		var updated json.RawMessage
		if !c.call("droid.update_session_settings", set, &updated, c.fail) {
			return false
		}
		init.SessionID = c.resume
		if set.ModelID != "" {
			init.Settings.ModelID = set.ModelID
		}
	} else if !c.call("droid.initialize_session", c.init, &init, c.fail) {
		return false
	}
	c.mu.Lock()
	c.sessionID, c.model = init.SessionID, init.Settings.ModelID
	t.Emit(Event{Kind: EventSession, SessionID: c.sessionID, Model: c.model})
	c.mu.Unlock()
	return true
}

// addMessage sends the turn's prompt; the turn ends with
// agent_turn_completed.
func (c *droidConversation) addMessage(t turn) bool {
	var added json.RawMessage
	return c.call("droid.add_user_message", map[string]any{"text": t.Prompt}, &added, c.fail)
}

func (c *droidConversation) handle(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request, t turn) {
	var params json.RawMessage
	if req.Params != nil {
		params = *req.Params
	}
	if !req.Notif {
		switch req.Method {
		case "droid.request_permission":
			var p droidPermission
			_ = decodeParams(params, &p)
			c.ask(hctx, req.ID, droidAnswer{SelectedOption: "cancel"}, func(ctx context.Context) any {
				return c.permission(ctx, p, t)
			})
		case "droid.ask_user":
			// The model's questions to the user (AskUser): card asks
			// allow or deny about tool calls and nothing else, so they
			// are answered cancelled, in the shape Droid reads, since an
			// error would leave Droid waiting.
			_ = conn.Reply(hctx, req.ID, map[string]any{"cancelled": true, "answers": []any{}})
		default:
			// Droid 0.225.2 sends no other request; an error is the only
			// answer JSON-RPC has for a method card does not know.
			_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "card does not serve " + req.Method})
		}
		return
	}
	if req.Method != "droid.session_notification" {
		t.Emit(otherEvent(req.Method, params))
		return
	}
	var p struct {
		Notification json.RawMessage `json:"notification"`
	}
	var n droidNotification
	if !decodeParams(params, &p) || !decodeParams(p.Notification, &n) || n.Type == "" {
		t.Emit(otherEvent(req.Method, params))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notification(n, p.Notification, t.Emit)
}

func (c *droidConversation) notification(n droidNotification, raw json.RawMessage, emit func(...Event)) {
	switch n.Type {
	case "tool_call":
		// Sent as the input streams in (first {}), then whole: the last
		// one seen is the call's input.
		if n.ToolUse != nil {
			if tl := c.tools.get(n.ToolUse.ID); tl != nil && !tl.announced {
				tl.name, tl.input = n.ToolUse.Name, n.ToolUse.Input
			}
		}
	case "tool_execution_phase_changed":
		if tl := c.tools.get(n.ToolUseID); tl != nil {
			emit(c.announce(n.ToolUseID, tl)...)
		}
	case "tool_result":
		tl := c.tools.get(n.ToolUseID)
		if tl == nil || tl.done {
			return
		}
		emit(c.announce(n.ToolUseID, tl)...)
		tl.done = true
		emit(Event{Kind: EventToolResult, Tool: &Tool{ID: n.ToolUseID}, Output: clip(droidText(n.Content), maxOutput), IsError: n.IsError})
	case "assistant_text_delta":
		if n.MessageID != c.answerMsg {
			// The answer is the last assistant message, not every "let me
			// look" before a tool call.
			c.answer, c.answerMsg = answerBuf{}, n.MessageID
		}
		c.answer.add(n.TextDelta)
		emit(Event{Kind: EventText, Text: n.TextDelta, Delta: true})
	case "session_token_usage_changed":
		// One per model call.
		if n.TokenUse != nil {
			c.turns++
			c.usageTotal = n.TokenUse.usage()
			c.usage = usageMinus(c.usageTotal, c.usageBase)
		}
	case "agent_turn_completed":
		if c.completed {
			return
		}
		// The turn's own usage and the session's total come with its end
		// too, and they are what counts: Droid 0.225.2 now and then leaves
		// out a turn's session_token_usage_changed (seen on the second
		// turn of a warm agent, about one run in four).
		if n.CumulativeUse != nil && n.CumulativeUse.usage() != (Usage{}) {
			c.usageTotal = n.CumulativeUse.usage()
			c.usage = usageMinus(c.usageTotal, c.usageBase)
		}
		if n.TokenUse != nil && n.TokenUse.usage() != (Usage{}) {
			c.usage = n.TokenUse.usage()
		}
		if c.turns == 0 && c.usage != (Usage{}) {
			c.turns = 1
		}
		if c.usage != (Usage{}) {
			u := c.usage
			emit(Event{Kind: EventUsage, Usage: &u})
		}
		if n.Reason != "" && n.Reason != "completed" && c.failure == nil {
			msg := fmt.Sprintf("droid ended the turn: %s", n.Reason)
			if c.lastError != "" {
				msg += ": " + c.lastError
			}
			c.failure = failure(classifyMessage(msg), clip(msg, 2048))
		}
		c.markEnded()
	case "llm_retry":
		c.retries++
		attempt := n.Attempt
		if attempt == 0 {
			attempt = c.retries
		}
		emit(Event{Kind: EventRetry, Attempt: attempt, Error: clip(n.Reason, 2048)})
	case "error", "session_error", "agent_error":
		msg := droidText(n.Message)
		if msg == "" {
			msg = droidText(n.Error)
		}
		if msg == "" {
			msg = string(raw)
		}
		c.lastError = clip(msg, 2048)
		emit(Event{Kind: EventError, Error: c.lastError})
	case "droid_working_state_changed", "settings_updated", "mcp_status_changed", "permission_resolved", "tool_progress_update",
		"create_message", "assistant_text_complete", "update_message":
		// State, menus and the message log: the events above carry what a
		// run's record needs.
	default:
		emit(otherEvent(n.Type, raw))
	}
}

// announce is the shared announce, with a call Droid left unnamed named
// "tool".
func (c *droidConversation) announce(id string, t *sessionTool) []Event {
	evs := c.tools.announce(id, t)
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
func (c *droidConversation) permission(ctx context.Context, p droidPermission, t turn) any {
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
		if tl := c.tools.get(u.ToolUse.ID); tl != nil {
			if !tl.announced {
				tl.name, tl.input = u.ToolUse.Name, u.ToolUse.Input
			}
			t.Emit(c.announce(u.ToolUse.ID, tl)...)
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

func (c *droidConversation) fail(method string, err error) {
	var je *jsonrpc2.Error
	if !errors.As(err, &je) {
		return
	}
	msg := fmt.Sprintf("droid answered %s with error %d: %s", method, je.Code, strings.TrimSpace(je.Message))
	c.setFailure(failure(classifyMessage(msg), clip(msg, 2048)))
}

func (c *droidConversation) finish(exit ExitInfo) Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := Result{Answer: c.answer.String(), SessionID: c.sessionID, Turns: c.turns, ToolCalls: c.tools.calls, Usage: c.usage,
		SessionUsage: totalOf(c.usageTotal)}
	return c.end(res, exit, nil, c.lastError)
}
