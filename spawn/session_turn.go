package spawn

import (
	"context"
	"fmt"
	"sync"
)

// turnState is the part of a session turn every protocol keeps alike and
// ends alike: the step card waits on, the first failure, whether the turn
// ended as the protocol says, and the questions still waiting on the
// approver. Each protocol embeds it and reads its own messages; the ending
// is written once here, so an agent that dies, a turn that is cancelled
// and a question left waiting are handled the same whichever protocol the
// agent speaks.
type turnState struct {
	adapter string
	words   stopWords

	// mu guards these and the embedding conversation's own state: the
	// reader and the questions waiting off it both touch them.
	mu        sync.Mutex
	closing   bool   // no new question is taken: the turn is over
	step      string // the call card waits on, for a child that stops
	completed bool   // the turn ended as the protocol says it ends
	failure   *Failure

	asks   sync.WaitGroup
	ctx    context.Context // ends with the turn: questions still waiting are denied
	cancel context.CancelFunc
}

// stopWords say, in a protocol's own terms, where an agent that stopped
// before its turn ended had got to.
type stopWords struct {
	verb      string // what the agent did not do to the step: "finished", "answered"
	firstStep string // the step named before card made any call
	cutShort  string // what an exit 0 mid-turn means for the output
}

// rpcWords are the words of the JSON-RPC protocols other than ACP.
var rpcWords = stopWords{verb: "finished", firstStep: "the first request", cutShort: "its output was cut short"}

// begin starts the turn's context; over must follow.
func (s *turnState) begin(ctx context.Context) {
	s.ctx, s.cancel = context.WithCancel(ctx)
}

// over ends the turn: no new question is taken, those waiting are denied
// (the approver answers an ended context with a deny) and answered before
// it returns, so no answer is written after the runner closes stdin.
func (s *turnState) over() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.cancel()
	s.asks.Wait()
}

func (s *turnState) setStep(step string) {
	s.mu.Lock()
	s.step = step
	s.mu.Unlock()
}

func (s *turnState) setFailure(f *Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failure == nil {
		s.failure = f
	}
}

// question puts one of the agent's questions to decide, off the reader, and
// hands reply its answer; once the turn is over it replies closed at once.
// Either way the agent gets an answer, never silence: none of these CLIs
// times a question out on its own.
func (s *turnState) question(closed any, reply func(answer any), decide func(ctx context.Context) any) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		reply(closed)
		return
	}
	s.asks.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.asks.Done()
		// The reply goes out even when the turn just ended: the agent
		// must not be left waiting on a question card dropped.
		reply(decide(s.ctx))
	}()
}

// end is the common ending of every protocol's finish, called with mu held
// once the child and its group are gone: the first failure recorded wins;
// a turn that ended as the protocol says succeeds; otherwise the agent
// stopped early, and explain (the protocol's reading of the exit and
// stderr, nil when it has nothing to add) or stopped says how, with the
// last error the agent reported, if any.
func (s *turnState) end(res Result, exit ExitInfo, explain func(ExitInfo) *Failure, lastError string) Result {
	switch {
	case s.failure != nil:
		res.IsError, res.Error = true, s.failure
	case s.completed:
	default:
		var f *Failure
		if explain != nil {
			f = explain(exit)
		}
		if f == nil {
			f = s.stopped(exit)
			if lastError != "" {
				f.Message += "; its last error: " + lastError
			}
		}
		res.IsError, res.Error = true, f
	}
	return res
}

// startFailed explains a warm agent whose handshake did not complete: a
// cancelled start, the failure the protocol recorded, or, once the agent
// has gone, what its exit says (explain and lastError as for end;
// lastError, read with mu held, may be nil).
func (s *turnState) startFailed(ctx context.Context, child *warmChild, explain func(ExitInfo) *Failure, lastError *string) *Failure {
	if ctx.Err() != nil {
		return failure(KindCancelled, "the start was cancelled")
	}
	s.mu.Lock()
	f := s.failure
	s.mu.Unlock()
	if f != nil {
		return f
	}
	// The agent went before it answered: its exit says why.
	select {
	case <-child.done:
	case <-ctx.Done():
		return failure(KindCancelled, "the start was cancelled")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last := ""
	if lastError != nil {
		last = *lastError
	}
	return s.end(Result{}, child.exit, explain, last).Error
}

// stopped explains an agent whose stdout ended before the turn did.
func (s *turnState) stopped(exit ExitInfo) *Failure {
	step := s.step
	if step == "" {
		step = s.words.firstStep
	}
	var msg string
	kind := KindExit
	switch {
	case exit.Code > 0:
		msg = fmt.Sprintf("%s exited with status %d before it %s %s", s.adapter, exit.Code, s.words.verb, step)
	case exit.Code == 0:
		kind = KindBadOutput
		msg = fmt.Sprintf("%s exited 0 before it %s %s; %s", s.adapter, s.words.verb, step, s.words.cutShort)
	default:
		msg = fmt.Sprintf("%s was killed before it %s %s", s.adapter, s.words.verb, step)
	}
	if l := lastLine(exit.StderrTail); l != "" {
		msg += ": " + l
	}
	return failure(kind, clip(msg, 2048))
}
