package rpc

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Only a connection whose upgrade ServerConfig.Local recognises has a
// local receiver; every other connection has none, whatever it sends, and
// both are granted and served alike.
func TestOnlyTheConnectionLocalRecognisesHasALocalReceiver(t *testing.T) {
	r := NewRegistry()
	Register(r, "peer.local", Doc{Access: AccessRead, Summary: "Whether this connection has a local receiver, after handing it a note."},
		func(ctx context.Context, _ struct{}) (bool, error) {
			local := PeerFrom(ctx).Local()
			if local != nil {
				local("peer.note", json.RawMessage(`{"n":1}`))
			}
			return local != nil, nil
		})
	var got atomic.Int32
	srv := NewServer(ServerConfig{
		Registry: r,
		Gate:     &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }},
		Local: func(req *http.Request) LocalReceiver {
			if req.Header.Get("X-Test-Local") != "the secret" {
				return nil
			}
			return func(method string, params json.RawMessage) {
				if method == "peer.note" && string(params) == `{"n":1}` {
					got.Add(1)
				}
			}
		},
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/rpc"
	for _, tc := range []struct {
		name   string
		header string
		local  bool
	}{
		{"no header", "", false},
		{"a wrong secret", "a guess", false},
		{"the secret", "the secret", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h := http.Header{"Authorization": {"Bearer " + fuzzToken}}
			if tc.header != "" {
				h.Set("X-Test-Local", tc.header)
			}
			ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
			require.NoError(t, err)
			defer ws.CloseNow()
			before := got.Load()
			require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"peer.local"}`)))
			_, frame, err := ws.Read(ctx)
			require.NoError(t, err)
			assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":`+map[bool]string{true: "true", false: "false"}[tc.local]+`}`, string(frame))
			want := int32(0)
			if tc.local {
				want = 1
			}
			assert.Equal(t, want, got.Load()-before, "notes taken in process")
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
}

// The server asks Local about a connection before it answers the upgrade,
// so a client that forgets its secret as soon as its dial returns (the
// daemon's own front door does) is still recognised.
func TestLocalIsAskedBeforeTheUpgradeIsAnswered(t *testing.T) {
	var dialed, dialedWhenAsked atomic.Bool
	asked := make(chan struct{})
	srv := NewServer(ServerConfig{
		Registry: NewRegistry(),
		Gate:     &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }},
		Local: func(*http.Request) LocalReceiver {
			// Long enough for a 101 already written to reach the client.
			time.Sleep(200 * time.Millisecond)
			dialedWhenAsked.Store(dialed.Load())
			close(asked)
			return nil
		},
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/rpc",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + fuzzToken}}})
	require.NoError(t, err)
	dialed.Store(true)
	defer ws.CloseNow()
	<-asked
	assert.False(t, dialedWhenAsked.Load(), "the client's dial had returned before Local was asked")
	ws.Close(websocket.StatusNormalClosure, "")
	require.NoError(t, srv.Shutdown(ctx))
}
