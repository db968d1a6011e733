package spawn

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
// A warm agent is an agent (agent.go) that is kept: the same process, the
// same protocol side as the CLI's ask runs, and the same turn.

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
	a *runner // nil until an adapter has a channel
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
		return Plan{}, &api.FieldError{Field: "attachments", Message: "a warm agent takes attachments with each turn, not at its start"}
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
	if spec.Plan.Session == nil {
		return nil, ErrNoWarmChannel
	}
	d, ok := lookupDriver(spec.Plan.Session.Adapter)
	if !ok || d.Warm.Build == nil {
		return nil, ErrNoWarmChannel
	}
	proto, err := protocolOf(spec.Plan)
	if err != nil {
		return nil, ErrNoWarmChannel
	}
	plan := spec.Plan
	// A conversation's child keeps its stdout a pipe: it does not exit
	// after its answer, so nothing is lost to a late reader. Its images
	// belong to each turn, not to the start.
	plan.StdoutToFile, plan.Input.Images = false, nil
	a := newRunner(plan, true, spec.ImageMemory)
	c := newChild(childSpec{Plan: plan, BaseEnv: spec.BaseEnv, Limits: spec.Limits, TempDir: spec.TempDir, OnStart: spec.OnStart, Approver: a.approver})
	if e := c.prepare(ctx); e != nil {
		c.cleanup()
		return nil, e
	}
	if e := a.start(c, proto, nil); e != nil {
		return nil, e
	}
	if e := a.ready(ctx, spec.OnExit); e != nil {
		return nil, e
	}
	return &Warm{a: a}, nil
}

// Turn sends one prompt and returns its result once the agent has answered
// it, with Run's meaning for the result and the error. ctx is the turn's
// deadline and cancel: a cancelled turn ends as KindCancelled (the agent
// may be ended with it; Alive says whether it can take another turn).
func (w *Warm) Turn(ctx context.Context, t TurnSpec) (api.Result, error) {
	if w == nil || w.a == nil {
		return api.Result{}, ErrNoWarmChannel
	}
	return w.a.turn(ctx, t)
}

// Steer adds text to the turn that is running, where the CLI's channel
// takes input mid-turn (Codex, Pi); ErrNoSteer where it does not, ErrNoTurn
// when no turn is running. It waits for the agent to take the text, so it
// must not be called from the turn's OnEvent, which runs on the agent's
// reader.
func (w *Warm) Steer(ctx context.Context, text string) error {
	if w == nil || w.a == nil {
		return ErrNoWarmChannel
	}
	if w.a.broken.Load() {
		return ErrAgentGone
	}
	t := w.a.current()
	if t == nil {
		return ErrNoTurn
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return w.a.proto.steer(t, text)
}

// AgentSessionID is the CLI's own id of the conversation, once the agent
// has said it ("" before): what a later cold turn resumes.
func (w *Warm) AgentSessionID() string {
	if w == nil || w.a == nil {
		return ""
	}
	return w.a.proto.sessionID()
}

// Pid is the agent's process id (its group's id too).
func (w *Warm) Pid() int { return w.a.child.pgid }

// Done is closed once the agent's process and group are gone.
func (w *Warm) Done() <-chan struct{} { return w.a.done }

// Alive says whether the agent can take another turn.
func (w *Warm) Alive() bool {
	if w == nil || w.a == nil {
		return false
	}
	return !isClosed(w.a.done) && !w.a.broken.Load()
}

// Close ends the agent and its whole group and returns once they are gone.
// It is safe to call more than once and after the agent died.
func (w *Warm) Close() {
	if w == nil || w.a == nil {
		return
	}
	// Its stdin closed, the agent can end its session as it would on its
	// own; its group is ended after the grace.
	w.a.broken.Store(true)
	w.a.child.close()
	<-w.a.done
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

// buildOneShot is Build, for the warm builders, which start from the
// one-shot plan: a variable set at init, since Build reads the registry
// the warm builders are part of.
var buildOneShot func(bin string, req Request) (Plan, error)

// lookupDriver is Lookup, for the same reason.
var lookupDriver func(id string) (Adapter, bool)

func init() { buildOneShot, lookupDriver = Build, Lookup }
