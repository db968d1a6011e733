package spawn

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/card-dev/card/api"
)

// turn is one prompt and its answer on an agent, as the runner and the
// protocol share it, whatever the protocol and however long the agent is
// kept. The runner owns the turn's deadline, its guards and its ending;
// the protocol records how the agent's side went: the step card waits on,
// whether the turn ended as the protocol says, the first failure. The
// ending is written once here, so an agent that dies, a turn that is
// cancelled and a question left waiting are handled alike whichever
// protocol the agent speaks.
type turn struct {
	ctx      context.Context
	spec     TurnSpec
	images   []Image // the spec's images, in memory while the turn runs
	approver Approver
	ev       *emitter
	at       time.Time
	// first says the agent's opening was this turn's first step (an agent
	// opened for one turn): what it reported went out with it.
	first bool

	ended   chan struct{} // the protocol is done with the turn
	endOnce sync.Once
	judged  chan struct{} // the run's own guards ended it (verdict)
	vOnce   sync.Once

	mu        sync.Mutex
	step      string // the call card waits on, for an agent that stops
	completed bool   // the turn ended as the protocol says it ends
	closing   bool   // no new question is taken
	failure   *api.RunError
	verdict   *api.RunError

	// asks are the questions waiting on the approver, off the reader;
	// qctx ends with the turn, and those still waiting are denied.
	asks    sync.WaitGroup
	qctx    context.Context
	qcancel context.CancelFunc
}

func newTurn(ctx context.Context, ts TurnSpec, approver Approver) *turn {
	t := &turn{ctx: ctx, spec: ts, approver: approver, at: time.Now(), ended: make(chan struct{}), judged: make(chan struct{})}
	t.qctx, t.qcancel = context.WithCancel(ctx)
	return t
}

// end says the turn is over as far as the protocol goes.
func (t *turn) end() { t.endOnce.Do(func() { close(t.ended) }) }

// isEnded says whether end was called.
func (t *turn) isEnded() bool { return isClosed(t.ended) }

// complete records that the turn ended as the protocol says, and ends it.
func (t *turn) complete() {
	t.mu.Lock()
	t.completed = true
	t.mu.Unlock()
	t.end()
}

// setFailure records why the turn fails; the first failure wins.
func (t *turn) setFailure(f *api.RunError) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failure == nil {
		t.failure = f
	}
}

// fail records f and ends the turn.
func (t *turn) fail(f *api.RunError) {
	t.setFailure(f)
	t.end()
}

// isCompleted says whether the turn ended as the protocol says.
func (t *turn) isCompleted() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.completed
}

// failed is the failure recorded, nil for none.
func (t *turn) failed() *api.RunError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failure
}

// endIfFailed ends a turn whose step could not be made for a reason the
// agent gave; one that went silent (its stream closed) is the runner's to
// explain from the exit.
func (t *turn) endIfFailed() {
	if t.failed() != nil {
		t.end()
	}
}

func (t *turn) setStep(step string) {
	t.mu.Lock()
	t.step = step
	t.mu.Unlock()
}

// judge is the emitter's and the watchdog's ending: the run's own guards
// (retries, caps, silence) decided the turn cannot succeed.
func (t *turn) judge(f *api.RunError) {
	t.vOnce.Do(func() {
		t.mu.Lock()
		t.verdict = f
		t.mu.Unlock()
		close(t.judged)
	})
}

// emit hands events to the turn's client, through its guards, until the
// turn is over.
func (t *turn) emit(evs ...Event) { t.ev.emit(evs) }

// approve puts q to the agent's approver; without one it is denied.
func (t *turn) approve(ctx context.Context, q Question) Decision {
	if t.approver == nil {
		return Decision{Message: "card denied this tool call: the run has no approver"}
	}
	return t.approver.Approve(ctx, q)
}

// question puts one of the agent's questions to decide, off the reader, and
// hands reply its answer; once the turn is over it replies closed at once.
// Either way the agent gets an answer, never silence: none of these CLIs
// times a question out on its own.
func (t *turn) question(closed any, reply func(answer any), decide func(ctx context.Context) any) {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		reply(closed)
		return
	}
	t.asks.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.asks.Done()
		// The reply goes out even when the turn just ended: the agent
		// must not be left waiting on a question card dropped.
		reply(decide(t.qctx))
	}()
}

// settle takes no new question; those waiting are denied (the approver
// answers an ended context with a deny) and answered before it returns,
// so no answer is written after the agent's stdin closes.
func (t *turn) settle() {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
	t.qcancel()
	t.asks.Wait()
}

// stopWords say, in a protocol's own terms, where an agent that stopped
// before its turn ended had got to.
type stopWords struct {
	verb      string // what the agent did not do to the step: "finished", "answered"
	firstStep string // the step named before card made any call
	cutShort  string // what an exit 0 mid-turn means for the output
}

// rpcWords are the words of the protocols other than ACP.
var rpcWords = stopWords{verb: "finished", firstStep: "the first request", cutShort: "its output was cut short"}

// outcome is the common ending of every protocol's result, once the turn
// is over: the first failure recorded wins; a turn that ended as the
// protocol says succeeds; otherwise the agent stopped early, and explain
// (the protocol's reading of the exit and stderr, nil when it has nothing
// to add) or the words say how, with the last error the agent reported.
func (t *turn) outcome(res api.Result, exit ExitInfo, adapter string, words stopWords, explain func(ExitInfo) *api.RunError, lastError string) api.Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.failure != nil:
		res.IsError, res.Error = true, t.failure
	case t.completed:
	default:
		var f *api.RunError
		if explain != nil {
			f = explain(exit)
		}
		if f == nil {
			f = stopped(exit, adapter, t.step, words)
			if lastError != "" {
				f.Message += "; its last error: " + lastError
			}
		}
		res.IsError, res.Error = true, f
	}
	return res
}

// stopped explains an agent whose stdout ended before the turn did.
func stopped(exit ExitInfo, adapter, step string, words stopWords) *api.RunError {
	if step == "" {
		step = words.firstStep
	}
	var msg string
	kind := api.KindExit
	switch {
	case exit.Code > 0:
		msg = fmt.Sprintf("%s exited with status %d before it %s %s", adapter, exit.Code, words.verb, step)
	case exit.Code == 0:
		kind = api.KindBadOutput
		msg = fmt.Sprintf("%s exited 0 before it %s %s; %s", adapter, words.verb, step, words.cutShort)
	default:
		msg = fmt.Sprintf("%s was killed before it %s %s", adapter, words.verb, step)
	}
	if l := lastLine(exit.StderrTail); l != "" {
		msg += ": " + l
	}
	return failure(kind, clip(msg, 2048))
}

// exitOrAlive is the exit a result is read with: an agent that lives on
// exited 0 as far as its turn goes.
func exitOrAlive(exit *ExitInfo) ExitInfo {
	if exit == nil {
		return ExitInfo{Code: 0}
	}
	return *exit
}

// usageMinus is a's tokens less b's, none below zero: a turn's part of a
// total an agent reports for its whole session.
func usageMinus(a, b api.Usage) api.Usage {
	return api.Usage{InputTokens: max(a.InputTokens-b.InputTokens, 0), OutputTokens: max(a.OutputTokens-b.OutputTokens, 0),
		CachedInputTokens: max(a.CachedInputTokens-b.CachedInputTokens, 0)}
}

// totalOf is a session's running total as a result reports it: nil when
// the CLI reported none.
func totalOf(u api.Usage) *api.Usage {
	if u == (api.Usage{}) {
		return nil
	}
	return &u
}
