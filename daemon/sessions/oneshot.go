package sessions

import (
	"context"
	"encoding/json"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/spawn"
)

// OneShot is an isolated agents.invoke: its run works in a worktree of its
// own, made for it, and is the one turn of a session recorded closed from
// the start (it takes no prompt), which holds the worktree for review by
// the session methods: sessions.diff, apply, rewind and discard, with the
// run's owner as the session's.
type OneShot struct {
	SessionID string
	// Isolated is where the run goes, for the planner.
	Isolated plan.Isolated
	// Worktree is the worktree as the answer shows it.
	Worktree *api.SessionWorktree
	iso      *isolation
}

// oneShotReason is a one-shot session's close reason.
const oneShotReason = "the one turn of an isolated agents.invoke; review its worktree with sessions.diff, then sessions.apply or sessions.discard"

// IsolateRun makes the worktree of an isolated agents.invoke of p (its cwd
// already judged and resolved) and records its session, closed, owned by
// owner. The run is then planned in OneShot.Isolated and started with
// CardSessionID OneShot.SessionID and turn 1; Started or Abandoned says
// what became of it.
func (m *Manager) IsolateRun(ctx context.Context, p api.InvokeParams, owner string) (OneShot, error) {
	if m.isClosing() {
		return OneShot{}, runs.ErrShuttingDown
	}
	// The bound is asked before the worktree is made (git takes a while,
	// outside startMu), and again with the record.
	m.startMu.Lock()
	err := m.worktreeBoundLocked(ctx, owner)
	m.startMu.Unlock()
	if err != nil {
		return OneShot{}, err
	}
	id := m.st.NewSessionID()
	iso, err := m.isolate(ctx, id, p.Cwd, p.Base)
	if err != nil {
		return OneShot{}, err
	}
	sp := api.SessionStartParams{
		AgentSettings: api.AgentSettings{ID: p.ID, InvokedBy: p.InvokedBy, Cwd: p.Cwd, PermissionMode: p.PermissionMode, Model: p.Model, Effort: p.Effort, Isolation: p.Isolation, Base: p.Base},
	}
	raw, err := json.Marshal(sp)
	if err != nil {
		m.dropWorktree(iso)
		return OneShot{}, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	mode := p.PermissionMode
	if mode == "" {
		mode = string(spawn.ModeReadOnly)
	}
	row := store.Session{ID: id, Adapter: p.ID, State: string(api.SessionClosed), Cwd: p.Cwd, PermissionMode: mode, Model: p.Model,
		Effort: p.Effort, Params: raw, Ancestry: []string{}, NextSeq: 1, Owner: owner, Worktree: iso.raw(), CreatedAt: now, UpdatedAt: now,
		ClosedAt: &now, CloseReason: oneShotReason}
	m.mu.Lock()
	m.oneShots[id] = true
	m.mu.Unlock()
	m.startMu.Lock()
	err = m.worktreeBoundLocked(ctx, owner)
	if err == nil {
		err = m.st.CreateSession(context.WithoutCancel(ctx), row)
	}
	m.startMu.Unlock()
	if err != nil {
		m.dropWorktree(iso)
		m.mu.Lock()
		delete(m.oneShots, id)
		m.mu.Unlock()
		return OneShot{}, err
	}
	return OneShot{SessionID: id, Isolated: iso.isolated(), Worktree: iso.view(), iso: iso}, nil
}

// Exec is the run's exec hook: the agent, then its changes committed as
// turn 1, with their changes event before the run's terminal one.
func (m *Manager) Exec(o OneShot, task string) execFunc {
	return m.committing(nil, o.iso.Worktree, 1, task, nil)
}

// Started records the run's end on its session once it ends (its stream's
// length), in the background.
func (m *Manager) Started(o OneShot, run *runs.Run) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		<-run.Done()
		m.closedMu.Lock()
		defer m.closedMu.Unlock()
		defer m.oneShotDone(o.SessionID)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		row, err := m.st.GetSession(ctx, o.SessionID)
		if err == nil {
			row.Params, row.Turns, row.NextSeq = nil, 1, run.LastSeq()+1
			row.UpdatedAt = time.Now().UTC().Truncate(time.Millisecond)
			err = m.st.UpdateSession(ctx, row)
		}
		if err != nil {
			m.log.Error("could not record a one-shot run's end on its session", zap.String("session_id", o.SessionID), zap.Error(err))
		}
	}()
}

// Abandoned throws the worktree away when the run did not start (why says
// what refused it), and says so on the session.
func (m *Manager) Abandoned(o OneShot, why error) {
	defer m.oneShotDone(o.SessionID)
	m.dropWorktree(o.iso)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.closedMu.Lock()
	defer m.closedMu.Unlock()
	if err := m.markDiscarded(ctx, o.SessionID, o.iso); err != nil {
		m.log.Warn("could not record a one-shot run's worktree as discarded", zap.String("session_id", o.SessionID), zap.Error(err))
	}
	row, err := m.st.GetSession(ctx, o.SessionID)
	if err == nil {
		row.Params, row.CloseReason = nil, "an isolated agents.invoke that did not run: "+why.Error()
		err = m.st.UpdateSession(ctx, row)
	}
	if err != nil {
		m.log.Warn("could not record why a one-shot run did not start", zap.String("session_id", o.SessionID), zap.Error(err))
	}
}

func (m *Manager) oneShotDone(id string) {
	m.mu.Lock()
	delete(m.oneShots, id)
	m.mu.Unlock()
}
