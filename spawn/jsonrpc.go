package spawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// Protocol names a protocol an agent speaks over its stdio.
type Protocol string

// ProtocolACP is the Agent Client Protocol (JSON-RPC 2.0, one message per
// line): initialize, session/new, session/prompt, with session/update
// notifications and session/request_permission requests from the agent.
const ProtocolACP Protocol = "acp"

// rpcClient is what card's side of each JSON-RPC protocol (ACP, Codex's
// app-server, Droid's stream-jsonrpc) keeps for the agent's life: one
// connection over its stdio, and card's request ids. The agent's messages
// are read in order on the connection's reader, and each question it asks
// waits for the approver off the reader, so its messages keep flowing
// meanwhile.
type rpcClient struct {
	a    *runner
	conn *jsonrpc2.Conn
	done chan struct{}
	// adapter names the agent in messages; classify reads an error it
	// reported (its message and JSON-RPC code) as a failure.
	adapter  string
	classify func(msg string, code int64) *api.RunError
	// idPrefix, when set, makes card's request ids strings (prefix and a
	// number): Droid refuses a numeric id as an invalid message.
	idPrefix string
	next     atomic.Uint64

	// mu guards these and what the protocol reads of the running turn:
	// the reader and the questions waiting off it both touch them.
	mu    sync.Mutex
	sid   string // the CLI's own id of the conversation
	model string
	// used is the session's token total before the running turn, for a
	// CLI that reports its session's running total: a turn's usage is its
	// part.
	used api.Usage
}

// reading is what a JSON-RPC client reads of one turn, whatever the
// protocol: the answer, the tool calls, the model calls and the usage.
type reading struct {
	answer     answerBuf
	tools      sessionTools
	turns      int
	retries    int
	usage      api.Usage
	usageTotal api.Usage // the session's running total, as the agent reports it
	lastError  string    // the last error the agent reported
}

// result is the turn's result as read, the failure or the explanation of
// an early stop the turn's ending gives it; the session's running total is
// the next turn's base. total says the result reports that total.
func (r *rpcClient) result(t *turn, rd *reading, exit *ExitInfo, words stopWords, explain func(ExitInfo) *api.RunError, total bool) api.Result {
	if rd.usageTotal != (api.Usage{}) {
		r.used = rd.usageTotal
	}
	res := api.Result{Answer: rd.answer.String(), SessionID: r.sid, Turns: rd.turns, ToolCalls: rd.tools.calls, Usage: rd.usage}
	if total {
		res.SessionUsage = totalOf(rd.usageTotal)
	}
	return t.outcome(res, exitOrAlive(exit), r.adapter, words, explain, rd.lastError)
}

// fail records why one of card's calls did not get its answer, when the
// agent gave a reason: an error response, with its data. A closed stream
// (the agent died) or an ended context is the runner's to explain.
func (r *rpcClient) fail(t *turn, method string, err error) {
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
	t.setFailure(r.classify(fmt.Sprintf("%s answered %s with error %d: %s", r.adapter, method, je.Code, msg), je.Code))
}

// opened records the session the opening opened (its id and model) and
// tells the turn.
func (r *rpcClient) opened(t *turn, sid, model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sid, r.model = sid, model
	t.emit(Event{Kind: api.EventSession, SessionID: sid, Model: model})
}

// resumed tells a turn after the agent's first of the session it runs in
// (the first turn had it from the opening), and gives the session's id.
func (r *rpcClient) resumed(t *turn) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !t.first {
		t.emit(Event{Kind: api.EventSession, SessionID: r.sid, Model: r.model})
	}
	return r.sid
}

// brief makes a call the agent answers at once (an interrupt, a steer),
// waiting at most within for it.
func (r *rpcClient) brief(method string, params, result any, within time.Duration) error {
	ctx, cancel := context.WithTimeout(r.a.life, within)
	defer cancel()
	return r.conn.Call(ctx, method, params, &lenientResult{result}, jsonrpc2.PickID(r.id()))
}

func (r *rpcClient) sessionID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sid
}

// open starts the connection over the agent's stdout lines, h serving the
// agent's messages; wrap, when set, dresses what card writes (Droid's
// envelope).
func (r *rpcClient) open(a *runner, h func(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request), wrap func(*lineStream) jsonrpc2.ObjectStream) {
	r.a, r.done = a, make(chan struct{})
	lines, gone := make(chan []byte), make(chan struct{})
	a.child.out = lineSink{line: func(b []byte) {
		select {
		case lines <- append([]byte(nil), b...):
		case <-gone:
		}
	}, eof: func() { close(lines) }}
	s := newLineStream(lines, stdinWriter{a.child}, func(line []byte) { a.emitCur(otherEvent("", line)) })
	if a.kept {
		// Whenever no line is in hand what the turn holds of its text goes
		// out, so the turn merges the deltas read together.
		s.idle, a.merges = a.flushCur, true
	}
	var stream jsonrpc2.ObjectStream = s
	if wrap != nil {
		stream = wrap(s)
	}
	r.conn = jsonrpc2.NewConn(a.life, stream, rpcHandler(h), jsonrpc2.SetLogger(discardLog{}))
	go func() {
		<-r.conn.DisconnectNotify()
		// What is left of stdout is drained, so the child never blocks.
		close(gone)
		close(r.done)
	}()
}

func (r *rpcClient) consumed() <-chan struct{} { return r.done }

// call makes one of card's requests and waits for its answer within ctx;
// false when none came (fail records an error response).
func (r *rpcClient) call(ctx context.Context, t *turn, method string, params, result any) bool {
	t.setStep(method)
	if err := r.conn.Call(ctx, method, params, result, jsonrpc2.PickID(r.id())); err != nil {
		r.fail(t, method, err)
		return false
	}
	return true
}

// id is card's next request id.
func (r *rpcClient) id() jsonrpc2.ID {
	n := r.next.Add(1)
	if r.idPrefix != "" {
		return jsonrpc2.ID{Str: fmt.Sprintf("%s%d", r.idPrefix, n), IsString: true}
	}
	return jsonrpc2.ID{Num: n}
}

// ask answers the agent's request id with what decide returns, off the
// reader; once the turn is over it answers closed at once instead.
func (r *rpcClient) ask(t *turn, id jsonrpc2.ID, closed any, decide func(ctx context.Context) any) {
	t.question(closed, func(answer any) { _ = r.conn.Reply(context.Background(), id, answer) }, decide)
}

// between serves a request the agent makes between turns: a question is
// answered with its no (answers, by method), anything else as not served.
func (r *rpcClient) between(hctx context.Context, req *jsonrpc2.Request, answers map[string]any) {
	if req.Notif {
		return
	}
	if no, ok := answers[req.Method]; ok {
		_ = r.conn.Reply(hctx, req.ID, no)
		return
	}
	r.notServed(hctx, req, " between turns")
}

// notServed answers a request card does not serve (what says more).
func (r *rpcClient) notServed(hctx context.Context, req *jsonrpc2.Request, what string) {
	_ = r.conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "card does not serve " + req.Method + what})
}

// running is the turn a message of the agent's belongs to, with the
// message's params; between turns it is answered there (a question with
// its no, in questions) and there is none, but the params still come: a
// notification between turns (ACP's list of slash commands, sent right
// after session/new) can say what the next turn needs.
func (r *rpcClient) running(hctx context.Context, req *jsonrpc2.Request, questions map[string]any) (*turn, json.RawMessage) {
	var params json.RawMessage
	if req.Params != nil {
		params = *req.Params
	}
	t := r.a.current()
	if t == nil {
		r.between(hctx, req, questions)
		return nil, params
	}
	return t, params
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

// stdinWriter writes the connection's messages through the child's one
// stdin lock.
type stdinWriter struct{ c *child }

func (s stdinWriter) Write(b []byte) (int, error) {
	if err := s.c.write(b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// lineStream is a jsonrpc2.ObjectStream over newline-delimited JSON, the
// framing of ACP (and of Codex's app-server and Droid's stream-jsonrpc):
// one message per line each way. It reads lines the runner has already
// bounded and counted, so nothing the child prints can grow it.
//
// The framing is acp's (these agents frame alike): a line that is not a
// JSON-RPC message (a log line, a stray object) is handed to bad and
// skipped, since sourcegraph/jsonrpc2 would otherwise close the whole
// connection on it, and each message is written as one line.
type lineStream struct {
	lines <-chan []byte
	w     *acp.Writer
	bad   func(line []byte)
	// idle, when set, is called before the stream waits for the agent's
	// next line: none is in hand, so what the turn holds of its text
	// goes out (see emitter.held).
	idle func()

	done chan struct{}
	once sync.Once
}

func newLineStream(lines <-chan []byte, w io.Writer, bad func(line []byte)) *lineStream {
	return &lineStream{lines: lines, w: acp.NewWriter(w), bad: bad, done: make(chan struct{})}
}

// ReadObject implements jsonrpc2.ObjectStream.
func (s *lineStream) ReadObject(v any) error {
	for {
		var line []byte
		var ok, got bool
		if s.idle != nil {
			select {
			case line, ok = <-s.lines:
				got = true
			default:
				s.idle()
			}
		}
		if !got {
			select {
			case <-s.done:
				return io.EOF
			case line, ok = <-s.lines:
			}
		}
		if !ok {
			return io.EOF
		}
		if !acp.IsMessage(line) {
			if s.bad != nil {
				s.bad(line)
			}
			continue
		}
		return json.Unmarshal(line, v)
	}
}

// WriteObject implements jsonrpc2.ObjectStream: one line per message.
func (s *lineStream) WriteObject(obj any) error {
	return s.w.Write(obj)
}

// Close implements jsonrpc2.ObjectStream. It stops reading; the child's
// stdin is the runner's to close.
func (s *lineStream) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}
