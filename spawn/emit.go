package spawn

import (
	"strings"
	"sync"
	"time"

	"github.com/card-dev/card/api"
)

// StderrParser is a Parser that also reads the agent's stderr, for a CLI
// that announces its retries only there (Gemini). FeedStderr gets one line
// at a time, without its newline; the runner never calls it at the same
// time as Feed, so a parser needs no lock of its own.
type StderrParser interface {
	Parser
	FeedStderr(line []byte) []Event
}

// emitter hands a run's events to OnEvent in order and one at a time,
// whichever of the child's streams they came from, and lets the retry guard
// see each one first. end is how it ends the run.
type emitter struct {
	mu      sync.Mutex
	onEvent func(Event)
	parser  Parser
	guard   *retryGuard
	caps    *capGuard
	end     func(*api.RunError)
	// watch sees each event (a retry's delay pauses it); nil: none.
	watch *watchdog
	// session, when set, is the session id a session event reports
	// (Plan.SessionID); noSession drops session events (Plan.NoSessionID).
	session   string
	noSession bool

	grace   time.Duration
	netDown *time.Timer // running while the API is out of reach
	// stopped is set once the turn is over: a late message of the agent's
	// (an update read after the turn's end) is dropped.
	stopped bool
	// ended is set once the run has been ended for a reason of the guard's:
	// what the agent prints while its group is being ended (a retry it had
	// already scheduled, its own last words) still reaches the parser, for
	// the result, but is not sent: the run is over for the client.
	ended bool

	// coalesce is set by a reader that calls flush whenever it has no
	// more complete lines in hand; see held.
	coalesce bool
	held     heldDelta
}

// heldDelta is a text or thinking delta not yet sent, with the deltas of the
// same kind that followed it, while the lines after it were already read and
// waiting. An agent that prints faster than card can hand each line on (a
// long answer streamed a token a line, a diff) would otherwise cost one
// event, one stored row and one WebSocket frame per line; the text is the
// same, in order, in fewer events. Nothing waits for more output: the reader
// flushes what is held before it blocks on the pipe, so a line that arrives
// alone goes out alone, at once.
type heldDelta struct {
	kind string // EventText or EventThinking; "" when nothing is held
	text strings.Builder
}

// maxHeldText bounds the text one merged delta carries: an event stays a
// size a client can show as it comes and the store keeps in one row.
const maxHeldText = 32 << 10

// mergeable is a bare text or thinking delta: its text is all it says, so
// two in a row can be one without losing anything.
func mergeable(ev *Event) bool {
	return ev.Delta && (ev.Kind == api.EventText || ev.Kind == api.EventThinking) &&
		ev.SessionID == "" && ev.Model == "" && ev.Tool == nil && ev.Usage == nil && ev.Raw == nil && ev.Type == "" && ev.Error == ""
}

func newEmitter(onEvent func(Event), parser Parser, maxRetries int, caps *PlanCaps, end func(*api.RunError)) *emitter {
	return &emitter{onEvent: onEvent, parser: parser, guard: newRetryGuard(maxRetries), caps: newCapGuard(caps), end: end, grace: NetworkGrace}
}

// feed parses one stdout line and emits its events.
func (e *emitter) feed(line []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	if e.parser == nil {
		e.emitLocked([]Event{otherEvent("", line)})
		return
	}
	e.emitLocked(e.parser.Feed(line))
}

// feedStderr parses one stderr line and emits its events.
func (e *emitter) feedStderr(p StderrParser, line []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.stopped {
		e.emitLocked(p.FeedStderr(line))
	}
}

func (e *emitter) emit(evs []Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.stopped {
		e.emitLocked(evs)
	}
}

func (e *emitter) emitLocked(evs []Event) {
	for i := range evs {
		if e.ended {
			return
		}
		ev := &evs[i]
		if ev.Kind == api.EventSession {
			if e.noSession {
				continue
			}
			if e.session != "" {
				ev.SessionID = e.session
			}
		}
		v := e.guard.observe(ev)
		switch {
		case v.progress && e.netDown != nil:
			e.netDown.Stop()
			e.netDown = nil
		case v.unreachable && e.netDown == nil && !e.stopped:
			msg := ev.Error
			e.netDown = time.AfterFunc(e.grace, func() { e.endRun(unreachableFailure(msg, e.grace)) })
		}
		if e.watch != nil {
			e.watch.event(ev)
		}
		if e.coalesce && mergeable(ev) {
			e.hold(ev)
			continue
		}
		e.flushLocked()
		if e.onEvent != nil && (v.end == nil || ev.Kind != api.EventRetry) && !ev.capsOnly {
			e.onEvent(*ev)
		}
		if v.end == nil {
			// A cap is judged on the usage the event reports, after the
			// client has seen it: the ending then explains itself.
			v.end = e.caps.observe(ev)
		}
		if v.end != nil {
			e.ended = true
			e.end(v.end)
		}
	}
}

// hold adds a mergeable delta to what is held, sending what was held first
// when it is of the other kind or full.
func (e *emitter) hold(ev *Event) {
	h := &e.held
	if h.kind != "" && (h.kind != ev.Kind || h.text.Len()+len(ev.Text) > maxHeldText) {
		e.flushLocked()
	}
	h.kind = ev.Kind
	h.text.WriteString(ev.Text)
}

// flush sends the held delta, if any: the reader calls it when it has no
// more complete lines in hand, before it waits for the agent.
func (e *emitter) flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.stopped {
		e.flushLocked()
	}
}

func (e *emitter) flushLocked() {
	h := &e.held
	if h.kind == "" {
		return
	}
	ev := Event{Kind: h.kind, Text: h.text.String(), Delta: true}
	h.kind = ""
	h.text.Reset()
	if e.onEvent != nil {
		e.onEvent(ev)
	}
}

// endRun ends the run for the watchdog or the network's grace; what the
// agent prints after is not sent, as after the guard's ending.
func (e *emitter) endRun(f *api.RunError) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended || e.stopped {
		return
	}
	e.flushLocked()
	e.ended = true
	e.end(f)
}

// stop sends what is still held and ends the network grace, once the child
// is gone.
func (e *emitter) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.ended {
		e.flushLocked()
	}
	e.stopped = true
	if e.netDown != nil {
		e.netDown.Stop()
		e.netDown = nil
	}
}
