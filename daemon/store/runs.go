package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/card-dev/card/api"
)

const runColumns = `id, adapter, status, invoked_by, ancestry, cwd, permission_mode, model,
	created_at, started_at, ended_at, duration_ms, exit_code, session_id, answer, error, usage,
	total_cost_usd, turns, tool_calls, task, task_len, task_sha256, pgid, refusal_reason, events_dropped, attachments,
	card_session_id, session_turn, session_seq_base, session_usage`

// querier is what *sql.DB and *sql.Tx share, so reads work inside a write
// transaction too.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Create records a run. Call it before the child starts, so a daemon killed
// while the agent runs still leaves a row behind. RunID (from NewRunID) and
// Adapter are required; an empty Status means StatusRunning and a zero
// CreatedAt means now. A run refused before it started is recorded in one
// call with StatusRefused and RefusalReason; its EndedAt defaults to
// CreatedAt.
func (s *Store) Create(ctx context.Context, r api.Run) error {
	if r.RunID == "" {
		return errors.New("store: run has no RunID; take one from NewRunID")
	}
	if r.Adapter == "" {
		return fmt.Errorf("store: run %s has no adapter", r.RunID)
	}
	if r.Status == "" {
		r.Status = api.StatusRunning
	}
	if !r.Status.Valid() {
		return fmt.Errorf("store: run %s: unknown status %q", r.RunID, r.Status)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	}
	var started, ended, duration any
	if r.StartedAt != nil {
		started = ms(*r.StartedAt)
	}
	if r.Status.Terminal() {
		end := r.CreatedAt
		if r.EndedAt != nil {
			end = *r.EndedAt
		}
		from := r.CreatedAt
		if r.StartedAt != nil {
			from = *r.StartedAt
		}
		ended, duration = ms(end), max(0, ms(end)-ms(from))
	}
	ancestry := r.Ancestry
	if ancestry == nil {
		ancestry = []string{}
	}
	ancestryJSON, err := json.Marshal(ancestry)
	if err != nil {
		return fmt.Errorf("store: run %s: ancestry: %w", r.RunID, err)
	}
	errJSON, err := marshalOrNull(r.Error)
	if err != nil {
		return fmt.Errorf("store: run %s: error: %w", r.RunID, err)
	}
	usageJSON, err := marshalOrNull(r.Usage)
	if err != nil {
		return fmt.Errorf("store: run %s: usage: %w", r.RunID, err)
	}
	sessionUsageJSON, err := marshalOrNull(r.SessionUsage)
	if err != nil {
		return fmt.Errorf("store: run %s: session usage: %w", r.RunID, err)
	}
	var pgid any
	if r.Pgid != 0 {
		pgid = r.Pgid
	}
	var attachments any
	if len(r.Attachments) > 0 {
		b, err := json.Marshal(r.Attachments)
		if err != nil {
			return fmt.Errorf("store: run %s: attachments: %w", r.RunID, err)
		}
		attachments = string(b)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO runs (`+runColumns+`)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		r.RunID, r.Adapter, string(r.Status), r.InvokedBy, string(ancestryJSON), r.Cwd, r.PermissionMode, r.Model,
		ms(r.CreatedAt), started, ended, duration, r.ExitCode, r.SessionID, r.Answer, errJSON, usageJSON,
		r.TotalCostUSD, r.Turns, r.ToolCalls, r.Task, r.TaskLen, r.TaskSHA256, pgid, r.RefusalReason, r.EventsDropped, attachments,
		r.CardSessionID, r.SessionTurn, r.SessionSeqBase, sessionUsageJSON)
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed") {
			return fmt.Errorf("store: run %s already exists; take a fresh id from NewRunID", r.RunID)
		}
		return fmt.Errorf("store: create run %s: %w", r.RunID, err)
	}
	return nil
}

// SetPgid records the process group of a running run's child, and marks the
// run started now if it was not already: the moment the child has a group is
// the moment it started. The pgid is what lets a daemon restarted after a
// crash end a group its predecessor left behind.
func (s *Store) SetPgid(ctx context.Context, id string, pgid int) error {
	res, err := s.db.ExecContext(ctx,
		`UPDATE runs SET pgid = ?, started_at = COALESCE(started_at, ?) WHERE id = ? AND status = 'running'`,
		pgid, ms(s.now()), id)
	if err != nil {
		return fmt.Errorf("store: set pgid of run %s: %w", id, err)
	}
	return s.explainNoChange(ctx, res, id)
}

// Finish records how a run ended. It succeeds once: finishing a run that is
// no longer running returns an error wrapping ErrFinished that names the run
// and the status already recorded, so a late or duplicate outcome (a cancel
// racing the child's exit) never overwrites the first.
func (s *Store) Finish(ctx context.Context, id string, f Finish) error {
	if !f.Status.Terminal() {
		return fmt.Errorf("store: finish run %s: status %q does not end a run", id, f.Status)
	}
	end := f.EndedAt
	if end.IsZero() {
		end = s.now()
	}
	errJSON, err := marshalOrNull(f.Error)
	if err != nil {
		return fmt.Errorf("store: finish run %s: error: %w", id, err)
	}
	usageJSON, err := marshalOrNull(f.Usage)
	if err != nil {
		return fmt.Errorf("store: finish run %s: usage: %w", id, err)
	}
	sessionUsageJSON, err := marshalOrNull(f.SessionUsage)
	if err != nil {
		return fmt.Errorf("store: finish run %s: session usage: %w", id, err)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE runs SET
		status = ?, ended_at = ?, duration_ms = MAX(0, ? - COALESCE(started_at, created_at)),
		exit_code = ?, session_id = ?, answer = ?, error = ?, usage = ?, total_cost_usd = ?,
		turns = ?, tool_calls = ?, refusal_reason = ?, events_dropped = ?, session_usage = ?
		WHERE id = ? AND status = 'running'`,
		string(f.Status), ms(end), ms(end), f.ExitCode, f.SessionID, f.Answer, errJSON, usageJSON, f.TotalCostUSD,
		f.Turns, f.ToolCalls, f.RefusalReason, f.EventsDropped, sessionUsageJSON, id)
	if err != nil {
		return fmt.Errorf("store: finish run %s: %w", id, err)
	}
	return s.explainNoChange(ctx, res, id)
}

// DurationMs is how long a finished run took as the history records it:
// from its child's start (or its creation, when no child started) to its
// end, by the store's clock. The run's result reports the same figure, so
// `card invoke` and `card runs` cannot disagree about one run.
func (s *Store) DurationMs(ctx context.Context, id string) (int64, error) {
	var d sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT duration_ms FROM runs WHERE id = ?`, id).Scan(&d)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("store: run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("store: duration of run %s: %w", id, err)
	}
	if !d.Valid {
		return 0, fmt.Errorf("store: run %s has not ended", id)
	}
	return d.Int64, nil
}

// explainNoChange turns an UPDATE ... WHERE status='running' that matched
// nothing into the reason: no such run, or a run already finished.
func (s *Store) explainNoChange(ctx context.Context, res sql.Result, id string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: run %s: %w", id, err)
	}
	if n > 0 {
		return nil
	}
	var status string
	err = s.db.QueryRowContext(ctx, `SELECT status FROM runs WHERE id = ?`, id).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("store: run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: run %s: %w", id, err)
	}
	return fmt.Errorf("store: run %s is already %s; its recorded outcome is kept: %w", id, status, ErrFinished)
}

// Get returns one run, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (api.Run, error) {
	return getRun(ctx, s.db, id)
}

func getRun(ctx context.Context, q querier, id string) (api.Run, error) {
	r, err := scanRun(q.QueryRowContext(ctx, `SELECT `+runColumns+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return api.Run{}, fmt.Errorf("store: run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return api.Run{}, fmt.Errorf("store: read run %s: %w", id, err)
	}
	return r, nil
}

// List returns runs newest first, filtered by q.
func (s *Store) List(ctx context.Context, q ListQuery) ([]api.Run, error) {
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = api.DefaultListLimit
	case limit > api.MaxListLimit:
		limit = api.MaxListLimit
	}
	if q.Status != "" && !q.Status.Valid() {
		return nil, fmt.Errorf("store: unknown status %q; use one of %v", q.Status, api.Statuses)
	}
	var where []string
	var args []any
	if q.Before != "" {
		where, args = append(where, "id < ?"), append(args, q.Before)
	}
	if q.Adapter != "" {
		where, args = append(where, "adapter = ?"), append(args, q.Adapter)
	}
	if q.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(q.Status))
	}
	query := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	return queryRuns(ctx, s.db, query, args...)
}

func queryRuns(ctx context.Context, q querier, query string, args ...any) ([]api.Run, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list runs: %w", err)
	}
	defer rows.Close()
	runs := []api.Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list runs: %w", err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list runs: %w", err)
	}
	return runs, nil
}

// InterruptRunning marks every run still "running" as "interrupted", with
// reason in its error (kind "interrupted") and ended now, and returns them.
// Call it once at startup, before accepting requests: any row still running
// then was left by a daemon that died mid-run, and no one will ever finish
// it. The returned runs carry their Pgid so the caller can end a process
// group that outlived its daemon (on macOS children do not die with it).
func (s *Store) InterruptRunning(ctx context.Context, reason string) ([]api.Run, error) {
	if reason == "" {
		reason = "card stopped before this run ended"
	}
	errJSON, err := json.Marshal(api.RunError{Kind: "interrupted", Message: reason})
	if err != nil {
		return nil, err
	}
	var out []api.Run
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM runs WHERE status = 'running' ORDER BY id`)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		now := ms(s.now())
		if _, err := tx.ExecContext(ctx, `UPDATE runs SET status = 'interrupted', ended_at = ?,
			duration_ms = MAX(0, ? - COALESCE(started_at, created_at)), error = ?
			WHERE status = 'running'`, now, now, string(errJSON)); err != nil {
			return err
		}
		for _, id := range ids {
			r, err := getRun(ctx, tx, id)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: interrupt running runs: %w", err)
	}
	return out, nil
}

type rowScanner interface{ Scan(dest ...any) error }

func scanRun(sc rowScanner) (api.Run, error) {
	var (
		r                                       api.Run
		status, ancestry                        string
		created                                 int64
		started, ended, duration, exitCode, pid sql.NullInt64
		errJSON, usageJSON, attachmentsJSON     sql.NullString
		sessionUsageJSON                        sql.NullString
		cost                                    sql.NullFloat64
	)
	err := sc.Scan(&r.RunID, &r.Adapter, &status, &r.InvokedBy, &ancestry, &r.Cwd, &r.PermissionMode, &r.Model,
		&created, &started, &ended, &duration, &exitCode, &r.SessionID, &r.Answer, &errJSON, &usageJSON,
		&cost, &r.Turns, &r.ToolCalls, &r.Task, &r.TaskLen, &r.TaskSHA256, &pid, &r.RefusalReason, &r.EventsDropped, &attachmentsJSON,
		&r.CardSessionID, &r.SessionTurn, &r.SessionSeqBase, &sessionUsageJSON)
	if err != nil {
		return api.Run{}, err
	}
	r.Status = api.Status(status)
	if err := json.Unmarshal([]byte(ancestry), &r.Ancestry); err != nil {
		return api.Run{}, fmt.Errorf("run %s: ancestry: %w", r.RunID, err)
	}
	if r.Ancestry == nil {
		r.Ancestry = []string{}
	}
	r.CreatedAt = fromMs(created)
	r.StartedAt = optTime(started)
	r.EndedAt = optTime(ended)
	if duration.Valid {
		r.DurationMs = &duration.Int64
	}
	if exitCode.Valid {
		c := int(exitCode.Int64)
		r.ExitCode = &c
	}
	if pid.Valid {
		r.Pgid = int(pid.Int64)
	}
	if cost.Valid {
		r.TotalCostUSD = &cost.Float64
	}
	if errJSON.Valid {
		r.Error = new(api.RunError)
		if err := json.Unmarshal([]byte(errJSON.String), r.Error); err != nil {
			return api.Run{}, fmt.Errorf("run %s: error: %w", r.RunID, err)
		}
	}
	r.TaskTruncated = r.Task != "" && len(r.Task) < r.TaskLen
	if attachmentsJSON.Valid {
		if err := json.Unmarshal([]byte(attachmentsJSON.String), &r.Attachments); err != nil {
			return api.Run{}, fmt.Errorf("run %s: attachments: %w", r.RunID, err)
		}
	}
	if usageJSON.Valid {
		r.Usage = new(api.Usage)
		if err := json.Unmarshal([]byte(usageJSON.String), r.Usage); err != nil {
			return api.Run{}, fmt.Errorf("run %s: usage: %w", r.RunID, err)
		}
	}
	if sessionUsageJSON.Valid {
		r.SessionUsage = new(api.Usage)
		if err := json.Unmarshal([]byte(sessionUsageJSON.String), r.SessionUsage); err != nil {
			return api.Run{}, fmt.Errorf("run %s: session usage: %w", r.RunID, err)
		}
	}
	return r, nil
}

func optTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMs(v.Int64)
	return &t
}
