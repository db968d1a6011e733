package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/rpc/rpcclient"
)

type strictInner struct {
	Path string `json:"path"`
}

type strictParams struct {
	ID             string        `json:"id"`
	PermissionMode string        `json:"permission_mode,omitempty"`
	Count          int           `json:"count,omitempty"`
	Items          []strictInner `json:"items,omitempty"`
}

// Params are matched by exact name, once: a name in another case, a name
// given twice (at any depth) and an unknown name are each refused with
// -32602 naming the member, so no two readers of one request can disagree
// on what it asked for.
func TestParamsAreMatchedByExactNameAndEachNameOnce(t *testing.T) {
	r := NewRegistry()
	Register(r, "strict.echo", Doc{Access: AccessRead, Summary: "Echo the params."},
		func(ctx context.Context, p strictParams) (strictParams, error) { return p, nil })
	cases := []struct {
		name, params, field, message string
	}{
		{"another case", `{"id":"a","PERMISSION_MODE":"edit"}`, "PERMISSION_MODE", `names are case-sensitive: did you mean "permission_mode"?`},
		{"another case of the id", `{"ID":"a"}`, "ID", `did you mean "id"?`},
		{"a duplicate", `{"id":"claude-code","id":"codex"}`, "id", "given more than once"},
		{"a duplicate in another case is unknown", `{"id":"a","Id":"b"}`, "Id", `did you mean "id"?`},
		{"a nested duplicate", `{"id":"a","items":[{"path":"/a","path":"/b"}]}`, "items[0].path", "given more than once"},
		{"a nested unknown", `{"id":"a","items":[{"path":"/a","Path":"/b"}]}`, "items[0].Path", `did you mean "path"?`},
		{"an unknown name", `{"id":"a","prompt":"x"}`, "prompt", "known fields: id, permission_mode, count, items"},
		{"a wrong type", `{"id":"a","count":"3"}`, "count", "must be an integer, not a string"},
		{"a nested wrong type", `{"id":"a","items":[{"path":3}]}`, "items[0].path", "must be a string, not a number"},
		{"a fraction for an integer", `{"id":"a","count":1.5}`, "count", "1.5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := r.Dispatch(context.Background(), "strict.echo", json.RawMessage(tc.params))
			require.NotNil(t, err)
			assert.Equal(t, rpcclient.CodeInvalidParams, err.Code, err.Message)
			assert.Equal(t, map[string]any{"field": tc.field}, err.Data, err.Message)
			assert.Contains(t, err.Message, tc.message)
		})
	}
	res, _, err := r.Dispatch(context.Background(), "strict.echo", json.RawMessage(`{"id":"a","permission_mode":"edit","count":2,"items":[{"path":"/x"}]}`))
	require.Nil(t, err)
	assert.Equal(t, strictParams{ID: "a", PermissionMode: "edit", Count: 2, Items: []strictInner{{Path: "/x"}}}, res)
}

// Over a connection, a name given twice is refused even though the layer
// between the frame and the registry would keep only the last: in a single
// request, a batch member, and a notification, which is not run either.
func TestADuplicateNameInAFramesParamsIsRefusedBeforeTheHandler(t *testing.T) {
	st := newServerTest(t, 8)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"conn.watch","params":{"a":1,"a":2}}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid params: a: `+duplicateMessage+`","data":{"field":"a"}}}`, c.read())
	c.send(`[{"jsonrpc":"2.0","id":"x","method":"conn.watch","params":{"o":{"k":1,"k":2}}},{"jsonrpc":"2.0","method":"conn.watch","params":{"a":1,"a":1}}]`)
	assert.JSONEq(t, `[{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"invalid params: o.k: `+duplicateMessage+`","data":{"field":"o.k"}}}]`, c.read())
	c.send(`{"jsonrpc":"2.0","id":2,"method":"conn.watch"}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":2,"result":true}`, c.read())
	c.ws.CloseNow()
	require.Eventually(t, func() bool { return st.gone.Load() == 1 }, 5*time.Second, 10*time.Millisecond,
		"only the last, well-formed call ran the handler")
}

// The envelope's one pass notices a name given twice in params wherever the
// id stands (before or after params), at any depth, and only in names; a
// member of the envelope itself given twice refuses the whole message
// (-32600 naming the member) before params are looked at.
func TestTheEnvelopesOwnPassFindsANameGivenTwiceInParams(t *testing.T) {
	cases := []struct {
		name, frame string
		field       string // "" when the request goes on
		member      string // an envelope member given twice
		method      string
		id          string
	}{
		{"id after params", `{"jsonrpc":"2.0","method":"m","params":{"a":1,"a":2},"id":7}`, "a", "", "", "7"},
		{"nested in an array", `{"jsonrpc":"2.0","id":7,"method":"m","params":{"items":[{"path":"/a"},{"path":"/b","path":"/c"}]}}`, "items[1].path", "", "", "7"},
		{"an envelope member twice and params twice", `{"jsonrpc":"2.0","id":7,"id":8,"method":"m","params":{"o":{"k":1,"k":2}}}`, "", "id", "", "null"},
		{"the method twice", `{"jsonrpc":"2.0","id":7,"method":"first","method":"m","params":{"a":1}}`, "", "method", "", "null"},
		{"params twice", `{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":1},"params":{"a":2}}`, "", "params", "", "7"},
		{"jsonrpc twice", `{"jsonrpc":"1.0","jsonrpc":"2.0","id":7,"method":"m"}`, "", "jsonrpc", "", "7"},
		{"an unknown member twice", `{"jsonrpc":"2.0","id":7,"method":"m","x":1,"x":2}`, "", "x", "", "7"},
		{"a response's result twice", `{"jsonrpc":"2.0","id":"card-1","result":{"decision":"deny"},"result":{"decision":"allow"}}`, "", "result", "", "null"},
		{"a response's error twice", `{"jsonrpc":"2.0","id":"card-1","error":{"code":1,"message":"a"},"error":{"code":2,"message":"b"}}`, "", "error", "", "null"},
		{"the same text inside a string is no name", `{"jsonrpc":"2.0","id":7,"method":"m","params":{"task":"{\"a\":1,\"a\":2}","a":1}}`, "", "", "m", "7"},
		{"the same name in sibling objects", `{"jsonrpc":"2.0","id":7,"method":"m","params":{"x":{"a":1},"y":{"a":1}}}`, "", "", "m", "7"},
		{"a member's name inside params is no envelope member", `{"jsonrpc":"2.0","id":7,"method":"m","params":{"method":"x","id":1}}`, "", "", "m", "7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &frameStream{}
			req, answer := s.parseRequest([]byte(tc.frame))
			switch {
			case tc.member != "":
				require.Nil(t, req)
				assert.JSONEq(t, `{"jsonrpc":"2.0","id":`+tc.id+`,"error":{"code":-32600,"message":"invalid request: \"`+tc.member+
					`\" is given more than once; each member of a JSON-RPC message may appear once","data":{"member":"`+tc.member+`"}}}`, string(answer))
				return
			case tc.field != "":
				require.Nil(t, req)
				assert.JSONEq(t, `{"jsonrpc":"2.0","id":`+tc.id+`,"error":{"code":-32602,"message":"invalid params: `+tc.field+`: `+duplicateMessage+`","data":{"field":"`+tc.field+`"}}}`, string(answer))
				return
			}
			require.Nil(t, answer, "%s", answer)
			require.NotNil(t, req)
			assert.Equal(t, tc.method, req.method)
			assert.Equal(t, tc.id, string(req.id))
		})
	}
}

// An answer to the server's question that gives "result" twice (a deny,
// then an allow) decides nothing: neither copy reaches the caller, which
// still waits, and a well-formed answer afterwards is taken.
func TestAResponseWithAMemberGivenTwiceIsRefusedAndDecidesNothing(t *testing.T) {
	st := callTest(t)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"ask.client","params":{"n":1}}`)
	id := c.serverRequest()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"say":"deny"},"result":{"say":"allow"}}`, id))
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: \"result\" is given more than once; each member of a JSON-RPC message may appear once","data":{"member":"result"}}}`, c.read())
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"result":{"say":"deny"}}`, id))
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":{"say":"deny"}}`, c.read())

	// A request whose method is given twice runs neither.
	c.send(`{"jsonrpc":"2.0","id":2,"method":"nothing","method":"ask.client"}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: \"method\" is given more than once; each member of a JSON-RPC message may appear once","data":{"member":"method"}}}`, c.read())
}
