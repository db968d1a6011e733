package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/daemon/daemontest"
)

// upgrade opens a WebSocket to d with the token, from origin ("" for a
// native client); it returns the refusal's status and text, or 0.
func upgrade(t *testing.T, d *daemontest.Daemon, origin string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer " + d.Token}}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ws, resp, err := websocket.Dial(ctx, d.URL, &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		t.Cleanup(func() { ws.CloseNow() })
		return 0, ""
	}
	require.NotNil(t, resp, "%v", err)
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// With card.toml's slot keys, one allowed origin is held to its share of
// max_connections while a native client still connects, and connections
// that never finish their upgrade are closed oldest first past
// max_pending_connections, the native client still getting through.
func TestTheDaemonKeepsSlotsForNativeClientsAgainstAnOriginAndHalfOpenUpgrades(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{
		Config: `login_shell_path = false
allowed_origins = ["https://app.example"]
max_connections = 8
max_connections_per_origin = 2
max_pending_connections = 4
`,
		Logger:   zap.NewNop(),
		NoClient: true,
	})
	for i := 0; i < 2; i++ {
		status, msg := upgrade(t, d, "https://app.example")
		require.Zero(t, status, msg)
	}
	status, msg := upgrade(t, d, "https://app.example")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, msg, "too many connections from this origin (limit 2)")
	status, msg = upgrade(t, d, "")
	require.Zero(t, status, "a native client: %s", msg)

	addr := strings.TrimSuffix(strings.TrimPrefix(d.URL, "ws://"), "/rpc")
	var conns []net.Conn
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		_, err = c.Write([]byte("GET /rpc HTTP/1.1\r\nHost: " + addr + "\r\n"))
		require.NoError(t, err)
		conns = append(conns, c)
	}
	closed := 0
	for _, c := range conns[:16] {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		var b [1]byte
		_, err := c.Read(b[:])
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			closed++
		}
	}
	assert.Equal(t, 16, closed, "all but the newest 4 half-open upgrades were closed, before the handshake deadline")
	status, msg = upgrade(t, d, "")
	require.Zero(t, status, "a native client among half-open upgrades: %s", msg)
}
