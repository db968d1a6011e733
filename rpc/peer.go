package rpc

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"sync/atomic"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/rpc/rpcclient"
)

// Peer is the client connection a request came from. Handlers use it to send
// notifications, and its Context to tie work to the connection's life.
type Peer struct {
	id   uint64
	conn atomic.Pointer[jsonrpc2.Conn]
	ctx  context.Context
	// out sends the server's requests to this client (Call).
	out *outgoing
	// onPanic logs a handler panic with its stack; set once per connection
	// so the hot path adds nothing to each request's context for it.
	onPanic func(method string, p any, stack []byte)
	// grants are the access classes this connection may call, decided at
	// the upgrade from its Origin; origin is that Origin: "" for a native
	// client, an allowed browser origin (the gate refused any other) for a
	// web page.
	grants Grants
	origin string
	// opened is the digest of the token the gate admitted the connection
	// with (OpenedWith).
	opened tokenDigest
	// localNotify and localServe are a local connection's (OpenLocal):
	// where its notifications go, and what answers the server's requests;
	// nil for a WebSocket connection.
	localNotify func(method string, params json.RawMessage)
	localServe  func(ctx context.Context, method string, params json.RawMessage) (any, error)
	// reg is the server's registry, for the class of each request the
	// server sends (ServerRequest); nil outside a server.
	reg *Registry
	// write sends one frame on the connection (the frame stream's write);
	// nil outside a server.
	write func([]byte) error
}

type peerKey struct{}

func withPeer(ctx context.Context, p *Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// PeerFrom returns the connection a request arrived on, or nil outside a
// request (for example in a unit test calling a handler directly).
func PeerFrom(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

// Grants are the access classes this connection may call.
func (p *Peer) Grants() Grants { return p.grants }

// Origin is the browser origin the connection came from, or "" for a native
// client (a browser always sends one on a WebSocket upgrade). A method may
// refuse a web page what it gives a program on the machine.
func (p *Peer) Origin() string { return p.origin }

// OpenedWith reports whether token is the one the connection was opened
// with. A client can answer that itself, so asking it tells nothing:
// unlike a comparison with the token the daemon holds now, which after
// `card token rotate` would let a connection opened with the old token
// test candidates for the new one. The comparison is of digests, in
// constant time.
func (p *Peer) OpenedWith(token string) bool {
	d := digestOf(token)
	return p.opened != (tokenDigest{}) && subtle.ConstantTimeCompare(d[:], p.opened[:]) == 1
}

// ID identifies the connection in logs.
func (p *Peer) ID() uint64 { return p.id }

// Context lives as long as the connection: it is cancelled when the client
// goes away (or the server shuts down), and carries the Peer. Work that
// belongs to the connection rather than to one request (a subscription, a
// run that ends with its client) derives from it or hangs off it with
// context.AfterFunc, instead of a goroutine watching for the close.
func (p *Peer) Context() context.Context { return p.ctx }

// Notify sends a notification to this client. Calls from one goroutine
// arrive in order.
//
// Params already encoded (a json.RawMessage, as a run's events are: encoded
// once for every subscriber and the store) are written inside the envelope
// as they are; going through jsonrpc2 would encode the envelope by
// reflection and scan and copy the params twice more, per event and per
// subscriber.
func (p *Peer) Notify(ctx context.Context, method string, params any) error {
	if p.localNotify != nil {
		raw, ok := params.(json.RawMessage)
		if !ok {
			var err error
			if raw, err = json.Marshal(params); err != nil {
				return err
			}
		}
		if p.ctx.Err() != nil {
			return ErrPeerGone
		}
		p.localNotify(method, raw)
		return nil
	}
	if raw, ok := params.(json.RawMessage); ok && p.write != nil && len(raw) > 0 {
		bp := answerBufs.Get().(*[]byte)
		b := append((*bp)[:0], rpcclient.NotificationHead...)
		m, err := json.Marshal(method)
		if err != nil {
			return err
		}
		b = append(b, m...)
		b = append(b, rpcclient.NotificationParams...)
		b = append(b, raw...)
		b = append(b, '}')
		err = p.write(b)
		if cap(b) <= maxPooledAnswer {
			*bp = b
			answerBufs.Put(bp)
		}
		return err
	}
	return p.conn.Load().Notify(ctx, method, params)
}
