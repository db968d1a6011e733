package rpc

import (
	"container/list"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Connection slots. MaxConns bounds the connections that passed the gate;
// two more bounds keep any one kind of caller from taking every slot:
//
//   - an allowed web origin holds at most MaxConnsPerOrigin connections,
//     and the web origins together never take the last quarter of
//     MaxConns: a page (or many tabs of it) cannot lock out the native
//     clients, which are the user's own programs;
//   - a connection that has not finished its upgrade (it has not shown the
//     token yet) is one of at most MaxPending, whatever its state: a
//     header being read, a refused request's keep-alive, a body trickled
//     in. Past the bound the oldest one is closed to make room. Half-open
//     connections held to fill the pool only ever push each other out,
//     while a real client's handshake, which takes a millisecond, gets
//     through; and the descriptors such callers can hold are bounded.
//
// Handshakes also have deadlines of their own (HandshakeTimeouts), set on
// the http.Server; the upgrade clears them.

// Defaults for the slot bounds.
const (
	// DefaultMaxPending is the least MaxPending defaults to.
	DefaultMaxPending = 256
	// DefaultHandshakeTimeout bounds each phase of an upgrade before the
	// socket is handed over: reading the headers, reading the request,
	// writing the answer, and waiting idle between requests.
	DefaultHandshakeTimeout = 5 * time.Second
)

// defaultMaxConnsPerOrigin is a quarter of maxConns, at least 1.
func defaultMaxConnsPerOrigin(maxConns int) int { return max(maxConns/4, 1) }

// nativeReserve is how many of maxConns web origins together may not take.
func nativeReserve(maxConns int) int {
	if maxConns < 2 {
		return 0
	}
	return max(maxConns/4, 1)
}

// HandshakeTimeouts sets srv's timeouts for the phase before an upgrade:
// a request must arrive, and its answer go out, within timeout, and a
// connection left idle after a refused request is closed after it. Go's
// HTTP server clears the socket's deadlines when a WebSocket upgrade takes
// it over, so an open connection is not affected.
func HandshakeTimeouts(srv *http.Server, timeout time.Duration) {
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	srv.ReadHeaderTimeout = timeout
	srv.ReadTimeout = timeout
	srv.WriteTimeout = timeout
	srv.IdleTimeout = timeout
}

// pendingConns is the connections accepted and not yet upgraded, oldest
// first.
type pendingConns struct {
	max int

	mu      sync.Mutex
	order   *list.List // of net.Conn
	byConn  map[net.Conn]*list.Element
	evicted int64
}

func newPendingConns(max int) *pendingConns {
	return &pendingConns{max: max, order: list.New(), byConn: map[net.Conn]*list.Element{}}
}

// ConnState is the http.Server's ConnState hook that keeps the pending
// connections: each new one is added (closing the oldest past the bound),
// and an upgraded or closed one leaves.
func (s *Server) ConnState(c net.Conn, state http.ConnState) {
	p := s.pending
	switch state {
	case http.StateNew:
		var oldest net.Conn
		p.mu.Lock()
		p.byConn[c] = p.order.PushBack(c)
		if p.order.Len() > p.max {
			e := p.order.Front()
			oldest = e.Value.(net.Conn)
			p.order.Remove(e)
			delete(p.byConn, oldest)
			p.evicted++
		}
		p.mu.Unlock()
		if oldest != nil {
			s.refusals.closedPending(oldest.RemoteAddr().String())
			_ = oldest.Close()
		}
	case http.StateHijacked, http.StateClosed:
		p.mu.Lock()
		if e, ok := p.byConn[c]; ok {
			p.order.Remove(e)
			delete(p.byConn, c)
		}
		p.mu.Unlock()
	}
}

// PendingConnections is the number of accepted connections that have not
// finished an upgrade, and how many were closed to make room.
func (s *Server) PendingConnections() (pending int, evicted int64) {
	s.pending.mu.Lock()
	defer s.pending.mu.Unlock()
	return s.pending.order.Len(), s.pending.evicted
}

// originKey is how connections are counted per origin: origins compare
// without case, as the gate compares them.
func originKey(origin string) string { return strings.ToLower(origin) }
