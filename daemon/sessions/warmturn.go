package sessions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/spawn"
)

// SessionIDEnv names the card session in the environment of its warm
// agent, so a daemon restarted after a crash ends only a group that is
// provably that session's (a pgid alone may have been reused).
const SessionIDEnv = "CARD_SESSION_ID"

// leftoverGrace is the SIGTERM→SIGKILL gap for a warm agent's group left
// by a previous daemon.
const leftoverGrace = 1500 * time.Millisecond

// endLeftoverGroup ends a warm agent's group a previous daemon left, where
// its processes carry the session's tag.
func endLeftoverGroup(pgid int, sessionID string) int {
	return proc.EndTaggedGroup(pgid, SessionIDEnv, sessionID, leftoverGrace)
}

// Agent is one warm agent process as a session uses it: *spawn.Warm is one
// (through SpawnWarmer). A session drives it only through this, so the
// daemon's side (one agent per conversation, idle timeout, least recently
// used first out, a dead agent replaced) is proven with a fake.
type Agent interface {
	Turn(ctx context.Context, t spawn.TurnSpec) (api.Result, error)
	Pid() int
	Done() <-chan struct{}
	Alive() bool
	Close()
}

// Steerer is an Agent whose CLI takes more input during a turn (Codex's
// app-server turn/steer). spawn.Warm has no such method yet; an agent that
// has one is steered through it.
type Steerer interface {
	Steer(ctx context.Context, text string) error
}

// Warmer starts warm agents.
type Warmer interface {
	// CanWarm says whether the adapter's CLI keeps one process across
	// turns, and if not, why.
	CanWarm(adapter string) (bool, string)
	// Start starts one and returns once it can take its first turn; ctx
	// bounds the start only.
	Start(ctx context.Context, w WarmStart) (Agent, error)
}

// WarmStart is what starting a warm agent needs: the session's argv
// request (Resume set to the CLI session it continues, if any) and the
// one-shot spec the turn would have run with (program, environment with
// the session's tag, limits, image memory).
type WarmStart struct {
	Request spawn.Request
	Spec    spawn.RunSpec
}

// SpawnWarmer is the Warmer over spawn's warm agents.
type SpawnWarmer struct{}

// CanWarm is spawn.CanWarm.
func (SpawnWarmer) CanWarm(adapter string) (bool, string) { return spawn.CanWarm(adapter) }

// Start builds the adapter's conversation channel and starts it.
func (SpawnWarmer) Start(ctx context.Context, w WarmStart) (Agent, error) {
	plan, err := spawn.BuildWarm(w.Spec.Plan.Program, w.Request)
	if err != nil {
		return nil, err
	}
	plan.Program = w.Spec.Plan.Program
	wa, err := spawn.StartWarm(ctx, spawn.WarmSpec{Plan: plan, BaseEnv: w.Spec.BaseEnv, Limits: w.Spec.Limits,
		TempDir: w.Spec.TempDir, ImageMemory: w.Spec.ImageMemory})
	if err != nil {
		return nil, err
	}
	return wa, nil
}

// Release ends the session's warm agent and keeps the session: an idle
// agent now, one in a turn once that turn is over. The next turn resumes
// the CLI's session cold, or in a new warm agent. For a client that knows
// nobody will prompt soon (an editor that exited): the agent would
// otherwise hold its process for idle_secs.
func (m *Manager) Release(ctx context.Context, id string) (api.SessionReleaseResult, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return api.SessionReleaseResult{}, err
	}
	s.mu.Lock()
	if m.onlyWarmHoldsLocked(s) {
		view := m.viewLocked(s)
		s.mu.Unlock()
		return api.SessionReleaseResult{Session: view, WarmAgent: warmKept}, nil
	}
	fate, idle := m.warm.retire(s)
	s.mu.Unlock()
	if idle != nil {
		m.log.Info("ended a session's warm agent at its client's request; the session stays open", zap.String("session_id", id))
		m.warm.close(idle)
	}
	s.mu.Lock()
	view := m.viewLocked(s)
	s.mu.Unlock()
	return api.SessionReleaseResult{Session: view, WarmAgent: fate}, nil
}

// onlyWarmHoldsLocked says the session's conversation is held by its warm
// agent alone: the CLI cannot resume it in a new process (Gemini CLI over
// ACP), so ending the agent would end the conversation.
func (m *Manager) onlyWarmHoldsLocked(s *session) bool {
	if s.row.AgentSessionID == "" || !m.warm.holds(s) {
		return false
	}
	p, err := m.fullParamsLocked(s)
	if err != nil {
		return false
	}
	_, err = m.deps.Planner.Check(p, "", nil, s.cont(plan.Continue{Resume: s.row.AgentSessionID, UsageBase: s.reported}))
	var fe *api.FieldError
	return errors.As(err, &fe) && fe.Field == "resume"
}

// setWarmPgid records the session's warm agent's group (0: none) so a
// daemon restarted after a crash can end one left behind.
func (m *Manager) setWarmPgid(s *session, pgid int) {
	if err := m.st.SetSessionWarmPgid(context.Background(), s.row.ID, pgid); err != nil {
		m.log.Warn("could not record a warm agent's process group", zap.String("session_id", s.row.ID), zap.Error(err))
	}
}

// canWarm says whether the session's turns go over a warm agent.
func (m *Manager) canWarm(adapter string) bool {
	if m.deps.Warmer == nil || m.cfg.MaxWarm <= 0 {
		return false
	}
	ok, _ := m.deps.Warmer.CanWarm(adapter)
	return ok
}

// warmStartRun is the turn a warm agent started by sessions.start is
// acquired for: none.
const warmStartRun = "warm-start"

// warmStartTimeout bounds a warm agent's start at sessions.start.
const warmStartTimeout = 2 * time.Minute

// warmAtStart is sessions.start with warm: the agent starts now, in the
// background, so the first turn does not wait for the CLI's start-up; a
// first prompt that comes while it starts waits for it (never a second
// process). An agent that cannot start is logged and the first turn
// starts one itself, or runs cold.
func (m *Manager) warmAtStart(s *session, p api.SessionStartParams) {
	if !m.canWarm(s.row.Adapter) {
		return
	}
	t, err := m.deps.Planner.SessionTurn(p, "(the session's warm start: no prompt yet)", nil, s.cont(plan.Continue{Resume: s.row.AgentSessionID}))
	if err != nil {
		m.log.Warn("could not plan a session's warm start", zap.String("session_id", s.row.ID), zap.Error(err))
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), warmStartTimeout)
		defer cancel()
		spec, err := m.deps.Runs.WarmSpec(ctx, s.row.Adapter, s.row.Ancestry, t.Run.Plan)
		if err != nil {
			m.log.Warn("could not start a session's warm agent", zap.String("session_id", s.row.ID), zap.Error(err))
			return
		}
		spec.BaseEnv = append(spec.BaseEnv, SessionIDEnv+"="+s.row.ID)
		w, err := m.warm.acquire(ctx, s, warmStartRun, func(ctx context.Context) (Agent, error) {
			return m.deps.Warmer.Start(ctx, WarmStart{Request: t.Spawn, Spec: spec})
		})
		if w == nil {
			m.log.Warn("could not start a session's warm agent; its first turn starts one", zap.String("session_id", s.row.ID), zap.Error(err))
		}
	}()
}

// execFor is the run hook of a session's turn: over its warm agent when
// the adapter keeps one, else nil (the run subsystem's cold spawn.Run). A
// turn whose agent cannot start (or the pool is full of agents in turns)
// runs cold, resuming the CLI's session by its id: the conversation goes
// on either way.
//
// A warmOnly turn goes over the agent that holds the conversation or not at
// all: with that agent gone it fails, saying why, rather than start a
// process that would begin a new conversation unasked.
func (m *Manager) execFor(s *session, req spawn.Request, warmOnly bool) func(context.Context, spawn.RunSpec) (api.Result, error) {
	if !m.canWarm(s.row.Adapter) {
		return nil
	}
	id := s.row.ID
	return func(ctx context.Context, spec spawn.RunSpec) (api.Result, error) {
		runID := ""
		for _, kv := range spec.BaseEnv {
			if v, ok := cutEnv(kv, "CARD_RUN_ID"); ok {
				runID = v
			}
		}
		if runID == "" {
			runID = "turn"
		}
		spec.BaseEnv = append(slices.Clip(spec.BaseEnv), SessionIDEnv+"="+id)
		start := func(ctx context.Context) (Agent, error) {
			return m.deps.Warmer.Start(ctx, WarmStart{Request: req, Spec: spec})
		}
		if warmOnly {
			start = func(context.Context) (Agent, error) { return nil, errConversationGone }
		}
		w, err := m.warm.acquire(ctx, s, runID, start)
		if w == nil && warmOnly {
			m.log.Info("a session's turn cannot go on without its warm agent", zap.String("session_id", id), zap.Error(err))
			return api.Result{}, &spawn.Error{Kind: api.KindSpawn, Message: fmt.Sprintf(
				"session %s: %v (%s cannot resume this conversation in a new process in %s mode); start a new session, or one in read_only or edit mode, to go on",
				id, errConversationGone, s.row.Adapter, s.row.PermissionMode)}
		}
		if w == nil {
			m.log.Info("a session's turn runs cold", zap.String("session_id", id), zap.Error(err))
			return spawn.Run(ctx, spec)
		}
		defer m.warm.release(w)
		if spec.OnStart != nil {
			pid := w.agent.Pid()
			spec.OnStart(pid, pid)
		}
		return w.agent.Turn(ctx, spawn.TurnSpec{Prompt: spec.Prompt, Images: spec.Plan.Input.Images, OnEvent: spec.OnEvent,
			OnState: spec.OnState, Approver: spec.Approver})
	}
}

func cutEnv(kv, name string) (string, bool) {
	if len(kv) > len(name) && kv[:len(name)] == name && kv[len(name)] == '=' {
		return kv[len(name)+1:], true
	}
	return "", false
}
