package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/coder/websocket"
	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"
)

// ClientOptions tune Dial. The zero value is a native client: token in the
// Authorization header, no Origin.
type ClientOptions struct {
	// OnNotification is called for each server notification, in order, on
	// the connection's read goroutine: keep it quick or hand off.
	OnNotification func(method string, params json.RawMessage)
	// TokenInSubprotocol sends the token as card.bearer.<token> instead of a
	// header, as a browser must.
	TokenInSubprotocol bool
	// Header adds request headers (tests use it to send Origin or Host).
	Header http.Header
	// Host overrides the Host header.
	Host      string
	ReadLimit int64
	Logger    *zap.Logger
}

// Client is a JSON-RPC client of the daemon, used by the CLI and tests.
type Client struct {
	conn   *jsonrpc2.Conn
	ws     *websocket.Conn
	cancel context.CancelFunc
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
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
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
	stream := newFrameStream(cctx, ws, false, DefaultWriteTimeout, DefaultMaxBatch, opts.Logger)
	var handler jsonrpc2.Handler = noteHandler(opts.OnNotification)
	jc := jsonrpc2.NewConn(cctx, stream, handler, jsonrpc2.SetLogger(zapPrintf{opts.Logger}))
	return &Client{conn: jc, ws: ws, cancel: cancel}, nil
}

// Call sends a request and decodes the result into result (which may be
// nil). A JSON-RPC error answer comes back as *Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	err := c.conn.Call(ctx, method, params, result)
	var je *jsonrpc2.Error
	if errors.As(err, &je) {
		e := &Error{Code: je.Code, Message: je.Message}
		if je.Data != nil {
			e.Data = *je.Data
		}
		return e
	}
	return err
}

// Notify sends a notification (no answer).
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	return c.conn.Notify(ctx, method, params)
}

// Done is closed when the connection ends.
func (c *Client) Done() <-chan struct{} { return c.conn.DisconnectNotify() }

// Close closes the connection normally.
func (c *Client) Close() error {
	err := c.conn.Close()
	c.cancel()
	if errors.Is(err, jsonrpc2.ErrClosed) {
		return nil
	}
	return err
}

type noteHandler func(method string, params json.RawMessage)

func (h noteHandler) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if !req.Notif {
		_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: CodeMethodNotFound, Message: "this client serves no methods"})
		return
	}
	if h == nil {
		return
	}
	var p json.RawMessage
	if req.Params != nil {
		p = *req.Params
	}
	h(req.Method, p)
}
