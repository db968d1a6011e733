package rpc

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type fastParams struct {
	Cached bool   `json:"cached"`
	Boom   bool   `json:"boom,omitempty"`
	Name   string `json:"name,omitempty"`
}

// fastServer has one method with a Fast answer (when params.cached) and
// counts how often each path ran.
func fastServer(t *testing.T, maxInFlight int) (st *serverTest, handler, fast *atomic.Int32) {
	t.Helper()
	handler, fast = &atomic.Int32{}, &atomic.Int32{}
	r := NewRegistry()
	Register(r, "list", Doc{Summary: "A list, cached or not.", Access: AccessRead}, func(ctx context.Context, p fastParams) ([]string, error) {
		handler.Add(1)
		return []string{"slow"}, nil
	})
	Fast(r, "list", func(ctx context.Context, p fastParams) ([]string, bool) {
		fast.Add(1)
		if p.Boom {
			panic("fast boom")
		}
		if !p.Cached {
			return nil, false
		}
		return []string{"fast"}, true
	})
	r.Alias("list_alias", "list")
	Register(r, "sleep", Doc{Summary: "Sleep a while.", Access: AccessRead}, func(ctx context.Context, _ struct{}) (bool, error) {
		time.Sleep(time.Second)
		return true, nil
	})
	st = &serverTest{srv: NewServer(ServerConfig{Registry: r, Gate: &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }}, MaxInFlight: maxInFlight})}
	hs := httptest.NewServer(st.srv)
	st.url = "ws" + strings.TrimPrefix(hs.URL, "http") + "/rpc"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = st.srv.Shutdown(ctx)
		hs.Close()
	})
	return st, handler, fast
}

func TestAFastAnswerIsGivenWithoutTheHandlerAndOtherwiseTheHandlerRuns(t *testing.T) {
	st, handler, fast := fastServer(t, 0)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"list","params":{"cached":true}}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":1,"result":["fast"]}`, c.read())
	assert.EqualValues(t, 0, handler.Load())

	c.send(`{"jsonrpc":"2.0","id":2,"method":"list","params":{"cached":false}}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":2,"result":["slow"]}`, c.read())
	assert.EqualValues(t, 1, handler.Load())

	c.send(`{"jsonrpc":"2.0","id":3,"method":"list_alias","params":{"cached":true}}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":3,"result":["fast"]}`, c.read(), "an alias shares it")
	assert.EqualValues(t, 3, fast.Load())

	c.send(`[{"jsonrpc":"2.0","id":4,"method":"list","params":{"cached":true}},{"jsonrpc":"2.0","id":5,"method":"list"}]`)
	got := c.read()
	assert.Contains(t, got, `{"jsonrpc":"2.0","id":4,"result":["fast"]}`, "a batch member answered at once still travels in its batch")
	assert.Contains(t, got, `{"jsonrpc":"2.0","id":5,"result":["slow"]}`)
}

func TestAFastAnswerValidatesParamsAndSurvivesAPanic(t *testing.T) {
	st, handler, _ := fastServer(t, 0)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"list","params":{"cached":"yes"}}`)
	got := c.read()
	assert.Contains(t, got, `"code":-32602`)
	assert.Contains(t, got, `"field":"cached"`)

	c.send(`{"jsonrpc":"2.0","id":2,"method":"list","params":{"boom":true}}`)
	got = c.read()
	assert.Contains(t, got, `"code":-32603`)
	assert.Contains(t, got, "fast boom")

	c.send(`{"jsonrpc":"2.0","id":3,"method":"list","params":{"cached":true}}`)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":3,"result":["fast"]}`, c.read(), "the connection goes on")
	assert.EqualValues(t, 0, handler.Load())
}

// The in-flight cap is documented as refusing every request past it; a
// method with a fast answer is no exception.
func TestAConnectionAtItsCapIsRefusedEvenAFastAnswer(t *testing.T) {
	st, _, fast := fastServer(t, 1)
	c := st.dial(t)
	c.send(`{"jsonrpc":"2.0","id":"slow","method":"sleep"}`)
	time.Sleep(50 * time.Millisecond)
	c.send(`{"jsonrpc":"2.0","id":"quick","method":"list","params":{"cached":true}}`)
	got := c.read()
	assert.Contains(t, got, `"id":"quick"`)
	assert.Contains(t, got, `"code":-32001`)
	assert.EqualValues(t, 0, fast.Load())
	assert.Contains(t, c.read(), `"id":"slow"`)
}

func TestFastWithOtherTypesThanTheHandlersPanicsAtRegistration(t *testing.T) {
	r := NewRegistry()
	Register(r, "m", Doc{Summary: "m", Access: AccessRead}, func(ctx context.Context, p fastParams) ([]string, error) { return nil, nil })
	require.Panics(t, func() {
		Fast(r, "m", func(ctx context.Context, p fastParams) (string, bool) { return "", false })
	})
	require.Panics(t, func() {
		Fast(r, "nope", func(ctx context.Context, p fastParams) ([]string, bool) { return nil, false })
	})
}
