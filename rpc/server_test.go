package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/card-dev/card/rpc/rpcclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type streamParams struct {
	N int `json:"n"`
	// Pad makes the answer that many bytes longer, so writing it takes
	// long enough for a misordered notification to overtake it.
	Pad int `json:"pad,omitempty"`
}

type streamNote struct {
	I int `json:"i"`
}

// serverTest is an in-process server with methods that exercise reply then
// continue, cancellation and the connection's context, reached over a real
// WebSocket.
type serverTest struct {
	url string
	srv *Server
	// gone counts connection contexts that ended.
	gone atomic.Int32
	// cancelled counts requests whose context was cancelled.
	cancelled atomic.Int32
}

func newServerTest(t *testing.T, maxInFlight int) *serverTest {
	t.Helper()
	st := &serverTest{}
	r := NewRegistry()
	RegisterThen(r, "stream.start", Doc{Access: AccessRead, Summary: "Answer, then send n notifications."},
		func(ctx context.Context, p streamParams) (map[string]any, Then, error) {
			peer := PeerFrom(ctx)
			res := map[string]any{"started": true}
			if p.Pad > 0 {
				res["pad"] = strings.Repeat("x", p.Pad)
			}
			return res, func(ctx context.Context) {
				for i := 1; i <= p.N; i++ {
					if peer.Notify(ctx, "stream.note", streamNote{I: i}) != nil {
						return
					}
				}
			}, nil
		})
	RegisterThen(r, "stream.hold", Doc{Access: AccessRead, Summary: "Answer, then hold on until the connection ends."},
		func(ctx context.Context, _ struct{}) (bool, Then, error) {
			return true, func(ctx context.Context) {
				<-ctx.Done()
				st.gone.Add(1)
			}, nil
		})
	Register(r, "wait.cancel", Doc{Access: AccessRead, Summary: "Wait until the request is cancelled."},
		func(ctx context.Context, _ struct{}) (bool, error) {
			select {
			case <-ctx.Done():
				st.cancelled.Add(1)
				return false, ctx.Err()
			case <-time.After(20 * time.Second):
				return true, nil
			}
		})
	Register(r, "wait.ms", Doc{Access: AccessRead, Summary: "Answer after n milliseconds."},
		func(ctx context.Context, p streamParams) (int, error) {
			time.Sleep(time.Duration(p.N) * time.Millisecond)
			return p.N, nil
		})
	Register(r, "conn.watch", Doc{Access: AccessRead, Summary: "Count the connection's end."},
		func(ctx context.Context, _ struct{}) (bool, error) {
			context.AfterFunc(PeerFrom(ctx).Context(), func() { st.gone.Add(1) })
			return true, nil
		})
	Register(r, "refuse.close", Doc{Access: AccessRead, Summary: "Refuse, then end the connection."},
		func(ctx context.Context, _ struct{}) (bool, error) {
			return false, CloseAfter(&rpcclient.Error{Code: rpcclient.CodeInternalError, Message: "go away"}, "refused")
		})
	st.srv = NewServer(ServerConfig{
		Registry:    r,
		Gate:        &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }},
		MaxInFlight: maxInFlight,
	})
	hs := httptest.NewServer(st.srv)
	st.url = "ws" + strings.TrimPrefix(hs.URL, "http") + "/rpc"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = st.srv.Shutdown(ctx)
		hs.Close()
	})
	return st
}

// rawClient is a bare WebSocket, so a test controls every frame and id.
type rawClient struct {
	t  *testing.T
	ws *websocket.Conn
}

func (st *serverTest) dial(t *testing.T) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, st.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + fuzzToken}}})
	require.NoError(t, err)
	ws.SetReadLimit(4 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	return &rawClient{t: t, ws: ws}
}

func (c *rawClient) send(frame string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(c.t, c.ws.Write(ctx, websocket.MessageText, []byte(frame)))
}

func (c *rawClient) read() string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.ws.Read(ctx)
	require.NoError(c.t, err)
	return string(b)
}

// A handler's Then runs after its answer is written, so the notifications it
// sends can never overtake the answer that announced them. Repeated, because
// a race that loses one time in twenty is still a broken promise.
func TestTheAnswerAlwaysPrecedesTheNotificationsItsHandlerSendsAfterIt(t *testing.T) {
	st := newServerTest(t, 0)
	c := st.dial(t)
	for round := 0; round < 50; round++ {
		pad := 0
		if round%2 == 1 {
			pad = 1 << 20 // a slow answer to overtake
		}
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"stream.start","params":{"n":3,"pad":%d}}`, round, pad))
		var a struct {
			ID     int `json:"id"`
			Result struct {
				Started bool `json:"started"`
			} `json:"result"`
		}
		got := c.read()
		require.NoError(t, json.Unmarshal([]byte(got), &a), "round %d: the answer comes first, got %.200s", round, got)
		require.Equal(t, round, a.ID, "round %d: the answer comes first, got %.200s", round, got)
		require.True(t, a.Result.Started)
		for i := 1; i <= 3; i++ {
			assert.JSONEq(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":"stream.note","params":{"i":%d}}`, i), c.read(), "round %d", round)
		}
	}
}

// In a batch the answer travels in the batch's one frame, which waits for
// the batch's slowest member; what the handler sends after its answer waits
// for that frame too.
func TestInABatchTheNotificationsWaitForTheFrameThatCarriesTheAnswer(t *testing.T) {
	st := newServerTest(t, 0)
	c := st.dial(t)
	c.send(`[{"jsonrpc":"2.0","id":1,"method":"stream.start","params":{"n":2}},{"jsonrpc":"2.0","id":2,"method":"wait.ms","params":{"n":300}}]`)
	first := c.read()
	require.True(t, strings.HasPrefix(first, "["), "the batch's answer comes first, got %s", first)
	assert.Contains(t, first, `"started":true`)
	assert.Contains(t, first, `"result":300`)
	assert.Contains(t, c.read(), `"i":1`)
	assert.Contains(t, c.read(), `"i":2`)
}

// A request that is answered no longer counts against the in-flight cap
// while its Then goes on, so a connection can hold more streams than
// requests.
func TestARequestsThenDoesNotHoldAnInFlightSlot(t *testing.T) {
	st := newServerTest(t, 1)
	c := st.dial(t)
	for i := 1; i <= 3; i++ {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"stream.hold"}`, i))
		assert.JSONEq(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":true}`, i), c.read())
	}
	require.NoError(t, c.ws.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool { return st.gone.Load() == 3 }, 5*time.Second, 10*time.Millisecond,
		"every Then saw the connection's context end")
}

// The connection's context ends when the client goes away, so work tied to
// the connection hangs off it instead of a goroutine watching for the close.
func TestTheConnectionContextEndsWhenTheClientGoesAway(t *testing.T) {
	st := newServerTest(t, 0)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"conn.watch"}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":true}`, c.read())
	time.Sleep(50 * time.Millisecond)
	assert.Zero(t, st.gone.Load(), "the connection is still open")
	require.NoError(t, c.ws.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool { return st.gone.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
}

// $/cancelRequest names the request by the id the client sent, whatever the
// stream did with it on the way in (it rewrites null, negative, huge and
// batch-member ids), and the request answers -32800 under that same id.
func TestCancelRequestCancelsTheRequestItNamesAndItAnswersRequestCancelled(t *testing.T) {
	cases := []struct {
		name  string
		id    string
		batch bool
	}{
		{"integer id", `7`, false},
		{"string id", `"req-7"`, false},
		{"string id with an escape", `"r\u0065q"`, false},
		{"negative id, rewritten", `-7`, false},
		{"huge id, rewritten", `18446744073709551616`, false},
		{"batch member, rewritten", `8`, true},
	}
	st := newServerTest(t, 0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := st.dial(t)
			req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"wait.cancel"}`, tc.id)
			if tc.batch {
				req = "[" + req + "]"
			}
			c.send(req)
			time.Sleep(50 * time.Millisecond) // let the handler start waiting
			c.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":%s}}`, tc.id))
			got := c.read()
			if tc.batch {
				got = strings.TrimSuffix(strings.TrimPrefix(got, "["), "]")
			}
			var a struct {
				ID    json.RawMessage  `json:"id"`
				Error *rpcclient.Error `json:"error"`
			}
			require.NoError(t, json.Unmarshal([]byte(got), &a), got)
			assert.JSONEq(t, tc.id, string(a.ID), "answered under the client's own id")
			require.NotNil(t, a.Error, got)
			assert.Equal(t, rpcclient.CodeRequestCancelled, a.Error.Code)
			assert.Contains(t, a.Error.Message, "$/cancelRequest")
		})
	}
	assert.EqualValues(t, len(cases), st.cancelled.Load(), "each handler saw its context cancelled")
}

// $/cancelRequest is a notification: an id nobody is waiting on, or params
// that name no id, get no answer and leave the other requests alone.
func TestCancelRequestForAnUnknownIdIsIgnoredSilently(t *testing.T) {
	st := newServerTest(t, 0)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"wait.ms","params":{"n":300}}`)
	for _, p := range []string{`{"id":99}`, `{"id":"1"}`, `{"id":null}`, `{}`, `[1]`, `{"id":{"x":1}}`} {
		c.send(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":` + p + `}`)
	}
	c.send(`{"jsonrpc":"2.0","method":"$/cancelRequest"}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":300}`, c.read(),
		"the only frame is the untouched request's answer: id 1 is a number, \"1\" a string")
	assert.Zero(t, st.cancelled.Load())
}

func TestCancelRequestSentAsARequestIsRefused(t *testing.T) {
	st := newServerTest(t, 0)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":5,"method":"$/cancelRequest","params":{"id":4}}`)
	var a struct {
		ID    int              `json:"id"`
		Error *rpcclient.Error `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(c.read()), &a))
	assert.Equal(t, 5, a.ID)
	require.NotNil(t, a.Error)
	assert.Equal(t, rpcclient.CodeInvalidRequest, a.Error.Code)
	assert.Contains(t, a.Error.Message, "notification")
}

// A client at its in-flight cap can still cancel: $/cancelRequest takes no
// slot.
func TestCancelRequestWorksForAClientAtItsInFlightCap(t *testing.T) {
	st := newServerTest(t, 1)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"wait.cancel"}`)
	time.Sleep(50 * time.Millisecond)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"wait.ms","params":{"n":1}}`)
	assert.Contains(t, c.read(), `"code":-32001`, "the cap holds")
	c.send(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}`)
	assert.Contains(t, c.read(), `"code":-32800`)
}

// A handler that panics is answered -32603 naming the method, logged with
// its stack, and the connection and the server go on.
func TestAHandlerPanicIsAnsweredAndLoggedNotFatal(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	srv := NewServer(ServerConfig{
		Registry: fuzzRegistry(),
		Gate:     &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }},
		Logger:   zap.New(core),
	})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer srv.Shutdown(ctx)
	c, err := Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/rpc", fuzzToken, rpcclient.ClientOptions{})
	require.NoError(t, err)
	defer c.Close()

	err = c.Call(ctx, "fuzz.panic", nil, nil)
	var re *rpcclient.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, rpcclient.CodeInternalError, re.Code)
	assert.Contains(t, re.Message, "fuzz.panic")

	entries := logs.FilterMessage("handler panicked").All()
	require.Len(t, entries, 1)
	fields := entries[0].ContextMap()
	assert.Equal(t, "fuzz.panic", fields["method"])
	assert.Contains(t, fields["stack"], "goroutine")

	var echoed fuzzEchoParams
	require.NoError(t, c.Call(ctx, "fuzz.echo", fuzzEchoParams{}, &echoed), "the connection survives")
}

// A connection whose upgrade completes after Shutdown took its list of
// connections is closed with 1001 by itself; nobody else would close it,
// and Shutdown would wait for it for ever.
func TestAConnectionThatArrivesWhileTheServerDrainsClosesItself(t *testing.T) {
	srv := NewServer(ServerConfig{Registry: NewRegistry(), Gate: &Gate{}})
	served := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		srv.draining.Store(true) // Shutdown started between the gate and serve
		srv.serve(ws, nil, r.RemoteAddr, GrantAll, "", tokenDigest{})
		close(served)
	}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	require.NoError(t, err)
	defer c.CloseNow()
	_, _, err = c.Read(ctx)
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("serve did not return")
	}
	assert.Zero(t, len(srv.conns))
}

// A refusal marked CloseAfter reaches the client, alone or in a batch, and
// only then is the connection closed with 1008; other connections go on.
func TestARefusalThatClosesTheConnectionIsAnsweredFirst(t *testing.T) {
	st := newServerTest(t, 0)
	other := st.dial(t)
	for _, frame := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"refuse.close"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"wait.ms","params":{"n":50}},{"jsonrpc":"2.0","id":2,"method":"refuse.close"}]`,
	} {
		c := st.dial(t)
		c.send(frame)
		answer := c.read()
		assert.Contains(t, answer, `"message":"go away"`)
		if strings.HasPrefix(frame, "[") {
			assert.Contains(t, answer, `"result":50`, "the batch's other answer travels with it")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := c.ws.Read(ctx)
		cancel()
		assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "%v", err)
	}
	other.send(`{"jsonrpc":"2.0","id":7,"method":"wait.ms","params":{"n":1}}`)
	assert.Contains(t, other.read(), `"result":1`)
}
