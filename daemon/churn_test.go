package daemon_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
)

// Every connection's goroutines (the read loop, in-flight handlers, the
// jsonrpc2 conn) must be gone once it closes: a daemon that runs for months
// sees millions of connections from editor windows opening and closing.
func TestAThousandConnectDisconnectCyclesLeaveNoGoroutineBehind(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{NoClient: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cycle := func() error {
		c, err := client.Dial(ctx, client.Options{URL: td.URL, Token: td.Token})
		if err != nil {
			return err
		}
		_, err = c.Info(ctx)
		return errors.Join(err, c.Close())
	}
	// Warm up: the first connection starts the HTTP server's own workers.
	require.NoError(t, cycle())
	time.Sleep(100 * time.Millisecond)
	before := goleak.IgnoreCurrent()

	for i := 0; i < 1000; i++ {
		require.NoError(t, cycle(), "cycle %d", i)
	}
	// VerifyNone retries until the closing goroutines have exited.
	goleak.VerifyNone(t, before)
	require.Zero(t, waitForConnections(td, 0), "the daemon still counts open connections")
}

// waitForConnections waits until the daemon's connection count is want and
// returns the last count seen beyond it.
func waitForConnections(td *daemontest.Daemon, want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := td.ActiveConnections()
		if n == want || time.Now().After(deadline) {
			return n - want
		}
		time.Sleep(10 * time.Millisecond)
	}
}
