package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/card-dev/card/rpc/rpcclient"
)

// LocalConn is a connection to a registry from inside the server's own
// process: the daemon's ACP front door calls card's methods through one,
// with the grants and origin of the editor's connection, so an ACP client
// holds exactly the access classes it would hold on /rpc. The calls,
// notifications and server requests are the ones a WebSocket connection
// has, without the socket: no frame is encoded and read back.
type LocalConn struct {
	reg    *Registry
	peer   *Peer
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// localIDs number local connections apart from the server's own (which
// count from 1): a peer's id tells connections apart, for the questions a
// run asks each once.
var localIDs atomic.Uint64

// OpenLocal opens a connection to reg with grants and origin, as a
// connection upgraded from that origin would hold. notify takes each
// notification the handlers send it, in order from each sender; it must not
// keep params after it returns. serve answers the server's requests
// (agents.approve) with a result or an *Error. Close it when done.
func OpenLocal(reg *Registry, grants Grants, origin string, notify func(method string, params json.RawMessage),
	serve func(ctx context.Context, method string, params json.RawMessage) (any, error)) *LocalConn {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Peer{id: 1<<62 + localIDs.Add(1), grants: grants, origin: origin, reg: reg, localNotify: notify, localServe: serve}
	p.ctx = withPeer(ctx, p)
	return &LocalConn{reg: reg, peer: p, cancel: cancel}
}

// Call runs method with params and decodes its answer into result (which
// may be nil), as a WebSocket client's call would: the same access checks,
// params decoding and errors (an *Error). What the handler goes on to do
// once answered (its Then, such as a subscription's events) runs after,
// on a goroutine of its own, until the connection closes.
func (c *LocalConn) Call(ctx context.Context, method string, params, result any) error {
	var raw json.RawMessage
	if params != nil {
		var err error
		if raw, err = json.Marshal(params); err != nil {
			return fmt.Errorf("rpc: encode the params of %s: %w", method, err)
		}
	}
	rctx, cancel := context.WithCancel(c.peer.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	res, then, rerr := c.reg.Dispatch(rctx, method, raw)
	if rerr != nil {
		return rerr
	}
	var out []byte
	if e, ok := res.(encodedResult); ok {
		out = e.encodedJSON()
	} else {
		var err error
		if out, err = json.Marshal(res); err != nil {
			return fmt.Errorf("rpc: encode the result of %s: %w", method, err)
		}
	}
	if then != nil {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			then(c.peer.ctx)
		}()
	}
	if result == nil {
		return nil
	}
	return json.Unmarshal(out, result)
}

// Done is closed once the connection is closed.
func (c *LocalConn) Done() <-chan struct{} { return c.peer.ctx.Done() }

// Close ends the connection, as a client going away does (its
// subscriptions end, and so do the runs the daemon ends with their
// connection), and waits for what its calls went on to do.
func (c *LocalConn) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

// callLocal is Call for a local peer: the server's request goes to its
// serve function, and the answer comes back as a WebSocket client's would.
func (p *Peer) callLocal(ctx context.Context, method string, params, result any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("rpc: encode the params of %s: %w", method, err)
	}
	if p.ctx.Err() != nil {
		return ErrPeerGone
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	res, err := p.localServe(cctx, method, raw)
	if err != nil {
		if p.ctx.Err() != nil {
			return ErrPeerGone
		}
		var e *rpcclient.Error
		if errors.As(err, &e) {
			return e
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &rpcclient.Error{Code: rpcclient.CodeInternalError, Message: err.Error()}
	}
	if result == nil {
		return nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return &BadResultError{Method: method, Err: err}
	}
	if err := json.Unmarshal(b, result); err != nil {
		return &BadResultError{Method: method, Result: b, Err: err}
	}
	return nil
}
