package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// NewEvent is one event to append: its seq, kind and JSON payload.
type NewEvent struct {
	Seq     int64
	Kind    string
	Payload json.RawMessage
}

// AppendEvent records one streamed event of a run under its seq; see
// AppendEvents.
func (s *Store) AppendEvent(ctx context.Context, runID string, seq int64, kind string, payload json.RawMessage) error {
	return s.AppendEvents(ctx, runID, []NewEvent{{Seq: seq, Kind: kind, Payload: payload}})
}

// AppendEvents records streamed events of a run, in one transaction: a
// chatty agent prints thousands of lines a second, and one SQLite commit per
// line would leave the history minutes behind the run.
//
// The store keeps what it is given. Bounding a run's events is the writer's
// job (it holds them in memory first and knows what it left out); it records
// how many it dropped with the run's outcome (Finish.EventsDropped). A seq
// already recorded for the run is an error, and then none of the batch is
// stored; so is a run that does not exist.
func (s *Store) AppendEvents(ctx context.Context, runID string, events []NewEvent) error {
	if len(events) == 0 {
		return nil
	}
	for i := range events {
		if len(events[i].Payload) == 0 {
			events[i].Payload = json.RawMessage("null")
		}
		if !json.Valid(events[i].Payload) {
			return fmt.Errorf("store: event %d of run %s: payload is not valid JSON", events[i].Seq, runID)
		}
	}
	// Prepared before the transaction takes the store's one connection.
	var stmts [2]*sql.Stmt
	for i, n := range [2]int{1, insertRows} {
		st, err := s.insertEvents(ctx, n)
		if err != nil {
			return fmt.Errorf("store: events of run %s: %w", runID, err)
		}
		stmts[i] = st
	}
	var failed int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, runID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			failed = events[0].Seq
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		now := ms(s.now())
		args := make([]any, 0, 5*min(len(events), insertRows))
		// single is set once a statement of many rows met a seq given twice:
		// the rest go one row at a time, so the error names that seq.
		single := false
		for rest := events; len(rest) > 0; {
			n := insertRows
			if single || len(rest) < n {
				n = 1
			}
			stmt := stmts[0]
			if n > 1 {
				stmt = stmts[1]
			}
			args = args[:0]
			for _, e := range rest[:n] {
				args = append(args, runID, e.Seq, e.Kind, string(e.Payload), now)
			}
			failed = rest[0].Seq
			_, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
			if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
				if n > 1 {
					// SQLite undid the statement, not the transaction.
					single = true
					continue
				}
				return fmt.Errorf("seq %d is already recorded; seq must increase per run", rest[0].Seq)
			}
			if err != nil {
				return err
			}
			rest = rest[n:]
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: event %d of run %s: %w", failed, runID, err)
	}
	return nil
}

// insertRows is how many events one INSERT statement writes. Each
// statement costs SQLite a parse, and database/sql a round of checks and
// conversions, whatever its rows: a chatty run's thousands of events in
// statements of one row each spent most of the store's time there.
const insertRows = 64

// insertEvents is the prepared INSERT of n events (1 or insertRows),
// prepared once per store: the one connection keeps it. It must not be
// called inside a transaction, which holds that connection.
func (s *Store) insertEvents(ctx context.Context, n int) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st := s.inserts[n]; st != nil {
		return st, nil
	}
	q := "INSERT INTO events (run_id, seq, kind, payload, created_at) VALUES (?, ?, ?, ?, ?)" +
		strings.Repeat(", (?, ?, ?, ?, ?)", n-1)
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if s.inserts == nil {
		s.inserts = map[int]*sql.Stmt{}
	}
	s.inserts[n] = st
	return st, nil
}

// Events returns a run's recorded events with seq > afterSeq, in seq order,
// at most limit of them (zero means DefaultEventsLimit; clamped to
// MaxEventsLimit). An unknown run is an error wrapping ErrNotFound; a known
// run with nothing after afterSeq is an empty slice.
func (s *Store) Events(ctx context.Context, runID string, afterSeq int64, limit int) ([]Event, error) {
	switch {
	case limit <= 0:
		limit = DefaultEventsLimit
	case limit > MaxEventsLimit:
		limit = MaxEventsLimit
	}
	rows, err := s.db.QueryContext(ctx,
		`SELECT seq, kind, payload, created_at FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
		runID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
	}
	events := []Event{}
	for rows.Next() {
		var (
			e       = Event{RunID: runID}
			payload string
			created int64
		)
		if err := rows.Scan(&e.Seq, &e.Kind, &payload, &created); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
		}
		e.Payload, e.CreatedAt = json.RawMessage(payload), fromMs(created)
		events = append(events, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
	}
	if len(events) == 0 {
		// Only now ask whether the run exists: the common case pays nothing.
		var one int
		err := s.db.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, runID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("store: events of run %s: %w", runID, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
		}
	}
	return events, nil
}

// LastSeq is the highest seq recorded for a run's events, 0 when it has
// none.
func (s *Store) LastSeq(ctx context.Context, runID string) (int64, error) {
	var seq int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?`, runID).Scan(&seq); err != nil {
		return 0, fmt.Errorf("store: last event of run %s: %w", runID, err)
	}
	return seq, nil
}

// HasEvent reports whether a run recorded an event of kind.
func (s *Store) HasEvent(ctx context.Context, runID, kind string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE run_id = ? AND kind = ?`, runID, kind).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: events of run %s: %w", runID, err)
	}
	return n > 0, nil
}
