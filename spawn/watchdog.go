package spawn

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/card-dev/card/api"
)

// The watchdog: a run that has gone silent says so, and after a second
// limit is ended, so an agent waiting on an API that never answers is seen
// as stalled rather than mistaken for one that is thinking.
//
// Silence is measured from the agent's last byte on stdout or stderr (a
// session protocol's messages arrive on stdout too). The clock pauses
// while a question waits for its answer (the person is the one being slow)
// and while a retry the agent announced with a delay has not come due (the
// agent said it is waiting, and for how long).
//
// How the defaults were chosen: nothing in a one-shot agent's output tells
// a quiet tool call from a hung model call. Claude Code prints a tool_use,
// then nothing until its tool is done, and a `cargo build` or a test suite
// can take many minutes; a model call with extended thinking prints
// nothing for minutes unless the CLI streams partial messages. So the
// warning comes late (DefaultStallSecs, five minutes: past nearly every
// model call, and a warning costs a run nothing) and the default never
// ends a run for its silence: the run's own deadline (timeout_secs) bounds
// it. An operator who knows their agents print steadily sets
// stall_kill_secs in card.toml, a client per request.

// DefaultStallSecs is the silence after which a run is marked stalled when
// neither the request nor card.toml says.
const DefaultStallSecs = 300

// Watchdog is a run's two limits on its agent's silence.
type Watchdog struct {
	// After is the silence after which the run is stalled and a stalled
	// event is sent; 0 never.
	After time.Duration
	// KillAfter is the silence after which the run is ended with kind
	// stalled; 0 never. It is more than After when both are set.
	KillAfter time.Duration
}

// watchdog follows one run: its state and its silence.
type watchdog struct {
	cfg     Watchdog
	onState func(api.RunState)

	mu         sync.Mutex
	last       time.Time // the agent's last output, or the end of a pause
	retryUntil time.Time // an announced retry's delay runs until then
	// retrying: the agent announced a retry without saying how long it
	// waits (Codex's "Reconnecting... n/m", Copilot's turn_retry), and has
	// shown no progress since: it is waiting for the API, though the
	// clock runs on, since nothing bounds how long.
	retrying bool
	asking   int  // questions waiting for an answer
	output   bool // the agent has printed something
	stalled  bool
	state    api.RunState
	killed   bool

	// emit and end are the run's, set before the first tick.
	emit func(Event)
	end  func(*api.RunError)
}

func newWatchdog(cfg Watchdog, onState func(api.RunState)) *watchdog {
	w := &watchdog{cfg: cfg, onState: onState, last: time.Now(), state: api.StateStarting}
	if onState != nil {
		onState(api.StateStarting)
	}
	return w
}

// setStateLocked recomputes the state and tells onState of a change. It
// runs under w.mu, so changes reach onState in order.
func (w *watchdog) setStateLocked(now time.Time) {
	s := api.StateStarting
	switch {
	case w.asking > 0:
		s = api.StateWaitingApproval
	case now.Before(w.retryUntil):
		s = api.StateWaitingAPI
	case w.stalled:
		s = api.StateStalled
	case w.retrying:
		s = api.StateWaitingAPI
	case w.output:
		s = api.StateWorking
	}
	if s != w.state {
		w.state = s
		if w.onState != nil {
			w.onState(s)
		}
	}
}

// touch is the agent's output: the clock starts again and a stalled run is
// working again.
func (w *watchdog) touch() {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last, w.output, w.stalled = now, true, false
	w.setStateLocked(now)
}

// event sees each event on its way to the client: a retry with a delay
// pauses the clock for the delay; progress ends that pause.
func (w *watchdog) event(ev *Event) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev.Kind {
	case api.EventRetry:
		w.retrying = true
		if ev.DelayMs > 0 {
			w.retryUntil = now.Add(time.Duration(ev.DelayMs) * time.Millisecond)
		}
	case api.EventText, api.EventThinking, api.EventToolUse, api.EventToolResult, api.EventUsage:
		w.retryUntil, w.retrying = time.Time{}, false
	}
	w.setStateLocked(now)
}

// asked marks a question waiting (+1) or answered (-1); the clock starts
// again from the answer.
func (w *watchdog) asked(d int) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asking += d
	if d < 0 {
		w.last, w.stalled = now, false
	}
	w.setStateLocked(now)
}

// tick decides, at now, whether the run has become stalled or is to end.
func (w *watchdog) tick(now time.Time) {
	w.mu.Lock()
	var send *Event
	var end *api.RunError
	from := w.last
	if w.retryUntil.After(from) {
		from = w.retryUntil
	}
	quiet := now.Sub(from)
	paused := w.asking > 0 || now.Before(w.retryUntil)
	switch {
	case paused || w.killed:
	case w.cfg.KillAfter > 0 && quiet >= w.cfg.KillAfter:
		w.killed = true
		end = failure(api.KindStalled, fmt.Sprintf("the agent printed nothing for %s (stall_kill_secs = %d, the request's field or card.toml's key); "+
			"card ended the run and its process group", w.cfg.KillAfter.Round(time.Millisecond), int(w.cfg.KillAfter/time.Second)))
	case w.cfg.After > 0 && quiet >= w.cfg.After && !w.stalled:
		w.stalled = true
		send = &Event{Kind: api.EventStalled, QuietMs: quiet.Milliseconds(), KillAfterMs: w.cfg.KillAfter.Milliseconds(),
			Text: fmt.Sprintf("the agent has printed nothing for %s (stall_secs = %d)", quiet.Round(time.Second), int(w.cfg.After/time.Second))}
	}
	w.setStateLocked(now)
	emit, endRun := w.emit, w.end
	w.mu.Unlock()
	// The emitter takes its own lock and calls event, so these go out
	// after w.mu is let go.
	if send != nil && emit != nil {
		emit(*send)
	}
	if end != nil && endRun != nil {
		endRun(end)
	}
}

// turn readies the watchdog of a warm agent for one turn: the clock starts
// now, and onState, emit and end are the turn's; nil for all three between
// turns, when nobody is told.
func (w *watchdog) turn(onState func(api.RunState), emit func(Event), end func(*api.RunError)) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onState, w.emit, w.end = onState, emit, end
	w.last, w.retryUntil, w.output, w.stalled, w.killed = now, time.Time{}, false, false, false
	w.state = ""
	w.setStateLocked(now)
}

// arm readies a run's watchdog for its one turn: emit and end are the
// turn's, and its state goes on from the start of the run.
func (w *watchdog) arm(emit func(Event), end func(*api.RunError)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emit, w.end = emit, end
}

// watch ticks until stop closes. A run without limits only follows its
// state, which needs no clock.
func (w *watchdog) watch(stop <-chan struct{}) {
	if w.cfg.After <= 0 && w.cfg.KillAfter <= 0 {
		return
	}
	limit := w.cfg.After
	if limit <= 0 || (w.cfg.KillAfter > 0 && w.cfg.KillAfter < limit) {
		limit = w.cfg.KillAfter
	}
	t := time.NewTicker(min(max(limit/10, 20*time.Millisecond), time.Second))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			w.tick(now)
		}
	}
}

// watchedApprover pauses the watchdog while a question waits.
type watchedApprover struct {
	Approver
	w *watchdog
}

func (a watchedApprover) Approve(ctx context.Context, q Question) Decision {
	a.w.asked(1)
	defer a.w.asked(-1)
	return a.Approver.Approve(ctx, q)
}
