package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/rpc/rpcclient"
)

func dialTest(t *testing.T, url string, opts rpcclient.ClientOptions) *rpcclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, url, fuzzToken, opts)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// A caller that gives up on a call must not leave the daemon working on it:
// the client withdraws the request with $/cancelRequest, the handler's
// context ends, and the connection goes on serving.
func TestACallWhoseContextEndsIsWithdrawnWithCancelRequest(t *testing.T) {
	st := newServerTest(t, 0)
	c := dialTest(t, st.url, rpcclient.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := c.Call(ctx, "wait.cancel", nil, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool { return st.cancelled.Load() == 1 }, 5*time.Second, 10*time.Millisecond,
		"the server never saw the request withdrawn")

	var n int
	require.NoError(t, c.Call(context.Background(), "wait.ms", streamParams{N: 1}, &n))
	assert.Equal(t, 1, n, "the connection still answers")
}

// requestingServer sends the client its frames (a request first) and hands
// back the frame the client answered with.
func requestingServer(t *testing.T, frames ...string) (url string, answer <-chan string) {
	t.Helper()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		for _, f := range frames {
			if ws.Write(ctx, websocket.MessageText, []byte(f)) != nil {
				return
			}
		}
		_, b, err := ws.Read(ctx)
		if err == nil {
			got <- string(b)
		}
		_, _, _ = ws.Read(ctx) // until the client closes
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), got
}

func TestTheClientAnswersTheServersRequestsWithItsOnRequest(t *testing.T) {
	cases := []struct {
		name  string
		serve func(ctx context.Context, method string, params json.RawMessage) (any, error)
		want  string
	}{
		{"without OnRequest: method not found", nil,
			`{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"this client serves no methods"}}`},
		{"a result", func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			return map[string]string{"method": method, "params": string(params)}, nil
		}, `{"jsonrpc":"2.0","id":9,"result":{"method":"ask","params":"{\"q\":1}"}}`},
		{"an *Error keeps its code and data", func(context.Context, string, json.RawMessage) (any, error) {
			return nil, Errorf(-32000, map[string]string{"why": "no"}, "refused")
		}, `{"jsonrpc":"2.0","id":9,"error":{"code":-32000,"message":"refused","data":{"why":"no"}}}`},
		{"any other error is internal", func(context.Context, string, json.RawMessage) (any, error) {
			return nil, errors.New("broken")
		}, `{"jsonrpc":"2.0","id":9,"error":{"code":-32603,"message":"broken"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, answer := requestingServer(t, `{"jsonrpc":"2.0","id":9,"method":"ask","params":{"q":1}}`)
			dialTest(t, url, rpcclient.ClientOptions{OnRequest: tc.serve})
			select {
			case a := <-answer:
				assert.JSONEq(t, tc.want, a)
			case <-time.After(5 * time.Second):
				t.Fatal("the client never answered")
			}
		})
	}
}

// A request the client is still serving does not stop notifications, and
// Close waits for it to return.
func TestAServedRequestRunsBesideNotificationsAndCloseWaitsForIt(t *testing.T) {
	url, _ := requestingServer(t, `{"jsonrpc":"2.0","id":1,"method":"slow"}`, `{"jsonrpc":"2.0","method":"note"}`)
	noted := make(chan struct{})
	returned := make(chan struct{})
	c, err := Dial(context.Background(), url, fuzzToken, rpcclient.ClientOptions{
		OnNotification: func(string, json.RawMessage) { close(noted) },
		OnRequest: func(ctx context.Context, _ string, _ json.RawMessage) (any, error) {
			defer close(returned)
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	require.NoError(t, err)
	select {
	case <-noted:
	case <-time.After(5 * time.Second):
		t.Fatal("the notification waited for the request being served")
	}
	require.NoError(t, c.Close())
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the request it was serving")
	}
}
