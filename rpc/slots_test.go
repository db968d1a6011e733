package rpc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slotServer is a server with the slot bounds given, behind a real
// http.Server wired as the daemon wires it (ConnState, handshake
// timeouts).
func slotServer(t *testing.T, cfg ServerConfig, handshake time.Duration) (*Server, string) {
	t.Helper()
	cfg.Registry = NewRegistry()
	cfg.Gate = &Gate{
		Token:          func() ([]byte, error) { return []byte(fuzzToken), nil },
		AllowedOrigins: []string{"https://a.example", "https://b.example", "https://c.example", "https://d.example"},
	}
	srv := NewServer(cfg)
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ConnState = srv.ConnState
	HandshakeTimeouts(hs.Config, handshake)
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	return srv, hs.Listener.Addr().String()
}

// dialAs opens a WebSocket with the token, from origin ("" for a native
// client), and returns the HTTP status of a refused upgrade (0 when it
// was accepted) and the refusal's text.
func dialAs(t *testing.T, addr, origin string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer " + fuzzToken}}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ws, resp, err := websocket.Dial(ctx, "ws://"+addr+"/rpc", &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		t.Cleanup(func() { ws.CloseNow() })
		return 0, ""
	}
	require.NotNil(t, resp, "%v", err)
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// One web origin, however many tabs it opens, holds at most its share of
// the connections, and web origins together leave a quarter of them to the
// native clients, which always connect.
func TestOneOriginCannotHoldEveryConnectionAndNativeClientsAlwaysHaveRoom(t *testing.T) {
	srv, addr := slotServer(t, ServerConfig{MaxConns: 8}, time.Minute)
	for i := 0; i < 2; i++ { // a quarter of 8
		status, msg := dialAs(t, addr, "https://a.example")
		require.Zero(t, status, msg)
	}
	for i := 0; i < 5; i++ {
		status, msg := dialAs(t, addr, "https://A.example")
		assert.Equal(t, http.StatusServiceUnavailable, status)
		assert.Contains(t, msg, "too many connections from this origin (limit 2)")
	}
	status, msg := dialAs(t, addr, "")
	require.Zero(t, status, "a native client connects while the origin is at its cap: %s", msg)

	for _, o := range []string{"https://b.example", "https://b.example", "https://c.example", "https://c.example"} {
		status, msg := dialAs(t, addr, o)
		require.Zero(t, status, msg)
	}
	status, msg = dialAs(t, addr, "https://d.example")
	assert.Equal(t, http.StatusServiceUnavailable, status, "web pages hold 6 of 8")
	assert.Contains(t, msg, "the rest are kept for native clients")
	status, msg = dialAs(t, addr, "")
	require.Zero(t, status, "the native reserve: %s", msg)
	assert.Equal(t, 8, srv.ActiveConnections())
	status, _ = dialAs(t, addr, "")
	assert.Equal(t, http.StatusServiceUnavailable, status, "max_connections still bounds everyone")
}

// A closed web connection gives its origin's slot back.
func TestAnOriginsSlotIsFreedWhenItsConnectionCloses(t *testing.T) {
	srv, addr := slotServer(t, ServerConfig{MaxConns: 8, MaxConnsPerOrigin: 1}, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer " + fuzzToken}, "Origin": {"https://a.example"}}
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/rpc", &websocket.DialOptions{HTTPHeader: h})
	require.NoError(t, err)
	status, _ := dialAs(t, addr, "https://a.example")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool { return srv.ActiveConnections() == 0 }, 5*time.Second, 10*time.Millisecond)
	status, msg := dialAs(t, addr, "https://a.example")
	assert.Zero(t, status, msg)
}

// halfOpen opens n connections that send the start of an upgrade and
// never finish it (slowloris), and returns them.
func halfOpen(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = c.Write([]byte("GET /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"))
		require.NoError(t, err)
		conns = append(conns, c)
	}
	return conns
}

// closedByServer reports whether the server has closed c.
func closedByServer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// Connections that never finish their upgrade (they never show the token)
// have a bound of their own: past MaxPending the oldest is closed, so
// half-open connections cannot pile up and hold descriptors, and a native
// client still connects in the middle of them. The handshake deadline is
// a minute here: only the bound closes them.
func TestHalfOpenUpgradesAreBoundedAndNeverLockOutANativeClient(t *testing.T) {
	srv, addr := slotServer(t, ServerConfig{MaxConns: 8, MaxPending: 16}, time.Minute)
	conns := halfOpen(t, addr, 64)
	require.Eventually(t, func() bool {
		pending, evicted := srv.PendingConnections()
		return pending <= 16 && evicted >= 48
	}, 5*time.Second, 10*time.Millisecond)
	closed := 0
	for _, c := range conns[:48] {
		if closedByServer(c, 2*time.Second) {
			closed++
		}
	}
	assert.Equal(t, 48, closed, "the oldest 48 were closed")
	assert.False(t, closedByServer(conns[63], 100*time.Millisecond), "the newest are still waiting")

	// More keep coming while a native client connects.
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				continue
			}
			_, _ = c.Write([]byte("GET /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
			defer c.Close()
			time.Sleep(time.Millisecond)
		}
	}()
	for i := 0; i < 5; i++ {
		status, msg := dialAs(t, addr, "")
		require.Zero(t, status, msg)
	}
	close(stop)
	<-flooded
	pending, _ := srv.PendingConnections()
	assert.LessOrEqual(t, pending, 16)
	assert.Equal(t, 5, srv.ActiveConnections())
}

// Before the upgrade every phase has a deadline: headers that never end,
// and a connection left idle after a refused request, are closed after
// it; an upgraded connection is not, as the upgrade clears the deadlines.
func TestAnUnfinishedHandshakeAndAnIdleRefusedConnectionAreClosedAtTheDeadline(t *testing.T) {
	srv, addr := slotServer(t, ServerConfig{MaxConns: 8}, 300*time.Millisecond)
	slow := halfOpen(t, addr, 1)[0]

	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { idle.Close() })
	_, err = idle.Write([]byte("GET /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	status, msg := dialAs(t, addr, "")
	require.Zero(t, status, msg)

	assert.True(t, closedByServer(slow, 3*time.Second), "headers that never end")
	assert.True(t, closedByServer(idle, 3*time.Second), "an idle connection after a refusal")
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, 1, srv.ActiveConnections(), "the upgraded connection outlives the deadline")
	pending, _ := srv.PendingConnections()
	assert.Zero(t, pending)
}

func TestTheSlotDefaultsAreFractionsOfMaxConns(t *testing.T) {
	assert.Equal(t, 32, defaultMaxConnsPerOrigin(128))
	assert.Equal(t, 1, defaultMaxConnsPerOrigin(2))
	assert.Equal(t, 32, nativeReserve(128))
	assert.Equal(t, 0, nativeReserve(1))
	assert.True(t, strings.HasPrefix(originKey("HTTPS://A.example"), "https://a.example"))
}
