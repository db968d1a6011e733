package daemon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc"
)

// Past a cap the client gets a clear answer at once, never a hang.
func TestTheConnectionCapAnswers503AndFreesUpWhenAClientLeaves(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{Config: "max_connections = 2\n"})
	ctx := daemontest.Context(t)
	first := td.Client
	td.Dial(t, client.Options{})

	_, err := client.Dial(ctx, client.Options{URL: td.URL, Token: td.Token})
	var de *rpc.DialError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, 503, de.Status)
	assert.Contains(t, de.Reason, "too many connections (limit 2)")

	require.NoError(t, first.Close())
	require.Zero(t, waitForConnections(td, 1))
	third := td.Dial(t, client.Options{})
	_, err = third.Info(ctx)
	require.NoError(t, err, "a slot freed by a closed connection is reused")
}

func TestTheInFlightCapAnswersAtOnceWithItsOwnCode(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{Config: "max_inflight_per_connection = 1\n", NoClient: true})
	c := td.Raw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slow := `{"jsonrpc":"2.0","id":"slow","method":"substrate.run_command","params":{"command":"sleep 1"}}`
	quick := `{"jsonrpc":"2.0","id":"quick","method":"daemon.info"}`
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(slow)))
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(quick)))

	start := time.Now()
	var order []string
	for i := 0; i < 2; i++ {
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		var a struct {
			ID    string `json:"id"`
			Error *struct {
				Code    int64  `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(b, &a), string(b))
		order = append(order, a.ID)
		if a.ID == "quick" {
			require.NotNil(t, a.Error, string(b))
			assert.Equal(t, rpc.CodeTooManyRequests, a.Error.Code)
			assert.Contains(t, a.Error.Message, "limit 1")
			assert.Less(t, time.Since(start), 900*time.Millisecond, "refused at once, not after the slow request")
		} else {
			assert.Nil(t, a.Error, string(b))
		}
	}
	assert.Equal(t, []string{"quick", "slow"}, order)
}
