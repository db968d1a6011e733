package spawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/agent"
)

// The Agent Client Protocol conversation (protocol version 1), as Gemini
// CLI 0.61.0 (`gemini --acp`) and Copilot CLI 1.0.102 (`copilot --acp`)
// speak it: card is the client. One turn is
//
//	→ initialize {protocolVersion: 1, clientCapabilities: no fs, no terminal}
//	→ session/new {cwd, mcpServers: []}
//	→ session/prompt {sessionId, prompt: [{type: text, text}]}
//	← session/update notifications while the turn runs
//	← session/request_permission requests, answered with one of the
//	  options the agent offers (picked by kind, since the ids differ:
//	  Gemini proceed_once/cancel, Copilot allow_once/reject_once)
//	← the session/prompt result: {stopReason, usage or _meta.quota}
//
// The client declares no file system and no terminal: the agent then
// reads, writes and runs commands itself, inside its own permission
// checks, and asks card only whether it may.

// acpVersion is the protocol version card speaks.
const acpVersion = 1

// acpAuthRequired is ACP's error code for "authenticate first".
const acpAuthRequired = -32000

// acpMaxTools bounds how many tool calls one turn tracks, so an agent that
// invents ids without end cannot grow the conversation's memory.
const acpMaxTools = 10000

// acpDialect is what differs between agents speaking ACP.
type acpDialect struct {
	// toolName names a call for the approver and the events; ACP itself
	// carries no tool name.
	toolName func(c acpToolCall) string
	// exitFailure explains an agent that stopped before its turn ended,
	// from its exit status and stderr; nil when it has nothing to add.
	exitFailure func(exit ExitInfo) *Failure
	// authHint is what to do about an auth failure.
	authHint string
	// notice reads an agent that reports its own API trouble as message
	// text instead of an error (Copilot): a retry it is making, or the
	// error it gave up on. Nil for an agent that answers with errors.
	notice func(text string) (retry bool, failed bool)
}

// acpDialects are the adapters run over ACP (their ask mode).
var acpDialects = map[string]acpDialect{agent.Gemini: geminiACP, agent.Copilot: copilotACP}

type (
	acpInitializeParams struct {
		ProtocolVersion    int           `json:"protocolVersion"`
		ClientCapabilities acpClientCaps `json:"clientCapabilities"`
	}
	acpClientCaps struct {
		FS       acpFSCaps `json:"fs"`
		Terminal bool      `json:"terminal"`
	}
	acpFSCaps struct {
		ReadTextFile  bool `json:"readTextFile"`
		WriteTextFile bool `json:"writeTextFile"`
	}
	acpInitializeResult struct {
		ProtocolVersion   int `json:"protocolVersion"`
		AgentCapabilities struct {
			PromptCapabilities struct {
				Image bool `json:"image"`
			} `json:"promptCapabilities"`
		} `json:"agentCapabilities"`
	}
	acpNewSessionParams struct {
		Cwd        string `json:"cwd"`
		MCPServers []any  `json:"mcpServers"`
	}
	acpNewSessionResult struct {
		SessionID string `json:"sessionId"`
		Models    *struct {
			CurrentModelID string `json:"currentModelId"`
		} `json:"models"`
	}
	acpPromptParams struct {
		SessionID string       `json:"sessionId"`
		Prompt    []acpContent `json:"prompt"`
	}
	// acpContent is a content block: text, or an image whose Data
	// encoding/json writes as the standard base64 ACP expects.
	acpContent struct {
		Type     string `json:"type"`
		Text     string `json:"text,omitempty"`
		MimeType string `json:"mimeType,omitempty"`
		Data     []byte `json:"data,omitempty"`
	}
	acpPromptResult struct {
		StopReason string `json:"stopReason"`
		Usage      *struct {
			InputTokens      int64 `json:"inputTokens"`
			OutputTokens     int64 `json:"outputTokens"`
			CachedReadTokens int64 `json:"cachedReadTokens"`
		} `json:"usage"`
		// Gemini reports tokens in its own _meta.
		Meta *struct {
			Quota *struct {
				TokenCount *struct {
					InputTokens  int64 `json:"input_tokens"`
					OutputTokens int64 `json:"output_tokens"`
				} `json:"token_count"`
			} `json:"quota"`
		} `json:"_meta"`
	}
	acpUpdateParams struct {
		SessionID string          `json:"sessionId"`
		Update    json.RawMessage `json:"update"`
	}
	// acpUpdate is a session/update's update. Content is one content
	// block in a message chunk and a list in a tool call.
	acpUpdate struct {
		SessionUpdate string `json:"sessionUpdate"`
		acpToolCall
	}
	// acpToolCall is a tool call or an update of one; every field but
	// the id is optional in an update.
	acpToolCall struct {
		ToolCallID string          `json:"toolCallId"`
		Title      string          `json:"title"`
		Kind       string          `json:"kind"`
		Status     string          `json:"status"`
		RawInput   json.RawMessage `json:"rawInput"`
		RawOutput  json.RawMessage `json:"rawOutput"`
		Content    json.RawMessage `json:"content"`
		Locations  json.RawMessage `json:"locations"`
	}
	acpPermissionParams struct {
		SessionID string                `json:"sessionId"`
		ToolCall  acpToolCall           `json:"toolCall"`
		Options   []acpPermissionOption `json:"options"`
	}
	acpPermissionOption struct {
		OptionID string `json:"optionId"`
		Name     string `json:"name"`
		Kind     string `json:"kind"`
	}
	acpPermissionResult struct {
		Outcome acpOutcome `json:"outcome"`
	}
	acpOutcome struct {
		Outcome  string `json:"outcome"`
		OptionID string `json:"optionId,omitempty"`
	}
)

// acpConversation is one ACP turn. Its state is touched by the reader
// (session/update, in order) and by each question waiting on the approver.
type acpConversation struct {
	adapter string
	dialect acpDialect

	mu        sync.Mutex
	closing   bool // no new question is taken: the turn is over
	step      string
	sessionID string
	model     string
	answer    answerBuf
	newAnswer bool // a tool call came since the last text: the next text starts the answer again
	fresh     bool // the next agent output starts a model turn
	turns     int
	toolCalls int
	tools     map[string]*acpTool
	usage     Usage
	retries   int
	// lastNotice is the error the agent said it gave up on, as text,
	// while no text has come after it.
	lastNotice string
	completed  bool
	failure    *Failure
}

// acpTool is what the conversation knows of one tool call.
type acpTool struct {
	name      string
	announced bool // its tool_use event was emitted
	done      bool // its tool_result event was emitted
}

func newACPConversation(sp SessionPlan) (conversation, error) {
	d, ok := acpDialects[sp.Adapter]
	if !ok {
		return nil, fmt.Errorf("adapter %q is not run over ACP", sp.Adapter)
	}
	return &acpConversation{adapter: sp.Adapter, dialect: d, fresh: true, tools: map[string]*acpTool{}}, nil
}

// acpHandler serves the agent's messages to card.
type acpHandler func(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request)

func (h acpHandler) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	h(ctx, conn, req)
}

// discardLog keeps jsonrpc2's own complaints (an unmatched response, a
// closed stream) off the daemon's stderr; what matters reaches the run.
type discardLog struct{}

func (discardLog) Printf(string, ...any) {}

func (c *acpConversation) converse(ctx context.Context, t turn) {
	ctx, cancel := context.WithCancel(ctx)
	var asks sync.WaitGroup
	stream := newLineStream(t.Lines, t.Stdin, func(line []byte) { t.Emit(otherEvent("", line)) })
	handler := acpHandler(func(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
		switch req.Method {
		case "session/update":
			// In order, on the reader: the events keep the agent's order,
			// and the prompt's result is read only after every update
			// before it is handled.
			var p acpUpdateParams
			if req.Params != nil && decodeParams(*req.Params, &p) {
				c.update(p.Update, t.Emit)
			}
		case "session/request_permission":
			if req.Notif {
				return
			}
			var p acpPermissionParams
			if req.Params == nil || !decodeParams(*req.Params, &p) {
				_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "card could not read the permission request"})
				return
			}
			c.mu.Lock()
			if c.closing {
				c.mu.Unlock()
				_ = conn.Reply(hctx, req.ID, acpPermissionResult{Outcome: acpOutcome{Outcome: "cancelled"}})
				return
			}
			asks.Add(1)
			c.mu.Unlock()
			// Off the reader: the question waits for a person, and the
			// agent's messages keep coming meanwhile.
			go func() {
				defer asks.Done()
				_ = conn.Reply(ctx, req.ID, c.permission(ctx, p, t))
			}()
		default:
			if !req.Notif {
				_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound,
					Message: "card does not serve " + req.Method + " (it declared no file system and no terminal)"})
			}
		}
	})
	conn := jsonrpc2.NewConn(ctx, stream, handler, jsonrpc2.SetLogger(discardLog{}))
	defer func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		// Questions still waiting end with the turn (the approver
		// answers a cancelled context with a deny).
		cancel()
		asks.Wait()
		conn.Close()
	}()

	var next uint64
	call := func(method string, params, result any) bool {
		c.mu.Lock()
		c.step = method
		c.mu.Unlock()
		next++
		err := conn.Call(ctx, method, params, result, jsonrpc2.PickID(jsonrpc2.ID{Num: next}))
		if err != nil {
			c.fail(method, err)
			return false
		}
		return true
	}

	var ini acpInitializeResult
	if !call("initialize", acpInitializeParams{ProtocolVersion: acpVersion}, &ini) {
		return
	}
	if ini.ProtocolVersion != acpVersion {
		c.setFailure(failure(KindBadOutput, fmt.Sprintf("%s speaks ACP version %d; card speaks version %d", c.adapter, ini.ProtocolVersion, acpVersion)))
		return
	}
	if len(t.Images) > 0 && !ini.AgentCapabilities.PromptCapabilities.Image {
		// ACP forbids an image block to an agent that did not declare
		// images; sending none would run the task without what it shows.
		c.setFailure(failure(KindBadInput, fmt.Sprintf("%s declared no image support over ACP (promptCapabilities.image), and the request has %d attachment(s)", c.adapter, len(t.Images))))
		return
	}
	var sess acpNewSessionResult
	if !call("session/new", acpNewSessionParams{Cwd: t.Cwd, MCPServers: []any{}}, &sess) {
		return
	}
	c.mu.Lock()
	c.sessionID = sess.SessionID
	if sess.Models != nil {
		c.model = sess.Models.CurrentModelID
	}
	t.Emit(Event{Kind: EventSession, SessionID: c.sessionID, Model: c.model})
	c.mu.Unlock()

	var res acpPromptResult
	if !call("session/prompt", acpPromptParams{SessionID: sess.SessionID, Prompt: acpPrompt(t.Prompt, t.Images)}, &res) {
		return
	}
	c.endTurn(res, t.Emit)
}

// acpPrompt is the prompt's content: the images first, as card's other
// image paths send them, then the text.
func acpPrompt(text string, images []Image) []acpContent {
	blocks := make([]acpContent, 0, len(images)+1)
	for _, img := range images {
		blocks = append(blocks, acpContent{Type: "image", MimeType: img.MIME, Data: img.Data})
	}
	return append(blocks, acpContent{Type: "text", Text: text})
}

// endTurn records the prompt's result: the turn is over.
func (c *acpConversation) endTurn(res acpPromptResult, emit func(...Event)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.completed = true
	if res.Usage != nil {
		c.usage = Usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CachedInputTokens: res.Usage.CachedReadTokens}
	} else if m := res.Meta; m != nil && m.Quota != nil && m.Quota.TokenCount != nil {
		c.usage = Usage{InputTokens: m.Quota.TokenCount.InputTokens, OutputTokens: m.Quota.TokenCount.OutputTokens}
	}
	if c.usage != (Usage{}) {
		u := c.usage
		emit(Event{Kind: EventUsage, Usage: &u})
	}
	if c.lastNotice != "" {
		// The agent gave up on an API error and said so as text, then
		// ended the turn as if it had answered.
		c.failure = c.classified(c.lastNotice, 0)
		return
	}
	switch res.StopReason {
	case "max_turn_requests":
		c.failure = failure(KindMaxTurns, c.adapter+" ended the turn: it reached its limit of model requests for one prompt")
	case "refusal":
		c.failure = failure(KindAPI, c.adapter+" ended the turn: the agent refused to continue")
	case "cancelled":
		c.failure = failure(KindCancelled, c.adapter+" ended the turn as cancelled")
	}
}

// decodeParams reads a message's params leniently (a field of an
// unexpected type costs that field, not the message).
func decodeParams(raw json.RawMessage, v any) bool {
	err := decodeLine(raw, v)
	return err == nil || isTypeError(err)
}

// fail records why a call did not get its answer, when the agent gave a
// reason: an error response. A closed stream (the agent died) or an ended
// context is the runner's to explain.
func (c *acpConversation) fail(method string, err error) {
	var je *jsonrpc2.Error
	if !errors.As(err, &je) {
		return
	}
	msg := strings.TrimSpace(je.Message)
	if je.Data != nil && len(*je.Data) > 0 && string(*je.Data) != "null" {
		var s string
		if json.Unmarshal(*je.Data, &s) != nil {
			s = string(*je.Data)
		}
		msg += ": " + s
	}
	c.setFailure(c.classified(fmt.Sprintf("%s answered %s with error %d: %s", c.adapter, method, je.Code, msg), je.Code))
}

// classified is the failure for an agent's error message and JSON-RPC
// code. Gemini answers with the API's HTTP status as the code; -32000 is
// ACP's "authentication required", unless the message says otherwise.
func (c *acpConversation) classified(msg string, code int64) *Failure {
	kind := classifyMessage(msg)
	switch {
	case code == 401 || code == 403:
		kind = KindAuth
	case code == 429:
		kind = KindRateLimit
	case code == acpAuthRequired && kind == KindAPI:
		kind = KindAuth
	}
	if kind == KindAuth && c.dialect.authHint != "" {
		msg += " — " + c.dialect.authHint
	}
	return failure(kind, clip(msg, 2048))
}

func (c *acpConversation) setFailure(f *Failure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failure == nil {
		c.failure = f
	}
}

// update maps one session/update onto events, emitted under the lock so
// they keep their order with the tool_use a question may emit.
func (c *acpConversation) update(raw json.RawMessage, emit func(...Event)) {
	var u acpUpdate
	if !decodeParams(raw, &u) || u.SessionUpdate == "" {
		emit(otherEvent("", raw))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch u.SessionUpdate {
	case "agent_message_chunk":
		var b acpContent
		if !decodeParams(u.Content, &b) || b.Type != "text" {
			emit(otherEvent(u.SessionUpdate, raw))
			return
		}
		if c.dialect.notice != nil {
			switch retry, failed := c.dialect.notice(b.Text); {
			case retry:
				c.retries++
				emit(Event{Kind: EventRetry, Attempt: c.retries, Error: clip(strings.TrimSpace(b.Text), 2048)})
				return
			case failed:
				c.lastNotice = clip(strings.TrimSpace(b.Text), 2048)
				emit(Event{Kind: EventError, Error: c.lastNotice})
				return
			}
		}
		c.lastNotice = ""
		c.agentOutput()
		if c.newAnswer {
			// The answer is what the agent said last, not every "let me
			// look" before a tool call.
			c.answer = answerBuf{}
			c.newAnswer = false
		}
		c.answer.add(b.Text)
		emit(Event{Kind: EventText, Text: b.Text, Delta: true})
	case "agent_thought_chunk":
		c.agentOutput()
		emit(otherEvent(u.SessionUpdate, raw))
	case "tool_call":
		c.lastNotice = ""
		c.agentOutput()
		emit(c.announce(u.acpToolCall)...)
		emit(c.result(u.acpToolCall)...)
	case "tool_call_update":
		emit(c.announce(u.acpToolCall)...)
		emit(c.result(u.acpToolCall)...)
	case "user_message_chunk", "available_commands_update", "current_mode_update", "config_option_update",
		"session_info_update", "usage_update":
		// The prompt's echo and the agent's menus and meters: nothing a
		// run's record needs.
	default:
		// plan and whatever comes next, as the agent sent it.
		emit(otherEvent(u.SessionUpdate, raw))
	}
}

// agentOutput counts a model turn at the first output after the prompt
// or after a tool's result.
func (c *acpConversation) agentOutput() {
	if c.fresh {
		c.turns++
		c.fresh = false
	}
}

// tool is the record of a tool call, nil past acpMaxTools.
func (c *acpConversation) tool(id string) *acpTool {
	if t, ok := c.tools[id]; ok {
		return t
	}
	if len(c.tools) >= acpMaxTools {
		return nil
	}
	t := &acpTool{}
	c.tools[id] = t
	return t
}

// announce is the tool_use event of a call not announced yet.
func (c *acpConversation) announce(call acpToolCall) []Event {
	t := c.tool(call.ToolCallID)
	if t == nil || t.announced {
		return nil
	}
	t.announced = true
	t.name = c.nameOf(call)
	c.toolCalls++
	c.newAnswer = true
	return []Event{{Kind: EventToolUse, Tool: &Tool{Name: t.name, ID: call.ToolCallID, Input: validRaw(acpInput(call))}}}
}

// result is the tool_result event of a call that has just finished.
func (c *acpConversation) result(call acpToolCall) []Event {
	if call.Status != "completed" && call.Status != "failed" {
		return nil
	}
	t := c.tool(call.ToolCallID)
	if t != nil {
		if t.done {
			return nil
		}
		t.done = true
	}
	c.fresh = true
	return []Event{{Kind: EventToolResult, Tool: &Tool{ID: call.ToolCallID}, Output: clip(acpOutput(call), maxOutput), IsError: call.Status == "failed"}}
}

// nameOf names a call by the dialect, falling back to the name it was
// announced with (an update need not repeat the kind).
func (c *acpConversation) nameOf(call acpToolCall) string {
	if n := c.dialect.toolName(call); n != "" {
		return n
	}
	if t, ok := c.tools[call.ToolCallID]; ok && t.name != "" {
		return t.name
	}
	return "tool"
}

// permission puts one session/request_permission to the approver and
// picks the agent's option for the decision.
func (c *acpConversation) permission(ctx context.Context, p acpPermissionParams, t turn) acpPermissionResult {
	call := p.ToolCall
	input := acpInput(call)
	c.mu.Lock()
	name := c.nameOf(call)
	// Gemini asks before it announces the call: the question must not
	// be about a call the run's events never showed.
	t.Emit(c.announce(call)...)
	c.mu.Unlock()

	d := Decision{Message: "card denied this tool call: the run has no approver"}
	if t.Approver != nil {
		d = t.Approver.Approve(ctx, Question{Tool: name, Input: input, ToolUseID: call.ToolCallID, Summary: acpSummary(name, call, input)})
	}
	return acpAnswer(p.Options, d.Allow)
}

// acpAnswer is the outcome for a decision: the agent's allow-once option
// for an allow, its reject-once option for a deny. An allow_always of the
// client is still answered allow-once: card's broker remembers it per tool
// name and answers the agent's next question by rule, so every call stays
// in the run's record, and what "always" covers is card's rule, not the
// agent's. With no fitting option the question is cancelled, which ACP
// agents read as a denial (checked with Gemini and Copilot).
func acpAnswer(opts []acpPermissionOption, allow bool) acpPermissionResult {
	want := "reject_once"
	if allow {
		want = "allow_once"
	}
	for _, o := range opts {
		if o.Kind == want && o.OptionID != "" {
			return acpPermissionResult{Outcome: acpOutcome{Outcome: "selected", OptionID: o.OptionID}}
		}
	}
	return acpPermissionResult{Outcome: acpOutcome{Outcome: "cancelled"}}
}

// acpInput is a call's input as card shows it: the agent's rawInput when
// it sends one (Copilot), else what the call says of itself (Gemini sends
// a title, a kind, locations and content such as a diff).
func acpInput(call acpToolCall) json.RawMessage {
	if in := call.RawInput; len(in) > 0 && in[0] == '{' && json.Valid(in) {
		return in
	}
	desc := map[string]any{}
	if call.Title != "" {
		desc["title"] = call.Title
	}
	if call.Kind != "" {
		desc["kind"] = call.Kind
	}
	for k, v := range map[string]json.RawMessage{"locations": call.Locations, "content": call.Content} {
		if len(v) > 0 && len(v) <= maxRaw && json.Valid(v) && string(v) != "[]" && string(v) != "null" {
			desc[k] = v
		}
	}
	b, _ := json.Marshal(desc)
	return b
}

// acpSummary is the question's one line: from the input's command, path or
// URL, else from the call's title.
func acpSummary(name string, call acpToolCall, input json.RawMessage) string {
	s := summarize(name, input)
	if s == name && strings.TrimSpace(call.Title) != "" {
		s = oneLine(name + ": " + call.Title)
	}
	return s
}

// acpOutput is a finished call's output as text: its text content, else
// what its rawOutput says.
func acpOutput(call acpToolCall) string {
	var blocks []struct {
		Type    string `json:"type"`
		Path    string `json:"path"`
		Content struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	var parts []string
	if decodeParams(call.Content, &blocks) {
		for _, b := range blocks {
			switch {
			case b.Type == "content" && b.Content.Type == "text":
				parts = append(parts, b.Content.Text)
			case b.Type == "diff" && b.Path != "":
				parts = append(parts, "changed "+b.Path)
			}
		}
	}
	if out := strings.TrimSpace(strings.Join(parts, "\n")); out != "" {
		return out
	}
	var s string
	if json.Unmarshal(call.RawOutput, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
		Message string `json:"message"`
	}
	if decodeParams(call.RawOutput, &o) {
		if o.Content != "" {
			return o.Content
		}
		if o.Message != "" {
			return o.Message
		}
	}
	return ""
}

func (c *acpConversation) finish(exit ExitInfo) Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := Result{Answer: c.answer.String(), SessionID: c.sessionID, Turns: c.turns, ToolCalls: c.toolCalls, Usage: c.usage}
	switch {
	case c.failure != nil:
		res.IsError, res.Error = true, c.failure
	case c.completed:
	default:
		f := c.dialect.exitFailure(exit)
		if f == nil {
			f = c.stopped(exit)
		}
		res.IsError, res.Error = true, f
	}
	return res
}

// stopped explains an agent whose stdout ended before the turn did.
func (c *acpConversation) stopped(exit ExitInfo) *Failure {
	step := c.step
	if step == "" {
		step = "initialize"
	}
	var msg string
	kind := KindExit
	switch {
	case exit.Code > 0:
		msg = fmt.Sprintf("%s exited with status %d before it answered %s", c.adapter, exit.Code, step)
	case exit.Code == 0:
		kind = KindBadOutput
		msg = fmt.Sprintf("%s exited 0 before it answered %s; its ACP output was cut short", c.adapter, step)
	default:
		msg = fmt.Sprintf("%s was killed before it answered %s", c.adapter, step)
	}
	if l := lastLine(exit.StderrTail); l != "" {
		msg += ": " + l
	}
	return failure(kind, clip(msg, 2048))
}

// idToolName reads the tool name Gemini puts in front of its call ids
// ("run_shell_command__run_shell_command_1796082544230_0").
var idToolName = regexp.MustCompile(`^([a-z][a-z0-9_]*)__`)
