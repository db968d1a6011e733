package spawn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

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
//
// The process side is warm_child.go, the turn loop shared by every
// protocol is warmRunner (warm_run.go), and each protocol's side is a
// warmProto, named by the adapter's driver (Driver.Warm) and built on the
// same parsers and session code as its one-shot and ask-mode runs
// (claude_warm.go, warm_acp.go, codex_warm.go, pi_warm.go, droid_warm.go).

// ErrNoWarmChannel is StartWarm's error for an adapter whose CLI has no
// headless channel that takes a second prompt in the same process; its
// conversations run each turn as a new process resuming the CLI's session.
var ErrNoWarmChannel = errors.New("the adapter has no channel that keeps one agent process across turns")

// ErrNoSteer is Steer's error for a CLI whose conversation channel cannot
// add input to a turn that is running.
var ErrNoSteer = errors.New("the agent's conversation channel cannot add input to a running turn")

// ErrNoTurn is Steer's error when no turn is running to steer.
var ErrNoTurn = errors.New("no turn is running on the agent")

// ErrAgentGone is Turn's and Steer's error (inside the *Error) for an agent
// whose process has ended: the conversation goes on in a new one.
var ErrAgentGone = errors.New("the warm agent's process has ended")

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
	steer(ctx context.Context, text string) error
	alive() bool
	sessionID() string
	close()
}

// CanWarm says whether the adapter's CLI has a channel that keeps one
// process across turns, and if not, why.
func CanWarm(adapter string) (bool, string) {
	a, ok := Lookup(adapter)
	if !ok {
		return false, fmt.Sprintf("unknown adapter %q", adapter)
	}
	if a.Warm.Build == nil {
		return false, a.Warm.None
	}
	return true, ""
}

// BuildWarm is Build for a warm agent: the same request checks and the
// same boundary per permission mode, with the argv of the CLI's
// conversation channel instead of its one-shot mode. The request's Resume
// continues a CLI session the conversation already has. An adapter or mode
// card does not keep warm is an error that wraps ErrNoWarmChannel, so the
// caller can run the turn cold instead.
func BuildWarm(bin string, req Request) (Plan, error) {
	if ok, why := CanWarm(req.Adapter); !ok {
		return Plan{}, fmt.Errorf("%s: %s: %w", req.Adapter, why, ErrNoWarmChannel)
	}
	if len(req.Images) > 0 {
		// A warm agent's images belong to its turns (TurnSpec.Images).
		return Plan{}, &FieldError{"attachments", "a warm agent takes attachments with each turn, not at its start"}
	}
	a, _ := Lookup(req.Adapter)
	p, err := a.Warm.Build(bin, req)
	if req.Resume != "" {
		p.UsageBase = req.UsageBase
	}
	return p, err
}

// StartWarm starts the plan's child and its conversation channel, and
// returns once the agent is ready for its first turn (or has failed to
// start: the error is an *Error, as Run's). ctx bounds the start only.
func StartWarm(ctx context.Context, spec WarmSpec) (*Warm, error) {
	adapter := ""
	if spec.Plan.Session != nil {
		adapter = spec.Plan.Session.Adapter
	}
	a, ok := Lookup(adapter)
	if !ok || a.Warm.Proto == nil {
		return nil, ErrNoWarmChannel
	}
	r, err := startWarm(ctx, spec, adapter, a.Warm.Proto(spec.Plan))
	if err != nil {
		return nil, err
	}
	return &Warm{adapter: adapter, pid: r.child.c.cmd.Process.Pid, done: r.done, impl: r}, nil
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

// Steer adds text to the turn that is running, where the CLI's channel
// takes input mid-turn (Codex, Pi); ErrNoSteer where it does not, ErrNoTurn
// when no turn is running. It waits for the agent to take the text, so it
// must not be called from the turn's OnEvent, which runs on the agent's
// reader.
func (w *Warm) Steer(ctx context.Context, text string) error {
	if w == nil || w.impl == nil {
		return ErrNoWarmChannel
	}
	return w.impl.steer(ctx, text)
}

// AgentSessionID is the CLI's own id of the conversation, once the agent
// has said it ("" before): what a later cold turn resumes.
func (w *Warm) AgentSessionID() string {
	if w == nil || w.impl == nil {
		return ""
	}
	return w.impl.sessionID()
}

// Pid is the agent's process id (its group's id too).
func (w *Warm) Pid() int { return w.pid }

// Done is closed once the agent's process and group are gone.
func (w *Warm) Done() <-chan struct{} { return w.done }

// Alive says whether the agent can take another turn.
func (w *Warm) Alive() bool {
	if w == nil || w.impl == nil {
		return false
	}
	select {
	case <-w.done:
		return false
	default:
		return w.impl.alive()
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

// switchApprover is the approver the agent's ask channel is opened with
// once, for its whole life: each question goes to the running turn's
// approver, and one asked between turns, or in a turn without an
// approver, is denied.
type switchApprover struct {
	mu  sync.Mutex
	cur Approver
}

func (s *switchApprover) set(a Approver) {
	s.mu.Lock()
	s.cur = a
	s.mu.Unlock()
}

func (s *switchApprover) Approve(ctx context.Context, q Question) Decision {
	s.mu.Lock()
	a := s.cur
	s.mu.Unlock()
	if a == nil {
		return Decision{Message: "card denied this tool call: no turn with an approver is running"}
	}
	return a.Approve(ctx, q)
}

// aliveFlag is set once the agent must take no more turns (it was ended,
// or is being), before its process is gone.
type aliveFlag struct{ broken atomic.Bool }

// buildOneShot is Build, for the warm builders, which start from the
// one-shot plan: a variable set at init, since Build reads the registry
// the warm builders are part of.
var buildOneShot func(bin string, req Request) (Plan, error)

// lookupDriver is Lookup, for the same reason.
var lookupDriver func(id string) (Adapter, bool)

func init() { buildOneShot, lookupDriver = Build, Lookup }
