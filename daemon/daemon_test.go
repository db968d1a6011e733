package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/rpc/rpcclient"
)

func TestMain(m *testing.M) {
	// Re-executed as a fake agent (the live-text benchmark's), the test
	// binary acts that part and exits.
	if fifo := os.Getenv(timedAgentEnv); fifo != "" {
		os.Exit(timedAgent(fifo))
	}
	daemontest.VerifyTestMain(m)
}

func TestDaemonInfoReportsWhoItIs(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{})
	info, err := td.Client.Info(daemontest.Context(t))
	require.NoError(t, err)
	assert.Equal(t, daemon.Version, info.Version)
	assert.Equal(t, daemon.ProtocolVersion, info.ProtocolVersion)
	assert.Equal(t, os.Getpid(), info.PID)
	assert.Equal(t, td.Home, info.Home)
	assert.Equal(t, td.URL, info.URL)
	assert.True(t, strings.HasPrefix(info.Addr, "127.0.0.1:"))
	_, err = time.Parse(time.RFC3339, info.StartedAt)
	assert.NoError(t, err)

	disc, err := daemon.ReadDiscovery(td.Home)
	require.NoError(t, err)
	assert.Equal(t, td.URL, disc.URL)
	assert.Equal(t, os.Getpid(), disc.PID)
	assert.Equal(t, info.StartedAt, disc.StartedAt)
}

func TestHomeAndTokenFilesArePrivate(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{NoClient: true})
	st, err := os.Stat(td.Home)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	st, err = os.Stat(filepath.Join(td.Home, home.TokenFileName))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.GreaterOrEqual(t, len(td.Token), 64, "256 bits, hex-encoded")
}

func TestUpgradeRefusals(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{NoClient: true})
	port := strings.TrimPrefix(strings.TrimSuffix(td.URL, "/rpc"), "ws://127.0.0.1:")
	cases := []struct {
		name   string
		url    string
		header http.Header
		host   string
		protos []string
		status int
	}{
		{name: "no token", status: 401},
		{name: "wrong token", header: http.Header{"Authorization": {"Bearer " + strings.Repeat("0", 64)}}, status: 401},
		{name: "token only in the query", url: td.URL + "?token=" + td.Token, status: 401},
		{name: "correct token in the query as well as the header", url: td.URL + "?access_token=" + td.Token,
			header: http.Header{"Authorization": {"Bearer " + td.Token}}, status: 401},
		{name: "wrong token in the subprotocol", protos: []string{"card.bearer.nope"}, status: 401},
		{name: "bad Host", host: "evil.example:" + port, header: http.Header{"Authorization": {"Bearer " + td.Token}}, status: 403},
		{name: "loopback Host with another port", host: "127.0.0.1:1", header: http.Header{"Authorization": {"Bearer " + td.Token}}, status: 403},
		{name: "bad Origin", header: http.Header{"Authorization": {"Bearer " + td.Token}, "Origin": {"https://evil.example"}}, status: 403},
		{name: "Origin null", header: http.Header{"Authorization": {"Bearer " + td.Token}, "Origin": {"null"}}, status: 403},
		{name: "localhost Origin is still a browser page", header: http.Header{"Authorization": {"Bearer " + td.Token}, "Origin": {"http://localhost:" + port}}, status: 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			u := tc.url
			if u == "" {
				u = td.URL
			}
			_, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: tc.header, Host: tc.host, Subprotocols: tc.protos})
			require.Error(t, err)
			require.NotNil(t, resp, "a refusal is a plain HTTP answer, not a dropped connection")
			assert.Equal(t, tc.status, resp.StatusCode)
		})
	}
}

func TestTheSubprotocolFormOfTheTokenIsAccepted(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{NoClient: true})
	c := td.Dial(t, client.Options{RPC: rpcclient.ClientOptions{TokenInSubprotocol: true}})
	info, err := c.Info(daemontest.Context(t))
	require.NoError(t, err)
	assert.Equal(t, td.Home, info.Home)
}

func TestEveryLoopbackHostFormIsAccepted(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{NoClient: true})
	port := strings.TrimPrefix(strings.TrimSuffix(td.URL, "/rpc"), "ws://127.0.0.1:")
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port} {
		t.Run(host, func(t *testing.T) {
			c := td.Dial(t, client.Options{RPC: rpcclient.ClientOptions{Host: host}})
			_, err := c.Info(daemontest.Context(t))
			require.NoError(t, err)
		})
	}
}

func TestRotatedTokenTakesEffectForNewConnections(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{})
	newTok, err := daemon.RotateToken(td.Home)
	require.NoError(t, err)
	require.NotEqual(t, td.Token, newTok)

	ctx := daemontest.Context(t)
	_, err = client.Dial(ctx, client.Options{URL: td.URL, Token: td.Token})
	var de *rpcclient.DialError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, 401, de.Status)

	c, err := client.Dial(ctx, client.Options{Home: td.Home})
	require.NoError(t, err, "a client reading the token file gets the new one")
	defer c.Close()
	_, err = c.Info(ctx)
	require.NoError(t, err)
	_, err = td.Client.Info(ctx)
	require.NoError(t, err, "open connections stay open")
}

func TestOversizeFrameClosesTheConnectionWith1009(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{Config: "max_message_bytes = 4096\n"})

	c := td.Raw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	big := `{"jsonrpc":"2.0","method":"daemon.info","id":1,"params":{"pad":"` + strings.Repeat("x", 8192) + `"}}`
	_ = c.Write(ctx, websocket.MessageText, []byte(big))
	_, _, err := c.Read(ctx)
	require.Error(t, err)
	assert.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err))

	// The daemon itself goes on serving.
	_, err = td.Client.Info(ctx)
	require.NoError(t, err)
}

// The examples of section 7 of the JSON-RPC 2.0 specification, against the
// real daemon. Each gets the answer the specification gives, and the
// connection stays open afterwards.
func TestJSONRPCSpecificationExamples(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{NoClient: true})
	cases := []struct {
		name  string
		frame string
		// want is the expected answer as JSON; "" means no answer at all.
		want string
	}{
		{"invalid JSON", `{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]`,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}`},
		{"invalid request object", `{"jsonrpc": "2.0", "method": 1, "params": "bar"}`,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600}}`},
		{"invalid JSON batch", `[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},{"jsonrpc": "2.0", "method"]`,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}`},
		{"empty batch", `[]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600}}`},
		{"invalid batch of one", `[1]`, `[{"jsonrpc":"2.0","id":null,"error":{"code":-32600}}]`},
		{"invalid batch of three", `[1,2,3]`, `[{"jsonrpc":"2.0","id":null,"error":{"code":-32600}},{"jsonrpc":"2.0","id":null,"error":{"code":-32600}},{"jsonrpc":"2.0","id":null,"error":{"code":-32600}}]`},
		{"mixed batch answers its requests only",
			`[{"jsonrpc":"2.0","method":"daemon.info","id":"1"},
			  {"jsonrpc":"2.0","method":"daemon.info"},
			  {"jsonrpc":"2.0","method":"no.such.method","id":"2"},
			  {"foo":"boo"},
			  {"jsonrpc":"2.0","method":"daemon.info","params":{"verbose":true},"id":"5"},
			  {"jsonrpc":"2.0","method":"daemon.info","id":"9"}]`,
			`[{"jsonrpc":"2.0","id":"1","result":{}},
			  {"jsonrpc":"2.0","id":"2","error":{"code":-32601}},
			  {"jsonrpc":"2.0","id":null,"error":{"code":-32600}},
			  {"jsonrpc":"2.0","id":"5","error":{"code":-32602}},
			  {"jsonrpc":"2.0","id":"9","result":{}}]`},
		{"batch of notifications only", `[{"jsonrpc":"2.0","method":"daemon.info","params":{}},{"jsonrpc":"2.0","method":"daemon.info"}]`, ""},
		{"notification", `{"jsonrpc":"2.0","method":"daemon.info"}`, ""},
		{"unknown method", `{"jsonrpc":"2.0","method":"foobar","id":"1"}`, `{"jsonrpc":"2.0","id":"1","error":{"code":-32601}}`},
		{"bad params name the field", `{"jsonrpc":"2.0","method":"daemon.info","params":{"verbose":true},"id":7}`,
			`{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"data":{"field":"verbose"}}}`},
		{"params that are not structured", `{"jsonrpc":"2.0","method":"daemon.info","params":"bar","id":8}`,
			`{"jsonrpc":"2.0","id":8,"error":{"code":-32600}}`},
		{"wrong jsonrpc version", `{"jsonrpc":"1.0","method":"daemon.info","id":10}`,
			`{"jsonrpc":"2.0","id":10,"error":{"code":-32600}}`},
		{"a negative id comes back as sent", `{"jsonrpc":"2.0","method":"no.such","id":-3}`,
			`{"jsonrpc":"2.0","id":-3,"error":{"code":-32601}}`},
		{"a fractional id comes back as sent", `{"jsonrpc":"2.0","method":"no.such","id":1.5}`,
			`{"jsonrpc":"2.0","id":1.5,"error":{"code":-32601}}`},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"method\":\"\xff\xfe\",\"id\":1}",
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}`},
	}
	c := td.Raw(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(tc.frame)))
			// A sentinel request after every frame proves the connection
			// is still open, and that nothing else was answered.
			require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"daemon.info","id":"sentinel"}`)))
			// Answers may come in any order (requests run concurrently).
			frames := 1
			if tc.want != "" {
				frames = 2
			}
			sawSentinel := false
			for i := 0; i < frames; i++ {
				_, got, err := c.Read(ctx)
				require.NoError(t, err, "the connection must stay open")
				var sentinel struct {
					ID any `json:"id"`
				}
				_ = json.Unmarshal(got, &sentinel)
				if sentinel.ID == "sentinel" && !sawSentinel {
					sawSentinel = true
					continue
				}
				require.NotEmpty(t, tc.want, "an unexpected extra answer: %s", got)
				assertAnswerMatches(t, tc.want, string(got))
			}
			assert.True(t, sawSentinel)
		})
	}
}

func TestBinaryFramesAreAnsweredNotDropped(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{NoClient: true})
	c := td.Raw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageBinary, []byte(`{"jsonrpc":"2.0","method":"daemon.info","id":1}`)))
	_, got, err := c.Read(ctx)
	require.NoError(t, err)
	assertAnswerMatches(t, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600}}`, string(got))
}

// assertAnswerMatches compares an answer with an expected shape: ids, codes
// and data fields must match; a result of {} matches any object; batch
// answers may come in any order.
func assertAnswerMatches(t *testing.T, want, got string) {
	t.Helper()
	var w, g any
	require.NoError(t, json.Unmarshal([]byte(want), &w))
	require.NoError(t, json.Unmarshal([]byte(got), &g), got)
	wl, wIsList := w.([]any)
	gl, gIsList := g.([]any)
	require.Equal(t, wIsList, gIsList, "batch vs single: %s", got)
	if !wIsList {
		wl, gl = []any{w}, []any{g}
	}
	require.Len(t, gl, len(wl), got)
	used := make([]bool, len(gl))
	for _, we := range wl {
		found := false
		for i, ge := range gl {
			if !used[i] && answerFits(we.(map[string]any), ge.(map[string]any)) {
				used[i], found = true, true
				break
			}
		}
		assert.True(t, found, "no answer like %v in %s", we, got)
	}
}

func answerFits(want, got map[string]any) bool {
	if got["jsonrpc"] != "2.0" {
		return false
	}
	if !assert.ObjectsAreEqual(want["id"], got["id"]) {
		return false
	}
	if _, ok := want["result"]; ok {
		_, isObj := got["result"].(map[string]any)
		return isObj && got["error"] == nil
	}
	we, _ := want["error"].(map[string]any)
	ge, _ := got["error"].(map[string]any)
	if we == nil || ge == nil || we["code"] != ge["code"] {
		return false
	}
	if msg, _ := ge["message"].(string); msg == "" {
		return false
	}
	if wd, ok := we["data"].(map[string]any); ok {
		gd, _ := ge["data"].(map[string]any)
		for k, v := range wd {
			if gd == nil || gd[k] != v {
				return false
			}
		}
	}
	return true
}

// A client that never answers the close handshake holds the graceful
// shutdown up to its grace period; the daemon then closes it hard, finishes
// shutting down, and says the stop was not graceful.
func TestAShutdownThatRunsOutOfGraceFinishesAndSaysSo(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{NoClient: true})
	ws := td.Raw(t)
	// One answered request, so the connection is surely being served; then
	// it never reads again, so it never answers the close frame.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"daemon.info"}`)))
	_, _, err := ws.Read(ctx)
	require.NoError(t, err)
	grace, cancelGrace := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelGrace()
	start := time.Now()
	err = td.Shutdown(grace)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The socket's own close timeout is 5 s; the grace period must bound
	// the wait, not that.
	assert.Less(t, took, 3*time.Second, "shutdown waited past its grace period for a silent client")
	t.Logf("shutdown with a 300 ms grace took %v", took)
	assert.Contains(t, err.Error(), "closed hard")
	_, statErr := os.Stat(filepath.Join(td.Home, home.DiscoveryFileName))
	assert.True(t, os.IsNotExist(statErr), "daemon.json is gone all the same")
	assert.Equal(t, err, td.Shutdown(context.Background()), "a second call gives the same answer")
}

// Past a cap the client gets a clear answer at once, never a hang.
func TestTheConnectionCapAnswers503AndFreesUpWhenAClientLeaves(t *testing.T) {
	td := daemontest.Start(t, daemontest.Options{Config: "max_connections = 2\n"})
	ctx := daemontest.Context(t)
	first := td.Client
	td.Dial(t, client.Options{})

	_, err := client.Dial(ctx, client.Options{URL: td.URL, Token: td.Token})
	var de *rpcclient.DialError
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
			assert.Equal(t, rpcclient.CodeTooManyRequests, a.Error.Code)
			assert.Contains(t, a.Error.Message, "limit 1")
			assert.Less(t, time.Since(start), 900*time.Millisecond, "refused at once, not after the slow request")
		} else {
			assert.Nil(t, a.Error, string(b))
		}
	}
	assert.Equal(t, []string{"quick", "slow"}, order)
}

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
