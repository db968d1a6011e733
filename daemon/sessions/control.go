package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/google/uuid"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/spawn"
)

// Cancel ends the session's running turn and, with ClearQueue, drops its
// queued prompts (each recorded as a refused turn).
func (m *Manager) Cancel(ctx context.Context, p api.SessionCancelParams) (api.SessionCancelResult, error) {
	s, err := m.lookup(ctx, p.SessionID)
	if err != nil {
		return api.SessionCancelResult{}, err
	}
	s.mu.Lock()
	res := api.SessionCancelResult{SessionID: s.row.ID}
	if p.ClearQueue {
		for _, q := range s.waitingLocked() {
			q.Dropped = "cleared by sessions.cancel with clear_queue before it ran"
			res.Cleared++
		}
		m.saveLocked(s)
	}
	run := s.current
	s.mu.Unlock()
	if run == nil {
		res.Reason = "no turn is running in session " + p.SessionID
		return res, nil
	}
	cr, err := m.deps.Runs.Cancel(ctx, run.ID())
	if err != nil {
		return res, err
	}
	res.Cancelled, res.RunID, res.Reason = cr.Cancelled, run.ID(), cr.Reason
	return res, nil
}

// Close ends the session: its running turn is cancelled, its queued
// prompts dropped (recorded as refused turns), its warm agent ended. A
// closed session keeps its history and takes no more prompts.
func (m *Manager) Close(ctx context.Context, id, reason string) (api.Session, error) {
	s, err := m.lookup(ctx, id)
	var closed *ClosedError
	if errors.As(err, &closed) {
		return m.Get(ctx, id)
	}
	if err != nil {
		return api.Session{}, err
	}
	s.mu.Lock()
	if reason == "" {
		reason = "closed by sessions.close"
	}
	for _, q := range s.waitingLocked() {
		q.Dropped = "the session was closed before this queued prompt ran"
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	s.row.State, s.row.ClosedAt, s.row.CloseReason = string(api.SessionClosed), &now, reason
	run := s.current
	m.saveLocked(s)
	s.notifyLocked()
	s.mu.Unlock()
	if run != nil {
		_, _ = m.deps.Runs.Cancel(ctx, run.ID())
		select {
		case <-run.Done():
		case <-ctx.Done():
		}
	}
	m.warm.end(s, "the session closed")
	// The turn's waiter records the dropped prompts; wait until it has.
	s.mu.Lock()
	for s.current != nil || len(s.queue) > 0 {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return api.Session{}, ctx.Err()
		}
		s.mu.Lock()
	}
	m.saveLocked(s)
	view := m.viewLocked(s)
	s.mu.Unlock()
	m.mu.Lock()
	delete(m.live, id)
	m.mu.Unlock()
	m.log.Info("session closed", zap.String("session_id", id), zap.String("reason", reason))
	return view, nil
}

// Configure gives the session new params for its next turns: p are its
// params with the change, judged by the daemon as sessions.start judges
// them. The turn running now keeps what it started with; the queued
// prompts run with p. A warm agent started with the old settings is ended
// now when idle, else when its turn ends, and the next turn starts its CLI
// anew, resuming the conversation by the id the last turn reported.
func (m *Manager) Configure(ctx context.Context, id string, p api.SessionStartParams) (api.SessionConfigureResult, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return api.SessionConfigureResult{}, err
	}
	s.mu.Lock()
	if s.closed() {
		s.mu.Unlock()
		return api.SessionConfigureResult{}, &ClosedError{SessionID: s.row.ID, Reason: s.row.CloseReason}
	}
	if p.ID != s.row.Adapter && s.row.Turns > 0 {
		s.mu.Unlock()
		return api.SessionConfigureResult{}, api.InvalidField("id", "session %s has taken %d turn(s) with %s, and another agent cannot carry its conversation",
			s.row.ID, s.row.Turns, s.row.Adapter)
	}
	if err := m.reisolateLocked(ctx, s, p); err != nil {
		s.mu.Unlock()
		return api.SessionConfigureResult{}, err
	}
	res := api.SessionConfigureResult{Changed: changedFields(s.params, p)}
	var retired *warmAgent
	if len(res.Changed) > 0 {
		raw, err := json.Marshal(p)
		if err != nil {
			s.mu.Unlock()
			return api.SessionConfigureResult{}, err
		}
		if p.ID != s.row.Adapter || p.Isolation != s.params.Isolation {
			// Only before the first turn (the daemon refuses it after):
			// the new CLI's session, or the session in its new place, is
			// named as a new session's is, so nothing a warm agent began
			// elsewhere is taken for it.
			s.row.Adapter, s.row.AgentSessionID, s.confirmed = p.ID, "", false
			if spawn.CardNamesSession(p.ID) {
				s.row.AgentSessionID = uuid.NewString()
			}
		}
		s.keepParams(p)
		s.row.PermissionMode, s.row.Model, s.row.Effort, s.row.Params = p.PermissionMode, p.Model, p.Effort, raw
		m.saveLocked(s)
		s.row.Params = nil
		res.WarmAgent, retired = m.warm.retire(s)
	}
	res.AppliesFromTurn = s.row.Turns + 1
	if s.current != nil {
		if n := len(s.turns); n > 0 {
			res.RunningTurn = s.turns[n-1].turn
		}
		if w := s.waitingLocked(); len(w) > 0 {
			res.AppliesFromTurn = w[0].Turn
		}
	}
	if len(res.Changed) > 0 {
		m.noteLocked(s, api.EventSessionConfigured, api.AgentEvent{Configured: &api.SessionConfigured{Changed: res.Changed, Adapter: s.row.Adapter,
			PermissionMode: s.row.PermissionMode, Model: s.row.Model, Effort: s.row.Effort, AppliesFromTurn: res.AppliesFromTurn,
			Isolation: s.params.Isolation, Worktree: s.iso.view()}})
	}
	s.mu.Unlock()
	if retired != nil {
		m.log.Info("ended an idle warm agent started with settings its session no longer has", zap.String("session_id", id))
		m.warm.close(retired)
	}
	s.mu.Lock()
	res.Session = m.viewLocked(s)
	s.mu.Unlock()
	m.log.Info("session configured", zap.String("session_id", id), zap.Strings("changed", res.Changed),
		zap.String("mode", p.PermissionMode), zap.String("model", p.Model), zap.String("effort", p.Effort),
		zap.Int("applies_from_turn", res.AppliesFromTurn))
	return res, nil
}

// noteLocked adds an event of the session's own to its stream: on the
// running turn's stream while a turn runs (as a queued prompt's event
// goes), else between turns.
func (m *Manager) noteLocked(s *session, kind string, ev api.AgentEvent) {
	if s.current == nil {
		m.addNoteLocked(s, s.row.Turns, kind, ev)
		return
	}
	if !m.deps.Runs.Note(s.current.ID(), kind, ev) {
		// The turn is ending (its terminal event is out, or its stream
		// is full): its waiter adds the event once the end is numbered.
		s.pending = append(s.pending, pendingNote{kind: kind, ev: ev})
	}
}

// addNoteLocked stores an event of the session's own at the session's
// next seq, while no turn runs, and wakes its subscribers. It has no run:
// run_id is "" and the run seq 0.
func (m *Manager) addNoteLocked(s *session, turn int, kind string, ev api.AgentEvent) {
	ev.Kind, ev.RunID, ev.Seq = kind, "", 0
	raw, err := json.Marshal(ev)
	if err != nil {
		m.log.Error("could not encode a session's event", zap.String("session_id", s.row.ID), zap.String("kind", kind), zap.Error(err))
		return
	}
	seq := s.row.NextSeq
	if err := m.st.AppendSessionEvent(context.Background(), s.row.ID, store.SessionEvent{Seq: seq, Turn: turn, Kind: kind, Payload: raw}); err != nil {
		m.log.Error("could not record a session's event", zap.String("session_id", s.row.ID), zap.String("kind", kind), zap.Error(err))
		return
	}
	s.turns = append(s.turns, turnRef{turn: turn, base: seq - 1, last: 1, note: raw})
	s.row.NextSeq = seq + 1
	m.saveLocked(s)
	s.notifyLocked()
}

// changedFields names the configurable fields whose value differs.
func changedFields(was, now api.SessionStartParams) []string {
	out := []string{}
	if was.ID != now.ID {
		out = append(out, "id")
	}
	if was.PermissionMode != now.PermissionMode {
		out = append(out, "permission_mode")
	}
	if was.Model != now.Model {
		out = append(out, "model")
	}
	if was.Effort != now.Effort {
		out = append(out, "effort")
	}
	if was.Isolation != now.Isolation {
		out = append(out, "isolation")
	}
	if was.Base != now.Base {
		out = append(out, "base")
	}
	return out
}

// Steer adds input to the running turn over its warm agent.
func (m *Manager) Steer(ctx context.Context, p api.SessionSteerParams) (api.SessionSteerResult, error) {
	s, err := m.lookup(ctx, p.SessionID)
	if err != nil {
		return api.SessionSteerResult{}, err
	}
	s.mu.Lock()
	run, turn := s.current, s.row.Turns
	adapter := s.row.Adapter
	s.mu.Unlock()
	w := m.warm.of(s)
	if run == nil {
		return api.SessionSteerResult{}, &SteerUnsupportedError{SessionID: p.SessionID, Adapter: adapter, Reason: "no turn is running"}
	}
	if w == nil || !w.turning(run.ID()) {
		return api.SessionSteerResult{}, &SteerUnsupportedError{SessionID: p.SessionID, Adapter: adapter,
			Reason: "the running turn is cold (a new process of the CLI, which reads its prompt once, on stdin)"}
	}
	st, ok := w.agent.(Steerer)
	if !ok {
		return api.SessionSteerResult{}, &SteerUnsupportedError{SessionID: p.SessionID, Adapter: adapter,
			Reason: "the adapter's CLI has no channel that takes input during a turn"}
	}
	if err := st.Steer(ctx, p.Task); err != nil {
		return api.SessionSteerResult{}, &SteerUnsupportedError{SessionID: p.SessionID, Adapter: adapter, Reason: err.Error()}
	}
	return api.SessionSteerResult{SessionID: p.SessionID, Turn: turn, RunID: run.ID(), Steered: true}, nil
}
