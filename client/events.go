package client

import (
	"encoding/json"
	"slices"
	"sync"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/card-dev/card/api"
)

// router hands each agents.event to the handlers of its run. It runs on the
// connection's read goroutine, so events arrive in the order the daemon
// sent them.
type router struct {
	all func(api.AgentEvent)
	// resubscribe asks for a run's events again after a seq, when the
	// daemon cut a subscription off for falling behind.
	resubscribe func(runID string, afterSeq int64)
	// resubscribeSession is resubscribe for a session subscription cut
	// off behind one of its turns.
	resubscribeSession func(sessionID string, afterSeq int64)

	mu   sync.Mutex
	runs map[string][]*route
	// streaming counts streamed invokes not yet answered and routed. The
	// daemon sends a streamed run's events right after the answer that
	// names the run, so they can be read before Stream has learned the run
	// id: while a streamed invoke is in flight, events of runs nobody
	// routes are kept in early for it to claim, and dropped once none is.
	streaming int
	early     map[string][]api.AgentEvent
	// sessions routes sessions.event notifications.
	sessions sessionRouter
}

// route is one handler of one run's events. It delivers each seq once and
// in order, even when the connection receives a run's events twice (two
// subscriptions to the same run), and ends with the terminal event.
type route struct {
	mu   sync.Mutex
	fn   func(api.AgentEvent)
	last int64
	done bool
}

// Terminal reports whether ev is the last event of its run.
func Terminal(ev api.AgentEvent) bool {
	return ev.Kind == api.EventDone || ev.Kind == api.EventRunError
}

func (rt *route) deliverLocked(ev api.AgentEvent) {
	if rt.done || ev.Seq <= rt.last {
		return
	}
	rt.last = ev.Seq
	rt.done = Terminal(ev)
	rt.fn(ev)
}

func (r *router) notify(method string, params json.RawMessage) {
	if method == api.SubscriptionEndedMethod {
		r.cutOff(params)
		return
	}
	if method == "sessions.event" {
		r.sessions.notify(params)
		return
	}
	if method != "agents.event" {
		return
	}
	var ev api.AgentEvent
	if decodeEvent(params, &ev) != nil {
		return
	}
	if r.all != nil {
		r.all(ev)
	}
	r.mu.Lock()
	routes := slices.Clone(r.runs[ev.RunID])
	if len(routes) == 0 && r.streaming > 0 {
		r.early[ev.RunID] = append(r.early[ev.RunID], ev)
	}
	r.mu.Unlock()
	for _, rt := range routes {
		rt.mu.Lock()
		rt.deliverLocked(ev)
		done := rt.done
		rt.mu.Unlock()
		if done {
			r.remove(ev.RunID, rt)
		}
	}
}

// add routes runID's events after afterSeq to fn, first delivering what
// arrived for it while it had no route; the route is added before those
// are delivered and holds its lock meanwhile, so a later event waits.
func (r *router) add(runID string, afterSeq int64, fn func(api.AgentEvent)) *route {
	rt := &route{fn: fn, last: afterSeq}
	rt.mu.Lock()
	r.mu.Lock()
	r.runs[runID] = append(r.runs[runID], rt)
	early := r.early[runID]
	delete(r.early, runID)
	r.mu.Unlock()
	for _, ev := range early {
		rt.deliverLocked(ev)
	}
	done := rt.done
	rt.mu.Unlock()
	if done {
		r.remove(runID, rt)
	}
	return rt
}

func (r *router) remove(runID string, rt *route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	routes := slices.DeleteFunc(r.runs[runID], func(have *route) bool { return have == rt })
	if len(routes) == 0 {
		delete(r.runs, runID)
	} else {
		r.runs[runID] = routes
	}
}

// beginStream and endStream bracket a streamed invoke, from before its
// request is sent until its run is routed.
func (r *router) beginStream() {
	r.mu.Lock()
	r.streaming++
	r.mu.Unlock()
}

func (r *router) endStream() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streaming--
	if r.streaming == 0 {
		clear(r.early)
	}
}

// cutOff takes up a run the daemon stopped sending because this connection
// fell behind: while a handler still waits for the run's end, the client
// subscribes again from the earliest seq one of them has not seen. Every
// route drops a seq it already had, so nothing arrives twice.
func (r *router) cutOff(params json.RawMessage) {
	var end api.SubscriptionEnded
	if json.Unmarshal(params, &end) != nil || r.resubscribe == nil {
		return
	}
	if end.SessionID != "" {
		// A session's subscription, behind its turn's run: the session is
		// taken up again from the last seq its followers had, and a
		// follower of the run alone was not cut off.
		if after, ok := r.sessions.lastOf(end.SessionID); ok && r.resubscribeSession != nil {
			go r.resubscribeSession(end.SessionID, after)
		}
		return
	}
	r.mu.Lock()
	routes := slices.Clone(r.runs[end.RunID])
	r.mu.Unlock()
	after := int64(-1)
	for _, rt := range routes {
		rt.mu.Lock()
		if !rt.done && (after < 0 || rt.last < after) {
			after = rt.last
		}
		rt.mu.Unlock()
	}
	if after >= 0 {
		// Not on the read goroutine: the answer is read there.
		go r.resubscribe(end.RunID, after)
	}
}

// decodeEvent reads a notification carrying an event. Events are most of
// what a client reads, and a merged text delta is tens of KiB: the json/v2
// engine with encoding/json's own rules (its v1 package: the same names,
// the same leniency) decodes one in a single pass, about four times as
// fast as encoding/json's validate-then-decode.
func decodeEvent(params json.RawMessage, v any) error {
	return jsonv1.Unmarshal(params, v)
}
