package spawn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// Gemini CLI's and Copilot CLI's conversation channel is ACP, the protocol
// their ask mode already speaks: initialize and session/new once, when the
// agent starts, then one session/prompt per turn on the same session, and
// session/cancel to stop a running turn inside the protocol (the agent
// answers the prompt with stopReason "cancelled" and waits for the next).
//
// In read_only, edit and bypass the plan is the one-shot plan's, every
// boundary flag included (Gemini's --approval-mode, Copilot's --deny-tool
// and --allow-tool), with --acp instead of the one-shot output flag; what
// the agent would still ask about is denied, since only ask mode has
// anyone to ask. In ask mode it is the ask plan as it is.
func buildACPWarm(bin string, req Request) (Plan, error) {
	if req.SessionID != "" {
		return Plan{}, errUnsupported("session_id", req.Adapter, "over ACP the agent names the session (session/new) and reports it in the session event")
	}
	// The session to continue goes inside the protocol (session/load),
	// never on argv.
	resume := req.Resume
	req.Resume = ""
	p, err := buildOneShot(bin, req)
	if err != nil {
		return Plan{}, err
	}
	if p.Session == nil {
		args, ok := withoutFlag(p.Args, "--output-format")
		if !ok {
			return Plan{}, fmt.Errorf("spawn: the %s plan has no --output-format to turn into --acp", req.Adapter)
		}
		// --acp before the boundary flags it keeps: Gemini's and
		// Copilot's option parsers take the last of a repeated flag,
		// and card's come after the operator's.
		n := len(req.Extras.Args)
		p.Args = append(slices.Clip(args[:n]), append([]string{"--acp"}, args[n:]...)...)
		p.Session = &SessionPlan{Protocol: ProtocolACP, Adapter: req.Adapter}
	}
	p.Session.resume = resume
	return p, nil
}

// withoutFlag is args without the flag and its value.
func withoutFlag(args []string, flag string) ([]string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return args, false
	}
	return append(slices.Clip(args[:i]), args[i+2:]...), true
}

// acpWarm is an ACP agent's side of a warm agent: one JSON-RPC connection
// for the agent's life, and each turn an acpConversation of its own (the
// same reading of updates, questions and errors as an ask-mode run) on it.
type acpWarm struct {
	w       *warmRunner
	adapter string
	dialect acpDialect
	resume  string // the session the opening loads, "" for a new one
	conn    *jsonrpc2.Conn
	done    chan struct{}

	mu sync.Mutex
	// cur is the conversation the agent's messages belong to, with its
	// turn; nil between turns.
	cur    *acpConversation
	curT   turn
	byTurn map[*warmTurn]*acpConversation
	sid    string
	model  string
	images bool
	next   uint64
	used   Usage // the session's token total before the running turn
	// commands are the slash commands the agent last listed, kept across
	// turns: it lists them once, after session/new or session/load,
	// usually between turns, and each turn's session event carries them.
	commands []api.SlashCommand
}

func newACPWarm(plan Plan) warmProto {
	a := &acpWarm{done: make(chan struct{}), byTurn: map[*warmTurn]*acpConversation{}}
	if plan.Session != nil {
		a.adapter, a.resume = plan.Session.Adapter, plan.Session.resume
	}
	// The adapter's dialect of ACP, as its driver's ask-mode session has it.
	if d, ok := lookupDriver(a.adapter); ok && d.Session.Protocol == ProtocolACP {
		if conv, err := d.Session.New(SessionPlan{Protocol: ProtocolACP, Adapter: a.adapter}); err == nil {
			a.dialect = conv.(*acpConversation).dialect
		}
	}
	return a
}

func (a *acpWarm) consumed() <-chan struct{} { return a.done }

// stdinWriter writes the connection's messages through the child's one
// stdin lock.
type stdinWriter struct{ c *warmChild }

func (s stdinWriter) Write(b []byte) (int, error) {
	if err := s.c.write(b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// conversation is a fresh turn's conversation on the agent's connection.
func (a *acpWarm) conversation() *acpConversation {
	c := &acpConversation{rpcTurn: newRPCTurn(a.adapter, "", acpWords), dialect: a.dialect, fresh: true}
	c.conn = a.conn
	return c
}

func (a *acpWarm) open(ctx context.Context, w *warmRunner) *Failure {
	a.w = w
	stream := w.lineStream()
	a.conn = jsonrpc2.NewConn(w.life, stream, rpcHandler(a.handle), jsonrpc2.SetLogger(discardLog{}))
	go func() {
		<-a.conn.DisconnectNotify()
		w.child.stopReading()
		close(a.done)
	}()
	c := a.conversation()
	c.resume = a.resume
	c.begin(ctx)
	t := turn{Cwd: w.plan.Dir, Emit: func(...Event) {}, Approver: w.child.approver}
	a.mu.Lock()
	a.cur, a.curT = c, t
	a.mu.Unlock()
	ok := c.handshake(t)
	c.over()
	a.mu.Lock()
	a.cur = nil
	a.sid, a.model, a.images, a.next = c.sessionID, c.model, c.images, c.next
	a.mu.Unlock()
	if ok {
		return nil
	}
	return c.startFailed(ctx, w.child, a.dialect.exitFailure, nil)
}

// handle serves one message of the agent: to the running turn's
// conversation, or, between turns, a question answered cancelled (ACP's
// denial) and anything else dropped.
func (a *acpWarm) handle(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	a.mu.Lock()
	if req.Method == acp.MethodSessionUpdate && req.Params != nil {
		a.keepCommandsLocked(*req.Params)
	}
	c, t := a.cur, a.curT
	a.mu.Unlock()
	if c != nil {
		c.handle(hctx, conn, req, t)
		return
	}
	if req.Notif {
		return
	}
	if req.Method == acp.MethodSessionRequestPermission {
		_ = conn.Reply(hctx, req.ID, acp.Cancelled())
		return
	}
	_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "card does not serve " + req.Method + " between turns"})
}

// keepCommandsLocked keeps the slash commands an update lists, whenever
// it comes: the agent lists them once, usually between turns, and every
// later turn's session event carries them. (During a turn, its
// conversation also emits them at once.)
func (a *acpWarm) keepCommandsLocked(params json.RawMessage) {
	if !bytes.Contains(params, []byte(acp.UpdateAvailableCommands)) {
		return
	}
	var p struct {
		Update acp.SessionUpdate `json:"update"`
	}
	if !decodeParams(params, &p) || p.Update.Kind != acp.UpdateAvailableCommands || p.Update.AvailableCommands == nil {
		return
	}
	a.commands = a.dialect.listed(p.Update.AvailableCommands.AvailableCommands)
}

func (a *acpWarm) begin(wt *warmTurn) {
	c := a.conversation()
	a.mu.Lock()
	c.sessionID, c.model, c.images, c.next = a.sid, a.model, a.images, a.next
	c.usageBase = a.used
	a.mu.Unlock()
	// The prompt's call waits for the agent's answer however the turn's
	// ctx ends: a cancelled turn is answered "cancelled" within the grace.
	c.callCtx = a.w.life
	c.begin(wt.ctx)
	t := turn{Prompt: wt.spec.Prompt, Images: wt.images, Cwd: a.w.plan.Dir, Emit: wt.emit, Approver: a.w.child.approver}
	a.mu.Lock()
	a.cur, a.curT = c, t
	a.byTurn[wt] = c
	// Read with cur set, under one lock: a list that comes after is the
	// turn's conversation's to emit.
	cmds := a.commands
	a.mu.Unlock()
	wt.emit(Event{Kind: EventSession, SessionID: c.sessionID, Model: c.model, Commands: cmds})
	c.prompt(t)
	c.mu.Lock()
	over := c.completed || c.failure != nil
	c.mu.Unlock()
	a.mu.Lock()
	a.next = c.next
	a.mu.Unlock()
	if over {
		wt.end()
	}
}

// interrupt sends session/cancel for the agent's session.
func (a *acpWarm) interrupt(*warmTurn) bool {
	a.mu.Lock()
	sid := a.sid
	a.mu.Unlock()
	return a.conn.Notify(context.Background(), acp.MethodSessionCancel, map[string]string{"sessionId": sid}) == nil
}

func (a *acpWarm) steer(*warmTurn, string) error { return ErrNoSteer }

func (a *acpWarm) finish(wt *warmTurn, exit *ExitInfo) Result {
	a.mu.Lock()
	c := a.byTurn[wt]
	delete(a.byTurn, wt)
	if c != nil && a.cur == c {
		a.cur = nil
	}
	a.mu.Unlock()
	if c == nil {
		if f := wt.protocolFailure(); f != nil {
			return Result{IsError: true, Error: f}
		}
		return Result{IsError: true, Error: failure(KindExit, a.adapter+" ended before the turn began")}
	}
	res := wt.settle(c, exit)
	c.mu.Lock()
	total := c.usageTotal
	c.mu.Unlock()
	if total != (Usage{}) {
		a.mu.Lock()
		a.used = total
		a.mu.Unlock()
	}
	return res
}

func (a *acpWarm) sessionID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sid
}
