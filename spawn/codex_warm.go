package spawn

import (
	"context"
	"fmt"
	"sync"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/agent"
)

// Codex's conversation channel is its app-server, the protocol its ask
// mode already speaks: initialize and thread/start once, when the agent
// starts, then one turn/start per turn on the same thread, turn/interrupt
// to stop a running turn (the server ends it with turn/completed, status
// "interrupted", and waits for the next), and turn/steer to add input to
// the running turn.
//
// The thread carries the mode's boundary, as codex exec's flags do: the
// sandbox of the mode (read-only, workspace-write, danger-full-access)
// with approval policy "never", so a refused command goes back to the
// model; edit mode's temp dirs are taken out of workspace-write by the
// same -c overrides as a one-shot edit run. Ask mode is the ask plan's
// thread (untrusted, every command asked). The app-server has no
// --ignore-user-config: the thread's own sandbox and approval policy
// override ~/.codex/config.toml, and card's CheckExtras keeps the
// operator's -c off them.
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
	if err != nil {
		return Plan{}, err
	}
	if mode == ModeAsk {
		return one, nil // the ask plan's thread, resumed if the request says so
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras), MaxAPIRetries: one.MaxAPIRetries, Stall: one.Stall, Caps: one.Caps}
	args := []string{"app-server"}
	args = append(args, codexModelArgs(req.Extras.Args)...)
	args = append(args, "--listen", "stdio://")
	if mode == ModeEdit {
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
	p.Session = &SessionPlan{Protocol: ProtocolCodexApp, Adapter: agent.Codex,
		thread: &codexAppThreadStart{Cwd: req.Cwd, ApprovalPolicy: "never", Sandbox: codexSandbox(mode)}, resume: req.Resume}
	if req.MCPEndpoint != "" {
		// The endpoint was checked by the one-shot build above.
		a, _ := lookupDriver(agent.Codex)
		a.MCP.Add(&p, req.MCPEndpoint)
	}
	return p, nil
}

// codexWarm is Codex's side of a warm agent: one JSON-RPC connection to
// the app-server for the agent's life, and each turn a
// codexAppConversation of its own (the same reading of items, approvals
// and errors as an ask-mode run) on the thread.
type codexWarm struct {
	w      *warmRunner
	thread codexAppThreadStart
	resume string // the thread the opening resumes, "" for a new one
	conn   *jsonrpc2.Conn
	done   chan struct{}

	mu     sync.Mutex
	cur    *codexAppConversation
	curT   turn
	byTurn map[*warmTurn]*codexAppConversation
	tid    string
	model  string
	next   uint64
	// used is the thread's token total before the running turn: the
	// server reports the thread's total, and a turn's usage is its part.
	used Usage
}

func newCodexWarm(plan Plan) warmProto {
	c := &codexWarm{done: make(chan struct{}), byTurn: map[*warmTurn]*codexAppConversation{}}
	if sp := plan.Session; sp != nil && sp.thread != nil {
		c.thread = *sp.thread
	} else {
		c.thread = codexAskThread(plan.Dir, false)
	}
	c.thread.Cwd = plan.Dir
	if plan.Session != nil {
		c.resume = plan.Session.resume
	}
	if c.resume != "" {
		// The resumed thread's totals count its earlier turns.
		c.used = plan.UsageBase
	}
	return c
}

func (c *codexWarm) consumed() <-chan struct{} { return c.done }

func (c *codexWarm) conversation() *codexAppConversation {
	conv := &codexAppConversation{rpcTurn: newRPCTurn(agent.Codex, "", rpcWords), deltas: map[string]bool{}}
	conv.conn = c.conn
	return conv
}

func (c *codexWarm) open(ctx context.Context, w *warmRunner) *Failure {
	c.w = w
	stream := w.lineStream()
	c.conn = jsonrpc2.NewConn(w.life, stream, rpcHandler(c.handle), jsonrpc2.SetLogger(discardLog{}))
	go func() {
		<-c.conn.DisconnectNotify()
		w.child.stopReading()
		close(c.done)
	}()
	conv := c.conversation()
	conv.resume = c.resume
	conv.begin(ctx)
	t := turn{Cwd: w.plan.Dir, Emit: func(...Event) {}, Approver: w.child.approver}
	c.mu.Lock()
	c.cur, c.curT = conv, t
	c.mu.Unlock()
	ok := conv.handshake(t, c.thread)
	conv.over()
	c.mu.Lock()
	c.cur = nil
	c.tid, c.model, c.next = conv.threadID, conv.model, conv.next
	c.mu.Unlock()
	if ok {
		return nil
	}
	return conv.startFailed(ctx, w.child, codexAppExit, &conv.lastError)
}

// handle serves one message of the server: to the running turn's
// conversation, or, between turns, a question declined and anything else
// dropped.
func (c *codexWarm) handle(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	c.mu.Lock()
	conv, t := c.cur, c.curT
	c.mu.Unlock()
	if conv != nil {
		conv.handle(hctx, conn, req, t)
		return
	}
	if req.Notif {
		return
	}
	switch req.Method {
	case "item/commandExecution/requestApproval", "item/fileChange/requestApproval":
		_ = conn.Reply(hctx, req.ID, codexAppDecision{Decision: "decline"})
	default:
		_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "card does not serve " + req.Method + " between turns"})
	}
}

func (c *codexWarm) begin(wt *warmTurn) {
	conv := c.conversation()
	c.mu.Lock()
	conv.threadID, conv.model, conv.next = c.tid, c.model, c.next
	conv.usageBase = c.used
	c.mu.Unlock()
	conv.callCtx = c.w.life
	conv.begin(wt.ctx)
	t := turn{Prompt: wt.spec.Prompt, Images: wt.images, Cwd: c.w.plan.Dir, Emit: wt.emit, Approver: c.w.child.approver}
	c.mu.Lock()
	c.cur, c.curT = conv, t
	c.byTurn[wt] = conv
	c.mu.Unlock()
	wt.emit(Event{Kind: EventSession, SessionID: conv.threadID, Model: conv.model})
	started := conv.startTurn(t)
	c.mu.Lock()
	c.next = conv.next
	c.mu.Unlock()
	if !started {
		conv.mu.Lock()
		failed := conv.failure != nil
		conv.mu.Unlock()
		if failed {
			wt.end()
		}
		return
	}
	// The turn ends with turn/completed, however its ctx ends: a cancel
	// is turn/interrupt, answered with an interrupted turn/completed.
	select {
	case <-conv.ended:
		wt.end()
	case <-c.conn.DisconnectNotify():
	case <-c.w.life.Done():
	}
}

// interrupt sends turn/interrupt for the running turn.
func (c *codexWarm) interrupt(wt *warmTurn) bool {
	c.mu.Lock()
	conv := c.byTurn[wt]
	c.mu.Unlock()
	if conv == nil {
		return false
	}
	conv.mu.Lock()
	tid, turnID := conv.threadID, conv.turnID
	conv.mu.Unlock()
	if turnID == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(c.w.life, c.w.lim.KillGrace)
	defer cancel()
	var res struct{}
	return c.conn.Call(ctx, "turn/interrupt", map[string]string{"threadId": tid, "turnId": turnID}, &lenientResult{&res}) == nil
}

// steer sends turn/steer: the text joins the running turn's input.
func (c *codexWarm) steer(wt *warmTurn, text string) error {
	c.mu.Lock()
	conv := c.byTurn[wt]
	c.mu.Unlock()
	if conv == nil {
		return ErrNoTurn
	}
	conv.mu.Lock()
	tid, turnID := conv.threadID, conv.turnID
	conv.mu.Unlock()
	if turnID == "" {
		return fmt.Errorf("the turn has not started on the agent yet; steer again in a moment: %w", ErrNoTurn)
	}
	ctx, cancel := context.WithTimeout(c.w.life, 30*c.w.lim.KillGrace)
	defer cancel()
	var res struct {
		TurnID string `json:"turnId"`
	}
	err := c.conn.Call(ctx, "turn/steer", map[string]any{"threadId": tid, "expectedTurnId": turnID,
		"input": []codexAppInput{{Type: "text", Text: text, TextElements: []any{}}}}, &lenientResult{&res})
	if err != nil {
		return fmt.Errorf("codex refused turn/steer: %w", err)
	}
	return nil
}

func (c *codexWarm) finish(wt *warmTurn, exit *ExitInfo) Result {
	c.mu.Lock()
	conv := c.byTurn[wt]
	delete(c.byTurn, wt)
	if conv != nil && c.cur == conv {
		c.cur = nil
	}
	c.mu.Unlock()
	if conv == nil {
		return Result{IsError: true, Error: failure(KindExit, "codex ended before the turn began")}
	}
	res := wt.settle(conv, exit)
	conv.mu.Lock()
	total := conv.usageTotal
	conv.mu.Unlock()
	if total != (Usage{}) {
		c.mu.Lock()
		c.used = total
		c.mu.Unlock()
	}
	return res
}

func (c *codexWarm) sessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tid
}
