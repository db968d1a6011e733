package rpc

import (
	"context"
	"encoding/json"
	"errors"

	"go.uber.org/zap"

	"github.com/card-dev/card/rpc/rpcclient"
)

// inflightCall is one unanswered request $/cancelRequest can reach.
type inflightCall struct{ cancel context.CancelCauseFunc }

// errCancelRequested is the cause of a request context cancelled by
// $/cancelRequest.
var errCancelRequested = errors.New("the client cancelled the request with $/cancelRequest")

// track records a request's cancel under the client's id; the returned
// function forgets it once the request is answered.
func (sc *serverConn) track(id json.RawMessage, cancel context.CancelCauseFunc) func() {
	key, ok := rpcclient.IDKey(id)
	if !ok {
		return nil
	}
	c := &inflightCall{cancel: cancel}
	sc.mu.Lock()
	sc.inflight[key] = append(sc.inflight[key], c)
	sc.mu.Unlock()
	return func() {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		calls := sc.inflight[key]
		for i, have := range calls {
			if have == c {
				calls = append(calls[:i], calls[i+1:]...)
				break
			}
		}
		if len(calls) == 0 {
			delete(sc.inflight, key)
		} else {
			sc.inflight[key] = calls
		}
	}
}

// cancelRequest handles $/cancelRequest. It is a notification: an unknown or
// already answered id, or params without an id, are ignored silently, as the
// protocol it comes from says; sent as a request (with an id of its own) it
// is answered -32600, since a client waiting for that answer has
// misunderstood it.
func (sc *serverConn) cancelRequest(req *request) {
	if !req.notif() {
		sc.answerError(req, &wireError{Code: rpcclient.CodeInvalidRequest,
			Message: "invalid request: $/cancelRequest is a notification; send it without an id"})
		return
	}
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if req.params == nil || json.Unmarshal(req.params, &p) != nil {
		return
	}
	key, ok := rpcclient.IDKey(p.ID)
	if !ok {
		return
	}
	sc.mu.Lock()
	calls := append([]*inflightCall(nil), sc.inflight[key]...)
	sc.mu.Unlock()
	for _, c := range calls {
		c.cancel(errCancelRequested)
	}
	if len(calls) > 0 {
		sc.log.Debug("request cancelled by the client", zap.ByteString("id", p.ID))
	}
}
