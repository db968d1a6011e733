package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/card-dev/card/api"
)

// pruneBatch bounds the runs one prune transaction deletes, so a prune of a
// large history never holds the writer lock long enough to stall the
// daemon's own writes behind it.
const pruneBatch = 500

// Retention says which runs a prune keeps. A running run is always kept:
// its outcome is still to be written.
type Retention struct {
	// MaxRuns keeps the newest MaxRuns runs (running ones count); zero
	// means no bound on the count.
	MaxRuns int
	// MaxAge keeps runs created within MaxAge of now; zero means no bound
	// on age.
	MaxAge time.Duration
	// Keep, when set, is asked about each run a prune would delete; true
	// keeps it (the run subsystem keeps the runs it still holds in memory).
	Keep func(runID string) bool
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
}

// Prune deletes finished runs past the retention, oldest first, with their
// events, in transactions of at most pruneBatch runs. SQLite reuses the
// freed pages, so a history pruned regularly stops growing at the size its
// retention keeps; it does not shrink the file.
func (s *Store) Prune(ctx context.Context, r Retention) (api.Pruned, error) {
	if r.MaxRuns < 0 || r.MaxAge < 0 {
		return api.Pruned{}, errors.New("store: prune: a negative retention keeps nothing; use zero for no bound")
	}
	if r.MaxRuns == 0 && r.MaxAge == 0 {
		n, err := s.count(ctx)
		return api.Pruned{Kept: n}, err
	}
	// Every run at or before boundary is past MaxRuns (ids sort by
	// creation); cutoff is the age bound.
	boundary := ""
	if r.MaxRuns > 0 {
		err := s.db.QueryRowContext(ctx, `SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?`, r.MaxRuns).Scan(&boundary)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return api.Pruned{}, fmt.Errorf("store: prune: %w", err)
		}
	}
	cutoff := int64(-1)
	if r.MaxAge > 0 {
		cutoff = ms(s.now().Add(-r.MaxAge))
	}
	if boundary == "" && cutoff < 0 {
		n, err := s.count(ctx)
		return api.Pruned{Kept: n}, err
	}
	var out api.Pruned
	after := ""
	for {
		ids, last, err := s.pruneCandidates(ctx, after, boundary, cutoff)
		if err != nil {
			return out, err
		}
		if last == "" {
			break
		}
		after = last
		var doomed []string
		for _, id := range ids {
			if r.Keep == nil || !r.Keep(id) {
				doomed = append(doomed, id)
			}
		}
		if len(doomed) == 0 {
			continue
		}
		runs, events, err := s.deleteRuns(ctx, doomed, r.DryRun)
		out.Runs += runs
		out.Events += events
		if err != nil {
			return out, err
		}
	}
	n, err := s.count(ctx)
	out.Kept = n
	if r.DryRun {
		out.Kept -= out.Runs
	}
	return out, err
}

// pruneCandidates is the next batch of finished runs after the id after
// that are past the retention; last is the batch's last id ("" when none).
func (s *Store) pruneCandidates(ctx context.Context, after, boundary string, cutoff int64) (ids []string, last string, err error) {
	var where []string
	args := []any{after}
	if boundary != "" {
		where, args = append(where, "id <= ?"), append(args, boundary)
	}
	if cutoff >= 0 {
		where, args = append(where, "created_at < ?"), append(args, cutoff)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM runs WHERE id > ? AND status != 'running' AND (`+
		strings.Join(where, " OR ")+`) ORDER BY id LIMIT ?`, append(args, pruneBatch)...)
	if err != nil {
		return nil, "", fmt.Errorf("store: prune: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, "", fmt.Errorf("store: prune: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("store: prune: %w", err)
	}
	if len(ids) > 0 {
		last = ids[len(ids)-1]
	}
	return ids, last, nil
}

// deleteRuns deletes (or counts) finished runs and their events in one
// transaction. A run that is running by now is left alone.
func (s *Store) deleteRuns(ctx context.Context, ids []string, dryRun bool) (runs, events int64, err error) {
	in := "(" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")"
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if dryRun {
		err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM((SELECT COUNT(*) FROM events e WHERE e.run_id = r.id)), 0)
			FROM runs r WHERE r.status != 'running' AND r.id IN `+in, args...).Scan(&runs, &events)
		if err != nil {
			return 0, 0, fmt.Errorf("store: prune: %w", err)
		}
		return runs, events, nil
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE run_id IN (SELECT id FROM runs WHERE status != 'running' AND id IN `+in+`)`, args...)
		if err != nil {
			return err
		}
		events, _ = res.RowsAffected()
		res, err = tx.ExecContext(ctx, `DELETE FROM runs WHERE status != 'running' AND id IN `+in, args...)
		if err != nil {
			return err
		}
		runs, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("store: prune: %w", err)
	}
	return runs, events, nil
}

// count is how many runs the history holds.
func (s *Store) count(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM runs`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count runs: %w", err)
	}
	return n, nil
}
