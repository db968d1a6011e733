package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// fuzzToken is the token of the fuzz server; it guards nothing of value.
const fuzzToken = "fuzz-token-0123456789abcdef0123456789abcdef0123456789abcdef"

type fuzzEchoParams struct {
	Text string `json:"text"`
	N    int    `json:"n"`
}

func (p *fuzzEchoParams) Validate() error {
	if p.N < 0 {
		return &api.FieldError{Field: "n", Message: "must not be negative"}
	}
	return nil
}

// fuzzRegistry holds one method of each kind the dispatcher must survive:
// typed params with validation, a panicking handler, and a handler that
// notifies the client before answering.
func fuzzRegistry() *Registry {
	r := NewRegistry()
	Register(r, "fuzz.echo", Doc{Access: AccessRead, Summary: "echo"}, func(ctx context.Context, p fuzzEchoParams) (fuzzEchoParams, error) {
		return p, nil
	})
	Register(r, "fuzz.panic", Doc{Access: AccessRead, Summary: "panic"}, func(ctx context.Context, p struct{}) (struct{}, error) {
		panic("fuzz handler panic")
	})
	Register(r, "fuzz.notify", Doc{Access: AccessRead, Summary: "notify"}, func(ctx context.Context, p struct{}) (bool, error) {
		if peer := PeerFrom(ctx); peer != nil {
			_ = peer.Notify(ctx, "fuzz.note", map[string]int{"x": 1})
		}
		return true, nil
	})
	r.Alias("fuzz.echo_alias", "fuzz.echo")
	return r
}

// fuzzConn is one client connection to an in-process server, reused across
// fuzz inputs: a frame that kills the connection is exactly the failure the
// target looks for, so a fresh socket per input would hide it.
type fuzzConn struct {
	ws    *websocket.Conn
	probe int
	// sent holds every string id the client sent; an answer under any
	// other string id was misrouted or made up.
	sent map[string]bool
}

func newFuzzConn(tb testing.TB) *fuzzConn {
	srv := NewServer(ServerConfig{
		Registry:  fuzzRegistry(),
		Gate:      &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }},
		ReadLimit: 1 << 20,
	})
	hs := httptest.NewServer(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/rpc", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + fuzzToken}},
	})
	require.NoError(tb, err, "dial the fuzz server")
	ws.SetReadLimit(8 << 20)
	tb.Cleanup(func() {
		_ = ws.Close(websocket.StatusNormalClosure, "")
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		hs.Close()
	})
	return &fuzzConn{ws: ws, sent: map[string]bool{}}
}

// send writes one frame, then a probe request, and reads until the probe is
// answered. Every frame read on the way must be a well-formed JSON-RPC
// answer, batch of answers, or the one notification the registry sends;
// answers to earlier inputs may still arrive, since handlers run
// concurrently, and are checked the same way.
func (c *fuzzConn) send(t *testing.T, frame []byte, binary bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ := websocket.MessageText
	if binary {
		typ = websocket.MessageBinary
	}
	if err := c.ws.Write(ctx, typ, frame); err != nil {
		t.Fatalf("the connection did not survive to take frame %q: %v", frame, err)
	}
	c.noteSentIDs(frame)
	c.probe++
	probeID := fmt.Sprintf("\x01probe-%d", c.probe)
	c.sent[probeID] = true
	probe, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": probeID, "method": "fuzz.echo", "params": map[string]any{"text": "alive", "n": c.probe}})
	if err := c.ws.Write(ctx, websocket.MessageText, probe); err != nil {
		t.Fatalf("after frame %q the connection refused the probe: %v", frame, err)
	}
	for {
		typ, got, err := c.ws.Read(ctx)
		if err != nil {
			t.Fatalf("after frame %q the connection stopped answering (probe %d unanswered): %v", frame, c.probe, err)
		}
		if typ != websocket.MessageText {
			t.Fatalf("after frame %q the server sent a binary frame %q", frame, got)
		}
		if problem := checkServerFrame(got); problem != "" {
			t.Fatalf("after frame %q the server sent %q: %s", frame, got, problem)
		}
		if foreign := c.foreignID(got); foreign != "" {
			t.Fatalf("after frame %q the server answered under id %q, which the client never sent, in %q", frame, foreign, got)
		}
		var a struct {
			ID     json.RawMessage `json:"id"`
			Result *fuzzEchoParams `json:"result"`
		}
		if got[0] == '{' && json.Unmarshal(got, &a) == nil {
			var id string
			if json.Unmarshal(a.ID, &id) == nil && id == probeID {
				if a.Result == nil || a.Result.Text != "alive" || a.Result.N != c.probe {
					t.Fatalf("after frame %q the probe got a wrong answer %q", frame, got)
				}
				return
			}
		}
	}
}

func (c *fuzzConn) noteSentIDs(frame []byte) {
	for _, id := range frameIDs(frame) {
		c.sent[id] = true
	}
}

func (c *fuzzConn) foreignID(got []byte) string {
	for _, id := range frameIDs(got) {
		if !c.sent[id] {
			return id
		}
	}
	return ""
}

// frameIDs returns the string ids of a message or batch, decoded.
func frameIDs(frame []byte) []string {
	var msgs []json.RawMessage
	if err := json.Unmarshal(frame, &msgs); err != nil {
		msgs = []json.RawMessage{frame}
	}
	var ids []string
	for _, m := range msgs {
		var one struct {
			ID json.RawMessage `json:"id"`
		}
		var s string
		if json.Unmarshal(m, &one) == nil && json.Unmarshal(one.ID, &s) == nil {
			ids = append(ids, s)
		}
	}
	return ids
}

// checkServerFrame returns what is wrong with a frame the server sent, or "".
func checkServerFrame(b []byte) string {
	if !json.Valid(b) {
		return "not valid JSON"
	}
	b = bytes.TrimSpace(b)
	if b[0] == '[' {
		var items []json.RawMessage
		if err := json.Unmarshal(b, &items); err != nil {
			return err.Error()
		}
		if len(items) == 0 {
			return "an empty batch answer (the specification says send nothing)"
		}
		for _, it := range items {
			if p := checkAnswer(it, false); p != "" {
				return "batch member: " + p
			}
		}
		return ""
	}
	return checkAnswer(b, true)
}

func checkAnswer(b []byte, notificationOK bool) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return "not an object: " + err.Error()
	}
	if string(m["jsonrpc"]) != `"2.0"` {
		return `"jsonrpc" is not "2.0"`
	}
	if _, isNote := m["method"]; isNote {
		if !notificationOK || string(m["method"]) != `"fuzz.note"` {
			return "an unexpected request or notification from the server"
		}
		if _, hasID := m["id"]; hasID {
			return "the server sent a request with an id"
		}
		return ""
	}
	id, hasID := m["id"]
	if !hasID {
		return "an answer without an id"
	}
	if len(id) == 0 || (id[0] != '"' && id[0] != 'n' && id[0] != '-' && (id[0] < '0' || id[0] > '9')) {
		return "an id that is not a string, number or null"
	}
	res, hasRes := m["result"]
	rawErr, hasErr := m["error"]
	if hasRes == hasErr {
		return "an answer must have exactly one of result and error"
	}
	_ = res
	if hasErr {
		var e struct {
			Code    *int64  `json:"code"`
			Message *string `json:"message"`
		}
		if err := json.Unmarshal(rawErr, &e); err != nil || e.Code == nil || e.Message == nil {
			return "an error without an integer code and a string message"
		}
		if *e.Message == "" {
			return "an error with an empty message"
		}
	}
	return ""
}

// FuzzFrame feeds arbitrary frames through the server's frame stream and the
// registry's dispatcher over one live connection: nothing may panic, every
// frame the server sends back must be valid JSON-RPC 2.0, and the connection
// must still answer a normal request afterwards. The stream exists because
// jsonrpc2 alone drops the connection on bad input; this target is what
// keeps that promise honest.
func FuzzFrame(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"fuzz.echo","params":{"text":"a","n":1},"id":1}`,
		`{"jsonrpc":"2.0","method":"foobar, "params":"bar", "baz]`,
		`{"jsonrpc":"2.0","method":1,"params":"bar"}`,
		`[]`, `[1]`, `[1,2,3]`,
		`[{"jsonrpc":"2.0","method":"fuzz.echo","params":{"n":1},"id":"1"},{"jsonrpc":"2.0","method":"fuzz.notify"},{"foo":"boo"},{"jsonrpc":"2.0","method":"nope","id":"5"}]`,
		`[{"jsonrpc":"2.0","method":"fuzz.echo"},{"jsonrpc":"2.0","method":"fuzz.echo"}]`,
		`{"jsonrpc":"2.0","method":"fuzz.echo"}`,
		`{"jsonrpc":"2.0","method":"nope","id":-1}`,
		`{"jsonrpc":"2.0","method":"fuzz.echo","params":{"n":-1},"id":1.5}`,
		`{"jsonrpc":"2.0","method":"fuzz.echo","params":{"n":"x"},"id":1e3}`,
		`{"jsonrpc":"2.0","method":"fuzz.echo","params":{"bogus":1},"id":null}`,
		`{"jsonrpc":"2.0","method":"fuzz.echo","params":[1,2],"id":99999999999999999999999}`,
		`{"jsonrpc":"2.0","method":"fuzz.echo","id":"\u0000card:1"}`,
		`{"jsonrpc":"2.0","method":"fuzz.panic","id":7}`,
		`{"jsonrpc":"2.0","method":"fuzz.notify","id":8}`,
		`{"jsonrpc":"2.0","method":"fuzz.echo_alias","params":{"text":"é"},"id":{}}`,
		`{"jsonrpc":"2.0","jsonrpc":"1.0","method":"fuzz.echo","id":1}`,
		`{"jsonrpc":"2.0","method":"fuzz.echo","id":1,"id":2}`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		"\xff\xfe{\"jsonrpc\":\"2.0\"}",
		"   \n\t",
		"",
		`null`, `true`, `"x"`, `{}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"jsonrpc":"2.0","method":"fuzz.echo","id":1}`), true)
	f.Add([]byte("\x00\x01\x02"), true)

	c := newFuzzConn(f)
	f.Fuzz(func(t *testing.T, frame []byte, binary bool) {
		if len(frame) > 512<<10 {
			t.Skip("larger than the fuzz server's read limit, which closes the connection by design (tested in the daemon)")
		}
		c.send(t, frame, binary)
	})
}

// TestFuzzFrameCheckerRejectsMalformedAnswers keeps the fuzz target's
// checker honest: a checker that accepts anything makes FuzzFrame worthless.
func TestFuzzFrameCheckerRejectsMalformedAnswers(t *testing.T) {
	bad := []string{
		`not json`,
		`[]`,
		`{"jsonrpc":"1.0","id":1,"result":1}`,
		`{"jsonrpc":"2.0","result":1}`,
		`{"jsonrpc":"2.0","id":1}`,
		`{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"message":"x"}}`,
		`{"jsonrpc":"2.0","id":{},"result":1}`,
		`[{"jsonrpc":"2.0","method":"fuzz.note"}]`,
		`{"jsonrpc":"2.0","method":"other"}`,
	}
	for _, b := range bad {
		require.NotEmpty(t, checkServerFrame([]byte(b)), "checker accepted %s", b)
	}
	good := []string{
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
		`[{"jsonrpc":"2.0","id":"1","result":{}},{"jsonrpc":"2.0","id":-1.5,"error":{"code":-32601,"message":"m"}}]`,
		`{"jsonrpc":"2.0","method":"fuzz.note","params":{"x":1}}`,
	}
	for _, g := range good {
		require.Empty(t, checkServerFrame([]byte(g)), "checker refused %s", g)
	}
}
