package runs

import (
	"encoding/json"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/card-dev/card/api"
)

// entry is one event as sent and stored. end is the bytes of the kept
// events up to and including this one, so how far a subscriber is behind
// is a subtraction.
type entry struct {
	seq  int64
	kind string
	raw  json.RawMessage
	end  int64
}

// eventLog is one run's events, numbered from 1, in memory. It owns the
// per-run bound: it keeps the first max events and the terminal one, and
// counts the rest as dropped, so a run that streams without end costs
// neither unbounded memory nor unbounded disk, and the count of what is
// missing is known in one place.
type eventLog struct {
	runID string
	max   int

	mu      sync.Mutex
	events  []entry // the first max events, plus the terminal one
	nextSeq int64
	dropped int64 // events past the bound: numbered and counted, not kept
	written int   // events[:written] are in the store
	ended   bool  // the terminal event is in events
	// questions are the approval questions kept whose decision is still
	// to come (by request id): that decision is kept past the bound.
	questions map[string]bool
	changed   chan struct{}
	// bytes is the size of the kept events, read without the lock by
	// subscribers measuring how far behind they are.
	bytes atomic.Int64
}

func newEventLog(runID string, max int) *eventLog {
	return &eventLog{runID: runID, max: max, nextSeq: 1, changed: make(chan struct{})}
}

// add appends one event. It is called on the child's stdout goroutine, so it
// only takes a lock and wakes waiters: a slow client or a slow disk never
// holds up the reading of the agent's output. An event past the bound still
// takes a seq, so a client sees the gap; the terminal event is always kept,
// because a subscriber must always learn how the run ended.
func (l *eventLog) add(kind string, ev api.AgentEvent, terminal bool) {
	l.put(kind, ev, terminal, terminal)
}

// keep appends an approval's question or decision. They count against the
// bound like every other event: an agent that asks without end (each
// question answered at once by a rule, a timeout or a deny) must not grow
// the log, the history and runs.get's answer without end either; one past
// the bound is counted in dropped, as any event is. The one exception is a
// decision whose question was kept, which is always kept too: a kept
// question is never left looking unanswered, and there are at most as many
// of those as the bound. It reports whether ev was kept.
func (l *eventLog) keep(kind string, ev api.AgentEvent) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := ""
	if ev.Approval != nil {
		id = ev.Approval.RequestID
	}
	answers := kind == api.EventApprovalDecided && l.questions[id]
	kept := l.putLocked(kind, ev, answers, false)
	switch {
	case answers:
		delete(l.questions, id)
	case kept && kind == api.EventApprovalRequested:
		if l.questions == nil {
			l.questions = map[string]bool{}
		}
		l.questions[id] = true
	}
	return kept
}

// hasRoom reports whether an event added now would be kept.
func (l *eventLog) hasRoom() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.ended && len(l.events) < l.max
}

func (l *eventLog) put(kind string, ev api.AgentEvent, kept, terminal bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.putLocked(kind, ev, kept, terminal)
}

// putLocked appends ev (always when force, else within the bound) and
// reports whether it was kept.
func (l *eventLog) putLocked(kind string, ev api.AgentEvent, force, terminal bool) bool {
	if l.ended {
		// Nothing follows the terminal event: subscribers stop there.
		return false
	}
	ev.RunID, ev.Seq = l.runID, l.nextSeq
	l.nextSeq++
	kept := force || len(l.events) < l.max
	if !kept {
		l.dropped++
	} else {
		// Encoded once, here: these bytes are what every subscriber is
		// sent and what the store keeps.
		raw, err := json.Marshal(ev)
		if err != nil {
			raw, _ = json.Marshal(api.AgentEvent{RunID: l.runID, Seq: ev.Seq, Event: api.Event{Kind: api.EventOther, Text: "event could not be encoded"}})
		}
		end := l.bytes.Add(int64(len(raw)))
		l.events = append(l.events, entry{seq: ev.Seq, kind: kind, raw: raw, end: end})
	}
	if terminal {
		l.ended = true
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return kept
}

// after returns the kept events with seq > seq, whether the log has ended,
// and a channel closed at the next change. The events are a view of the
// log, not a copy: an entry never changes once added and add only writes
// past the view's end, so a thousand subscribers of a long run share one
// log instead of holding a thousand copies of it.
//
// The terminal event is held back until the store has every event: a
// client that saw a run end and asks the history for it right away finds
// all of it there, and its answer (runs.get, a replay) never has a hole.
func (l *eventLog) after(seq int64) ([]entry, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.events)
	ended := l.ended
	if ended && l.written < n {
		n--
		ended = false
	}
	i := sort.Search(n, func(i int) bool { return l.events[i].seq > seq })
	return l.events[i:n:n], ended, l.changed
}

// bytesThrough is the size of the kept events with seq <= seq.
func (l *eventLog) bytesThrough(seq int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.events), func(i int) bool { return l.events[i].seq > seq })
	if i == 0 {
		return 0
	}
	return l.events[i-1].end
}

// unwritten returns the events not yet handed to the store (a view, as
// after's), whether the log has ended, and a channel closed at the next
// change.
func (l *eventLog) unwritten() ([]entry, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.events)
	return l.events[l.written:n:n], l.ended, l.changed
}

// markWritten records that n more events are in the store and reports
// whether the store now has every kept event. Once it has them all after
// the terminal event, the followers waiting for that event are woken.
func (l *eventLog) markWritten(n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.written += n
	all := l.written == len(l.events)
	if all && l.ended && n > 0 {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return all
}

// isEnded reports whether the terminal event is in the log.
func (l *eventLog) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// droppedCount is how many events past the bound were not kept.
func (l *eventLog) droppedCount() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// ofKinds returns the kept events of the given kinds, in seq order.
func (l *eventLog) ofKinds(kinds ...string) []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []entry
	for _, e := range l.events {
		for _, k := range kinds {
			if e.kind == k {
				out = append(out, e)
				break
			}
		}
	}
	return out
}
