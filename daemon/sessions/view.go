package sessions

import (
	"context"
	"errors"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
)

// Get is one session as the wire shows it.
func (m *Manager) Get(ctx context.Context, id string) (api.Session, error) {
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.settleLocked(ctx)
		return m.viewLocked(s), nil
	}
	row, err := m.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrSessionNotFound) {
		return api.Session{}, &NotFoundError{SessionID: id}
	}
	if err != nil {
		return api.Session{}, err
	}
	return m.viewOfRow(ctx, row)
}

// List is the sessions, newest first: every session for a native client
// (owner nil), and only its own for a web origin.
func (m *Manager) List(ctx context.Context, p api.SessionListParams, owner *string) (api.SessionList, error) {
	rows, err := m.st.ListSessions(ctx, store.SessionQuery{Adapter: p.Adapter, State: storedState(p.State), IncludeClosed: p.IncludeClosed, Limit: p.Limit,
		Owner: owner})
	if err != nil {
		return api.SessionList{}, err
	}
	out := api.SessionList{Sessions: []api.Session{}}
	for _, row := range rows {
		m.mu.Lock()
		s := m.live[row.ID]
		m.mu.Unlock()
		var v api.Session
		if s != nil {
			s.mu.Lock()
			s.settleLocked(ctx)
			v = m.viewLocked(s)
			s.mu.Unlock()
		} else if v, err = m.viewOfRow(ctx, row); err != nil {
			return api.SessionList{}, err
		}
		if p.State != "" && v.State != p.State {
			continue
		}
		out.Sessions = append(out.Sessions, v)
	}
	return out, nil
}

// storedState is the stored state a wire state filter reads: a turn
// waiting on a question is running in the store.
func storedState(s api.SessionState) string {
	if s == api.SessionWaitingApproval {
		return string(api.SessionRunning)
	}
	return string(s)
}

func (m *Manager) viewLocked(s *session) api.Session {
	v := viewOf(s.row)
	v.Turns = s.row.Turns
	v.Queue = []api.QueuedPrompt{}
	for i, q := range s.waitingLocked() {
		v.Queue = append(v.Queue, api.QueuedPrompt{Turn: q.Turn, Position: i + 1, QueuedAt: q.QueuedAt, TaskBytes: q.TaskBytes, Attachments: q.Attachments})
	}
	if s.current != nil {
		v.CurrentRunID = s.current.ID()
		v.State = api.SessionRunning
		if s.current.State() == api.StateWaitingApproval {
			v.State = api.SessionWaitingApproval
		}
		v.NextSeq = s.row.NextSeq + s.current.LastSeq()
	}
	if pid := m.warm.pidOf(s); pid > 0 {
		v.Warm, v.Pid = true, pid
	}
	v.TotalCostUSD, v.Usage = s.spentUSD, s.usage
	v.Worktree = s.iso.view()
	return v
}

func viewOf(row store.Session) api.Session {
	v := api.Session{SessionID: row.ID, Adapter: row.Adapter, State: api.SessionState(row.State), Cwd: row.Cwd,
		PermissionMode: row.PermissionMode, Model: row.Model, Effort: row.Effort, Ancestry: row.Ancestry, Turns: row.Turns, Queue: []api.QueuedPrompt{},
		AgentSessionID: row.AgentSessionID, NextSeq: row.NextSeq, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
		ClosedAt: row.ClosedAt, CloseReason: row.CloseReason, Origin: row.Owner}
	if v.Ancestry == nil {
		v.Ancestry = []string{}
	}
	return v
}

// viewOfRow is a session not in memory (closed): its spending is read from
// its turns.
func (m *Manager) viewOfRow(ctx context.Context, row store.Session) (api.Session, error) {
	v := viewOf(row)
	v.Worktree = m.readIsolation(row).view()
	turns, err := m.st.SessionRuns(ctx, row.ID)
	if err != nil {
		return api.Session{}, err
	}
	for _, r := range turns {
		if r.TotalCostUSD != nil {
			v.TotalCostUSD += *r.TotalCostUSD
		}
		if r.Usage != nil {
			v.Usage.InputTokens += r.Usage.InputTokens
			v.Usage.OutputTokens += r.Usage.OutputTokens
			v.Usage.CachedInputTokens += r.Usage.CachedInputTokens
		}
	}
	return v, nil
}
