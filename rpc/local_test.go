package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/rpc/rpcclient"
)

// testDeniedCode is the code these tests map a refusal by access class to.
const testDeniedCode int64 = -32030

type localAskParams struct {
	Q string `json:"q"`
}

type localAskAnswer struct {
	A string `json:"a"`
}

// localRegistry has a method that answers with the caller's origin and
// then notifies it; one that asks the caller a question; and one only
// host may call.
func localRegistry(t *testing.T) *Registry {
	r := NewRegistry()
	RegisterThen(r, "who", Doc{Access: AccessRead, Summary: "The caller's origin, then two notes."},
		func(ctx context.Context, _ struct{}) (string, Then, error) {
			p := PeerFrom(ctx)
			return p.Origin(), func(ctx context.Context) {
				_ = p.Notify(ctx, "note", json.RawMessage(`{"n":1}`))
				_ = p.Notify(ctx, "note", map[string]int{"n": 2})
			}, nil
		})
	Register(r, "ask", Doc{Access: AccessRead, Summary: "Ask the caller, and say its answer."},
		func(ctx context.Context, p localAskParams) (string, error) {
			var a localAskAnswer
			if err := PeerFrom(ctx).Call(ctx, "question", p, &a); err != nil {
				return "", err
			}
			return a.A, nil
		})
	ServerRequest[localAskParams, localAskAnswer](r, "question", Doc{Access: AccessApprove, Summary: "A question for the client."})
	Register(r, "host.only", Doc{Access: AccessHost, Summary: "Host only."},
		func(ctx context.Context, _ struct{}) (bool, error) { return true, nil })
	r.MapErrors(func(err error) error {
		var denied *AccessDeniedError
		if errors.As(err, &denied) {
			return &rpcclient.Error{Code: testDeniedCode, Message: denied.Error()}
		}
		return err
	})
	return r
}

// A local connection calls the registry as a WebSocket client of the same
// origin would: the same access classes, the same errors, its
// notifications delivered in order, its questions put to it.
func TestALocalConnectionIsServedAsAWebSocketOneOfItsOriginIs(t *testing.T) {
	r := localRegistry(t)
	var mu sync.Mutex
	var notes []string
	c := OpenLocal(r, GrantsOf(AccessRead, AccessApprove), "https://app.example",
		func(method string, params json.RawMessage) {
			mu.Lock()
			notes = append(notes, method+" "+string(params))
			mu.Unlock()
		},
		func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			var q localAskParams
			require.NoError(t, json.Unmarshal(params, &q))
			return localAskAnswer{A: "yes to " + q.Q}, nil
		})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var origin string
	require.NoError(t, c.Call(ctx, "who", nil, &origin))
	assert.Equal(t, "https://app.example", origin)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(notes) == 2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []string{`note {"n":1}`, `note {"n":2}`}, notes)

	var said string
	require.NoError(t, c.Call(ctx, "ask", localAskParams{Q: "tea"}, &said))
	assert.Equal(t, "yes to tea", said)

	err := c.Call(ctx, "host.only", nil, nil)
	var re *rpcclient.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, testDeniedCode, re.Code, "the connection's grants hold in process too")
	err = c.Call(ctx, "no.such", nil, nil)
	require.ErrorAs(t, err, &re)
	assert.Equal(t, rpcclient.CodeMethodNotFound, re.Code)
	require.NoError(t, c.Close())
}

// A connection without approve is never put a question, and a closed one
// is gone: a question to it ends with ErrPeerGone, as a WebSocket one's.
func TestALocalConnectionWithoutApproveIsNotAskedAndAClosedOneIsGone(t *testing.T) {
	r := localRegistry(t)
	asked := false
	serve := func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		asked = true
		return localAskAnswer{A: "yes"}, nil
	}
	c := OpenLocal(r, GrantsOf(AccessRead), "", func(string, json.RawMessage) {}, serve)
	ctx := context.Background()
	err := c.Call(ctx, "ask", localAskParams{Q: "tea"}, nil)
	var re *rpcclient.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, testDeniedCode, re.Code, "the question is refused by its class: %v", err)
	assert.False(t, asked, "a connection without approve is never asked")

	approver := OpenLocal(r, GrantsOf(AccessRead, AccessApprove), "", func(string, json.RawMessage) {}, serve)
	p := approver.peer
	require.NoError(t, approver.Close())
	err = p.Call(ctx, "question", localAskParams{Q: "tea"}, nil)
	assert.ErrorIs(t, err, ErrPeerGone)
	assert.ErrorIs(t, p.Notify(ctx, "note", json.RawMessage(`{}`)), ErrPeerGone)
}
