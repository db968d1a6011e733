package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// EventsOfKinds returns a run's recorded events whose kind is one of kinds,
// in seq order, at most MaxEventsLimit of them: the few events a view of the
// run is built from (its approvals) without replaying the rest. An unknown
// run gives an empty slice; callers that care ask Get first.
func (s *Store) EventsOfKinds(ctx context.Context, runID string, kinds ...string) ([]Event, error) {
	events := []Event{}
	if len(kinds) == 0 {
		return events, nil
	}
	args := []any{runID}
	for _, k := range kinds {
		args = append(args, k)
	}
	args = append(args, MaxEventsLimit)
	q := `SELECT seq, kind, payload, created_at FROM events WHERE run_id = ? AND kind IN (?` +
		strings.Repeat(",?", len(kinds)-1) + `) ORDER BY seq LIMIT ?`
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e       = Event{RunID: runID}
			payload string
			created int64
		)
		if err := rows.Scan(&e.Seq, &e.Kind, &payload, &created); err != nil {
			return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
		}
		e.Payload, e.CreatedAt = json.RawMessage(payload), fromMs(created)
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
	}
	return events, nil
}

// CountDistinct is how many distinct values the JSON member at path (an
// SQLite JSON path such as '$.approval.request_id') takes among a run's
// events of the given kinds: what a reader of at most MaxEventsLimit of
// them (EventsOfKinds) needs to say how much it left out.
func (s *Store) CountDistinct(ctx context.Context, runID, path string, kinds ...string) (int64, error) {
	if len(kinds) == 0 {
		return 0, nil
	}
	args := []any{path, runID}
	for _, k := range kinds {
		args = append(args, k)
	}
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(DISTINCT json_extract(payload, ?)) FROM events WHERE run_id = ? AND kind IN (?`+
		strings.Repeat(",?", len(kinds)-1)+`)`, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: events of run %s: %w", runID, err)
	}
	return n, nil
}
