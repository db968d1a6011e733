package sessions

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/daemon/worktree"
)

// reviewed is an isolated session under review: the open session in
// memory (s, nil when closed) or the closed one's record, and its worktree.
type reviewed struct {
	s     *session
	row   store.Session
	iso   *isolation
	turns int
}

// review finds session id's worktree for method: refused when the session
// is unknown, has none, or its worktree is gone.
func (m *Manager) review(ctx context.Context, id, method string) (reviewed, error) {
	var r reviewed
	s, err := m.lookup(ctx, id)
	var closed *ClosedError
	switch {
	case err == nil:
		s.mu.Lock()
		s.settleLocked(ctx)
		r = reviewed{s: s, row: s.row, iso: s.iso, turns: s.row.Turns}
		s.mu.Unlock()
	case errors.As(err, &closed):
		row, err := m.st.GetSession(ctx, id)
		if errors.Is(err, store.ErrSessionNotFound) {
			return r, &NotFoundError{SessionID: id}
		}
		if err != nil {
			return r, err
		}
		r = reviewed{row: row, iso: m.readIsolation(row), turns: row.Turns}
		if r.turns == 0 {
			// A one-shot run still going has its turn recorded only
			// with its run.
			if runs, err := m.st.SessionRuns(ctx, id); err == nil && len(runs) > 0 {
				r.turns = runs[len(runs)-1].SessionTurn
			}
		}
	default:
		return r, err
	}
	if r.iso == nil {
		return r, &NotIsolatedError{SessionID: id, Method: method}
	}
	if r.iso.DiscardedAt != nil {
		return r, &WorktreeGoneError{SessionID: id, Reason: "it was discarded " + r.iso.DiscardedAt.Format(time.RFC3339)}
	}
	return r, nil
}

// busyLocked refuses method while a turn of s runs or prompts wait.
func (s *session) busyLocked(method string) error {
	waiting := len(s.waitingLocked())
	if s.current == nil && waiting == 0 {
		return nil
	}
	e := &BusyError{SessionID: s.row.ID, Method: method, Queued: waiting}
	if s.current != nil {
		e.RunID = s.current.ID()
	}
	return e
}

// closedBusy refuses method on a closed session whose one-shot run (an
// isolated agents.invoke) is still going.
func (m *Manager) closedBusy(ctx context.Context, id, method string) error {
	m.mu.Lock()
	going := m.oneShots[id]
	m.mu.Unlock()
	if going {
		return &BusyError{SessionID: id, Method: method}
	}
	turns, err := m.st.SessionRuns(ctx, id)
	if err != nil {
		return err
	}
	for _, r := range turns {
		if r.Status == api.StatusRunning {
			return &BusyError{SessionID: id, Method: method, RunID: r.RunID}
		}
	}
	return nil
}

// Diff is sessions.diff: the whole session's changes, or one turn's.
func (m *Manager) Diff(ctx context.Context, p api.SessionDiffParams) (api.SessionDiff, error) {
	r, err := m.review(ctx, p.SessionID, "sessions.diff")
	if err != nil {
		return api.SessionDiff{}, err
	}
	if p.Turn > r.turns {
		return api.SessionDiff{}, api.InvalidField("turn", "session %s has taken %d turns; ask for one of them, or 0 for the whole session", p.SessionID, r.turns)
	}
	wt := r.iso.Worktree
	committed, err := m.deps.Worktrees.Turns(ctx, wt)
	if err != nil {
		return api.SessionDiff{}, mapWorktreeError(p.SessionID, err)
	}
	maxBytes := p.MaxBytes
	if maxBytes == 0 {
		maxBytes = api.DefaultDiffBytes
	}
	out := api.SessionDiff{SessionID: p.SessionID, Turn: p.Turn, MaxBytes: maxBytes, Turns: worktreeTurns(committed), Files: []api.FileChange{}}
	d, err := m.deps.Worktrees.Diff(ctx, wt, p.Turn, maxBytes)
	if errors.Is(err, worktree.ErrNoTurn) {
		// A turn the session took that has no commit: it changed
		// nothing, or was rewound away. Its diff is empty, at the state
		// the worktree had after the turns before it.
		out.From = wt.Base
		for _, t := range committed {
			if t.Number < p.Turn {
				out.From = t.Commit
			}
		}
		out.To = out.From
		return out, nil
	}
	if err != nil {
		return api.SessionDiff{}, mapWorktreeError(p.SessionID, err)
	}
	out.From, out.To, out.Patch, out.Truncated = d.From, d.To, d.Patch, d.Truncated
	out.Files, out.Added, out.Deleted = fileChanges(d.Changes.Files), d.Changes.Added, d.Changes.Deleted
	return out, nil
}

// Apply is sessions.apply: the session's changes into the user's checkout,
// uncommitted, all or nothing (a *worktree.ConflictError names the files
// when any conflicts; nothing is written then). Only committed turns are
// applied: a turn still running is not in them.
func (m *Manager) Apply(ctx context.Context, id string) (api.SessionApplyResult, error) {
	r, err := m.review(ctx, id, "sessions.apply")
	if err != nil {
		return api.SessionApplyResult{}, err
	}
	a, err := m.deps.Worktrees.Apply(ctx, r.iso.Worktree)
	if err != nil {
		return api.SessionApplyResult{}, mapWorktreeError(id, err)
	}
	m.log.Info("applied a session's changes to its checkout", zap.String("session_id", id), zap.String("repo", r.iso.Worktree.Repo),
		zap.Int("files", len(a.Changes.Files)))
	return api.SessionApplyResult{SessionID: id, Repo: r.iso.Worktree.Repo, From: a.From, To: a.To, Files: fileChanges(a.Changes.Files),
		Added: a.Changes.Added, Deleted: a.Changes.Deleted}, nil
}

// Rewind is sessions.rewind: the worktree and the session's branch back to
// the state after turn (0: the base), refused while a turn runs or prompts
// wait. The conversation goes on from there: the next turn is numbered
// after every turn taken, and the agent's own memory still holds the turns
// rewound (only their files are gone). A rewound event says so in the
// session's stream.
func (m *Manager) Rewind(ctx context.Context, id string, turn int) (api.SessionRewindResult, error) {
	r, err := m.review(ctx, id, "sessions.rewind")
	if err != nil {
		return api.SessionRewindResult{}, err
	}
	if turn > r.turns {
		return api.SessionRewindResult{}, api.InvalidField("turn", "session %s has taken %d turns; rewind to one of them, or 0 for the state it started from", id, r.turns)
	}
	s := r.s
	if s == nil {
		// A closed session has no turn to race but a one-shot run's;
		// its stream's next seq is kept under closedMu.
		m.closedMu.Lock()
		defer m.closedMu.Unlock()
		if err := m.closedBusy(ctx, id, "sessions.rewind"); err != nil {
			return api.SessionRewindResult{}, err
		}
		row, err := m.st.GetSession(ctx, id)
		if err != nil {
			return api.SessionRewindResult{}, err
		}
		s = newSession(row, api.SessionStartParams{})
		s.iso = r.iso
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.busyLocked("sessions.rewind"); err != nil {
		return api.SessionRewindResult{}, err
	}
	rw, err := m.deps.Worktrees.Rewind(ctx, r.iso.Worktree, turn)
	if err != nil {
		return api.SessionRewindResult{}, mapWorktreeError(id, err)
	}
	ev := api.SessionRewound{Turn: turn, Commit: rw.Commit, DroppedTurns: []int{}}
	for _, t := range rw.Dropped {
		ev.DroppedTurns = append(ev.DroppedTurns, t.Number)
	}
	m.addNoteLocked(s, s.row.Turns, api.EventRewound, api.AgentEvent{Rewound: &ev})
	left, err := m.deps.Worktrees.Turns(ctx, r.iso.Worktree)
	if err != nil {
		return api.SessionRewindResult{}, mapWorktreeError(id, err)
	}
	m.log.Info("rewound a session's worktree", zap.String("session_id", id), zap.Int("turn", turn), zap.Ints("dropped_turns", ev.DroppedTurns))
	return api.SessionRewindResult{SessionID: id, SessionRewound: ev, Turns: worktreeTurns(left)}, nil
}

// discardedReason is the close reason of a session whose worktree was
// discarded while it was open.
const discardedReason = "its worktree was discarded (sessions.discard)"

// Discard is sessions.discard: the worktree and the session's branch go,
// with every turn's commit. An open session is closed first (its turns
// would have nowhere to run); one with a turn running or prompts waiting
// is refused. Discarding a discarded session answers it as it is.
func (m *Manager) Discard(ctx context.Context, id string) (api.SessionDiscardResult, error) {
	r, err := m.review(ctx, id, "sessions.discard")
	var gone *WorktreeGoneError
	if errors.As(err, &gone) && r.iso != nil && r.iso.DiscardedAt != nil {
		v, err := m.Get(ctx, id)
		return api.SessionDiscardResult{Session: v}, err
	}
	if err != nil {
		return api.SessionDiscardResult{}, err
	}
	res := api.SessionDiscardResult{}
	if s := r.s; s != nil {
		s.mu.Lock()
		err := s.busyLocked("sessions.discard")
		s.mu.Unlock()
		if err != nil {
			return res, err
		}
		if _, err := m.Close(ctx, id, discardedReason); err != nil {
			return res, err
		}
		res.Closed = true
	} else {
		m.closedMu.Lock()
		defer m.closedMu.Unlock()
		if err := m.closedBusy(ctx, id, "sessions.discard"); err != nil {
			return res, err
		}
	}
	if err := m.deps.Worktrees.Discard(ctx, r.iso.Worktree); err != nil {
		return res, err
	}
	if err := m.markDiscarded(ctx, id, r.iso); err != nil {
		return res, err
	}
	m.log.Info("discarded a session's worktree and branch", zap.String("session_id", id), zap.String("repo", r.iso.Worktree.Repo),
		zap.String("branch", r.iso.Worktree.Branch))
	res.Session, err = m.Get(ctx, id)
	return res, err
}

// markDiscarded records that iso's worktree is gone.
func (m *Manager) markDiscarded(ctx context.Context, id string, iso *isolation) error {
	now := time.Now().UTC().Truncate(time.Second)
	done := *iso
	done.DiscardedAt = &now
	if err := m.st.SetSessionWorktree(context.WithoutCancel(ctx), id, done.raw()); err != nil {
		return err
	}
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.iso = &done
		s.mu.Unlock()
	}
	return nil
}
