package spawn

import (
	"context"
	"fmt"
	"sync"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/agent"
)

// Droid's conversation channel is its stream-jsonrpc (`droid exec
// --input-format stream-jsonrpc --output-format stream-jsonrpc`), the
// protocol its ask mode already speaks: droid.initialize_session once,
// when the agent starts, then one droid.add_user_message per turn in the
// same session, the turn over at agent_turn_completed, and
// droid.interrupt_session to stop a running turn.
//
// read_only runs the ask plan's session (autonomy "off": Droid runs its
// reads unasked and asks before every Execute, Create, Edit and
// ApplyPatch) with every question denied, since read_only has nobody to
// ask: the same boundary, narrower if anything (a denied call ends Droid's
// turn). Ask mode is the ask plan as it is. Edit is refused as in every
// Droid run, and bypass is not kept warm (its flag was not seen to act in
// this mode).
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

// droidWarm is Droid's side of a warm agent: one connection for the
// agent's life, and each turn a droidConversation of its own (the same
// reading of notifications and questions as an ask-mode run) on it.
type droidWarm struct {
	w    *warmRunner
	sp   SessionPlan
	conn *jsonrpc2.Conn
	done chan struct{}

	mu     sync.Mutex
	cur    *droidConversation
	curT   turn
	byTurn map[*warmTurn]*droidConversation
	sid    string
	model  string
	next   uint64
	used   Usage // the session's token total before the running turn
}

func newDroidWarm(plan Plan) warmProto {
	d := &droidWarm{done: make(chan struct{}), byTurn: map[*warmTurn]*droidConversation{}}
	if plan.Session != nil {
		d.sp = *plan.Session
	}
	if d.sp.resume != "" {
		// The loaded session's totals count its earlier turns.
		d.used = plan.UsageBase
	}
	return d
}

func (d *droidWarm) consumed() <-chan struct{} { return d.done }

func (d *droidWarm) conversation() *droidConversation {
	conv, _ := newDroidConversation(d.sp)
	c := conv.(*droidConversation)
	c.conn = d.conn
	return c
}

func (d *droidWarm) open(ctx context.Context, w *warmRunner) *Failure {
	d.w = w
	d.sp.Adapter = agent.Droid
	stream := droidStream{w.lineStream()}
	d.conn = jsonrpc2.NewConn(w.life, stream, rpcHandler(d.handle), jsonrpc2.SetLogger(discardLog{}))
	go func() {
		<-d.conn.DisconnectNotify()
		w.child.stopReading()
		close(d.done)
	}()
	c := d.conversation()
	c.begin(ctx)
	t := turn{Cwd: w.plan.Dir, Emit: func(...Event) {}, Approver: w.child.approver}
	d.mu.Lock()
	d.cur, d.curT = c, t
	d.mu.Unlock()
	ok := c.handshake(t)
	c.over()
	d.mu.Lock()
	d.cur = nil
	d.sid, d.model, d.next = c.sessionID, c.model, c.next
	d.mu.Unlock()
	if ok {
		return nil
	}
	return c.startFailed(ctx, w.child, nil, &c.lastError)
}

// handle serves one message of Droid: to the running turn's conversation,
// or, between turns, a question answered cancel (never an error, which
// Droid would wait on) and anything else dropped.
func (d *droidWarm) handle(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	d.mu.Lock()
	c, t := d.cur, d.curT
	d.mu.Unlock()
	if c != nil {
		c.handle(hctx, conn, req, t)
		return
	}
	if req.Notif {
		return
	}
	switch req.Method {
	case "droid.request_permission":
		_ = conn.Reply(hctx, req.ID, droidAnswer{SelectedOption: "cancel"})
	case "droid.ask_user":
		_ = conn.Reply(hctx, req.ID, map[string]any{"cancelled": true, "answers": []any{}})
	default:
		_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "card does not serve " + req.Method + " between turns"})
	}
}

func (d *droidWarm) begin(wt *warmTurn) {
	c := d.conversation()
	d.mu.Lock()
	c.sessionID, c.model, c.next = d.sid, d.model, d.next
	c.usageBase = d.used
	d.mu.Unlock()
	c.callCtx = d.w.life
	c.begin(wt.ctx)
	t := turn{Prompt: wt.spec.Prompt, Images: wt.images, Cwd: d.w.plan.Dir, Emit: wt.emit, Approver: d.w.child.approver}
	d.mu.Lock()
	d.cur, d.curT = c, t
	d.byTurn[wt] = c
	d.mu.Unlock()
	wt.emit(Event{Kind: EventSession, SessionID: c.sessionID, Model: c.model})
	added := c.addMessage(t)
	d.mu.Lock()
	d.next = c.next
	d.mu.Unlock()
	if !added {
		c.mu.Lock()
		failed := c.failure != nil
		c.mu.Unlock()
		if failed {
			wt.end()
		}
		return
	}
	select {
	case <-c.ended:
		wt.end()
	case <-d.conn.DisconnectNotify():
	case <-d.w.life.Done():
	}
}

// interrupt sends droid.interrupt_session.
func (d *droidWarm) interrupt(*warmTurn) bool {
	d.mu.Lock()
	d.next++
	id := jsonrpc2.ID{Str: fmt.Sprintf("card-%d", d.next), IsString: true}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(d.w.life, d.w.lim.KillGrace)
	defer cancel()
	var res struct{}
	return d.conn.Call(ctx, "droid.interrupt_session", map[string]any{}, &lenientResult{&res}, jsonrpc2.PickID(id)) == nil
}

func (d *droidWarm) steer(*warmTurn, string) error { return ErrNoSteer }

func (d *droidWarm) finish(wt *warmTurn, exit *ExitInfo) Result {
	d.mu.Lock()
	c := d.byTurn[wt]
	delete(d.byTurn, wt)
	if c != nil && d.cur == c {
		d.cur = nil
	}
	d.mu.Unlock()
	if c == nil {
		return Result{IsError: true, Error: failure(KindExit, "droid ended before the turn began")}
	}
	res := wt.settle(c, exit)
	c.mu.Lock()
	total := c.usageTotal
	c.mu.Unlock()
	if total != (Usage{}) {
		d.mu.Lock()
		d.used = total
		d.mu.Unlock()
	}
	return res
}

func (d *droidWarm) sessionID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sid
}
