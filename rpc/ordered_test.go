package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type laneParams struct {
	Key string `json:"key,omitempty"`
	N   int    `json:"n"`
	// Blob makes the params long, so a lane key is found past it.
	Blob string `json:"blob,omitempty"`
}

// laneTest is a server whose lane.append handler records the order its
// requests reached it, after a random-ish pause that lets a later request
// overtake an earlier one when nothing orders them.
type laneTest struct {
	*serverTest
	mu  sync.Mutex
	got map[string][]int
	// hold, when set, keeps key "held"'s handler waiting until closed.
	hold chan struct{}
}

func newLaneTest(t *testing.T) *laneTest {
	t.Helper()
	lt := &laneTest{serverTest: &serverTest{}, got: map[string][]int{}, hold: make(chan struct{})}
	r := NewRegistry()
	append := func(ctx context.Context, p laneParams) (int, error) {
		if p.Key == "held" && p.N == 0 {
			<-lt.hold
		}
		// Later requests pause less, so without a lane they overtake.
		time.Sleep(time.Duration(10-p.N%10) * time.Millisecond)
		lt.mu.Lock()
		lt.got[p.Key] = append(lt.got[p.Key], p.N)
		lt.mu.Unlock()
		return p.N, nil
	}
	Register(r, "lane.append", Doc{Access: AccessRead, Summary: "Record n under key."}, append)
	Register(r, "lane.other", Doc{Access: AccessRead, Summary: "Record n under key, in the same lanes."}, append)
	Register(r, "free.append", Doc{Access: AccessRead, Summary: "Record n under key, unordered."}, append)
	Ordered(r, "lane.append", "key")
	Ordered(r, "lane.other", "key")
	r.Alias("lane.alias", "lane.append")
	lt.srv = NewServer(ServerConfig{Registry: r, Gate: &Gate{Token: func() ([]byte, error) { return []byte(fuzzToken), nil }}})
	hs := httptest.NewServer(lt.srv)
	lt.url = "ws" + strings.TrimPrefix(hs.URL, "http") + "/rpc"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = lt.srv.Shutdown(ctx)
		hs.Close()
	})
	return lt
}

func (lt *laneTest) order(key string) []int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return append([]int(nil), lt.got[key]...)
}

// Requests of an ordered method sent back to back on one connection reach
// their handler in the order they were sent, whatever their size or which
// ordered method (or alias) each is; a batch keeps its members' order too.
// Repeated: without the lane the reordering shows most rounds, not all.
func TestOrderedRequestsFromOneConnectionReachTheHandlerInTheOrderSent(t *testing.T) {
	for round := range 20 {
		lt := newLaneTest(t)
		c := lt.dial(t)
		const n = 8
		methods := []string{"lane.append", "lane.other", "lane.alias"}
		for i := range n {
			blob := ""
			if i%3 == 0 {
				blob = strings.Repeat("b", 64<<10)
			}
			// The key after a long member: the lane is found without
			// decoding the rest.
			c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"blob":%q,"n":%d,"key":"k"}}`, i+1, methods[i%3], blob, i))
		}
		batch := make([]string, 0, n)
		for i := n; i < 2*n; i++ {
			batch = append(batch, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"lane.append","params":{"key":"k","n":%d}}`, i+1, i))
		}
		c.send("[" + strings.Join(batch, ",") + "]")
		for range n + 1 {
			c.read()
		}
		want := make([]int, 2*n)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, lt.order("k"), "round %d", round)
	}
}

// A lane orders one key only: a request of another key, or of a method
// that is not ordered, does not wait behind a handler that is still
// running.
func TestALaneHoldsOnlyItsOwnKey(t *testing.T) {
	lt := newLaneTest(t)
	c := lt.dial(t)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"lane.append","params":{"key":"held","n":0}}`)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"lane.append","params":{"key":"held","n":1}}`)
	c.send(`{"jsonrpc":"2.0","id":3,"method":"lane.append","params":{"key":"other","n":7}}`)
	c.send(`{"jsonrpc":"2.0","id":4,"method":"free.append","params":{"key":"held","n":9}}`)
	got := map[string]bool{}
	for range 2 {
		var ans struct{ ID json.RawMessage }
		require.NoError(t, json.Unmarshal([]byte(c.read()), &ans))
		got[string(ans.ID)] = true
	}
	assert.Equal(t, map[string]bool{"3": true, "4": true}, got, "the other key and the unordered method were answered while the lane waits")
	assert.Equal(t, []int{9}, lt.order("held"), "the second request of the held key waits behind the first")
	close(lt.hold)
	c.read()
	c.read()
	assert.Equal(t, []int{9, 0, 1}, lt.order("held"))
}

// Two connections each keep their own order; neither waits for the other.
func TestEachConnectionHasItsOwnLanes(t *testing.T) {
	lt := newLaneTest(t)
	a, b := lt.dial(t), lt.dial(t)
	a.send(`{"jsonrpc":"2.0","id":1,"method":"lane.append","params":{"key":"held","n":0}}`)
	b.send(`{"jsonrpc":"2.0","id":1,"method":"lane.append","params":{"key":"held","n":5}}`)
	assert.Contains(t, b.read(), `"result":5`, "the other connection's request of the same key is not held")
	close(lt.hold)
	a.read()
}
