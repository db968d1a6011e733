package daemontest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
)

// Events collects the agents.event notifications of a connection: pass its
// Add as client.Options.OnEvent.
type Events struct {
	mu  sync.Mutex
	all []api.AgentEvent
	ch  chan struct{}
}

// NewEvents is an empty collector.
func NewEvents() *Events { return &Events{ch: make(chan struct{}, 1)} }

// Add records one event.
func (e *Events) Add(ev api.AgentEvent) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
	default:
	}
}

// Of returns the events seen so far for run id, in arrival order.
func (e *Events) Of(id string) []api.AgentEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []api.AgentEvent
	for _, ev := range e.all {
		if ev.RunID == id {
			out = append(out, ev)
		}
	}
	return out
}

// WaitFor waits up to d until cond holds over run id's events and returns
// them; it fails the test, listing what came, when d runs out.
func (e *Events) WaitFor(t testing.TB, id string, d time.Duration, cond func([]api.AgentEvent) bool) []api.AgentEvent {
	t.Helper()
	deadline := time.After(d)
	for {
		if evs := e.Of(id); cond(evs) {
			return evs
		}
		select {
		case <-e.ch:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			evs := e.Of(id)
			t.Fatalf("run %s: condition not met after %s; %d events: %s", id, d, len(evs), Kinds(evs))
			return nil
		}
	}
}

// WaitEnd waits up to d for run id's terminal event.
func (e *Events) WaitEnd(t testing.TB, id string, d time.Duration) []api.AgentEvent {
	t.Helper()
	return e.WaitFor(t, id, d, Ended)
}

// Ended reports whether evs end with their run's terminal event.
func Ended(evs []api.AgentEvent) bool {
	return len(evs) > 0 && client.Terminal(evs[len(evs)-1])
}

// Kinds lists events as seq:kind, for failure messages.
func Kinds(evs []api.AgentEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%d:%s ", e.Seq, e.Kind)
	}
	return b.String()
}
