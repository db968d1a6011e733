package sessions

import (
	"context"
	"time"

	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/spawn"
)

// SessionIDEnv names the card session in the environment of its warm
// agent, so a daemon restarted after a crash ends only a group that is
// provably that session's.
const SessionIDEnv = "CARD_SESSION_ID"

// endLeftoverGroup ends a warm agent's group a previous daemon left, if
// its processes carry the session's tag.
func endLeftoverGroup(pgid int) int {
	return endTagged(pgid)
}

var endTagged = func(pgid int) int { return 0 }

// warmAgent is a session's warm agent.
type warmAgent struct {
	agent Agent
}

func (w *warmAgent) alive() bool { return w != nil && w.agent != nil && w.agent.Alive() }

// turning says whether the warm agent is running run's turn.
func (w *warmAgent) turning(runID string) bool { return false }

// Steerer is an Agent whose CLI takes more input during a turn.
type Steerer interface {
	Steer(ctx context.Context, text string) error
}

// warmPool bounds the warm agents alive at once.
type warmPool struct {
	m *Manager
}

func (p *warmPool) init(m *Manager)              { p.m = m }
func (p *warmPool) end(w *warmAgent, why string) {}
func (p *warmPool) shutdown()                    {}

func (m *Manager) warmAtStart(s *session) {}

// execFor is the run hook of a session's turn: over its warm agent when it
// has one, else nil (a cold spawn.Run).
func (m *Manager) execFor(s *session, req spawn.Request) func(context.Context, spawn.RunSpec) (spawn.Result, error) {
	return nil
}

// Agent is one warm agent process as a session uses it; *spawn.Warm is
// one.
type Agent interface {
	Turn(ctx context.Context, t spawn.TurnSpec) (spawn.Result, error)
	Pid() int
	Done() <-chan struct{}
	Alive() bool
	Close()
}

// Warmer starts warm agents.
type Warmer interface {
	CanWarm(adapter string) (bool, string)
	Start(ctx context.Context, w WarmStart) (Agent, error)
}

// WarmStart is what starting a warm agent needs: the session's argv
// request (Resume set to the CLI session it continues) and the one-shot
// spec the turn would have run with (program, environment, limits).
type WarmStart struct {
	Request spawn.Request
	Spec    spawn.RunSpec
}

var _ = proc.EndTaggedGroup
var _ = time.Second
