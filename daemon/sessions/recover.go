package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
)

// restartedReason is why a prompt queued when the daemon stopped never
// ran. card does not run it after a restart: the connection that sent it
// may be gone, with nobody to answer its questions or read its answer, so
// it is recorded refused, visibly, and the client sends it again.
const restartedReason = "card stopped before this queued prompt ran (the daemon restarted or was killed); send it again"

// Recover carries on the sessions a previous daemon left open, after the
// run subsystem has recorded its leftover runs interrupted: a turn that
// was running gets the terminal event it never had (so the session's
// stream says how it ended), the prompts that were queued are recorded
// refused, each with its event, and a warm agent's group left behind is
// ended. The next prompt of each continues the same conversation, cold, by
// the CLI session id stored with it.
//
// It keeps none of them in memory: each is put right and let go, and is
// loaded again (lookup) when a client next asks for it. A daemon restarted
// with many open sessions, some with long system prompts, reads them one
// at a time and holds only those in use.
func (m *Manager) Recover(ctx context.Context) error {
	rows, err := m.st.OpenSessions(ctx)
	if err != nil {
		return err
	}
	for _, row := range rows {
		if row.WarmPgid > 0 {
			n := endLeftoverGroup(row.WarmPgid, row.ID)
			m.log.Warn("a session's warm agent was left by a previous daemon; ended its process group",
				zap.String("session_id", row.ID), zap.Int("pgid", row.WarmPgid), zap.Int("processes_ended", n))
			row.WarmPgid = 0
			if err := m.st.SetSessionWarmPgid(ctx, row.ID, 0); err != nil {
				return err
			}
		}
		var closed *ClosedError
		if _, err := m.load(ctx, row); err != nil && !errors.As(err, &closed) {
			return err
		}
	}
	return m.recoverOneShots(ctx)
}

// recoverOneShots puts right the isolated agents.invoke runs a dead daemon
// cut short. Each is the one turn of a session recorded closed from the
// start, which Recover's open sessions leave out: its run gets the end its
// stream never had, what it had changed in the worktree becomes its
// commit with a changes event after that end (as an open session's cut
// turn does), and the session records its turn. A run that ended before
// the daemon died is only recorded as the session's turn.
func (m *Manager) recoverOneShots(ctx context.Context) error {
	rows, err := m.st.ClosedIsolatedSessionsWithoutTurns(ctx)
	if err != nil {
		return err
	}
	for _, row := range rows {
		iso := m.readIsolation(row)
		if iso == nil || iso.DiscardedAt != nil {
			continue
		}
		s := newSession(row, api.SessionStartParams{})
		s.iso = iso
		cut, err := m.recoverTurns(ctx, s)
		if err != nil {
			return err
		}
		if s.row.Turns == 0 {
			continue // its run never started: nothing to put right
		}
		m.recoverCutTurnLocked(ctx, s, cut)
		m.saveLocked(s)
	}
	return nil
}

// load makes an open session of the store one in memory: its params, its
// turns and spending, the end of a turn a dead daemon left running, and
// its queue, which a daemon that stopped left unrun, recorded refused. It
// is idempotent: a session put right once loads as it is.
func (m *Manager) load(ctx context.Context, row store.Session) (*session, error) {
	raw, err := m.st.SessionParams(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	var p api.SessionStartParams
	if err := json.Unmarshal(raw, &p); err != nil {
		m.log.Error("a session's start params could not be read; closing it", zap.String("session_id", row.ID), zap.Error(err))
		now := time.Now().UTC().Truncate(time.Millisecond)
		row.State, row.ClosedAt, row.CloseReason = string(api.SessionClosed), &now, "its record could not be read after a restart"
		row.Params = nil
		_ = m.st.UpdateSession(ctx, row)
		return nil, &ClosedError{SessionID: row.ID, Reason: row.CloseReason}
	}
	row.Params = nil
	s := newSession(row, p)
	s.iso = m.readIsolation(row)
	cut, err := m.recoverTurns(ctx, s)
	if err != nil {
		return nil, err
	}
	m.recoverCutTurnLocked(ctx, s, cut)
	var left []queued
	_ = json.Unmarshal(row.Queue, &left)
	s.row.State = string(api.SessionIdle)
	for _, q := range left {
		reason := q.Dropped
		if reason == "" {
			reason = restartedReason
		}
		m.refuseTurnLocked(s, q.Turn, reason)
	}
	m.saveLocked(s)
	if len(left) > 0 {
		m.log.Warn("a session had prompts queued when the daemon stopped; recorded them refused",
			zap.String("session_id", row.ID), zap.Int("prompts", len(left)))
	}
	return s, nil
}

// recoverTurns reads a session's turns and spending, and ends the stream
// of a turn the previous daemon left running. It returns the last turn's
// run when a stop interrupted it (SessionTurn 0 otherwise).
func (m *Manager) recoverTurns(ctx context.Context, s *session) (cut api.Run, err error) {
	turns, err := m.st.SessionRuns(ctx, s.row.ID)
	if err != nil {
		return cut, err
	}
	for i, r := range turns {
		if r.SessionID != "" && r.SessionID == s.row.AgentSessionID {
			s.confirmed = true
		}
		if r.TotalCostUSD != nil {
			s.spentUSD += *r.TotalCostUSD
		}
		if r.SessionUsage != nil && r.SessionID == s.row.AgentSessionID {
			s.reported = *r.SessionUsage
		}
		if r.Usage != nil {
			s.spentTokens += r.Usage.InputTokens + r.Usage.OutputTokens
			s.usage.InputTokens += r.Usage.InputTokens
			s.usage.OutputTokens += r.Usage.OutputTokens
			s.usage.CachedInputTokens += r.Usage.CachedInputTokens
		}
		t := turnRef{turn: r.SessionTurn, runID: r.RunID, base: r.SessionSeqBase}
		if i+1 < len(turns) {
			t.last = turns[i+1].SessionSeqBase - r.SessionSeqBase
			s.turns = append(s.turns, t)
			continue
		}
		last, kind, err := m.st.LastEvent(ctx, r.RunID)
		if err != nil {
			return cut, err
		}
		if kind != api.EventDone && kind != api.EventRunError && r.Status.Terminal() {
			// The daemon died mid-turn: the run is interrupted in the
			// store, and its stream gets the end it never had.
			last++
			res := api.InvokeResult{RunID: r.RunID, Adapter: r.Adapter, Ancestry: r.Ancestry, Status: r.Status,
				Result: api.Result{IsError: true, Error: r.Error, SessionID: r.SessionID}}
			ev := api.AgentEvent{RunID: r.RunID, Seq: last, Event: api.Event{Kind: api.EventRunError, Error: res.Reason()}, Status: r.Status, Result: &res}
			raw, _ := json.Marshal(ev)
			if err := m.st.AppendEvent(ctx, r.RunID, last, api.EventRunError, raw); err != nil && !errors.Is(err, store.ErrNotFound) {
				return cut, err
			}
		}
		if r.Status == api.StatusInterrupted {
			cut = r
		}
		t.last = last
		s.turns = append(s.turns, t)
		s.row.NextSeq = max(s.row.NextSeq, t.base+last+1)
		s.row.Turns = max(s.row.Turns, r.SessionTurn)
		if s.row.AgentSessionID == "" && r.SessionID != "" {
			s.row.AgentSessionID, s.confirmed = r.SessionID, true
		}
		if !s.confirmed && r.Status == api.StatusInterrupted {
			// A first turn cut short by the crash under the id card chose:
			// the CLI may have begun that session; resume it (a failure
			// then lets the id go, as above).
			s.confirmed = true
		}
	}
	notes, err := m.st.SessionEvents(ctx, s.row.ID)
	if err != nil {
		return cut, err
	}
	s.turns = withNotes(s.turns, notes)
	return cut, nil
}
