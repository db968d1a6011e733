package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"
)

// Defaults for ServerConfig's zero values.
const (
	DefaultReadLimit    = 4 << 20
	DefaultMaxConns     = 128
	DefaultMaxInFlight  = 64
	DefaultMaxBatch     = 256
	DefaultWriteTimeout = 10 * time.Second
)

// ServerConfig configures a Server.
type ServerConfig struct {
	Registry *Registry
	Gate     *Gate
	// ReadLimit is the largest frame accepted; a larger one closes the
	// connection with 1009, since reading it would be the attack.
	ReadLimit int64
	// MaxConns caps concurrent connections; past it the upgrade gets 503.
	MaxConns int
	// MaxInFlight caps unanswered requests per connection; past it a request
	// is answered at once with CodeTooManyRequests instead of queueing.
	MaxInFlight  int
	MaxBatch     int
	WriteTimeout time.Duration
	Logger       *zap.Logger
}

// Server serves JSON-RPC over WebSocket on one path. It tracks its
// connections itself because http.Server forgets hijacked ones, and a
// graceful shutdown must close each with 1001.
type Server struct {
	cfg    ServerConfig
	log    *zap.Logger
	active atomic.Int64
	nextID atomic.Uint64

	mu    sync.Mutex
	conns map[*serverConn]struct{}
	wg    sync.WaitGroup
	// draining is written under mu (so no connection is added after
	// Shutdown starts waiting) and read without it on every request.
	draining atomic.Bool
}

// NewServer fills defaults and returns a server; mount it at /rpc.
func NewServer(cfg ServerConfig) *Server {
	if cfg.ReadLimit <= 0 {
		cfg.ReadLimit = DefaultReadLimit
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Server{cfg: cfg, log: cfg.Logger, conns: map[*serverConn]struct{}{}}
}

// ActiveConnections is the number of open WebSocket connections.
func (s *Server) ActiveConnections() int { return int(s.active.Load()) }

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, reason string) {
	// The log names who and why, never the token: Authorization and the
	// subprotocols are deliberately not logged.
	s.log.Info("refused websocket upgrade",
		zap.Int("status", status), zap.String("reason", reason),
		zap.String("remote", r.RemoteAddr), zap.String("host", r.Host),
		zap.String("origin", r.Header.Get("Origin")), zap.String("path", r.URL.Path))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintln(w, reason)
}

// ServeHTTP gates the upgrade, then serves the connection until it closes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		s.refuse(w, r, http.StatusMethodNotAllowed, "method not allowed: /rpc is a WebSocket endpoint (GET with Upgrade: websocket)")
		return
	}
	subprotocol, refusal := s.cfg.Gate.Check(r)
	if refusal != nil {
		s.refuse(w, r, refusal.Status, refusal.Reason)
		return
	}
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		s.refuse(w, r, http.StatusServiceUnavailable, "service unavailable: the daemon is shutting down")
		return
	}
	if s.active.Load() >= int64(s.cfg.MaxConns) {
		s.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		s.refuse(w, r, http.StatusServiceUnavailable, "service unavailable: too many connections (limit "+strconv.Itoa(s.cfg.MaxConns)+"); close an idle one and retry")
		return
	}
	s.active.Add(1)
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer s.active.Add(-1)

	opts := &websocket.AcceptOptions{InsecureSkipVerify: true} // Origin was checked by the gate, more strictly.
	if subprotocol != "" {
		opts.Subprotocols = []string{subprotocol}
	}
	c, err := websocket.Accept(w, r, opts)
	if err != nil {
		s.log.Info("websocket upgrade failed", zap.String("remote", r.RemoteAddr), zap.Error(err))
		return
	}
	c.SetReadLimit(s.cfg.ReadLimit)
	s.serve(c, r.RemoteAddr)
}

// serverConn is one client connection.
type serverConn struct {
	srv    *Server
	ws     *websocket.Conn
	stream *frameStream
	sem    chan struct{}
	wg     sync.WaitGroup
	peer   *Peer
	log    *zap.Logger
}

func (s *Server) serve(ws *websocket.Conn, remote string) {
	id := s.nextID.Add(1)
	log := s.log.With(zap.Uint64("conn", id))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	peer := &Peer{id: id, onPanic: func(method string, p any, stack []byte) {
		log.Error("handler panicked", zap.String("method", method), zap.Any("panic", p), zap.ByteString("stack", stack))
	}}
	sc := &serverConn{srv: s, ws: ws, sem: make(chan struct{}, s.cfg.MaxInFlight), log: log, peer: peer}
	stream := newFrameStream(ctx, ws, true, s.cfg.WriteTimeout, s.cfg.MaxBatch, log)
	sc.stream = stream
	jc := jsonrpc2.NewConn(ctx, stream, sc, jsonrpc2.SetLogger(zapPrintf{log}))
	sc.peer.conn.Store(jc)

	s.mu.Lock()
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	log.Debug("connection opened", zap.String("remote", remote))

	<-jc.DisconnectNotify()
	cancel()
	sc.wg.Wait()
	sc.peer.runOnClose()

	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
	log.Debug("connection closed")
}

// Handle is called by jsonrpc2 on the connection's read goroutine, in order.
// It answers over-cap requests at once and runs the rest concurrently.
func (sc *serverConn) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	// The first request can arrive before NewConn has returned to serve.
	sc.peer.conn.CompareAndSwap(nil, conn)
	if sc.srv.draining.Load() {
		if !req.Notif {
			_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: CodeShuttingDown, Message: "the daemon is shutting down and takes no new requests"})
		}
		return
	}
	select {
	case sc.sem <- struct{}{}:
	default:
		if !req.Notif {
			_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: CodeTooManyRequests,
				Message: fmt.Sprintf("too many requests in flight on this connection (limit %d): wait for answers before sending more", cap(sc.sem))})
		}
		return
	}
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		defer func() { <-sc.sem }()
		ctx := withPeer(ctx, sc.peer)
		var params json.RawMessage
		if req.Params != nil {
			params = *req.Params
		}
		res, rerr := sc.srv.cfg.Registry.Dispatch(ctx, req.Method, params)
		if req.Notif {
			return
		}
		if rerr != nil {
			if rerr.Code == CodeInternalError {
				sc.log.Warn("request failed", zap.String("method", req.Method), zap.String("error", rerr.Message))
			}
			w := rerr.wire()
			je := &jsonrpc2.Error{Code: w.Code, Message: w.Message}
			if w.Data != nil {
				d := json.RawMessage(w.Data)
				je.Data = &d
			}
			_ = conn.ReplyWithError(ctx, req.ID, je)
			return
		}
		if err := sc.reply(req.ID, res); err != nil {
			sc.log.Debug("could not send an answer", zap.String("method", req.Method), zap.Error(err))
		}
	}()
}

// answer is a success response. Result is the already-encoded result.
type answer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      jsonrpc2.ID     `json:"id"`
	Result  json.RawMessage `json:"result"`
}

// encoded is a message that is already JSON; the stream writes it as is.
type encoded []byte

func (e encoded) MarshalJSON() ([]byte, error) { return e, nil }

// reply sends a success answer through the stream (so batch gathering and
// id restoring still apply) without jsonrpc2's Reply, which encodes the
// result three times over (marshal, then re-compact it twice); on a large
// answer such as agents.detect that was most of the daemon's CPU.
func (sc *serverConn) reply(id jsonrpc2.ID, res any) error {
	result, err := json.Marshal(res)
	if err != nil {
		return err
	}
	b, err := json.Marshal(answer{JSONRPC: "2.0", ID: id, Result: result})
	if err != nil {
		return err
	}
	return sc.stream.WriteObject(encoded(b))
}

// Shutdown stops taking requests and closes every connection with 1001
// (going away), waiting until they are gone or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		go func(c *serverConn) {
			_ = c.ws.Close(websocket.StatusGoingAway, "card is shutting down")
		}(c)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			_ = c.ws.CloseNow()
		}
		<-done
		return ctx.Err()
	}
}

// Peer is the client connection a request came from. Handlers use it to send
// notifications and to learn when the client goes away.
type Peer struct {
	id   uint64
	conn atomic.Pointer[jsonrpc2.Conn]
	// onPanic logs a handler panic with its stack; set once per connection
	// so the hot path adds nothing to each request's context for it.
	onPanic func(method string, p any, stack []byte)

	mu      sync.Mutex
	onClose []func()
	closed  bool
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

// ID identifies the connection in logs.
func (p *Peer) ID() uint64 { return p.id }

// Done is closed when the connection has closed.
func (p *Peer) Done() <-chan struct{} { return p.conn.Load().DisconnectNotify() }

// Notify sends a notification to this client. Calls from one goroutine
// arrive in order.
func (p *Peer) Notify(ctx context.Context, method string, params any) error {
	return p.conn.Load().Notify(ctx, method, params)
}

// OnClose runs f once the connection has closed and its requests have
// finished; at once if it already has.
func (p *Peer) OnClose(f func()) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		f()
		return
	}
	p.onClose = append(p.onClose, f)
	p.mu.Unlock()
}

func (p *Peer) runOnClose() {
	p.mu.Lock()
	fs := p.onClose
	p.onClose = nil
	p.closed = true
	p.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// zapPrintf adapts zap to jsonrpc2's Logger.
type zapPrintf struct{ log *zap.Logger }

func (z zapPrintf) Printf(format string, v ...any) {
	z.log.Debug(fmt.Sprintf(format, v...))
}
