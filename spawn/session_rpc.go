package spawn

import (
	"context"
	"fmt"
	"sync"

	"github.com/sourcegraph/jsonrpc2"
)

// rpcTurn is what the JSON-RPC session protocols (ACP, Codex's app-server,
// Droid's stream-jsonrpc) share on top of turnState: card calls the agent
// one step at a time, the agent's notifications are mapped in order on the
// reader, and each question the agent asks waits for the approver off the
// reader, so the agent's messages keep flowing meanwhile. Once the turn is
// over no new question is taken, and those still waiting end denied with it.
type rpcTurn struct {
	turnState
	// idPrefix, when set, makes card's request ids strings (prefix and a
	// number): Droid refuses a numeric id as an invalid message.
	idPrefix string

	// ended is closed once by markEnded, for a protocol whose turn ends
	// with a notification rather than with the answer to card's call.
	ended     chan struct{}
	endedOnce sync.Once

	conn *jsonrpc2.Conn
	next uint64
	// callCtx, when set, bounds card's calls instead of the turn's
	// context: a warm agent's turn that is cancelled still waits, within
	// the grace, for the agent's answer to the call it cancelled.
	callCtx context.Context
}

func newRPCTurn(adapter, idPrefix string, words stopWords) rpcTurn {
	return rpcTurn{turnState: turnState{adapter: adapter, words: words}, idPrefix: idPrefix, ended: make(chan struct{})}
}

// open starts the JSON-RPC connection over stream; close must follow.
func (r *rpcTurn) open(ctx context.Context, stream jsonrpc2.ObjectStream, h func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request)) {
	r.begin(ctx)
	r.conn = jsonrpc2.NewConn(r.ctx, stream, rpcHandler(h), jsonrpc2.SetLogger(discardLog{}))
}

// close ends the turn (over), then the connection.
func (r *rpcTurn) close() {
	r.over()
	r.conn.Close()
}

// call makes one request and waits for its answer; false when none came
// (an error response is recorded by fail; a closed stream or an ended
// context is the runner's to explain).
func (r *rpcTurn) call(method string, params, result any, fail func(method string, err error), opts ...jsonrpc2.CallOption) bool {
	r.setStep(method)
	r.next++
	id := jsonrpc2.ID{Num: r.next}
	if r.idPrefix != "" {
		id = jsonrpc2.ID{Str: fmt.Sprintf("%s%d", r.idPrefix, r.next), IsString: true}
	}
	opts = append(opts, jsonrpc2.PickID(id))
	ctx := r.ctx
	if r.callCtx != nil {
		ctx = r.callCtx
	}
	if err := r.conn.Call(ctx, method, params, result, opts...); err != nil {
		fail(method, err)
		return false
	}
	return true
}

// ask answers the agent's request id with what decide returns, off the
// reader; once the turn is closing it answers closed at once instead.
func (r *rpcTurn) ask(hctx context.Context, id jsonrpc2.ID, closed any, decide func(ctx context.Context) any) {
	r.question(closed, func(answer any) { _ = r.conn.Reply(context.Background(), id, answer) }, decide)
}

// markEnded records, with mu held, that the turn ended as the protocol
// says; false when it already had (an agent that says so twice).
func (r *rpcTurn) markEnded() bool {
	if r.completed {
		return false
	}
	r.completed = true
	r.endedOnce.Do(func() { close(r.ended) })
	return true
}

// awaitEnd waits, as step, for the notification that ends the turn, for
// the agent's stdout to end, or for the run to end.
func (r *rpcTurn) awaitEnd(step string) {
	r.setStep(step)
	select {
	case <-r.ended:
	case <-r.conn.DisconnectNotify():
	case <-r.ctx.Done():
	}
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
