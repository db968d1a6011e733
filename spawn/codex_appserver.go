package spawn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// ProtocolCodexApp is Codex's app-server protocol (JSON-RPC 2.0, one
// message per line, "jsonrpc" omitted in what the server sends), as `codex
// app-server` 0.171.0 speaks it; card is the client. The agent's opening,
// then one turn after another on its thread:
//
//	→ initialize {clientInfo}          → initialized (a notification)
//	→ thread/start {cwd, approvalPolicy, sandbox, approvalsReviewer,
//	  ephemeral}, or thread/resume {threadId, cwd, approvalPolicy, sandbox,
//	  approvalsReviewer} with the same to continue a saved thread
//	→ turn/start {threadId, input: [images…, text]}
//	← item/started, item/completed, item/agentMessage/delta, … while the
//	  turn runs
//	← item/commandExecution/requestApproval and
//	  item/fileChange/requestApproval, answered {decision: accept|decline}
//	← turn/completed {turn: {status, error}}
//	→ turn/interrupt stops a running turn (the server ends it with
//	  turn/completed, status "interrupted", and waits for the next), and
//	  turn/steer adds input to it
//
// A deny is "decline": Codex then tells the model the command was rejected
// and the turn goes on. "cancel" would end the turn without telling the
// model, and an error response reads as "approval request failed".
const ProtocolCodexApp Protocol = "codex-app-server"

// The app-server messages card sends and reads, as Codex 0.171.0 speaks
// them; fields card does not use are left out and ignored on read.

type (
	codexAppThreadStart struct {
		Cwd               string `json:"cwd"`
		ApprovalPolicy    string `json:"approvalPolicy"`
		ApprovalsReviewer string `json:"approvalsReviewer,omitempty"`
		Sandbox           string `json:"sandbox"`
		Ephemeral         bool   `json:"ephemeral"`
	}
	codexAppThreadResume struct {
		ThreadID          string `json:"threadId"`
		Cwd               string `json:"cwd"`
		ApprovalPolicy    string `json:"approvalPolicy"`
		ApprovalsReviewer string `json:"approvalsReviewer,omitempty"`
		Sandbox           string `json:"sandbox"`
		// ExcludeTurns leaves the thread's past turns out of the answer:
		// card reads only the thread's id and model from it, and without
		// it Codex 0.171.0 warns that full-history hydration is deprecated.
		ExcludeTurns bool `json:"excludeTurns"`
	}
	codexAppThreadResult struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
		Model string `json:"model"`
	}
	codexAppInput struct {
		Type         string `json:"type"`
		Text         string `json:"text,omitempty"`
		TextElements []any  `json:"text_elements,omitempty"`
		URL          string `json:"url,omitempty"`
	}
	codexAppTurnStart struct {
		ThreadID string          `json:"threadId"`
		Input    []codexAppInput `json:"input"`
	}
	codexAppTurn struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  *struct {
			Message           string `json:"message"`
			AdditionalDetails string `json:"additionalDetails"`
		} `json:"error"`
	}
	codexAppItemParams struct {
		Item json.RawMessage `json:"item"`
	}
	// codexAppItem is a ThreadItem: the fields of the kinds card maps.
	codexAppItem struct {
		Type             string          `json:"type"`
		ID               string          `json:"id"`
		Text             string          `json:"text"`
		Command          string          `json:"command"`
		Cwd              string          `json:"cwd"`
		Status           string          `json:"status"`
		AggregatedOutput *string         `json:"aggregatedOutput"`
		ExitCode         *int            `json:"exitCode"`
		Changes          json.RawMessage `json:"changes"`
		Server           string          `json:"server"`
		Tool             string          `json:"tool"`
		Arguments        json.RawMessage `json:"arguments"`
		Result           json.RawMessage `json:"result"`
		Error            *struct {
			Message string `json:"message"`
		} `json:"error"`
		Query string `json:"query"`
	}
	codexAppDelta struct {
		ItemID string `json:"itemId"`
		Delta  string `json:"delta"`
	}
	codexAppCommandApproval struct {
		ItemID         string `json:"itemId"`
		Command        string `json:"command"`
		Cwd            string `json:"cwd"`
		Reason         string `json:"reason"`
		CommandActions []struct {
			Command string `json:"command"`
		} `json:"commandActions"`
	}
	codexAppFileApproval struct {
		ItemID    string `json:"itemId"`
		Reason    string `json:"reason"`
		GrantRoot string `json:"grantRoot"`
	}
	codexAppDecision struct {
		Decision string `json:"decision"`
	}
	codexAppUsage struct {
		TokenUsage struct {
			Total struct {
				InputTokens       int64 `json:"inputTokens"`
				CachedInputTokens int64 `json:"cachedInputTokens"`
				OutputTokens      int64 `json:"outputTokens"`
			} `json:"total"`
		} `json:"tokenUsage"`
	}
	codexAppError struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		WillRetry bool `json:"willRetry"`
	}
	codexAppWarning struct {
		Message string `json:"message"`
		Summary string `json:"summary"`
	}
)

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

// codexApp is card's side of Codex's app-server.
type codexApp struct {
	rpcClient
	// thread is the thread/start (or thread/resume) of the opening: the
	// plan's mode's, or the ask thread.
	thread codexAppThreadStart
	resume string // the thread the opening resumes, "" for a new one

	of *turn
	st codexTurn
}

// codexTurn is what one turn reads of the server.
type codexTurn struct {
	reading
	turnID string          // the running turn's id, from turn/start
	ended  bool            // turn/completed came
	deltas map[string]bool // agent messages already streamed as deltas
}

func newCodexApp(plan Plan) protocol {
	c := &codexApp{rpcClient: rpcClient{adapter: agent.Codex, classify: codexAppFailure}, thread: codexAskThread(plan.Dir, false)}
	if sp := plan.Session; sp != nil {
		if sp.thread != nil {
			c.thread = *sp.thread
		}
		c.resume = sp.resume
	}
	c.thread.Cwd = plan.Dir
	if c.resume != "" {
		// The resumed thread's totals count its earlier turns.
		c.used = plan.UsageBase
	}
	return c
}

func (c *codexApp) open(a *runner) { c.rpcClient.open(a, c.handle, nil) }

// turnOf is the turn's reading of the server, fresh for a turn it has not
// read for yet; called with mu held.
func (c *codexApp) turnOf(t *turn) *codexTurn {
	if c.of != t {
		c.of, c.st = t, codexTurn{deltas: map[string]bool{}}
	}
	return &c.st
}

// opening is the app-server's: initialize, initialized, and the thread's
// start, or its resume (a cold turn, or a warm agent continuing a thread
// the conversation has) with the mode's sandbox, approval policy and
// reviewer as a new thread gets them.
func (c *codexApp) opening(t *turn) bool {
	c.mu.Lock()
	c.turnOf(t)
	c.mu.Unlock()
	var ini json.RawMessage
	if !c.call(t.ctx, t, "initialize", map[string]any{"clientInfo": map[string]any{"name": "card", "title": "card", "version": "1"}, "capabilities": nil}, &ini) {
		return false
	}
	if err := c.conn.Notify(t.ctx, "initialized", nil); err != nil {
		return false
	}
	var th codexAppThreadResult
	start := c.thread
	if c.resume != "" {
		if !c.call(t.ctx, t, "thread/resume", codexAppThreadResume{ThreadID: c.resume, Cwd: start.Cwd, ApprovalPolicy: start.ApprovalPolicy,
			ApprovalsReviewer: start.ApprovalsReviewer, Sandbox: start.Sandbox, ExcludeTurns: true}, &th) {
			return false
		}
	} else if !c.call(t.ctx, t, "thread/start", start, &th) {
		return false
	}
	c.opened(t, th.Thread.ID, th.Model)
	return true
}

// begin sends turn/start on the thread with the turn's prompt and images,
// and records the turn's id. The turn ends with turn/completed, however
// its ctx ends: a cancel is turn/interrupt, answered with an interrupted
// turn/completed.
func (c *codexApp) begin(t *turn) {
	input := make([]codexAppInput, 0, len(t.images)+1)
	for _, img := range t.images {
		input = append(input, codexAppInput{Type: "image", URL: "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)})
	}
	input = append(input, codexAppInput{Type: "text", Text: t.spec.Prompt, TextElements: []any{}})
	thread := c.resumed(t)
	var started struct {
		Turn codexAppTurn `json:"turn"`
	}
	if !c.call(c.a.life, t, "turn/start", codexAppTurnStart{ThreadID: thread, Input: input}, &lenientResult{&started}) {
		t.endIfFailed()
		return
	}
	c.mu.Lock()
	c.turnOf(t).turnID = started.Turn.ID
	c.mu.Unlock()
	t.setStep("the turn (turn/completed)")
}

// ids are the thread and the running turn's id, "" before turn/start
// has answered.
func (c *codexApp) ids(t *turn) (thread, turnID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sid, c.turnOf(t).turnID
}

// interrupt sends turn/interrupt for the running turn.
func (c *codexApp) interrupt(t *turn) bool {
	tid, turnID := c.ids(t)
	if turnID == "" {
		return false
	}
	var res struct{}
	return c.brief("turn/interrupt", map[string]string{"threadId": tid, "turnId": turnID}, &res, c.a.child.lim.KillGrace) == nil
}

// steer sends turn/steer: the text joins the running turn's input.
func (c *codexApp) steer(t *turn, text string) error {
	tid, turnID := c.ids(t)
	if turnID == "" {
		return fmt.Errorf("the turn has not started on the agent yet; steer again in a moment: %w", ErrNoTurn)
	}
	var res struct {
		TurnID string `json:"turnId"`
	}
	if err := c.brief("turn/steer", map[string]any{"threadId": tid, "expectedTurnId": turnID,
		"input": []codexAppInput{{Type: "text", Text: text, TextElements: []any{}}}}, &res, 30*c.a.child.lim.KillGrace); err != nil {
		return fmt.Errorf("codex refused turn/steer: %w", err)
	}
	return nil
}

// codexQuestions are the server's questions, each answered "decline" when
// card cannot ask it.
var codexQuestions = map[string]any{
	"item/commandExecution/requestApproval": codexAppDecision{Decision: "decline"},
	"item/fileChange/requestApproval":       codexAppDecision{Decision: "decline"},
}

// handle serves one message of the server, on the reader: to the running
// turn, or, between turns, a question declined and anything else dropped.
func (c *codexApp) handle(hctx context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) {
	t, params := c.running(hctx, req, codexQuestions)
	switch no, question := codexQuestions[req.Method]; {
	case t == nil:
	case question && !req.Notif:
		// A question card cannot read is declined, not failed: an error
		// response would read as "approval request failed".
		c.ask(t, req.ID, no, func(ctx context.Context) any { return c.approval(ctx, t, req.Method, params) })
	case !req.Notif:
		// Requests for input, elicitations, new permissions: card asks
		// allow or deny about tool calls and nothing else.
		c.notServed(hctx, req, "")
	default:
		c.mu.Lock()
		defer c.mu.Unlock()
		c.notification(t, c.turnOf(t), req.Method, params)
	}
}

// notification reads one of the server's notifications for the turn, with
// mu held.
func (c *codexApp) notification(t *turn, st *codexTurn, method string, params json.RawMessage) {
	switch method {
	case "item/started", "item/completed":
		var p codexAppItemParams
		if !decodeParams(params, &p) {
			t.emit(otherEvent(method, params))
			return
		}
		st.item(t, method == "item/completed", p.Item)
	case "item/agentMessage/delta":
		var d codexAppDelta
		if decodeParams(params, &d) && d.Delta != "" {
			if len(st.deltas) < codexMaxItems {
				st.deltas[d.ItemID] = true
			}
			t.emit(Event{Kind: api.EventText, Text: d.Delta, Delta: true})
		}
	case "thread/tokenUsage/updated":
		// One per model call.
		var u codexAppUsage
		if decodeParams(params, &u) {
			st.turns++
			tot := u.TokenUsage.Total
			st.usageTotal = api.Usage{InputTokens: tot.InputTokens, OutputTokens: tot.OutputTokens, CachedInputTokens: tot.CachedInputTokens}
			st.usage = usageMinus(st.usageTotal, c.used)
		}
	case "turn/completed":
		var p struct {
			Turn codexAppTurn `json:"turn"`
		}
		_ = decodeParams(params, &p)
		c.endTurn(t, st, p.Turn)
	case "error":
		var e codexAppError
		_ = decodeParams(params, &e)
		msg := clip(strings.TrimSpace(e.Error.Message), 2048)
		if e.WillRetry {
			st.retries++
			t.emit(Event{Kind: api.EventRetry, Attempt: st.retries, Error: msg})
			return
		}
		st.lastError = msg
		t.emit(Event{Kind: api.EventError, Error: msg})
	case "account/rateLimits/updated":
		if ev, ok := codexRateLimitEvent(params); ok {
			t.emit(ev)
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
			t.emit(otherEvent(method, params))
			return
		}
		t.emit(Event{Kind: api.EventWarning, Text: clip(msg, 2048)})
	case "item/commandExecution/outputDelta", "item/reasoning/summaryTextDelta", "item/reasoning/summaryPartAdded", "item/reasoning/textDelta",
		"thread/started", "thread/status/changed", "turn/started", "serverRequest/resolved",
		"remoteControl/status/changed", "mcpServer/startupStatus/updated", "turn/diff/updated", "item/fileChange/outputDelta":
		// Progress and meters: the items carry what a run's record needs.
	default:
		t.emit(otherEvent(method, params))
	}
}

// item maps one item/started or item/completed.
func (st *codexTurn) item(t *turn, done bool, raw json.RawMessage) {
	var it codexAppItem
	if !decodeParams(raw, &it) || it.Type == "" {
		t.emit(otherEvent("item", raw))
		return
	}
	switch it.Type {
	case "userMessage":
	case "agentMessage":
		if !done {
			return
		}
		st.answer = answerBuf{}
		st.answer.add(it.Text)
		if !st.deltas[it.ID] && it.Text != "" {
			t.emit(Event{Kind: api.EventText, Text: it.Text})
		}
	case "commandExecution", "fileChange", "mcpToolCall", "webSearch", "dynamicToolCall":
		tl := st.tools.get(it.ID)
		if tl == nil {
			return
		}
		if !tl.announced {
			tl.name, tl.input = codexAppToolOf(it)
		}
		t.emit(st.tools.announce(it.ID, tl)...)
		if done && !tl.done {
			tl.done = true
			t.emit(Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: it.ID}, Output: clip(codexAppOutput(it), maxOutput), IsError: codexAppFailed(it)})
		}
	default:
		// reasoning, plan, and what comes next, once whole.
		if done {
			t.emit(otherEvent(it.Type, raw))
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
func (c *codexApp) approval(ctx context.Context, t *turn, method string, params json.RawMessage) any {
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
		st := c.turnOf(t)
		if tl := st.tools.get(p.ItemID); tl != nil && !tl.announced {
			tl.name, tl.input = q.Tool, input
			t.emit(st.tools.announce(p.ItemID, tl)...)
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
		st := c.turnOf(t)
		input := codexAppChanges(nil)
		if tl := st.tools.get(p.ItemID); tl != nil {
			if tl.input != nil {
				input = tl.input
			} else {
				tl.name, tl.input = "file_change", input
			}
			t.emit(st.tools.announce(p.ItemID, tl)...)
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
func (c *codexApp) endTurn(t *turn, st *codexTurn, turn codexAppTurn) {
	if st.ended {
		return
	}
	st.ended = true
	if st.usage != (api.Usage{}) {
		u := st.usage
		t.emit(Event{Kind: api.EventUsage, Usage: &u})
	}
	switch turn.Status {
	case "completed":
	case "interrupted":
		t.setFailure(failure(api.KindCancelled, agent.Codex+" interrupted the turn"))
	default:
		msg := st.lastError
		if turn.Error != nil && turn.Error.Message != "" {
			msg = turn.Error.Message
		}
		if msg == "" {
			msg = fmt.Sprintf("%s ended the turn with status %q", agent.Codex, turn.Status)
		}
		t.setFailure(codexAppFailure(msg, 0))
	}
	t.complete()
}

// codexAppFailure classifies an error the server reported.
func codexAppFailure(msg string, _ int64) *api.RunError {
	kind := classifyMessage(msg)
	if kind == api.KindAuth {
		msg += " — sign in with `codex login` or give the provider's key to the daemon's environment"
	}
	return failure(kind, clip(msg, 2048))
}

func (c *codexApp) finish(t *turn, exit *ExitInfo) api.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.result(t, &c.turnOf(t).reading, exit, rpcWords, codexAppExit, true)
}

// codexAppExit reads a server that stopped before its turn ended: one
// that is not signed in says so on stderr.
func codexAppExit(exit ExitInfo) *api.RunError {
	if strings.Contains(exit.StderrTail, "Not logged in") {
		return failure(api.KindAuth, "codex is not logged in — run `codex login`")
	}
	return nil
}

// codexAskThread is the thread of ask mode: every command and every file
// change asked (approvalPolicy untrusted, reviewed by the user, which is
// card's broker), an approved one run in codexAskSandbox. It is saved for a
// later turn to resume unless ephemeral.
func codexAskThread(cwd string, ephemeral bool) codexAppThreadStart {
	return codexAppThreadStart{Cwd: cwd, ApprovalPolicy: "untrusted", ApprovalsReviewer: "user", Sandbox: codexAskSandbox, Ephemeral: ephemeral}
}

// Codex in ask mode, as checked against Codex 0.171.0 with a loopback
// model stand-in:
//
//   - `codex app-server` (JSON-RPC on stdio): codex exec cannot ask (it
//     refuses approval_policy "untrusted" and runs "on-request" as never).
//   - The thread starts with approvalPolicy "untrusted", sandbox
//     "workspace-write" and approvalsReviewer "user" (codex_appserver.go): every
//     command the model runs is put to card first, even ls or cat (Codex
//     has no separate read tool here, and untrusted asks for them all), and
//     every file change. An accepted command can run as the user, outside
//     Codex's sandbox: one the model marks "require_escalated" runs
//     unsandboxed at once, and a plain one that the sandbox refuses is run
//     again unsandboxed, unasked, whenever Codex reads the refusal as a
//     sandbox denial (a timing guess that went both ways with 0.171.0). So
//     the sandbox is no boundary card can count on once the user says yes:
//     the question is the whole boundary, as it is for Claude Code's Bash,
//     and it shows the command whole. A declined one
//     does not run and the model is told it was rejected. Nothing runs
//     unasked: narrower than read_only, where any command may run inside
//     the read-only sandbox.
//   - The thread is saved (not ephemeral) unless the request discards its
//     session: a cold turn resumes it by its id with thread/resume, carrying
//     the same approval policy, sandbox and reviewer as thread/start, so a
//     resumed thread asks exactly as a new one does (checked with 0.171.0:
//     the resumed thread's first command was put to card before it ran).
func buildCodexAsk(bin string, req Request) (Plan, error) {
	p := codexAppServer(bin, req, codexAskThread(req.Cwd, req.NoSession))
	// Images travel in turn/start as data URLs, not as files.
	p.Input = Input{Images: req.Images}
	p.Ask = &AskPlan{Channel: AskViaSession}
	return p, nil
}

// buildCodexWarm keeps Codex warm over its app-server. The thread carries
// the mode's boundary, as codex exec's flags do: the sandbox of the mode
// (read-only, workspace-write, danger-full-access) with approval policy
// "never", so a refused command goes back to the model; edit mode's temp
// dirs are taken out of workspace-write by the same -c overrides as a
// one-shot edit run. Ask mode is the ask plan's thread (untrusted, every
// command asked).
//
// No thread is ephemeral, so a cold turn resumes it: codex exec resume
// <thread id> in read_only, edit and bypass, and in ask mode a one-shot
// app-server run (or a new warm agent) opening it with thread/resume and
// the ask thread's policy.
func buildCodexWarm(bin string, req Request) (Plan, error) {
	if req.NoSession {
		return Plan{}, errUnsupported("session_id", agent.Codex, "a warm Codex thread is kept so that a cold turn can resume it")
	}
	mode := req.EffectiveMode()
	one, err := buildOneShot(bin, req) // every check of a one-shot request
	if err != nil || mode == ModeAsk {
		return one, err // the ask plan's thread, resumed if the request says so
	}
	p := codexAppServer(bin, req, codexAppThreadStart{Cwd: req.Cwd, ApprovalPolicy: "never", Sandbox: codexSandbox(mode)})
	p.MaxAPIRetries, p.Stall, p.Caps = one.MaxAPIRetries, one.Stall, one.Caps
	if req.MCPEndpoint != "" {
		// The endpoint was checked by the one-shot build above.
		a, _ := lookupDriver(agent.Codex)
		a.MCP.Add(&p, req.MCPEndpoint)
	}
	return p, nil
}

// codexAppServer is the plan of `codex app-server` talked to over stdio,
// its thread th. Model, effort and instructions are -c overrides, as in
// codex exec; the prompt and the images go in turn/start. The app-server
// has no --ignore-user-config or --ignore-rules: the thread's own approval
// policy, sandbox and reviewer override ~/.codex/config.toml, and card's
// CheckExtras keeps the operator's -c off them; execpolicy rules the user
// wrote themselves still apply.
func codexAppServer(bin string, req Request, th codexAppThreadStart) Plan {
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := append([]string{"app-server"}, codexModelArgs(req.Extras.Args)...)
	args = append(args, "--listen", "stdio://")
	if req.EffectiveMode() == ModeEdit {
		args = append(args, codexEditTmp...)
	}
	if req.Model != "" {
		args = append(args, "-c", `model="`+req.Model+`"`)
	}
	if req.Effort != "" {
		args = append(args, "-c", `model_reasoning_effort="`+req.Effort+`"`)
	}
	if req.SystemPrompt != "" {
		args = append(args, "-c", `model_instructions_file="`+p.privateFile("instructions.md", req.SystemPrompt)+`"`)
	}
	p.Args = args
	p.Session = &SessionPlan{Protocol: ProtocolCodexApp, Adapter: agent.Codex, thread: &th, resume: req.Resume}
	return p
}
