package spawn

import (
	"context"
	"fmt"
	"sync"

	"github.com/sourcegraph/jsonrpc2"
)

// rpcTurn is what the JSON-RPC session protocols other than ACP (Codex's
// app-server, Droid's stream-jsonrpc) share: card calls the agent one step
// at a time, the agent's notifications are mapped in order on the reader,
// and each question the agent asks waits for the approver off the reader,
// so the agent's messages keep flowing meanwhile. Once the turn is over no
// new question is taken, and those still waiting end denied with it.
type rpcTurn struct {
	adapter string
	// idPrefix, when set, makes card's request ids strings (prefix and a
	// number): Droid refuses a numeric id as an invalid message.
	idPrefix string

	mu      sync.Mutex
	closing bool   // no new question is taken: the turn is over
	step    string // the call card waits on, for a child that stops
	failure *Failure

	asks   sync.WaitGroup
	ctx    context.Context // ends with the turn: questions still waiting are denied
	cancel context.CancelFunc
	conn   *jsonrpc2.Conn
	next   uint64
}

// open starts the JSON-RPC connection over stream; close must follow.
func (r *rpcTurn) open(ctx context.Context, stream jsonrpc2.ObjectStream, h func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request)) {
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.conn = jsonrpc2.NewConn(r.ctx, stream, rpcHandler(h), jsonrpc2.SetLogger(discardLog{}))
}

// close ends the turn: no new question, those waiting are denied (the
// approver answers an ended context with a deny) and answered, then the
// connection closes.
func (r *rpcTurn) close() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.cancel()
	r.asks.Wait()
	r.conn.Close()
}

// call makes one request and waits for its answer; false when none came
// (an error response is recorded by fail; a closed stream or an ended
// context is the runner's to explain).
func (r *rpcTurn) call(method string, params, result any, fail func(method string, err error), opts ...jsonrpc2.CallOption) bool {
	r.mu.Lock()
	r.step = method
	r.mu.Unlock()
	r.next++
	id := jsonrpc2.ID{Num: r.next}
	if r.idPrefix != "" {
		id = jsonrpc2.ID{Str: fmt.Sprintf("%s%d", r.idPrefix, r.next), IsString: true}
	}
	opts = append(opts, jsonrpc2.PickID(id))
	if err := r.conn.Call(r.ctx, method, params, result, opts...); err != nil {
		fail(method, err)
		return false
	}
	return true
}

// ask answers the agent's request id with what decide returns, off the
// reader; once the turn is closing it answers closed at once instead.
// Either way the agent gets an answer, never silence: none of these CLIs
// times a question out on its own.
func (r *rpcTurn) ask(hctx context.Context, id jsonrpc2.ID, closed any, decide func(ctx context.Context) any) {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		_ = r.conn.Reply(hctx, id, closed)
		return
	}
	r.asks.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.asks.Done()
		answer := decide(r.ctx)
		// The reply goes out even when the turn just ended: the agent
		// must not be left waiting on a question card dropped.
		_ = r.conn.Reply(context.Background(), id, answer)
	}()
}

func (r *rpcTurn) setFailure(f *Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failure == nil {
		r.failure = f
	}
}

// stopped explains an agent whose stdout ended before the turn did.
func (r *rpcTurn) stopped(exit ExitInfo) *Failure {
	step := r.step
	if step == "" {
		step = "the first request"
	}
	var msg string
	kind := KindExit
	switch {
	case exit.Code > 0:
		msg = fmt.Sprintf("%s exited with status %d before it finished %s", r.adapter, exit.Code, step)
	case exit.Code == 0:
		kind = KindBadOutput
		msg = fmt.Sprintf("%s exited 0 before it finished %s; its output was cut short", r.adapter, step)
	default:
		msg = fmt.Sprintf("%s was killed before it finished %s", r.adapter, step)
	}
	if l := lastLine(exit.StderrTail); l != "" {
		msg += ": " + l
	}
	return failure(kind, clip(msg, 2048))
}

// rpcHandler serves the agent's messages to card over jsonrpc2.
type rpcHandler func(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request)

func (h rpcHandler) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	h(ctx, conn, req)
}

// discardLog keeps jsonrpc2's own complaints (an unmatched response, a
// closed stream) off the daemon's stderr; what matters reaches the run.
type discardLog struct{}

func (discardLog) Printf(string, ...any) {}
