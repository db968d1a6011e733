package spawn

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/card-dev/card/api"
)

// An agent is one agent process and the protocol its CLI speaks over its
// stdio, with one turn running at a time. A one-shot run is an agent
// opened for one turn of print mode, whose turn reads stdout to its end; an
// ask run is an agent opened for one turn of its CLI's session protocol;
// a warm agent is one that is kept across the turns of a conversation.
// Whichever, the process has the same guarantees (child.go), a turn the
// same record (turn.go), and a turn runs the same way (runTurn): the
// deadline, cancel, output bound and guards are the runner's, what goes
// over stdio the protocol's.

// protocol is the agent's side of what its CLI speaks over stdio.
type protocol interface {
	// open readies the protocol to read the agent's stdout (it sets the
	// child's sink); nothing is read before it returns.
	open(a *runner)
	// consumed is closed once the protocol has read the last stdout line.
	consumed() <-chan struct{}
	// opening speaks the protocol's opening, if it has one, within t's
	// context, reporting on t; false when it did not get through (the
	// failure, if the agent gave one, recorded on t).
	opening(t *turn) bool
	// begin sends the turn's prompt; the protocol ends the turn once the
	// agent says it is over, or records why it cannot.
	begin(t *turn)
	// interrupt asks the agent, inside the protocol, to stop the running
	// turn; false when the protocol has no way to.
	interrupt(t *turn) bool
	// steer adds text to the running turn, or says why it cannot.
	steer(t *turn, text string) error
	// finish gives the turn's result once it is over; exit is nil while
	// the agent lives on.
	finish(t *turn, exit *ExitInfo) api.Result
	// sessionID is the CLI's own id of the conversation, once known.
	sessionID() string
}

// oneShotCanceller is a protocol whose one-shot runs are stopped inside
// it before their agent is ended, as a kept agent's turns are: the agent
// then ends what it started (commands in sessions of their own, outside
// its process group) before the kill.
type oneShotCanceller interface{ cancelsFirst() bool }

func cancelsFirst(p protocol) bool {
	c, ok := p.(oneShotCanceller)
	return ok && c.cancelsFirst()
}

// runner is one agent: its process and its protocol side.
type runner struct {
	adapter  string
	plan     Plan
	imageMem *Budget
	// kept: the agent lives on after its turns (a warm agent); a run's
	// agent is ended once its one turn is over.
	kept  bool
	child *child
	proto protocol
	// approver is a kept agent's: each question goes to the running
	// turn's approver.
	approver *switchApprover
	broken   atomic.Bool // the agent must take no more turns
	// merges is set by a protocol whose reader flushes the running turn
	// whenever it has no line in hand: the turn's text deltas read
	// together then go out as one (see emitter.held).
	merges bool
	opened bool // the protocol's opening is done

	// sem lets one turn run at a time, and a waiting one give up with
	// its ctx.
	sem chan struct{}
	mu  sync.Mutex
	cur *turn

	// life ends when the agent does: what the protocol keeps open for the
	// agent's life (a JSON-RPC connection) is bound to it.
	life     context.Context
	stopLife context.CancelFunc
	done     chan struct{}
}

func newRunner(plan Plan, kept bool, imageMem *Budget) *runner {
	a := &runner{plan: plan, kept: kept, imageMem: imageMem, approver: &switchApprover{}, sem: make(chan struct{}, 1), done: make(chan struct{})}
	if plan.Session != nil {
		a.adapter = plan.Session.Adapter
	}
	a.life, a.stopLife = context.WithCancel(context.Background())
	return a
}

// SessionPlan is how a plan's child is talked to when it is not one-shot.
type SessionPlan struct {
	Protocol Protocol
	// Adapter picks the adapter's dialect of the protocol: how it names
	// tools and what its exit codes and stderr mean.
	Adapter string
	// Model and Effort go inside the protocol, for a CLI that takes them
	// there and not on argv (Droid's stream-jsonrpc); empty leaves the
	// CLI's own choice.
	Model, Effort string
	// thread is the app-server thread a Codex run or warm agent starts or
	// resumes (its mode's sandbox and approval policy); nil: the ask
	// thread.
	thread *codexAppThreadStart
	// resume is the CLI's own session a run or a warm agent opens instead
	// of a new one (ACP's session/load, Codex's thread/resume); "" for a
	// new one.
	resume string
	// mode is the permission mode the protocol answers the agent's
	// questions by, for a dialect that judges them itself (a declared
	// ACP agent's).
	mode Mode
}

// usageBaser is a one-shot parser whose CLI reports the session's running
// total: it takes the run's part from the plan's base.
type usageBaser interface{ setUsageBase(api.Usage) }

// protocolOf is the protocol the plan's session names, as its adapter's
// driver speaks it.
func protocolOf(plan Plan) (protocol, error) {
	sp := plan.Session
	if d, ok := lookupDriver(sp.Adapter); ok && d.Protocols[sp.Protocol] != nil {
		return d.Protocols[sp.Protocol](plan), nil
	}
	return nil, fmt.Errorf("adapter %q is not run over session protocol %q", sp.Adapter, sp.Protocol)
}

// start starts the agent's prepared child and its protocol's reading, t
// the turn the agent is started for (nil for a kept agent, whose turns
// come later).
func (a *runner) start(c *child, proto protocol, t *turn) *Error {
	a.child, a.proto = c, proto
	if e := c.start(); e != nil {
		c.cleanup()
		return e
	}
	c.skipped = func(n int64) {
		a.emitCur(Event{Kind: api.EventOther, Text: fmt.Sprintf("a stdout line of more than %d bytes was skipped (line limit)", n)})
	}
	proto.open(a)
	if t != nil {
		a.enter(t)
	}
	go c.live()
	return nil
}

// watchExit marks the agent gone once its child is, and closes done;
// onExit, when set, is called once the child and its whole group are gone,
// before done closes.
func (a *runner) watchExit(onExit func(ExitInfo)) {
	<-a.child.done
	a.broken.Store(true)
	// What the agent wrote before it exited (an answer, then exit) is read
	// before what the protocol holds open for its life ends: a request
	// still waiting for that answer would fail on the ended life instead.
	// The stream has ended with the child, so this is short; the grace
	// bounds a protocol that holds on.
	grace := time.NewTimer(a.child.lim.KillGrace)
	select {
	case <-a.proto.consumed():
	case <-grace.C:
	}
	grace.Stop()
	a.stopLife()
	<-a.proto.consumed()
	// OnExit before Done: whoever sees Done has had OnExit.
	if onExit != nil {
		onExit(a.child.exit)
	}
	close(a.done)
}

// ready speaks a kept agent's opening before its first turn, within ctx;
// a failed one ends the agent and says why, as Run would. onExit is the
// kept agent's (WarmSpec.OnExit).
func (a *runner) ready(ctx context.Context, onExit func(ExitInfo)) *Error {
	t := newTurn(ctx, TurnSpec{}, a.child.Approver)
	t.ev = newEmitter(nil, nil, 0, nil, t.judge)
	a.setCur(t)
	ok := a.proto.opening(t)
	a.setCur(nil)
	t.settle()
	if ok {
		a.opened = true
		go a.watchExit(onExit)
		return nil
	}
	f := a.startFailed(ctx, t)
	a.broken.Store(true)
	a.child.end()
	<-a.child.done
	a.stopLife()
	<-a.proto.consumed()
	kind, msg := f.Kind, f.Message
	if ctx.Err() != nil {
		kind, msg = ctxKind(ctx)
		msg += " before the agent was ready"
	}
	return &Error{Kind: kind, Message: msg, Command: a.child.command, ExitCode: a.child.exit.Code,
		StderrExcerpt: stderrExcerpt(a.child.exit.StderrTail)}
}

// startFailed explains an opening that did not get through: a cancelled
// start, the failure the agent gave, or, once it has gone, its exit.
func (a *runner) startFailed(ctx context.Context, t *turn) *api.RunError {
	if ctx.Err() != nil {
		return failure(api.KindCancelled, "the start was cancelled")
	}
	if f := t.failed(); f != nil {
		return f
	}
	select {
	case <-a.child.done:
	case <-ctx.Done():
		return failure(api.KindCancelled, "the start was cancelled")
	}
	<-a.proto.consumed()
	x := a.child.exit
	return a.proto.finish(t, &x).Error
}

// enter makes t the running turn.
func (a *runner) enter(t *turn) {
	t.ev.coalesce = a.merges
	a.setCur(t)
}

func (a *runner) setCur(t *turn) {
	a.mu.Lock()
	a.cur = t
	a.mu.Unlock()
}

// current is the running turn, nil between turns.
func (a *runner) current() *turn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur
}

// emitCur hands an event to the running turn, if there is one; between
// turns nobody is listening.
func (a *runner) emitCur(ev Event) {
	if t := a.current(); t != nil {
		t.emit(ev)
	}
}

// flushCur sends what the running turn holds of its text.
func (a *runner) flushCur() {
	if t := a.current(); t != nil {
		t.ev.flush()
	}
}

// what the agent's work is called in messages: a run, or a kept agent's
// turn.
func (a *runner) what() string {
	if a.kept {
		return "turn"
	}
	return "run"
}

// newTurn readies a turn of ts on the agent: its images in memory within
// the daemon's bound, its emitter and guards.
func (a *runner) newTurn(ctx context.Context, ts TurnSpec) (*turn, func(), *Error) {
	early := func(kind, msg string, err error) (*turn, func(), *Error) {
		return nil, nil, a.child.early(kind, msg, err)
	}
	if d, ok := lookupDriver(a.adapter); ok && a.kept && len(ts.Images) > 0 && !d.Capabilities.Images {
		// Build refuses these for a run; a warm turn's images are checked
		// here, so none is dropped without a word.
		e := &api.FieldError{Field: "attachments", Message: fmt.Sprintf("%s does not take images: %s", a.adapter, d.NoImages)}
		return early(api.KindBadInput, e.Error(), e)
	}
	t := newTurn(ctx, ts, a.child.Approver)
	release := t.qcancel
	if len(ts.Images) > 0 {
		var n int64
		for _, img := range ts.Images {
			n += img.Size()
		}
		free, err := a.imageMem.Hold(ctx, n)
		if err != nil {
			release()
			kind, msg := ctxKind(ctx)
			return early(kind, msg+" while the "+a.what()+" waited for memory for its images ([attachments] max_bytes_in_flight)", err)
		}
		release = func() {
			t.qcancel()
			t.images = nil
			free()
			// The images and the message that carried them are garbage
			// now; give their pages back rather than keep a high-water
			// mark for the daemon's whole life.
			debug.FreeOSMemory()
		}
		if t.images, err = inMemory(ts.Images); err != nil {
			release()
			return early(api.KindSpawn, err.Error(), err)
		}
	}
	t.ev = newEmitter(ts.OnEvent, nil, a.plan.MaxAPIRetries, a.plan.Caps, t.judge)
	t.ev.watch = a.child.watch
	return t, release, nil
}

// turn runs one turn of a kept agent, after the one before it.
func (a *runner) turn(ctx context.Context, ts TurnSpec) (api.Result, error) {
	early := func(e *Error) (api.Result, error) { return e.result(), e }
	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		kind, msg := ctxKind(ctx)
		return early(a.child.early(kind, msg+" while the turn waited for the one before it", ctx.Err()))
	}
	defer func() { <-a.sem }()
	if a.broken.Load() {
		return a.gone()
	}
	if err := ctx.Err(); err != nil {
		kind, msg := ctxKind(ctx)
		return early(a.child.early(kind, msg+" before the turn started", err))
	}
	t, release, e := a.newTurn(ctx, ts)
	if e != nil {
		return early(e)
	}
	defer release()
	if a.plan.Ask != nil {
		a.approver.set(ts.Approver)
	}
	defer a.approver.set(nil)
	a.child.resetOutput()
	a.enter(t)
	return a.runTurn(t)
}

// gone is a turn refused because the agent's process is over.
func (a *runner) gone() (api.Result, error) {
	e := &Error{Kind: api.KindExit, Message: a.adapter + ": " + ErrAgentGone.Error() + "; start a new one (it resumes the conversation)",
		Command: a.child.command, ExitCode: -1, Err: ErrAgentGone}
	return e.result(), e
}

// How a turn ended, for its result.
const (
	byAgent   = iota // as the protocol or the agent's exit says
	byCtx            // its deadline or a cancel
	byVerdict        // the run's own guards
)

// runTurn runs the running turn t: the prompt in, the agent's answer out,
// within t's context, the output limit and the run's guards. A turn the
// protocol cannot stop cleanly (a cancel the agent does not obey within
// the grace, an output flood, a verdict of the guards) ends the agent with
// it, as the end of its one turn ends an agent that is not kept.
func (a *runner) runTurn(t *turn) (api.Result, error) {
	stopWatch := a.watchTurn(t)
	defer stopWatch()
	var began sync.WaitGroup
	began.Add(1)
	go func() {
		defer began.Done()
		a.begin(t)
	}()
	how := a.await(t)
	exit := a.settle(t, &began)
	return a.judge(t, how, exit)
}

// begin makes the protocol's opening first, for an agent opened with its
// turn, then sends the prompt.
func (a *runner) begin(t *turn) {
	if !a.opened {
		a.opened, t.first = true, true
		if !a.proto.opening(t) {
			t.endIfFailed()
			return
		}
	}
	a.proto.begin(t)
}

// watchTurn runs the agent's watchdog for t: its silence within the turn,
// paused while a question waits, ending the turn (and the agent) at
// stall_kill_secs.
func (a *runner) watchTurn(t *turn) (stop func()) {
	wd := a.child.watch
	emit := func(e Event) { t.emit(e) }
	if a.kept {
		wd.turn(t.spec.OnState, emit, t.judge)
	} else {
		// The run's watchdog, told of the run's state since it started.
		wd.arm(emit, t.ev.endRun)
	}
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		wd.watch(done)
	}()
	return func() {
		close(done)
		<-watched
		wd.turn(nil, nil, nil)
	}
}

// await waits for the turn to end: as the protocol says, by its context
// (stopped inside the protocol when a kept agent's can be, within the
// grace, else with the agent), by the guards' verdict, or with the agent.
func (a *runner) await(t *turn) int {
	select {
	case <-t.ended:
		if !a.kept && t.ctx.Err() != nil {
			return byCtx
		}
		return byAgent
	case <-t.ctx.Done():
		if !t.isEnded() && (a.kept || cancelsFirst(a.proto)) && a.proto.interrupt(t) {
			grace := time.NewTimer(a.child.lim.KillGrace)
			select {
			case <-t.ended:
			case <-grace.C:
			case <-a.child.done:
			}
			grace.Stop()
		}
		if !t.isEnded() {
			a.broken.Store(true)
			a.child.end()
		}
		return byCtx
	case <-t.judged:
		a.broken.Store(true)
		a.child.end()
		return byVerdict
	case <-a.child.done:
		return byAgent
	}
}

// settle ends the turn's side of the agent once it is over: its questions
// still waiting denied, what the agent said read to the end where it is
// going (or gone), and the agent ended where it must not take another
// turn (not kept, exited, or the turn unfinished). It returns the agent's
// exit, nil while it lives on.
func (a *runner) settle(t *turn, began *sync.WaitGroup) *ExitInfo {
	t.settle()
	if !t.isEnded() || a.broken.Load() {
		select {
		case <-a.child.done:
			<-a.proto.consumed()
		case <-t.ended:
		}
	}
	if !a.kept || a.child.exitedEarly() || !t.isEnded() {
		a.broken.Store(true)
		if a.kept || !t.isEnded() || t.ctx.Err() != nil {
			a.child.end()
		} else {
			// Its stdin closed, an agent that exits on EOF gets the grace
			// to do so cleanly.
			a.child.close()
		}
		<-a.child.done
		<-a.proto.consumed()
	}
	began.Wait()
	a.setCur(nil)
	t.ev.stop()
	if !isClosed(a.child.done) {
		return nil
	}
	x := a.child.exit
	return &x
}

// judge gives the turn's result, and its error when it failed, in order of
// precedence: its context, the guards' verdict, the output limit, what the
// protocol read of the agent.
func (a *runner) judge(t *turn, how int, exit *ExitInfo) (api.Result, error) {
	res := a.proto.finish(t, exit)
	if a.kept || res.DurationMs == 0 {
		res.DurationMs = time.Since(t.at).Milliseconds()
	}
	if res.Usage == (api.Usage{}) {
		// A turn the cap ended before the CLI's own summary still records
		// what it used.
		res.Usage = t.ev.caps.reported()
	}
	if a.plan.SessionID != "" {
		res.SessionID = a.plan.SessionID
	}
	e := &Error{Command: a.child.command, ExitCode: -1}
	if exit != nil {
		e.ExitCode, e.StderrExcerpt = exit.Code, stderrExcerpt(exit.StderrTail)
	}
	t.mu.Lock()
	verdict := t.verdict
	t.mu.Unlock()
	switch {
	case how == byCtx:
		e.Kind, e.Message = ctxKind(t.ctx)
		e.Err = t.ctx.Err()
		if exit == nil {
			// The agent stopped the turn inside its protocol and lives on.
			e.Message = "the turn was stopped inside the agent's protocol; the agent stays up for the next turn"
			if c := context.Cause(t.ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
				e.Message = c.Error() + "; " + e.Message
			}
		}
	case how == byVerdict && verdict != nil:
		e.Kind, e.Message = verdict.Kind, verdict.Message
	case a.child.limited:
		e.Kind = api.KindOutputLimit
		e.Message = fmt.Sprintf("the agent printed more than %d bytes; the run was ended (raise the output limit or narrow the task)", a.child.lim.MaxOutput)
		if a.kept {
			e.Message = fmt.Sprintf("the agent printed more than %d bytes in one turn; the agent was ended (raise the output limit or narrow the task)", a.child.lim.MaxOutput)
		}
	case res.Error != nil:
		e.Kind, e.Message = res.Error.Kind, res.Error.Message
		if e.Kind == api.KindBudget && !a.kept && a.plan.Caps != nil && a.plan.Caps.CostByCLI {
			// The CLI stopped at its own spending flag: say it in the
			// words of the cap the client set.
			e.Message = a.plan.Caps.capMessage(res)
		}
	default:
		res.IsError, res.Error = false, nil
		return res, nil
	}
	res.IsError = true
	res.Error = &api.RunError{Kind: e.Kind, Message: e.Message, StderrExcerpt: e.StderrExcerpt}
	if e.ExitCode >= 0 {
		code := e.ExitCode
		res.Error.ExitCode = &code
	}
	return res, e
}
