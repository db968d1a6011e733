package client

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

func newRouter() *router {
	return &router{runs: map[string][]*route{}, early: map[string][]api.AgentEvent{}}
}

func (r *router) send(t *testing.T, run string, seq int64, kind string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"run_id": run, "seq": seq, "kind": kind})
	require.NoError(t, err)
	r.notify("agents.event", b)
}

func seqs(evs []api.AgentEvent) string { return fmt.Sprint(len(evs), evs[len(evs)-1].Seq) }

// The events of a streamed run may be read before Stream has its answer in
// hand; they are kept while it is in flight and handed over first.
func TestEventsThatArriveBeforeTheirRunIsRoutedAreDeliveredFirstAndInOrder(t *testing.T) {
	r := newRouter()
	var got []int64
	r.beginStream()
	r.send(t, "run_a", 1, "session")
	r.send(t, "run_a", 2, "text")
	r.send(t, "run_b", 1, "session")
	r.add("run_a", 0, func(ev api.AgentEvent) { got = append(got, ev.Seq) })
	r.endStream()
	r.send(t, "run_a", 3, api.EventDone)
	assert.Equal(t, []int64{1, 2, 3}, got)
	assert.Empty(t, r.runs, "a route ends with its run's terminal event")
	assert.Empty(t, r.early, "what nobody claimed is dropped once no stream is in flight")
}

func TestUnroutedEventsAreNotKeptWhenNoStreamIsInFlight(t *testing.T) {
	r := newRouter()
	r.send(t, "run_a", 1, "session")
	assert.Empty(t, r.early)
}

// Two subscriptions to one run on one connection bring each event twice; a
// handler still sees each seq once, and only those after its own start.
func TestAHandlerSeesEachSeqOnceAndOnlyAfterItsStart(t *testing.T) {
	r := newRouter()
	var first, second []api.AgentEvent
	r.add("run_a", 0, func(ev api.AgentEvent) { first = append(first, ev) })
	r.add("run_a", 1, func(ev api.AgentEvent) { second = append(second, ev) })
	for _, seq := range []int64{1, 2, 1, 2} {
		r.send(t, "run_a", seq, "text")
	}
	r.send(t, "run_a", 3, api.EventRunError)
	r.send(t, "run_a", 3, api.EventRunError)
	assert.Equal(t, "3 3", seqs(first))
	assert.Equal(t, "2 3", seqs(second))
	assert.Empty(t, r.runs)
}
