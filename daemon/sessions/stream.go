package sessions

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
)

// Send delivers one sessions.event notification's params (JSON). It must
// not keep event after it returns: a stream writes each event into the
// buffer the one before it used.
type Send func(ctx context.Context, event json.RawMessage) error

// Subscribe answers where the session stands and returns what sends its
// events after afterSeq, replayed and then live across turns, until the
// session closes or ctx ends. watcher, when not nil, is asked the
// questions of the session's ask-mode turns while it follows.
func (m *Manager) Subscribe(ctx context.Context, id string, afterSeq int64, watcher runs.Asker) (api.SessionSubscribeResult, func(context.Context, Send) error, error) {
	s, err := m.lookup(ctx, id)
	var closedErr *ClosedError
	if err != nil && !errors.As(err, &closedErr) {
		return api.SessionSubscribeResult{}, nil, err
	}
	if s == nil {
		row, err := m.st.GetSession(ctx, id)
		if errors.Is(err, store.ErrSessionNotFound) {
			return api.SessionSubscribeResult{}, nil, &NotFoundError{SessionID: id}
		}
		if err != nil {
			return api.SessionSubscribeResult{}, nil, err
		}
		// A closed session: its history, from the store, and nothing live.
		s = newSession(row, api.SessionStartParams{})
		if s.turns, err = m.turnsOf(ctx, row); err != nil {
			return api.SessionSubscribeResult{}, nil, err
		}
	}
	s.mu.Lock()
	v := m.viewLocked(s)
	s.mu.Unlock()
	res := api.SessionSubscribeResult{SessionID: id, State: v.State, NextSeq: v.NextSeq, Live: v.State != api.SessionClosed}
	return res, func(ctx context.Context, send Send) error {
		if watcher != nil && res.Live {
			defer m.watch(s, watcher)()
		}
		return m.stream(ctx, s, afterSeq, send)
	}, nil
}

// watch makes a the session's subscriber for approvals until the returned
// function is called.
func (m *Manager) watch(s *session, a runs.Asker) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := a.ID()
	s.watchers[id] = a
	if s.current != nil {
		s.unwatch[id] = m.deps.Runs.Watch(s.current.ID(), a)
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.watchers[id] == a {
			delete(s.watchers, id)
			if stop := s.unwatch[id]; stop != nil {
				stop()
				delete(s.unwatch, id)
			}
		}
	}
}

// stream sends the session's events after seq, turn by turn.
func (m *Manager) stream(ctx context.Context, s *session, seq int64, send Send) error {
	done := 0 // the turns (by index in s.turns) fully sent
	// buf is the envelope of the event being sent, reused for the next:
	// a turn's events are sent one at a time, and a talkative one is
	// dozens of KiB-long texts that would each be copied anew.
	var buf []byte
	for {
		s.mu.Lock()
		refs := slices.Clone(s.turns)
		changed, closed := s.changed, s.closed()
		busy := s.current != nil || len(s.queue) > 0
		s.mu.Unlock()
		for ; done < len(refs); done++ {
			t := refs[done]
			if t.last > 0 && t.base+t.last <= seq {
				continue
			}
			if t.note != nil {
				buf = appendSessionEvent(buf[:0], s.row.ID, t.base+1, t.turn, t.note)
				if err := send(ctx, buf); err != nil || ctx.Err() != nil {
					return nil
				}
				seq = t.base + 1
				continue
			}
			_, events, err := m.deps.Runs.Subscribe(ctx, t.runID, max(0, seq-t.base))
			var gone *runs.NotFoundError
			if errors.As(err, &gone) {
				// The turn's run was pruned from the history (max_runs,
				// max_age_days): its events are gone, and the seq goes on
				// at the next turn's base.
				continue
			}
			if err != nil {
				return err
			}
			var sendErr error
			err = events(ctx, func(ctx context.Context, runSeq int64, raw json.RawMessage) error {
				at := t.base + runSeq
				buf = appendSessionEvent(buf[:0], s.row.ID, at, t.turn, raw)
				sendErr = send(ctx, buf)
				if cap(buf) > maxKeptEnvelope {
					// One very long event's buffer is not held for the
					// rest of the subscription.
					buf = nil
				}
				if sendErr != nil {
					return sendErr
				}
				seq = at
				return nil
			})
			var behind *runs.BehindError
			if errors.As(err, &behind) {
				return &BehindError{BehindError: behind, SessionID: s.row.ID, NextSessionSeq: t.base + behind.NextSeq}
			}
			if err != nil {
				return err
			}
			if sendErr != nil || ctx.Err() != nil {
				return nil
			}
		}
		if closed && !busy {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// maxKeptEnvelope bounds the envelope buffer a stream keeps between
// events.
const maxKeptEnvelope = 64 << 10

// appendSessionEvent appends one sessions.event's params around a run
// event's JSON to b.
func appendSessionEvent(b []byte, id string, seq int64, turn int, raw json.RawMessage) []byte {
	b = slices.Grow(b, len(raw)+len(id)+64)
	b = append(b, `{"session_id":`...)
	b = strconv.AppendQuote(b, id)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"turn":`...)
	b = strconv.AppendInt(b, int64(turn), 10)
	b = append(b, `,"event":`...)
	b = append(b, raw...)
	b = append(b, '}')
	return b
}

// turnsOf reads a session's turns from the store, with each turn's last
// seq from the next one's base (the last turn's from the session's next
// seq).
func (m *Manager) turnsOf(ctx context.Context, row store.Session) ([]turnRef, error) {
	runsOf, err := m.st.SessionRuns(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	refs := make([]turnRef, 0, len(runsOf))
	for i, r := range runsOf {
		t := turnRef{turn: r.SessionTurn, runID: r.RunID, base: r.SessionSeqBase}
		if i+1 < len(runsOf) {
			t.last = runsOf[i+1].SessionSeqBase - r.SessionSeqBase
		} else {
			t.last = row.NextSeq - 1 - r.SessionSeqBase
		}
		refs = append(refs, t)
	}
	notes, err := m.st.SessionEvents(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	return withNotes(refs, notes), nil
}

// withNotes puts a session's own events (from the store) among its turns
// in seq order; a turn followed by one ends where it begins.
func withNotes(refs []turnRef, notes []store.SessionEvent) []turnRef {
	if len(notes) == 0 {
		return refs
	}
	for _, n := range notes {
		refs = append(refs, turnRef{turn: n.Turn, base: n.Seq - 1, last: 1, note: n.Payload})
	}
	slices.SortStableFunc(refs, func(a, b turnRef) int { return cmp.Compare(a.base, b.base) })
	for i := 0; i+1 < len(refs); i++ {
		if refs[i].note == nil && refs[i+1].note != nil {
			refs[i].last = refs[i+1].base - refs[i].base
		}
	}
	return refs
}
