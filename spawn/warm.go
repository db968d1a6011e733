package spawn

import (
	"context"
	"errors"
	"fmt"

	"github.com/card-dev/card/api"
)

// A warm agent is one agent process kept across the turns of a
// conversation, so a follow-up does not pay the CLI's start-up again and
// one conversation never has two processes. It keeps every guarantee of a
// one-shot run: the child has an explicit cwd and its own process group,
// each turn has its own deadline (the turn's ctx), cancel and output bound,
// and the group, grandchildren included, is ended when the agent closes,
// when a turn is cancelled or overruns in a way the protocol cannot stop
// cleanly, and when the daemon goes.
//
// The daemon owns which conversation has which agent; spawn owns the
// process and the protocol. An agent that died (or was ended) is never
// reused: the next turn starts a new one that resumes the CLI's own session
// by its id, cold.

// ErrNoWarmChannel is StartWarm's error for an adapter whose CLI has no
// headless channel that takes a second prompt in the same process; its
// conversations run each turn as a new process resuming the CLI's session.
var ErrNoWarmChannel = errors.New("the adapter has no channel that keeps one agent process across turns")

// WarmSpec starts one warm agent. Plan is built by BuildWarm, its Program
// set to the binary detection resolved; BaseEnv, Limits, TempDir and
// ImageMemory are as a one-shot run's (RunSpec). Limits.MaxOutput bounds
// each turn, not the agent's life.
type WarmSpec struct {
	Plan        Plan
	BaseEnv     []string
	Limits      Limits
	TempDir     string
	ImageMemory *Budget
	// OnStart is called once the child runs, with its pid and group.
	OnStart func(pid, pgid int)
	// OnExit is called once, after the child and its whole group are gone,
	// however it ended (closed, idle, killed, crashed); it must not block.
	OnExit func(ExitInfo)
}

// TurnSpec is one turn on a warm agent: what a one-shot RunSpec carries
// for the prompt and its events.
type TurnSpec struct {
	Prompt   string
	Images   []Image
	OnEvent  func(Event)
	OnState  func(api.RunState)
	Approver Approver
}

// Warm is one running warm agent. Its methods are safe from any goroutine;
// turns run one at a time (Turn waits for the previous one).
type Warm struct {
	adapter string
	pid     int
	done    chan struct{}
	// impl is the protocol's side, nil until an adapter has a channel.
	impl warmAgent
}

// warmAgent is one protocol's multi-turn side of a warm agent.
type warmAgent interface {
	turn(ctx context.Context, t TurnSpec) (Result, error)
	close()
}

// CanWarm says whether the adapter's CLI has a channel that keeps one
// process across turns, and if not, why.
func CanWarm(adapter string) (bool, string) {
	a, ok := Lookup(adapter)
	if !ok {
		return false, fmt.Sprintf("unknown adapter %q", adapter)
	}
	_ = a
	return false, ErrNoWarmChannel.Error()
}

// BuildWarm is Build for a warm agent: the same request checks and the
// same boundary per permission mode, with the argv of the CLI's
// conversation channel instead of its one-shot mode. The request's Resume
// continues a CLI session the conversation already has.
func BuildWarm(bin string, req Request) (Plan, error) {
	if ok, why := CanWarm(req.Adapter); !ok {
		return Plan{}, fmt.Errorf("%s: %s", req.Adapter, why)
	}
	return Plan{}, ErrNoWarmChannel
}

// StartWarm starts the plan's child and its conversation channel, and
// returns once the agent is ready for its first turn (or has failed to
// start: the error is an *Error, as Run's). ctx bounds the start only.
func StartWarm(ctx context.Context, spec WarmSpec) (*Warm, error) {
	return nil, ErrNoWarmChannel
}

// Turn sends one prompt and returns its result once the agent has answered
// it, with Run's meaning for the result and the error. ctx is the turn's
// deadline and cancel: a cancelled turn ends as KindCancelled (the agent
// may be ended with it; Alive says whether it can take another turn).
func (w *Warm) Turn(ctx context.Context, t TurnSpec) (Result, error) {
	if w == nil || w.impl == nil {
		return Result{}, ErrNoWarmChannel
	}
	return w.impl.turn(ctx, t)
}

// Pid is the agent's process id (its group's id too).
func (w *Warm) Pid() int { return w.pid }

// Done is closed once the agent's process and group are gone.
func (w *Warm) Done() <-chan struct{} { return w.done }

// Alive says whether the agent can take another turn.
func (w *Warm) Alive() bool {
	select {
	case <-w.done:
		return false
	default:
		return w.impl != nil
	}
}

// Close ends the agent and its whole group and returns once they are gone.
// It is safe to call more than once and after the agent died.
func (w *Warm) Close() {
	if w == nil || w.impl == nil {
		return
	}
	w.impl.close()
	<-w.done
}
