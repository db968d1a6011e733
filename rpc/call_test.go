package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/rpc/rpcclient"
)

type askParams struct {
	N int `json:"n"`
	// WithinMs makes the server give up on its question after that long.
	WithinMs int `json:"within_ms,omitempty"`
}

type askAnswer struct {
	Say string `json:"say"`
}

// callTest is a server with one method, ask.client, that asks the client
// q.ask with the request's context and answers with what came back: the
// client's answer, or the error Call returned, by kind.
func callTest(t *testing.T) *serverTest {
	t.Helper()
	st := &serverTest{}
	r := NewRegistry()
	Register(r, "ask.client", Doc{Access: AccessAgents, Summary: "Ask the client, answer with its answer."},
		func(ctx context.Context, p askParams) (map[string]any, error) {
			var a askAnswer
			if p.WithinMs > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(p.WithinMs)*time.Millisecond)
				defer cancel()
			}
			err := PeerFrom(ctx).Call(ctx, "q.ask", p, &a)
			var re *rpcclient.Error
			var bad *BadResultError
			switch {
			case err == nil:
				return map[string]any{"say": a.Say}, nil
			case errors.As(err, &re):
				return map[string]any{"client_error": re.Code, "message": re.Message}, nil
			case errors.As(err, &bad):
				return map[string]any{"bad_result": string(bad.Result)}, nil
			case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
				st.cancelled.Add(1)
				return nil, err
			case errors.Is(err, ErrPeerGone):
				st.gone.Add(1)
				return nil, err
			}
			return nil, err
		})
	ServerRequest[askParams, askAnswer](r, "q.ask", Doc{Summary: "A question for the client.", Access: AccessRead})
	st.srv = NewServer(ServerConfig{Registry: r, Gate: &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }}})
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

// serverRequest reads the next frame and requires it to be the server's
// q.ask request; it returns the request's id as sent.
func (c *rawClient) serverRequest() string {
	c.t.Helper()
	var q struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  askParams       `json:"params"`
	}
	got := c.read()
	require.NoError(c.t, json.Unmarshal([]byte(got), &q), got)
	require.Equal(c.t, "2.0", q.JSONRPC, got)
	require.Equal(c.t, "q.ask", q.Method, got)
	var id string
	require.NoError(c.t, json.Unmarshal(q.ID, &id), "the server's ids are strings: %s", got)
	require.True(c.t, strings.HasPrefix(id, ServerRequestIDPrefix), got)
	return id
}

func TestTheServerAsksTheClientAndGetsItsAnswer(t *testing.T) {
	st := callTest(t)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"ask.client","params":{"n":3}}`)
	id := c.serverRequest()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"say":"yes"}}`, id))
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":{"say":"yes"}}`, c.read())
}

// Two questions in flight at once are told apart by their ids, whatever
// order the client answers them in, and a batch of answers is taken too.
func TestAnswersAreMatchedToTheirQuestionsByIdInAnyOrderAndInABatch(t *testing.T) {
	st := callTest(t)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"ask.client","params":{"n":1}}`)
	first := c.serverRequest()
	c.send(`{"jsonrpc":"2.0","id":2,"method":"ask.client","params":{"n":2}}`)
	second := c.serverRequest()
	require.NotEqual(t, first, second)
	c.send(fmt.Sprintf(`[{"jsonrpc":"2.0","id":%q,"result":{"say":"second"}},{"jsonrpc":"2.0","id":%q,"result":{"say":"first"}}]`, second, first))
	got := map[string]bool{c.read(): true, c.read(): true}
	assert.True(t, got[`{"jsonrpc":"2.0","id":1,"result":{"say":"first"}}`], "%v", got)
	assert.True(t, got[`{"jsonrpc":"2.0","id":2,"result":{"say":"second"}}`], "%v", got)
}

func TestAClientsErrorAnswerReachesTheCallerAsAnError(t *testing.T) {
	st := callTest(t)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"ask.client"}`)
	id := c.serverRequest()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"error":{"code":-32601,"message":"no such method here"}}`, id))
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":{"client_error":-32601,"message":"no such method here"}}`, c.read())
}

func TestAnAnswerThatDoesNotFitIsABadResultNotASilentZeroValue(t *testing.T) {
	st := callTest(t)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"ask.client"}`)
	id := c.serverRequest()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"say":42}}`, id))
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":{"bad_result":"{\"say\":42}"}}`, c.read())
}

// When the caller stops waiting, the client is told with $/cancelRequest
// naming the server's id, and a late answer is dropped without an answer of
// its own (JSON-RPC never answers a response).
func TestAWithdrawnQuestionIsCancelledAtTheClientAndItsLateAnswerIsDropped(t *testing.T) {
	st := callTest(t)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":"outer","method":"ask.client"}`)
	id := c.serverRequest()
	c.send(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"outer"}}`)
	got := map[string]string{}
	for i := 0; i < 2; i++ {
		frame := c.read()
		var m struct {
			Method string `json:"method"`
		}
		require.NoError(t, json.Unmarshal([]byte(frame), &m))
		got[m.Method] = frame
	}
	assert.JSONEq(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":%q}}`, id), got["$/cancelRequest"])
	assert.Contains(t, got[""], `"code":-32800`)
	assert.EqualValues(t, 1, st.cancelled.Load())

	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"say":"too late"}}`, id))
	c.send(`{"jsonrpc":"2.0","id":"never-sent","result":{}}`)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"ask.client","params":{"n":2}}`)
	next := c.serverRequest()
	assert.NotEqual(t, id, next, "the stray responses got no answer: the next frame is the next question")
}

func TestAQuestionToAClientThatGoesAwayEndsWithErrPeerGone(t *testing.T) {
	st := callTest(t)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"ask.client"}`)
	c.serverRequest()
	require.NoError(t, c.ws.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool { return st.gone.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
}

// A frame shaped like neither a request nor a response is still refused as
// before: only a well-formed response is taken silently.
func TestAFrameWithAnIDButNeitherMethodNorResultIsStillAnInvalidRequest(t *testing.T) {
	st := callTest(t)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":5}`)
	assert.Contains(t, c.read(), `"code":-32600`)
	c.send(`{"jsonrpc":"2.0","id":6,"result":1,"error":{"code":1,"message":"x"}}`)
	assert.Contains(t, c.read(), `"code":-32600`)
}

// The Go client answers the server's requests through OnRequest, and a
// withdrawn question ends the handler's context.
func TestTheGoClientAnswersServerRequestsAndSeesThemWithdrawn(t *testing.T) {
	st := callTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	withdrawn := make(chan struct{})
	c, err := Dial(ctx, st.url, fuzzToken, rpcclient.ClientOptions{OnRequest: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		var p askParams
		require.NoError(t, json.Unmarshal(params, &p))
		switch p.N {
		case 1:
			return askAnswer{Say: "one"}, nil
		case 2:
			return nil, &rpcclient.Error{Code: -32099, Message: "not today"}
		}
		<-ctx.Done()
		close(withdrawn)
		return nil, ctx.Err()
	}})
	require.NoError(t, err)
	defer c.Close()

	var got, got2 map[string]any
	require.NoError(t, c.Call(ctx, "ask.client", askParams{N: 1}, &got))
	assert.Equal(t, map[string]any{"say": "one"}, got)
	require.NoError(t, c.Call(ctx, "ask.client", askParams{N: 2}, &got2))
	assert.Equal(t, map[string]any{"client_error": float64(-32099), "message": "not today"}, got2)

	// The server gives up after 200 ms and withdraws its question.
	err = c.Call(ctx, "ask.client", askParams{N: 3, WithinMs: 200}, nil)
	require.Error(t, err)
	select {
	case <-withdrawn:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's withdrawn question did not end the handler's context")
	}
}

// Once a client's close frame is answered, the WebSocket refuses every
// write, and that can happen before the read side ends the connection's
// context. A question that could not be written is one the client will
// never see: Call says the client is gone, so the caller asks someone else
// at once instead of waiting out its timeout for an answer that cannot come.
func TestAQuestionThatCannotBeWrittenEndsWithErrPeerGoneBeforeTheConnectionEnds(t *testing.T) {
	refused := errors.New("failed to write frame: use of closed network connection")
	open := make(chan struct{}) // the connection's context has not ended
	p := &Peer{id: 1, out: newOutgoing(func([]byte) error { return refused }, open, zap.NewNop())}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.Call(ctx, "q.ask", askParams{N: 1}, nil)
	require.ErrorIs(t, err, ErrPeerGone)
	assert.ErrorContains(t, err, "use of closed network connection", "the write's own error stays in the message")
	assert.NoError(t, ctx.Err(), "Call did not wait for its context")
	assert.Empty(t, p.out.pending, "nothing is left waiting for an answer")
}
