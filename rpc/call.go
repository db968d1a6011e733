package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/rpc/rpcclient"
)

// Server-to-client requests: the daemon asks a client something and waits
// for its JSON-RPC response on the same connection (agents.approve asks
// whether an agent may make a tool call).
//
// The ids are the server's own, strings "card-<n>" numbered per connection,
// and they live in a namespace of their own: a request and a response are
// told apart by the presence of "method", so the client's ids for its own
// requests cannot collide with them. A response is matched to its request
// by the stream before jsonrpc2 sees the frame (jsonrpc2 would drop it as an
// answer to a call it never made), and is never answered: JSON-RPC answers
// requests, not responses.

// ServerRequestIDPrefix starts the id of every request the server sends.
const ServerRequestIDPrefix = "card-"

// ErrPeerGone is Call's error when the connection ends before the client
// answered.
var ErrPeerGone = errors.New("the client's connection closed before it answered")

// BadResultError is a client's success response whose result does not fit
// the caller's type. The request is answered, wrongly: the caller decides
// what a wrong answer means.
type BadResultError struct {
	Method string
	Result json.RawMessage
	Err    error
}

func (e *BadResultError) Error() string {
	return fmt.Sprintf("the client's answer to %s does not fit: %v", e.Method, e.Err)
}

func (e *BadResultError) Unwrap() error { return e.Err }

// outgoing is one connection's table of requests the server sent and has
// not had answered.
type outgoing struct {
	write func([]byte) error
	done  <-chan struct{} // the connection's end
	log   *zap.Logger

	mu      sync.Mutex
	next    uint64
	pending map[string]chan response
}

// response is a client's answer: exactly one of result and err.
type response struct {
	result json.RawMessage
	err    *wireError
}

func newOutgoing(write func([]byte) error, done <-chan struct{}, log *zap.Logger) *outgoing {
	return &outgoing{write: write, done: done, log: log, pending: map[string]chan response{}}
}

func (o *outgoing) register() (string, chan response) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	id := ServerRequestIDPrefix + strconv.FormatUint(o.next, 10)
	ch := make(chan response, 1)
	o.pending[id] = ch
	return id, ch
}

// forget drops a request nobody waits for any more; a late answer to it is
// then ignored.
func (o *outgoing) forget(id string) {
	o.mu.Lock()
	delete(o.pending, id)
	o.mu.Unlock()
}

// deliver hands a response to the request waiting for it and reports
// whether one was.
func (o *outgoing) deliver(id string, r response) bool {
	o.mu.Lock()
	ch, ok := o.pending[id]
	delete(o.pending, id)
	o.mu.Unlock()
	if ok {
		ch <- r // buffered: one answer per request
	}
	return ok
}

type outRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      string `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

type outNotification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// Call sends a request to this client and waits for its response. The
// result is decoded into result (which may be nil); a decode failure is a
// *BadResultError. An error response comes back as *Error, the end of the
// connection as ErrPeerGone. When ctx ends first, the client is told with
// the notification $/cancelRequest {"id": <the request's id>}, as the
// Language Server Protocol does, so it can withdraw whatever it shows its
// user, and Call returns ctx's error; an answer that arrives after that is
// ignored. A documented request (ServerRequest) whose class the connection
// was not granted is never sent: Call returns an *AccessDeniedError, and
// since the connection has no such request pending, a response it sends
// anyway answers nothing and is dropped.
func (p *Peer) Call(ctx context.Context, method string, params, result any) error {
	if p.reg != nil {
		if need, ok := p.reg.serverRequestAccess(method); ok && !p.grants.Has(need) {
			return &AccessDeniedError{Method: method, Need: need, Have: p.grants, Origin: p.origin}
		}
	}
	if p.localServe != nil {
		return p.callLocal(ctx, method, params, result)
	}
	o := p.out
	if o == nil {
		return errors.New("rpc: this peer is not a connection and cannot be sent requests")
	}
	select {
	case <-o.done:
		return ErrPeerGone
	default:
	}
	id, ch := o.register()
	frame, err := json.Marshal(outRequest{JSONRPC: "2.0", ID: id, Method: method, Params: params})
	if err != nil {
		o.forget(id)
		return fmt.Errorf("rpc: encode the params of %s: %w", method, err)
	}
	if err := o.write(frame); err != nil {
		o.forget(id)
		// A WebSocket write fails only on a connection that is closing or
		// broken, and it can fail before the read side has seen the close
		// and ended the connection's context: once the client's close frame
		// is answered, every write is refused. The client will never see
		// this request, so it is gone, and a caller that hands the question
		// to another client (ask mode) must be told so now, not wait for a
		// timeout.
		return fmt.Errorf("%w (rpc: send %s: %v)", ErrPeerGone, method, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			e := &rpcclient.Error{Code: r.err.Code, Message: r.err.Message}
			if len(r.err.Data) > 0 {
				e.Data = r.err.Data
			}
			return e
		}
		if result == nil {
			return nil
		}
		if err := json.Unmarshal(r.result, result); err != nil {
			return &BadResultError{Method: method, Result: r.result, Err: err}
		}
		return nil
	case <-ctx.Done():
		o.forget(id)
		notice, _ := json.Marshal(outNotification{JSONRPC: "2.0", Method: rpcclient.CancelRequestMethod, Params: map[string]string{"id": id}})
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := o.write(notice); err != nil {
				o.log.Debug("could not withdraw a request from the client", zap.String("id", id), zap.Error(err))
			}
		}()
		select {
		case <-done:
		case <-time.After(cancelNoticeWait):
		}
		return ctx.Err()
	case <-o.done:
		o.forget(id)
		return ErrPeerGone
	}
}

// takeResponse routes a message without a method that is a response (an
// id, exactly one of result and error) to the request it answers, and
// reports whether the message was a response at all. A response nobody
// waits for (a late answer to a withdrawn request, or an id the server
// never sent this connection) is dropped and logged (stray): JSON-RPC has
// no way to answer a response. Absent members are nil.
func (s *frameStream) takeResponse(id, result, rawErr []byte) bool {
	hasResult, hasErr := result != nil, rawErr != nil
	if id == nil || hasResult == hasErr {
		return false
	}
	var key string
	if s.out == nil || json.Unmarshal(id, &key) != nil {
		s.stray("ignoring a response to no request of the server's", zap.ByteString("id", id))
		return true
	}
	r := response{result: result}
	if hasErr {
		var we wireError
		if err := json.Unmarshal(rawErr, &we); err != nil || we.Message == "" {
			we = wireError{Code: we.Code, Message: "the client answered with an error object that has no message: " + string(rawErr)}
		}
		r = response{err: &we}
	}
	if !s.out.deliver(key, r) {
		s.stray("ignoring a response to no waiting request of the server's (withdrawn, or never sent to this connection)", zap.String("id", key))
	}
	return true
}

// stray logs a response that answered nothing: the first of a connection
// at info (a late answer to a withdrawn question is ordinary; a connection
// answering questions it was never sent is not), the rest at debug.
func (s *frameStream) stray(msg string, fields ...zap.Field) {
	if s.strays.Add(1) == 1 {
		s.log.Info(msg, append(fields, zap.String("note", "later ones on this connection are logged at debug"))...)
		return
	}
	s.log.Debug(msg, fields...)
}

// cancelNoticeWait bounds the write of a $/cancelRequest: whoever gave up
// on the request must not wait long on a stuck socket either.
const cancelNoticeWait = 2 * time.Second
