package daemon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/card-dev/card/rpc"
)

// Every connection's goroutines (the read loop, in-flight handlers, the
// jsonrpc2 conn) must be gone once it closes: a daemon that runs for months
// sees millions of connections from editor windows opening and closing.
func TestAThousandConnectDisconnectCyclesLeaveNoGoroutineBehind(t *testing.T) {
	td := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Warm up: the first connection starts the HTTP server's own workers.
	c, err := rpc.Dial(ctx, td.URL(), td.token, rpc.ClientOptions{})
	require.NoError(t, err)
	require.NoError(t, c.Call(ctx, "daemon.info", nil, nil))
	require.NoError(t, c.Close())
	time.Sleep(100 * time.Millisecond)
	before := goleak.IgnoreCurrent()

	for i := 0; i < 1000; i++ {
		c, err := rpc.Dial(ctx, td.URL(), td.token, rpc.ClientOptions{})
		require.NoError(t, err, "cycle %d", i)
		require.NoError(t, c.Call(ctx, "daemon.info", nil, nil), "cycle %d", i)
		require.NoError(t, c.Close(), "cycle %d", i)
	}
	// VerifyNone retries until the closing goroutines have exited.
	goleak.VerifyNone(t, before)
	require.Zero(t, waitForConnections(td, 0), "the daemon still counts open connections")
}

// waitForConnections waits until the daemon's connection count is want and
// returns the last count seen beyond it.
func waitForConnections(td *testDaemon, want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := td.ActiveConnections()
		if n == want || time.Now().After(deadline) {
			return n - want
		}
		time.Sleep(10 * time.Millisecond)
	}
}
