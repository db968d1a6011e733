package spawn

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// warmProto is one protocol's side of a warm agent. The runner owns the
// process, the turn's deadline and cancel, its output bound and its
// ending; the protocol owns what goes over stdio.
type warmProto interface {
	// open starts reading the child's stdout lines (until they close) and
	// speaks the protocol's opening, if it has one, within ctx.
	open(ctx context.Context, w *warmRunner) *Failure
	// consumed is closed once the protocol has read the last stdout line.
	consumed() <-chan struct{}
	// begin sends the turn's prompt; the protocol ends the turn (t.end)
	// once the agent says it is over, or records why it cannot (t.fail).
	begin(t *warmTurn)
	// interrupt asks the agent, inside the protocol, to stop the running
	// turn; false when the protocol has no way to.
	interrupt(t *warmTurn) bool
	// steer adds text to the running turn, or says why it cannot.
	steer(t *warmTurn, text string) error
	// finish gives the turn's result once it is over; exit is nil while
	// the agent lives on.
	finish(t *warmTurn, exit *ExitInfo) Result
	// sessionID is the CLI's own id of the conversation, once known.
	sessionID() string
}

// usageMinus is a's tokens less b's, none below zero: a turn's part of a
// total an agent reports for its whole session.
func usageMinus(a, b Usage) Usage {
	return Usage{InputTokens: max(a.InputTokens-b.InputTokens, 0), OutputTokens: max(a.OutputTokens-b.OutputTokens, 0),
		CachedInputTokens: max(a.CachedInputTokens-b.CachedInputTokens, 0)}
}

// totalOf is a session's running total as a result reports it: nil when
// the CLI reported none.
func totalOf(u Usage) *Usage {
	if u == (Usage{}) {
		return nil
	}
	return &u
}

// warmTurn is one turn as the runner and the protocol share it.
type warmTurn struct {
	ctx    context.Context
	spec   TurnSpec
	images []Image
	ev     *emitter
	at     time.Time

	ended   chan struct{}
	endOnce sync.Once

	mu      sync.Mutex
	failure *Failure // the protocol's reason the turn failed
	verdict *Failure // the run's own ending (retries, caps)
	judged  chan struct{}
	vOnce   sync.Once

	// emitMu and over keep a late message of the agent's (an update read
	// after the turn's end) from reaching a turn its caller has closed.
	emitMu sync.RWMutex
	over   bool
}

// end says the turn is over as far as the protocol goes.
func (t *warmTurn) end() { t.endOnce.Do(func() { close(t.ended) }) }

// fail ends the turn with f (the first failure wins).
func (t *warmTurn) fail(f *Failure) {
	t.mu.Lock()
	if t.failure == nil {
		t.failure = f
	}
	t.mu.Unlock()
	t.end()
}

func (t *warmTurn) protocolFailure() *Failure {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failure
}

// settling is a protocol's conversation as a warm turn ends it: its
// questions still waiting denied, then its result.
type settling interface {
	over()
	finish(exit ExitInfo) Result
}

// settle ends c's turn on a warm agent once its reader is done with it:
// questions still waiting end denied before the result is read, the
// agent's exit (nil while it lives) explains an unfinished turn, and a
// failure the runner saw first wins.
func (t *warmTurn) settle(c settling, exit *ExitInfo) Result {
	c.over()
	x := ExitInfo{Code: 0}
	if exit != nil {
		x = *exit
	}
	res := c.finish(x)
	if f := t.protocolFailure(); f != nil {
		res.IsError, res.Error = true, f
	}
	return res
}

// judge is the emitter's ending: the run's own guards (retries, caps)
// decided the turn cannot succeed.
func (t *warmTurn) judge(f *Failure) {
	t.vOnce.Do(func() {
		t.mu.Lock()
		t.verdict = f
		t.mu.Unlock()
		close(t.judged)
	})
}

// emit hands events to the turn's client, through its guards, until the
// turn is over.
func (t *warmTurn) emit(evs ...Event) {
	t.emitMu.RLock()
	defer t.emitMu.RUnlock()
	if !t.over {
		t.ev.emit(evs)
	}
}

// flush sends the text deltas the turn's emitter holds.
func (t *warmTurn) flush() {
	t.emitMu.RLock()
	defer t.emitMu.RUnlock()
	if !t.over {
		t.ev.flush()
	}
}

// close ends the turn's events: what comes after is dropped.
func (t *warmTurn) close() {
	t.emitMu.Lock()
	t.over = true
	t.emitMu.Unlock()
}

// warmRunner is the turn loop every warm protocol shares.
type warmRunner struct {
	adapter  string
	plan     Plan
	lim      Limits
	imageMem *Budget
	child    *warmChild
	proto    warmProto
	approver *switchApprover
	aliveFlag

	// merges is set by a protocol whose reader flushes the running turn
	// (flushCur) whenever it has no line in hand: the turn's text deltas
	// read together then go out as one (see emitter.held).
	merges bool

	// sem lets one turn run at a time, and a waiting one give up with
	// its ctx.
	sem chan struct{}

	mu  sync.Mutex
	cur *warmTurn

	// life ends when the agent does: what the protocol keeps open for
	// the agent's life (a JSON-RPC connection) is bound to it.
	life     context.Context
	stopLife context.CancelFunc

	done chan struct{}
}

// lineStream is the agent's stdout as JSON-RPC messages, for a protocol
// that speaks JSON-RPC over it: a line that is not a message is the running
// turn's "other" event, and whenever no line is in hand what the turn holds
// of its text goes out, so the turn merges the deltas read together.
func (w *warmRunner) lineStream() *lineStream {
	s := newLineStream(w.child.lines, stdinWriter{w.child}, func(line []byte) { w.emitCur(otherEvent("", line)) })
	s.idle, w.merges = w.flushCur, true
	return s
}

// startWarm starts the child and the protocol's opening.
func startWarm(ctx context.Context, spec WarmSpec, adapter string, proto warmProto) (*warmRunner, error) {
	w := &warmRunner{adapter: adapter, plan: spec.Plan, lim: spec.Limits.withDefaults(), imageMem: spec.ImageMemory, proto: proto,
		approver: &switchApprover{}, sem: make(chan struct{}, 1), done: make(chan struct{})}
	w.life, w.stopLife = context.WithCancel(context.Background())
	onExit := spec.OnExit
	spec.OnExit = nil
	child, e := startWarmChild(ctx, spec, w.approver, func(n int64) {
		w.emitCur(Event{Kind: EventOther, Text: fmt.Sprintf("a stdout line of more than %d bytes was skipped (line limit)", n)})
	})
	if e != nil {
		w.stopLife()
		return nil, e
	}
	w.child = child
	if f := proto.open(ctx, w); f != nil {
		w.child.end()
		<-w.child.done
		w.stopLife()
		<-proto.consumed()
		kind, msg := f.Kind, f.Message
		if ctx.Err() != nil {
			kind, msg = ctxKind(ctx)
			msg += " before the agent was ready"
		}
		return nil, &Error{Kind: kind, Message: msg, Command: w.plan.Command(), ExitCode: w.child.exit.Code,
			StderrExcerpt: stderrExcerpt(w.child.exit.StderrTail)}
	}
	go func() {
		<-w.child.done
		w.broken.Store(true)
		// What the agent wrote before it exited (an answer, then exit) is
		// read before what the protocol holds open for its life ends: a
		// request still waiting for that answer would fail on the ended
		// life instead. The stream has ended with the child, so this is
		// short; the grace bounds a protocol that holds on.
		grace := time.NewTimer(w.lim.KillGrace)
		select {
		case <-proto.consumed():
		case <-grace.C:
		}
		grace.Stop()
		w.stopLife()
		<-proto.consumed()
		// OnExit before Done: whoever sees Done has had OnExit.
		if onExit != nil {
			onExit(w.child.exit)
		}
		close(w.done)
	}()
	return w, nil
}

// emitCur hands an event to the running turn, if there is one; between
// turns nobody is listening.
func (w *warmRunner) emitCur(ev Event) {
	w.mu.Lock()
	t := w.cur
	w.mu.Unlock()
	if t != nil {
		t.emit(ev)
	}
}

// flushCur sends what the running turn holds of its text.
func (w *warmRunner) flushCur() {
	if t := w.current(); t != nil {
		t.flush()
	}
}

// current is the running turn, nil between turns.
func (w *warmRunner) current() *warmTurn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

func (w *warmRunner) alive() bool { return !w.broken.Load() }

func (w *warmRunner) sessionID() string { return w.proto.sessionID() }

// close ends the agent: its stdin closed, so it can end its session as it
// would on its own, then its group after the grace, then the protocol.
func (w *warmRunner) close() {
	w.broken.Store(true)
	w.child.close()
	<-w.done
}

// gone is a turn refused because the agent's process is over.
func (w *warmRunner) gone() (Result, error) {
	e := &Error{Kind: KindExit, Message: w.adapter + ": " + ErrAgentGone.Error() + "; start a new one (it resumes the conversation)",
		Command: w.plan.Command(), ExitCode: -1, Err: ErrAgentGone}
	return e.result(), e
}

func (w *warmRunner) steer(ctx context.Context, text string) error {
	if !w.alive() {
		return ErrAgentGone
	}
	t := w.current()
	if t == nil {
		return ErrNoTurn
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return w.proto.steer(t, text)
}

// turn runs one turn: the prompt in, the agent's answer out, within ctx,
// the output limit and the run's guards. A turn the protocol cannot stop
// cleanly (a cancel the agent does not obey within the grace, an output
// flood, a verdict of the guards) ends the agent with it.
func (w *warmRunner) turn(ctx context.Context, ts TurnSpec) (Result, error) {
	early := func(kind, msg string, err error) (Result, error) {
		e := &Error{Kind: kind, Message: msg, Command: w.plan.Command(), ExitCode: -1, Err: err}
		return e.result(), e
	}
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		kind, msg := ctxKind(ctx)
		return early(kind, msg+" while the turn waited for the one before it", ctx.Err())
	}
	defer func() { <-w.sem }()
	if !w.alive() {
		return w.gone()
	}
	if err := ctx.Err(); err != nil {
		kind, msg := ctxKind(ctx)
		return early(kind, msg+" before the turn started", err)
	}
	t := &warmTurn{ctx: ctx, spec: ts, at: time.Now(), ended: make(chan struct{}), judged: make(chan struct{})}
	if a, ok := lookupDriver(w.adapter); ok && len(ts.Images) > 0 && !a.Capabilities.Images {
		// Build refuses these for a one-shot run; a turn's images are
		// checked here, so none is dropped without a word.
		e := &FieldError{"attachments", fmt.Sprintf("%s does not take images: %s", w.adapter, a.NoImages)}
		return early(KindBadInput, e.Error(), e)
	}
	if len(ts.Images) > 0 {
		var n int64
		for _, img := range ts.Images {
			n += img.Size()
		}
		release, err := w.imageMem.Hold(ctx, n)
		if err != nil {
			kind, msg := ctxKind(ctx)
			return early(kind, msg+" while the turn waited for memory for its images ([attachments] max_bytes_in_flight)", err)
		}
		defer func() {
			t.images = nil
			release()
			debug.FreeOSMemory()
		}()
		if t.images, err = inMemory(ts.Images); err != nil {
			return early(KindSpawn, err.Error(), err)
		}
	}
	t.ev = newEmitter(ts.OnEvent, nil, w.plan.MaxAPIRetries, w.plan.Caps, t.judge)
	t.ev.coalesce = w.merges
	if w.plan.Ask != nil {
		w.approver.set(ts.Approver)
	}
	defer w.approver.set(nil)
	// The turn's watchdog: the agent's silence within the turn, paused
	// while a question waits, ending the turn (and the agent) at
	// stall_kill_secs as a one-shot run's ends.
	wd := w.child.p.watch
	wd.turn(ts.OnState, func(e Event) { t.emit(e) }, t.judge)
	t.ev.watch = wd
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		wd.watch(stopWatch)
	}()
	defer func() {
		close(stopWatch)
		<-watched
		wd.turn(nil, nil, nil)
	}()
	w.child.resetOutput()
	w.mu.Lock()
	w.cur = t
	w.mu.Unlock()

	var began sync.WaitGroup
	began.Add(1)
	go func() {
		defer began.Done()
		w.proto.begin(t)
	}()
	const (
		none = iota
		byCtx
		byVerdict
	)
	reason := none
	ended := func() bool {
		select {
		case <-t.ended:
			return true
		default:
			return false
		}
	}
	select {
	case <-t.ended:
	case <-ctx.Done():
		reason = byCtx
		if !ended() && w.proto.interrupt(t) {
			grace := time.NewTimer(w.lim.KillGrace)
			select {
			case <-t.ended:
			case <-grace.C:
			case <-w.child.done:
			}
			grace.Stop()
		}
		if !ended() {
			w.broken.Store(true)
			w.child.end()
		}
	case <-t.judged:
		reason = byVerdict
		w.broken.Store(true)
		w.child.end()
	case <-w.child.done:
	}
	if !ended() || w.broken.Load() {
		// The agent is going (or gone): read what it said to the end
		// before the turn is judged.
		select {
		case <-w.child.done:
			<-w.proto.consumed()
		case <-t.ended:
		}
	}
	if w.child.exitedEarly() || !ended() {
		w.broken.Store(true)
		w.child.end()
		<-w.child.done
		<-w.proto.consumed()
	}
	began.Wait()
	w.mu.Lock()
	w.cur = nil
	w.mu.Unlock()
	t.close()
	t.ev.stop()

	var exit *ExitInfo
	select {
	case <-w.child.done:
		x := w.child.exit
		exit = &x
	default:
	}
	res := w.proto.finish(t, exit)
	res.DurationMs = time.Since(t.at).Milliseconds()
	if res.Usage == (Usage{}) {
		res.Usage = t.ev.caps.reported()
	}
	e := &Error{Command: w.plan.Command(), ExitCode: -1}
	if exit != nil {
		e.ExitCode = exit.Code
		e.StderrExcerpt = stderrExcerpt(exit.StderrTail)
	}
	t.mu.Lock()
	verdict := t.verdict
	t.mu.Unlock()
	switch {
	case reason == byCtx:
		e.Kind, e.Message = ctxKind(ctx)
		e.Err = ctx.Err()
		if exit == nil {
			// The agent stopped the turn inside its protocol and lives on.
			e.Message = "the turn was stopped inside the agent's protocol; the agent stays up for the next turn"
			if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
				e.Message = c.Error() + "; " + e.Message
			}
		}
	case reason == byVerdict && verdict != nil:
		e.Kind, e.Message = verdict.Kind, verdict.Message
	case w.child.limited:
		e.Kind = KindOutputLimit
		e.Message = fmt.Sprintf("the agent printed more than %d bytes in one turn; the agent was ended (raise the output limit or narrow the task)", w.lim.MaxOutput+w.plan.OutputAllowance)
	case res.Error != nil:
		e.Kind, e.Message = res.Error.Kind, res.Error.Message
	default:
		res.IsError, res.Error = false, nil
		return res, nil
	}
	res.IsError = true
	res.Error = &Failure{Kind: e.Kind, Message: e.Message, StderrExcerpt: e.StderrExcerpt}
	if e.ExitCode >= 0 {
		code := e.ExitCode
		res.Error.ExitCode = &code
	}
	return res, e
}
