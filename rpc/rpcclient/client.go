// Package rpcclient is the JSON-RPC 2.0 client of card's daemon over its
// WebSocket, and what client and server share of the protocol: the error
// type, the standard codes, the names of the transport's own methods and
// the rpc.discover document. It is apart from package rpc (the server) so
// that a client program builds without the server's dependencies (its
// logger, its schema reflector).
package rpcclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/sourcegraph/jsonrpc2"
)

// ClientOptions tune Dial. The zero value is a native client: token in the
// Authorization header, no Origin.
type ClientOptions struct {
	// OnNotification is called for each server notification, in order, on
	// the connection's read goroutine: keep it quick or hand off.
	OnNotification func(method string, params json.RawMessage)
	// OnRequest serves a request the server sends to the client. Each runs
	// in a goroutine of its own, so one that waits (on a person, say) holds
	// up neither the notifications nor the answers to the client's own
	// calls; ctx ends when the connection does, or when the server
	// withdraws the request with $/cancelRequest (it is then not answered),
	// and Close waits for every OnRequest to return. The result is the answer's result; an error is
	// answered as a JSON-RPC error (an *Error keeps its code and data).
	// Without OnRequest every server request is answered method not found.
	OnRequest func(ctx context.Context, method string, params json.RawMessage) (any, error)
	// TokenInSubprotocol sends the token as card.bearer.<token> instead of a
	// header, as a browser must.
	TokenInSubprotocol bool
	// Header adds request headers (tests use it to send Origin or Host).
	Header http.Header
	// Host overrides the Host header.
	Host      string
	ReadLimit int64
	// Logf, when set, is told of frames from the daemon the client could
	// not read (never of the messages themselves).
	Logf func(format string, args ...any)
}

// Client is the low-level JSON-RPC client of the daemon: methods named by
// string, params and results as any JSON value. The typed client (package
// client) is built on it; tests that must send what no typed method would
// use it directly.
type Client struct {
	conn   *jsonrpc2.Conn
	ws     *websocket.Conn
	cancel context.CancelFunc
	// lastID numbers the client's requests itself, so a call whose context
	// ends can name its request in $/cancelRequest.
	lastID  atomic.Uint64
	serving sync.WaitGroup
}

// DialError is a refused or failed upgrade, with the HTTP status and the
// daemon's one-line reason when it answered.
type DialError struct {
	URL    string
	Status int
	Reason string
	Err    error
}

func (e *DialError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("connect %s: HTTP %d: %s", e.URL, e.Status, e.Reason)
	}
	return fmt.Sprintf("connect %s: %v", e.URL, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// Dial connects to the daemon at url (ws://127.0.0.1:PORT/rpc) with token.
func Dial(ctx context.Context, url, token string, opts ClientOptions) (*Client, error) {
	h := http.Header{}
	for k, vs := range opts.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	d := &websocket.DialOptions{HTTPHeader: h, Host: opts.Host}
	if opts.TokenInSubprotocol {
		d.Subprotocols = []string{SubprotocolVersion, BearerSubprotocolPrefix + token}
	} else if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.Dial(ctx, url, d)
	if err != nil {
		de := &DialError{URL: url, Err: err}
		if resp != nil {
			de.Status = resp.StatusCode
			if resp.Body != nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
				de.Reason = strings.TrimSpace(string(b))
			}
		}
		return nil, de
	}
	limit := opts.ReadLimit
	if limit == 0 {
		limit = 64 << 20
	}
	ws.SetReadLimit(limit)
	cctx, cancel := context.WithCancel(context.Background())
	stream := &frameStream{ctx: cctx, conn: ws, writeTimeout: WriteTimeout, logf: opts.Logf, notify: opts.OnNotification}
	c := &Client{ws: ws, cancel: cancel}
	handler := &clientHandler{notify: opts.OnNotification, serve: opts.OnRequest, serving: &c.serving}
	c.conn = jsonrpc2.NewConn(cctx, stream, handler, jsonrpc2.SetLogger(discard{}))
	return c, nil
}

// cancelNoticeTimeout bounds the write of a $/cancelRequest: the caller has
// already given up, so it must not wait long on a stuck socket either.
const cancelNoticeTimeout = 2 * time.Second

// Call sends a request and decodes the result into result (which may be
// nil). A JSON-RPC error answer comes back as *Error. When ctx ends before
// the answer, Call tells the server with $/cancelRequest, so the work the
// request started stops too, and returns ctx's error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	id := jsonrpc2.ID{Num: c.lastID.Add(1)}
	w, err := c.conn.DispatchCall(ctx, method, params, jsonrpc2.PickID(id))
	if err == nil {
		err = w.Wait(ctx, result)
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		nctx, cancel := context.WithTimeout(context.Background(), cancelNoticeTimeout)
		_ = c.conn.Notify(nctx, CancelRequestMethod, map[string]uint64{"id": id.Num})
		cancel()
		return err
	}
	return fromWire(err)
}

// fromWire turns the JSON-RPC library's error answer into *Error.
func fromWire(err error) error {
	var je *jsonrpc2.Error
	if !errors.As(err, &je) {
		return err
	}
	e := &Error{Code: je.Code, Message: je.Message}
	if je.Data != nil {
		e.Data = *je.Data
	}
	return e
}

// Notify sends a notification (no answer).
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	return c.conn.Notify(ctx, method, params)
}

// Done is closed when the connection ends.
func (c *Client) Done() <-chan struct{} { return c.conn.DisconnectNotify() }

// Close closes the connection normally, after the requests the client was
// serving have returned.
func (c *Client) Close() error {
	err := c.conn.Close()
	c.cancel()
	c.serving.Wait()
	if errors.Is(err, jsonrpc2.ErrClosed) {
		return nil
	}
	return err
}

// clientHandler takes what the server sends that is not an answer:
// notifications in order on the read goroutine, requests each on its own.
// The server withdraws a request it no longer waits for with
// $/cancelRequest (a question answered on another connection, or
// expired): that request's context ends and it is not answered.
type clientHandler struct {
	notify  func(method string, params json.RawMessage)
	serve   func(ctx context.Context, method string, params json.RawMessage) (any, error)
	serving *sync.WaitGroup

	mu       sync.Mutex
	inflight map[string]context.CancelFunc // by idKey of the server's id
}

func (h *clientHandler) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p json.RawMessage
	if req.Params != nil {
		p = *req.Params
	}
	switch {
	case req.Notif && req.Method == CancelRequestMethod:
		h.withdraw(p)
	case req.Notif:
		if h.notify != nil {
			h.notify(req.Method, p)
		}
	case h.serve == nil:
		_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: CodeMethodNotFound, Message: "this client serves no methods"})
	default:
		rctx, cancel := context.WithCancel(ctx)
		raw, _ := req.ID.MarshalJSON()
		key, _ := IDKey(raw)
		h.mu.Lock()
		if h.inflight == nil {
			h.inflight = map[string]context.CancelFunc{}
		}
		h.inflight[key] = cancel
		h.mu.Unlock()
		h.serving.Add(1)
		go func() {
			defer h.serving.Done()
			defer func() {
				h.mu.Lock()
				delete(h.inflight, key)
				h.mu.Unlock()
				cancel()
			}()
			res, err := h.serve(rctx, req.Method, p)
			if rctx.Err() != nil && ctx.Err() == nil {
				return // withdrawn: the server waits for no answer
			}
			if err != nil {
				_ = conn.ReplyWithError(ctx, req.ID, toWire(err))
				return
			}
			_ = conn.Reply(ctx, req.ID, res)
		}()
	}
}

// withdraw ends the request $/cancelRequest names, if it is still served.
func (h *clientHandler) withdraw(params json.RawMessage) {
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	key, ok := IDKey(p.ID)
	if !ok {
		return
	}
	h.mu.Lock()
	cancel := h.inflight[key]
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// toWire is the JSON-RPC error answer for an error a client's OnRequest
// returned: an *Error as it is, anything else an internal error.
func toWire(err error) *jsonrpc2.Error {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: CodeInternalError, Message: err.Error()}
	}
	je := &jsonrpc2.Error{Code: e.Code, Message: e.Message}
	if e.Data != nil {
		je.SetError(e.Data)
	}
	return je
}
