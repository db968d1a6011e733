package spawn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sourcegraph/jsonrpc2"
)

// ProtocolCodexApp is Codex's app-server protocol (JSON-RPC 2.0, one
// message per line, "jsonrpc" omitted in what the server sends).
const ProtocolCodexApp Protocol = "codex-app-server"

// The app-server conversation, as `codex app-server` 0.171.0 speaks it;
// card is the client. One turn is
//
//	→ initialize {clientInfo}          → initialized (a notification)
//	→ thread/start {cwd, approvalPolicy: untrusted, sandbox: workspace-write,
//	  approvalsReviewer: user, ephemeral: false}, or thread/resume
//	  {threadId, cwd, approvalPolicy, sandbox, approvalsReviewer} with the
//	  same three to continue a saved thread
//	→ turn/start {threadId, input: [images…, text]}
//	← item/started, item/completed, item/agentMessage/delta, … while the
//	  turn runs
//	← item/commandExecution/requestApproval and
//	  item/fileChange/requestApproval, answered {decision: accept|decline}
//	← turn/completed {turn: {status, error}}
//
// A deny is "decline": Codex then tells the model the command was rejected
// and the turn goes on. "cancel" would end the turn without telling the
// model, and an error response reads as "approval request failed".

// codexAskSandbox is the sandbox an ask-mode thread runs in. Under
// approvalPolicy untrusted Codex asks before every command, and runs the
// approved one in this sandbox. read-only would make an approved write
// fail (seen with 0.171.0: "Read-only file system" after accept, though not
// on every machine state); workspace-write lets it write the working dir
// and nothing else, with no network, which is what an editor's user means
// by "yes, run that here".
const codexAskSandbox = "workspace-write"

// codexMaxItems bounds how many items one turn tracks.
const codexMaxItems = 10000

// codexAppConversation is one app-server turn.
type codexAppConversation struct {
	rpcTurn

	threadID string
	turnID   string // the running turn's id, from turn/start
	resume   string // the thread handshake resumes instead of a new one
	// thread is the thread/start (or thread/resume) of a one-shot run: the
	// ask thread of its plan.
	thread codexAppThreadStart
	// usageTotal is the thread's total as the server reports it;
	// usageBase, for a warm agent's turn, the total before it.
	usageTotal, usageBase Usage
	model                 string
	answer                string
	deltas                map[string]bool // agent messages already streamed as deltas
	tools                 sessionTools
	turns                 int
	retries               int
	usage                 Usage
	lastError             string
}

func newCodexAppConversation(sp SessionPlan) (conversation, error) {
	th := codexAskThread("", false)
	if sp.thread != nil {
		th = *sp.thread
	}
	return &codexAppConversation{rpcTurn: newRPCTurn(sp.Adapter, "", rpcWords), deltas: map[string]bool{}, thread: th, resume: sp.resume,
		usageBase: resumedBase(sp)}, nil
}

func (c *codexAppConversation) converse(ctx context.Context, t turn) {
	stream := newLineStream(t.Lines, t.Stdin, func(line []byte) { t.Emit(otherEvent("", line)) })
	c.open(ctx, stream, func(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
		c.handle(hctx, conn, req, t)
	})
	defer c.close()
	th := c.thread
	th.Cwd = t.Cwd
	if !c.handshake(t, th) {
		return
	}
	if !c.startTurn(t) {
		return
	}
	// The turn's end is a notification, not turn/start's answer.
	c.awaitEnd("the turn (turn/completed)")
}

// handshake is the app-server's opening: initialize, initialized, and the
// thread start; false when the server did not get that far. A warm agent
// makes it once, for every turn after.
func (c *codexAppConversation) handshake(t turn, start codexAppThreadStart) bool {
	var ini json.RawMessage
	if !c.call("initialize", map[string]any{"clientInfo": map[string]any{"name": "card", "title": "card", "version": "1"}, "capabilities": nil}, &ini, c.fail) {
		return false
	}
	if err := c.conn.Notify(c.ctx, "initialized", nil); err != nil {
		return false
	}
	var th codexAppThreadResult
	if c.resume != "" {
		// Continuing a thread the conversation has (a cold turn, or a
		// warm agent's opening), with the mode's sandbox, approval policy
		// and reviewer as a new thread gets them.
		if !c.call("thread/resume", codexAppThreadResume{ThreadID: c.resume, Cwd: start.Cwd, ApprovalPolicy: start.ApprovalPolicy,
			ApprovalsReviewer: start.ApprovalsReviewer, Sandbox: start.Sandbox, ExcludeTurns: true}, &th, c.fail) {
			return false
		}
	} else if !c.call("thread/start", start, &th, c.fail) {
		return false
	}
	c.mu.Lock()
	c.threadID, c.model = th.Thread.ID, th.Model
	t.Emit(Event{Kind: EventSession, SessionID: c.threadID, Model: c.model})
	c.mu.Unlock()
	return true
}

// startTurn sends turn/start on the thread with the turn's prompt and
// images, and records the turn's id.
func (c *codexAppConversation) startTurn(t turn) bool {
	input := make([]codexAppInput, 0, len(t.Images)+1)
	for _, img := range t.Images {
		input = append(input, codexAppInput{Type: "image", URL: "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)})
	}
	input = append(input, codexAppInput{Type: "text", Text: t.Prompt, TextElements: []any{}})
	c.mu.Lock()
	thread := c.threadID
	c.mu.Unlock()
	var started struct {
		Turn codexAppTurn `json:"turn"`
	}
	if !c.call("turn/start", codexAppTurnStart{ThreadID: thread, Input: input}, &lenientResult{&started}, c.fail) {
		return false
	}
	c.mu.Lock()
	c.turnID = started.Turn.ID
	c.mu.Unlock()
	return true
}

// handle serves one message of the server, on the reader.
func (c *codexAppConversation) handle(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request, t turn) {
	var params json.RawMessage
	if req.Params != nil {
		params = *req.Params
	}
	if !req.Notif {
		switch req.Method {
		case "item/commandExecution/requestApproval", "item/fileChange/requestApproval":
			// A question card cannot read is declined, not failed: an
			// error response would read as "approval request failed".
			c.ask(hctx, req.ID, codexAppDecision{Decision: "decline"}, func(ctx context.Context) any {
				return c.approval(ctx, req.Method, params, t)
			})
		default:
			// Requests for input, elicitations, new permissions: card asks
			// allow or deny about tool calls and nothing else.
			_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "card does not serve " + req.Method})
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch req.Method {
	case "item/started", "item/completed":
		var p codexAppItemParams
		if !decodeParams(params, &p) {
			t.Emit(otherEvent(req.Method, params))
			return
		}
		c.item(req.Method == "item/completed", p.Item, t.Emit)
	case "item/agentMessage/delta":
		var d codexAppDelta
		if decodeParams(params, &d) && d.Delta != "" {
			if len(c.deltas) < codexMaxItems {
				c.deltas[d.ItemID] = true
			}
			t.Emit(Event{Kind: EventText, Text: d.Delta, Delta: true})
		}
	case "thread/tokenUsage/updated":
		// One per model call.
		var u codexAppUsage
		if decodeParams(params, &u) {
			c.turns++
			tot := u.TokenUsage.Total
			c.usageTotal = Usage{InputTokens: tot.InputTokens, OutputTokens: tot.OutputTokens, CachedInputTokens: tot.CachedInputTokens}
			c.usage = usageMinus(c.usageTotal, c.usageBase)
		}
	case "turn/completed":
		var p struct {
			Turn codexAppTurn `json:"turn"`
		}
		_ = decodeParams(params, &p)
		c.endTurn(p.Turn, t.Emit)
	case "error":
		var e codexAppError
		_ = decodeParams(params, &e)
		msg := clip(strings.TrimSpace(e.Error.Message), 2048)
		if e.WillRetry {
			c.retries++
			t.Emit(Event{Kind: EventRetry, Attempt: c.retries, Error: msg})
			return
		}
		c.lastError = msg
		t.Emit(Event{Kind: EventError, Error: msg})
	case "account/rateLimits/updated":
		if ev, ok := codexRateLimitEvent(params); ok {
			t.Emit(ev)
		}
	case "warning", "configWarning", "deprecationNotice", "guardianWarning":
		// Warnings the turn survives ("Model metadata for `gpt-5` not
		// found"): a warning event, no failure.
		var w codexAppWarning
		_ = decodeParams(params, &w)
		msg := w.Message
		if msg == "" {
			msg = w.Summary
		}
		if msg == "" {
			t.Emit(otherEvent(req.Method, params))
			return
		}
		t.Emit(Event{Kind: EventWarning, Text: clip(msg, 2048)})
	case "item/commandExecution/outputDelta", "item/reasoning/summaryTextDelta", "item/reasoning/summaryPartAdded", "item/reasoning/textDelta",
		"thread/started", "thread/status/changed", "turn/started", "serverRequest/resolved",
		"remoteControl/status/changed", "mcpServer/startupStatus/updated", "turn/diff/updated", "item/fileChange/outputDelta":
		// Progress and meters: the items carry what a run's record needs.
	default:
		t.Emit(otherEvent(req.Method, params))
	}
}

// item maps one item/started or item/completed.
func (c *codexAppConversation) item(done bool, raw json.RawMessage, emit func(...Event)) {
	var it codexAppItem
	if !decodeParams(raw, &it) || it.Type == "" {
		emit(otherEvent("item", raw))
		return
	}
	switch it.Type {
	case "userMessage":
	case "agentMessage":
		if !done {
			return
		}
		c.answer = clip(it.Text, maxAnswer)
		if !c.deltas[it.ID] && it.Text != "" {
			emit(Event{Kind: EventText, Text: it.Text})
		}
	case "commandExecution", "fileChange", "mcpToolCall", "webSearch", "dynamicToolCall":
		tl := c.tools.get(it.ID)
		if tl == nil {
			return
		}
		if !tl.announced {
			tl.name, tl.input = codexAppToolOf(it)
		}
		emit(c.tools.announce(it.ID, tl)...)
		if done && !tl.done {
			tl.done = true
			emit(Event{Kind: EventToolResult, Tool: &Tool{ID: it.ID}, Output: clip(codexAppOutput(it), maxOutput), IsError: codexAppFailed(it)})
		}
	default:
		// reasoning, plan, and what comes next, once whole.
		if done {
			emit(otherEvent(it.Type, raw))
		}
	}
}

// codexAppToolOf names an item as codex exec's parser does
// (command_execution, file_change, server.tool, web_search) and gives its
// input.
func codexAppToolOf(it codexAppItem) (string, json.RawMessage) {
	var v any
	name := it.Type
	switch it.Type {
	case "commandExecution":
		name = "command_execution"
		v = map[string]string{"command": it.Command, "cwd": it.Cwd}
	case "fileChange":
		name = "file_change"
		return name, codexAppChanges(it.Changes)
	case "mcpToolCall":
		return it.Server + "." + it.Tool, it.Arguments
	case "webSearch":
		name = "web_search"
		v = map[string]string{"query": it.Query}
	case "dynamicToolCall":
		return it.Tool, it.Arguments
	}
	b, _ := json.Marshal(v)
	return name, b
}

// codexAppChanges is a file change's input: {changes: [{path, kind, diff}]}.
func codexAppChanges(changes json.RawMessage) json.RawMessage {
	if len(changes) == 0 || !json.Valid(changes) {
		changes = json.RawMessage("[]")
	}
	b, _ := json.Marshal(map[string]json.RawMessage{"changes": changes})
	return b
}

func codexAppOutput(it codexAppItem) string {
	switch {
	case it.Error != nil && it.Error.Message != "":
		return it.Error.Message
	case it.AggregatedOutput != nil:
		return *it.AggregatedOutput
	case len(it.Result) > 0 && string(it.Result) != "null":
		return string(it.Result)
	case it.Type == "fileChange":
		var ch []struct {
			Path string `json:"path"`
		}
		_ = json.Unmarshal(it.Changes, &ch)
		var paths []string
		for _, p := range ch {
			paths = append(paths, p.Path)
		}
		if len(paths) > 0 {
			return it.Status + " " + strings.Join(paths, ", ")
		}
	case it.Status == "declined":
		return "declined"
	}
	return ""
}

func codexAppFailed(it codexAppItem) bool {
	return it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0) || (it.Error != nil && it.Error.Message != "")
}

// approval puts one requestApproval to the approver.
func (c *codexAppConversation) approval(ctx context.Context, method string, params json.RawMessage, t turn) any {
	var q Question
	switch method {
	case "item/commandExecution/requestApproval":
		var p codexAppCommandApproval
		if !decodeParams(params, &p) {
			return codexAppDecision{Decision: "decline"}
		}
		in := map[string]string{"command": p.Command, "cwd": p.Cwd}
		if p.Reason != "" {
			in["reason"] = p.Reason
		}
		input, _ := json.Marshal(in)
		q = Question{Tool: "command_execution", Input: input, ToolUseID: p.ItemID}
		// The summary shows what the model asked to run, not the shell
		// wrapper Codex puts around it.
		var cmds []string
		for _, a := range p.CommandActions {
			if a.Command != "" {
				cmds = append(cmds, a.Command)
			}
		}
		q.Summary = summarize(q.Tool, input)
		if len(cmds) > 0 {
			q.Summary = oneLine(q.Tool + ": " + strings.Join(cmds, "; "))
		}
		c.mu.Lock()
		if tl := c.tools.get(p.ItemID); tl != nil && !tl.announced {
			tl.name, tl.input = q.Tool, input
			t.Emit(c.tools.announce(p.ItemID, tl)...)
		}
		c.mu.Unlock()
	case "item/fileChange/requestApproval":
		var p codexAppFileApproval
		if !decodeParams(params, &p) {
			return codexAppDecision{Decision: "decline"}
		}
		// The change itself is in the item/started that came before,
		// under the same item id.
		c.mu.Lock()
		input := codexAppChanges(nil)
		if tl := c.tools.get(p.ItemID); tl != nil {
			if tl.input != nil {
				input = tl.input
			} else {
				tl.name, tl.input = "file_change", input
			}
			t.Emit(c.tools.announce(p.ItemID, tl)...)
		}
		c.mu.Unlock()
		if p.Reason != "" || p.GrantRoot != "" {
			var m map[string]any
			_ = json.Unmarshal(input, &m)
			if p.Reason != "" {
				m["reason"] = p.Reason
			}
			if p.GrantRoot != "" {
				m["grant_root"] = p.GrantRoot
			}
			input, _ = json.Marshal(m)
		}
		q = Question{Tool: "file_change", Input: input, ToolUseID: p.ItemID, Summary: codexAppChangeSummary(input)}
	}
	d := t.approve(ctx, q)
	if d.Allow {
		return codexAppDecision{Decision: "accept"}
	}
	return codexAppDecision{Decision: "decline"}
}

// codexAppChangeSummary is "file_change: add a.txt, update b.go".
func codexAppChangeSummary(input json.RawMessage) string {
	var in struct {
		Changes []struct {
			Path string `json:"path"`
			Kind struct {
				Type string `json:"type"`
			} `json:"kind"`
		} `json:"changes"`
	}
	_ = json.Unmarshal(input, &in)
	var parts []string
	for _, ch := range in.Changes {
		parts = append(parts, strings.TrimSpace(ch.Kind.Type+" "+ch.Path))
	}
	if len(parts) == 0 {
		return "file_change"
	}
	return oneLine("file_change: " + strings.Join(parts, ", "))
}

// endTurn records turn/completed: the turn is over.
func (c *codexAppConversation) endTurn(turn codexAppTurn, emit func(...Event)) {
	if c.completed {
		return
	}
	if c.usage != (Usage{}) {
		u := c.usage
		emit(Event{Kind: EventUsage, Usage: &u})
	}
	switch turn.Status {
	case "completed":
	case "interrupted":
		if c.failure == nil {
			c.failure = failure(KindCancelled, c.adapter+" interrupted the turn")
		}
	default:
		msg := c.lastError
		if turn.Error != nil && turn.Error.Message != "" {
			msg = turn.Error.Message
		}
		if msg == "" {
			msg = fmt.Sprintf("%s ended the turn with status %q", c.adapter, turn.Status)
		}
		if c.failure == nil {
			c.failure = codexAppFailure(msg)
		}
	}
	c.markEnded()
}

// codexAppFailure classifies an error the server reported.
func codexAppFailure(msg string) *Failure {
	kind := classifyMessage(msg)
	if kind == KindAuth {
		msg += " — sign in with `codex login` or give the provider's key to the daemon's environment"
	}
	return failure(kind, clip(msg, 2048))
}

// fail records an error response to one of card's calls.
func (c *codexAppConversation) fail(method string, err error) {
	var je *jsonrpc2.Error
	if !errors.As(err, &je) {
		return
	}
	c.setFailure(codexAppFailure(fmt.Sprintf("%s answered %s with error %d: %s", c.adapter, method, je.Code, strings.TrimSpace(je.Message))))
}

func (c *codexAppConversation) finish(exit ExitInfo) Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := Result{Answer: c.answer, SessionID: c.threadID, Turns: c.turns, ToolCalls: c.tools.calls, Usage: c.usage,
		SessionUsage: totalOf(c.usageTotal)}
	return c.end(res, exit, codexAppExit, c.lastError)
}

// codexAppExit reads a server that stopped before its turn ended: one
// that is not signed in says so on stderr.
func codexAppExit(exit ExitInfo) *Failure {
	if strings.Contains(exit.StderrTail, "Not logged in") {
		return failure(KindAuth, "codex is not logged in — run `codex login`")
	}
	return nil
}
