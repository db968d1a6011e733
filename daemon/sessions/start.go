package sessions

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/spawn"
)

// Start records a new session; nothing runs until its first prompt (or,
// with p.Warm, its warm agent starts at once). p is validated by the
// daemon; ancestry is the chain the guard seeded once for the session;
// owner is the web origin that starts it, "" for a native client.
func (m *Manager) Start(ctx context.Context, p api.SessionStartParams, ancestry []string, owner string) (api.Session, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return api.Session{}, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	row := store.Session{
		CreatedAt: now, UpdatedAt: now,
		ID: m.st.NewSessionID(), Adapter: p.ID, State: string(api.SessionIdle), Cwd: p.Cwd, PermissionMode: p.PermissionMode,
		Model: p.Model, Effort: p.Effort, Params: raw, Ancestry: ancestry, NextSeq: 1, Owner: owner,
	}
	if row.PermissionMode == "" {
		row.PermissionMode = string(spawn.ModeReadOnly)
	}
	if spawn.CardNamesSession(p.ID) {
		// The CLI keeps the conversation where card says: its id is
		// card's from the start, so the first turn (or the warm agent
		// started now) already writes the file every later turn resumes.
		row.AgentSessionID = uuid.NewString()
	}
	if m.isClosing() {
		return api.Session{}, runs.ErrShuttingDown
	}
	var iso *isolation
	if p.Isolation != "" {
		// The bound is asked first, so a start it refuses makes no
		// worktree; the worktree is made outside startMu (git takes a
		// while), and the bound asked again before the record.
		m.startMu.Lock()
		err := m.boundLocked(ctx, owner)
		if err == nil {
			err = m.worktreeBoundLocked(ctx, owner)
		}
		m.startMu.Unlock()
		if err != nil {
			return api.Session{}, err
		}
		if iso, err = m.isolate(ctx, row.ID, p.Cwd, p.Base); err != nil {
			return api.Session{}, err
		}
		// Its turns are judged where they run: the worktree, which the
		// cwd policy lets this session's turns (and no one else's) use.
		if _, err := m.deps.Planner.Check(p, "", nil, plan.Continue{Isolated: iso.isolated()}); err != nil {
			m.dropWorktree(iso)
			return api.Session{}, err
		}
		row.Worktree = iso.raw()
	}
	m.startMu.Lock()
	err = m.boundLocked(ctx, owner)
	if err == nil && iso != nil {
		err = m.worktreeBoundLocked(ctx, owner)
	}
	if err != nil {
		m.startMu.Unlock()
		if iso != nil {
			m.dropWorktree(iso)
		}
		return api.Session{}, err
	}
	err = m.st.CreateSession(context.WithoutCancel(ctx), row)
	m.startMu.Unlock()
	if err != nil {
		if iso != nil {
			m.dropWorktree(iso)
		}
		return api.Session{}, err
	}
	row.Params = nil
	s := newSession(row, p)
	s.iso = iso
	m.mu.Lock()
	m.live[row.ID] = s
	m.mu.Unlock()
	m.log.Info("session started", zap.String("session_id", row.ID), zap.String("adapter", p.ID), zap.String("mode", row.PermissionMode),
		zap.Strings("ancestry", ancestry))
	if p.Warm {
		m.warmAtStart(s, p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return m.viewLocked(s), nil
}

// boundLocked refuses a new session past MaxOpen or MaxOpenPerOwner, with
// startMu held.
func (m *Manager) boundLocked(ctx context.Context, owner string) error {
	if m.cfg.MaxOpen <= 0 && m.cfg.MaxOpenPerOwner <= 0 {
		return nil
	}
	all, owned, err := m.st.CountOpenSessions(ctx, owner)
	if err != nil {
		return err
	}
	if m.cfg.MaxOpen > 0 && all >= m.cfg.MaxOpen {
		return &TooManySessionsError{Open: all, Max: m.cfg.MaxOpen, Key: "max_open"}
	}
	if m.cfg.MaxOpenPerOwner > 0 && owned >= m.cfg.MaxOpenPerOwner {
		return &TooManySessionsError{Open: owned, Max: m.cfg.MaxOpenPerOwner, Key: "max_open_per_origin", Owner: owner}
	}
	return nil
}

// worktreeBoundLocked refuses one more worktree for owner past
// MaxWorktreesPerOwner, with startMu held.
func (m *Manager) worktreeBoundLocked(ctx context.Context, owner string) error {
	if m.cfg.MaxWorktreesPerOwner <= 0 {
		return nil
	}
	n, err := m.st.CountWorktrees(ctx, owner)
	if err != nil {
		return err
	}
	if n >= m.cfg.MaxWorktreesPerOwner {
		return &TooManySessionsError{Open: n, Max: m.cfg.MaxWorktreesPerOwner, Key: "max_worktrees_per_origin", Owner: owner}
	}
	return nil
}
