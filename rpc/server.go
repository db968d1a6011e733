package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"

	"github.com/card-dev/card/rpc/rpcclient"
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
	// MaxConnsPerOrigin caps the connections of one allowed web origin
	// (zero: a quarter of MaxConns); web origins together also leave a
	// quarter of MaxConns to native clients. See slots.go.
	MaxConnsPerOrigin int
	// MaxPending caps accepted connections that have not finished their
	// upgrade (zero: DefaultMaxPending or MaxConns, whichever is larger);
	// past it the oldest is closed.
	// Only connections the http.Server reports through ConnState count.
	MaxPending int
	// MaxInFlight caps unanswered requests per connection; past it a request
	// is answered at once with CodeTooManyRequests instead of queueing.
	MaxInFlight  int
	MaxBatch     int
	WriteTimeout time.Duration
	Logger       *zap.Logger
	// RefusalLogBurst refused upgrades of each reason are logged per
	// RefusalLogWindow; the rest are counted in one line when the window
	// ends. Zero values mean DefaultRefusalLogBurst and
	// DefaultRefusalLogWindow.
	RefusalLogBurst  int
	RefusalLogWindow time.Duration
}

// Server serves JSON-RPC over WebSocket on one path. It tracks its
// connections itself because http.Server forgets hijacked ones, and a
// graceful shutdown must close each with 1001.
type Server struct {
	cfg      ServerConfig
	log      *zap.Logger
	refusals *refusalLog
	active   atomic.Int64
	nextID   atomic.Uint64

	mu    sync.Mutex
	conns map[*serverConn]struct{}
	// byOrigin counts open connections per web origin (originKey), under
	// mu; native clients are not counted here.
	byOrigin map[string]int
	// webConns is the sum of byOrigin.
	webConns int
	pending  *pendingConns
	wg       sync.WaitGroup
	// draining is written under mu (so no connection is added after
	// Shutdown starts waiting) and read without it on every request.
	draining atomic.Bool
	// release hands back the memory of bursts of large messages.
	release *memoryRelease
}

// NewServer fills defaults and returns a server; mount it at /rpc.
func NewServer(cfg ServerConfig) *Server {
	if cfg.ReadLimit <= 0 {
		cfg.ReadLimit = DefaultReadLimit
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConnsPerOrigin <= 0 {
		cfg.MaxConnsPerOrigin = defaultMaxConnsPerOrigin(cfg.MaxConns)
	}
	if cfg.MaxPending <= 0 {
		// At least MaxConns: clients filling every slot at once must not
		// push out each other's handshakes.
		cfg.MaxPending = max(DefaultMaxPending, cfg.MaxConns)
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
	if cfg.RefusalLogBurst <= 0 {
		cfg.RefusalLogBurst = DefaultRefusalLogBurst
	}
	if cfg.RefusalLogWindow <= 0 {
		cfg.RefusalLogWindow = DefaultRefusalLogWindow
	}
	return &Server{cfg: cfg, log: cfg.Logger, conns: map[*serverConn]struct{}{},
		byOrigin: map[string]int{}, pending: newPendingConns(cfg.MaxPending),
		refusals: newRefusalLog(cfg.Logger, cfg.RefusalLogBurst, cfg.RefusalLogWindow),
		release:  newMemoryRelease()}
}

// ActiveConnections is the number of open WebSocket connections.
func (s *Server) ActiveConnections() int { return int(s.active.Load()) }

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, reason string) {
	s.refusals.refused(r, status, reason)
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
	grants, origin := s.cfg.Gate.Grants(r)
	key := originKey(origin)
	if origin != "" {
		if reason := s.webSlotRefusal(key); reason != "" {
			s.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			s.refuse(w, r, http.StatusServiceUnavailable, reason)
			return
		}
		s.byOrigin[key]++
		s.webConns++
	}
	s.active.Add(1)
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer s.active.Add(-1)
	if origin != "" {
		defer func() {
			s.mu.Lock()
			if s.byOrigin[key]--; s.byOrigin[key] <= 0 {
				delete(s.byOrigin, key)
			}
			s.webConns--
			s.mu.Unlock()
		}()
	}

	opts := &websocket.AcceptOptions{InsecureSkipVerify: true} // Origin was checked by the gate, more strictly.
	if subprotocol != "" {
		opts.Subprotocols = []string{subprotocol}
	}
	hj := &hijackRecorder{ResponseWriter: w}
	c, err := websocket.Accept(hj, r, opts)
	if err != nil {
		s.log.Info("websocket upgrade failed", zap.String("remote", r.RemoteAddr), zap.Error(err))
		return
	}
	c.SetReadLimit(s.cfg.ReadLimit)
	s.serve(c, hj.conn, r.RemoteAddr, grants, origin, openedWith(r))
}

// webSlotRefusal is why a connection from web origin key may not have a
// slot ("" when it may), with mu held.
func (s *Server) webSlotRefusal(key string) string {
	if n := s.cfg.MaxConnsPerOrigin; s.byOrigin[key] >= n {
		return "service unavailable: too many connections from this origin (limit " + strconv.Itoa(n) + "); close an idle one and retry"
	}
	if n := s.cfg.MaxConns - nativeReserve(s.cfg.MaxConns); s.webConns >= n {
		return "service unavailable: web pages hold every connection they may (limit " + strconv.Itoa(n) +
			"; the rest are kept for native clients); close an idle one and retry"
	}
	return ""
}

// serverConn is one client connection.
type serverConn struct {
	srv *Server
	ws  *websocket.Conn
	// raw is the socket under ws, closed directly when a shutdown's grace
	// period runs out: the library's close handshake waits its own 5 s
	// for a client that does not answer, and holds the socket meanwhile.
	raw    net.Conn
	stream *frameStream
	sem    chan struct{}
	wg     sync.WaitGroup
	peer   *Peer
	log    *zap.Logger
	// ctx is the connection's context: it carries the Peer and ends when
	// the connection closes. Every request's context derives from it.
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// inflight holds the cancel of each unanswered request, by the id the
	// client sent (idKey), for $/cancelRequest.
	inflight map[string][]*inflightCall
	// lanes holds, by order key (Ordered), the ordered requests waiting
	// behind the one whose handler runs; a key is here while its lane has
	// a goroutine.
	lanes map[string][]func()
}

func (s *Server) serve(ws *websocket.Conn, raw net.Conn, remote string, grants Grants, origin string, opened tokenDigest) {
	id := s.nextID.Add(1)
	log := s.log.With(zap.Uint64("conn", id))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	peer := &Peer{id: id, grants: grants, origin: origin, opened: opened, reg: s.cfg.Registry, onPanic: func(method string, p any, stack []byte) {
		log.Error("handler panicked", zap.String("method", method), zap.Any("panic", p), zap.ByteString("stack", stack))
	}}
	ctx = withPeer(ctx, peer)
	peer.ctx = ctx
	sc := &serverConn{srv: s, ws: ws, raw: raw, sem: make(chan struct{}, s.cfg.MaxInFlight), log: log, peer: peer, ctx: ctx, cancel: cancel,
		inflight: map[string][]*inflightCall{}, lanes: map[string][]func(){}}

	// Registered before it reads anything, and under the lock Shutdown
	// takes its list with: a connection whose upgrade finished after
	// Shutdown took the list would be closed by nobody, and Shutdown would
	// wait for it for ever.
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		_ = ws.Close(websocket.StatusGoingAway, goingAway)
		return
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, sc)
		s.mu.Unlock()
		log.Debug("connection closed")
	}()
	log.Debug("connection opened", zap.String("remote", remote), zap.Stringer("grants", grants))

	stream := newFrameStream(ctx, ws, true, s.cfg.WriteTimeout, s.cfg.MaxBatch, log)
	stream.out = newOutgoing(stream.write, ctx.Done(), log)
	peer.out = stream.out
	peer.write = stream.write
	stream.handle = sc.handle
	stream.large = s.release.note
	sc.stream = stream
	jc := jsonrpc2.NewConn(ctx, stream, noRequests{}, jsonrpc2.SetLogger(zapPrintf{log}))
	sc.peer.conn.Store(jc)
	// Requests may be read from here on: a handler finds its Peer able to
	// send.
	close(stream.ready)

	<-jc.DisconnectNotify()
	cancel()
	sc.wg.Wait()
}

// noRequests is the handler jsonrpc2 holds on the server. The frame stream
// hands requests to serverConn.handle itself, so none reach jsonrpc2.
type noRequests struct{}

func (noRequests) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if !req.Notif {
		_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: rpcclient.CodeInternalError, Message: "internal error: a request reached the wrong handler"})
	}
}

// hijackRecorder keeps the socket the WebSocket upgrade takes over, so a
// shutdown can close it when the close handshake would outlast the grace
// period.
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response writer cannot hand over its connection")
	}
	c, rw, err := hj.Hijack()
	h.conn = c
	return c, rw, err
}

// goingAway is the close reason a shutting-down server gives with 1001.
const goingAway = "the server is shutting down"

// handle is called by the frame stream on the connection's read goroutine,
// in frame order. It answers over-cap requests at once and runs the rest
// concurrently.
func (sc *serverConn) handle(req *request) {
	if req.method == rpcclient.CancelRequestMethod {
		// Handled here, in frame order and outside the in-flight cap: a
		// client at its cap is exactly the one that needs to cancel.
		sc.cancelRequest(req)
		return
	}
	if sc.srv.draining.Load() {
		if !req.notif() {
			sc.answerError(req, &wireError{Code: rpcclient.CodeShuttingDown, Message: "the daemon is shutting down and takes no new requests"})
		}
		return
	}
	// A connection at its cap is refused whatever it asks, as the cap is
	// documented; below it, an answer given at once (Fast) never holds a
	// slot, a goroutine or anything to cancel.
	if len(sc.sem) < cap(sc.sem) {
		if res, ok, rerr := sc.srv.cfg.Registry.dispatchFast(sc.ctx, req.method, req.params); ok {
			sc.finish(req, res, nil, rerr, false)
			return
		}
	}
	select {
	case sc.sem <- struct{}{}:
	default:
		if !req.notif() {
			sc.answerError(req, &wireError{Code: rpcclient.CodeTooManyRequests,
				Message: fmt.Sprintf("too many requests in flight on this connection (limit %d): wait for answers before sending more", cap(sc.sem))})
		}
		return
	}
	reqCtx, cancel := context.WithCancelCause(sc.ctx)
	var untrack func()
	if !req.notif() {
		untrack = sc.track(req.id, cancel)
	}
	if key, ok := sc.srv.cfg.Registry.orderKey(req.method, req.params); ok {
		sc.inLane(key, func() { sc.run(reqCtx, cancel, untrack, req) })
		return
	}
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		sc.run(reqCtx, cancel, untrack, req)
	}()
}

// inLane runs job after every job queued before it under key has run, on
// the lane's one goroutine (see Ordered). It is called on the read
// goroutine, so jobs queue in frame order; it never blocks, and what waits
// in a lane holds its request's in-flight slot, so lanes are bounded by
// the in-flight cap.
func (sc *serverConn) inLane(key string, job func()) {
	sc.mu.Lock()
	if waiting, busy := sc.lanes[key]; busy {
		sc.lanes[key] = append(waiting, job)
		sc.mu.Unlock()
		return
	}
	sc.lanes[key] = nil
	sc.mu.Unlock()
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		for job != nil {
			job()
			sc.mu.Lock()
			if waiting := sc.lanes[key]; len(waiting) > 0 {
				job, sc.lanes[key] = waiting[0], waiting[1:]
			} else {
				job = nil
				delete(sc.lanes, key)
			}
			sc.mu.Unlock()
		}
	}()
}

// run dispatches one request, answers it, and then runs its Then: on its
// own goroutine when it has one, so an ordered request's lane waits for
// its handler and answer, never for what it goes on to do.
func (sc *serverConn) run(reqCtx context.Context, cancel context.CancelCauseFunc, untrack func(), req *request) {
	res, then, rerr := sc.srv.cfg.Registry.Dispatch(reqCtx, req.method, req.params)
	withdrawn := errors.Is(context.Cause(reqCtx), errCancelRequested)
	// The slot is free before the answer is written: a client that sends
	// its next request the moment it reads an answer must not find the cap
	// still counting the answered one.
	if untrack != nil {
		untrack()
	}
	cancel(nil)
	<-sc.sem
	if then != nil {
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			sc.finish(req, res, then, rerr, withdrawn)
		}()
		return
	}
	sc.finish(req, res, then, rerr, withdrawn)
}

// finish answers a request (a notification gets none) and then runs its
// Then.
func (sc *serverConn) finish(req *request, res any, then Then, rerr *rpcclient.Error, withdrawn bool) {
	ctx := sc.ctx
	if req.notif() {
		if rerr != nil && rerr.CloseConn != "" {
			sc.closeAfterRefusal(req, rerr)
		}
		if then != nil {
			then(ctx)
		}
		return
	}
	if rerr != nil {
		if withdrawn && rerr.Code != rpcclient.CodeRequestCancelled {
			rerr = &rpcclient.Error{Code: rpcclient.CodeRequestCancelled, Message: "request cancelled: the client withdrew it with $/cancelRequest"}
		}
		if rerr.Code == rpcclient.CodeInternalError {
			sc.log.Warn("request failed", zap.String("method", req.method), zap.String("error", rerr.Message))
		}
		flushed := sc.answerError(req, wireOf(rerr))
		if rerr.CloseConn != "" {
			// A batch member's answer leaves with its batch: the socket
			// stays until that frame is written.
			select {
			case <-flushed:
			case <-ctx.Done():
			}
			sc.closeAfterRefusal(req, rerr)
		}
		return
	}
	flushed, err := sc.reply(req, res)
	if err != nil {
		sc.log.Debug("could not send an answer", zap.String("method", req.method), zap.Error(err))
		return
	}
	if then == nil {
		return
	}
	// A batch member's answer travels with its batch: what follows it
	// waits for that frame. An answer already written is checked first: a
	// client that closes the moment it reads the answer must still find the
	// Then run (with the connection's context ended), not skipped by the
	// select's choice between two ready cases.
	select {
	case <-flushed:
	default:
		select {
		case <-flushed:
		case <-ctx.Done():
			return
		}
	}
	then(ctx)
}

// closeAfterRefusal ends the connection with 1008 once a refusal marked
// with CloseAfter has been answered.
func (sc *serverConn) closeAfterRefusal(req *request, rerr *rpcclient.Error) {
	sc.log.Info("closing the connection after refusing a request", zap.String("method", req.method), zap.String("reason", rerr.CloseConn))
	_ = sc.ws.Close(websocket.StatusPolicyViolation, rerr.CloseConn)
}

func (sc *serverConn) answerError(req *request, e *wireError) (flushed <-chan struct{}) {
	flushed, err := sc.stream.answer(req, errorAnswerWire(req.id, e))
	if err != nil {
		sc.log.Debug("could not send an error answer", zap.String("method", req.method), zap.Error(err))
	}
	if flushed == nil {
		return sent
	}
	return flushed
}

// reply sends a success answer. A result that is already JSON (Encoded) is
// written as it is; anything else is encoded once, and the envelope joined
// around it without a second pass. flushed is closed once the frame
// carrying it is written.
func (sc *serverConn) reply(req *request, res any) (flushed <-chan struct{}, err error) {
	var result []byte
	if e, ok := res.(encodedResult); ok {
		result = e.encodedJSON()
	} else if result, err = json.Marshal(res); err != nil {
		return nil, err
	}
	return sc.stream.answerResult(req, result)
}

// Shutdown stops taking requests and closes every connection with 1001
// (going away), waiting until they are gone or ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	defer s.refusals.close()
	s.release.close()
	s.mu.Lock()
	s.draining.Store(true)
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		go func(c *serverConn) {
			_ = c.ws.Close(websocket.StatusGoingAway, goingAway)
		}(c)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// A close handshake the client never answers would hold the
		// socket for the library's own timeout, past the grace period the
		// operator set: drop the socket itself.
		for _, c := range conns {
			c.cancel()
			if c.raw != nil {
				_ = c.raw.Close()
			}
			_ = c.ws.CloseNow()
		}
		<-done
		return ctx.Err()
	}
}

// zapPrintf adapts zap to jsonrpc2's Logger.
type zapPrintf struct{ log *zap.Logger }

func (z zapPrintf) Printf(format string, v ...any) {
	z.log.Debug(fmt.Sprintf(format, v...))
}

// Admit runs this server's gate for another WebSocket endpoint on the same
// listener (the daemon's /acp): the same token, Host and Origin checks,
// refused with the same texts and counted in the same refusal log. When ok
// is false the refusal has been written to w. A draining server admits
// nobody.
func (s *Server) Admit(w http.ResponseWriter, r *http.Request) (subprotocol string, grants Grants, origin string, ok bool) {
	if r.Method != http.MethodGet {
		s.refuse(w, r, http.StatusMethodNotAllowed, "method not allowed: "+r.URL.Path+" is a WebSocket endpoint (GET with Upgrade: websocket)")
		return "", 0, "", false
	}
	subprotocol, refusal := s.cfg.Gate.Check(r)
	if refusal != nil {
		s.refuse(w, r, refusal.Status, refusal.Reason)
		return "", 0, "", false
	}
	if s.draining.Load() {
		s.refuse(w, r, http.StatusServiceUnavailable, "service unavailable: the daemon is shutting down")
		return "", 0, "", false
	}
	grants, origin = s.cfg.Gate.Grants(r)
	return subprotocol, grants, origin, true
}

// Refuse answers an upgrade with status and reason, logged with the
// gate's refusals.
func (s *Server) Refuse(w http.ResponseWriter, r *http.Request, status int, reason string) {
	s.refuse(w, r, status, reason)
}
