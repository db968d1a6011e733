package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations are applied in order at Open; the schema version is their count,
// kept in PRAGMA user_version. Never edit or reorder an entry once released:
// append a new one, since a database in the field has already run the old.
var migrations = [][]string{
	// 1: runs and their events. (events_stored is no longer written: the
	// run's writer bounds its events and records events_dropped itself.)
	{
		`CREATE TABLE runs (
			id              TEXT PRIMARY KEY,
			adapter         TEXT NOT NULL,
			status          TEXT NOT NULL CHECK (status IN ('running','succeeded','failed','cancelled','timed_out','refused','interrupted')),
			invoked_by      TEXT NOT NULL DEFAULT '',
			ancestry        TEXT NOT NULL DEFAULT '[]',
			cwd             TEXT NOT NULL DEFAULT '',
			permission_mode TEXT NOT NULL DEFAULT '',
			model           TEXT NOT NULL DEFAULT '',
			created_at      INTEGER NOT NULL,
			started_at      INTEGER,
			ended_at        INTEGER,
			duration_ms     INTEGER,
			exit_code       INTEGER,
			session_id      TEXT NOT NULL DEFAULT '',
			answer          TEXT NOT NULL DEFAULT '',
			error           TEXT,
			usage           TEXT,
			total_cost_usd  REAL,
			turns           INTEGER NOT NULL DEFAULT 0,
			tool_calls      INTEGER NOT NULL DEFAULT 0,
			task            TEXT NOT NULL DEFAULT '',
			task_len        INTEGER NOT NULL DEFAULT 0,
			task_sha256     TEXT NOT NULL DEFAULT '',
			pgid            INTEGER,
			refusal_reason  TEXT NOT NULL DEFAULT '',
			events_stored   INTEGER NOT NULL DEFAULT 0,
			events_dropped  INTEGER NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX runs_by_adapter ON runs (adapter, id)`,
		`CREATE INDEX runs_by_status ON runs (status, id)`,
		`CREATE TABLE events (
			run_id     TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
			seq        INTEGER NOT NULL,
			kind       TEXT NOT NULL,
			payload    TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			PRIMARY KEY (run_id, seq)
		) WITHOUT ROWID`,
	},
	// 2: what each run was handed besides its task: the attachments' names,
	// types, sizes and digests (JSON; NULL when there were none).
	{
		`ALTER TABLE runs ADD COLUMN attachments TEXT`,
	},
	// 3: sessions (conversations across turns) and, on runs, which card
	// session and turn a run is, with where its events start in the
	// session's seq. card_session_id is card's own id; the run's
	// session_id stays the CLI's.
	{
		`CREATE TABLE sessions (
			id               TEXT PRIMARY KEY,
			adapter          TEXT NOT NULL,
			state            TEXT NOT NULL CHECK (state IN ('idle','running','closed')),
			cwd              TEXT NOT NULL DEFAULT '',
			permission_mode  TEXT NOT NULL DEFAULT '',
			model            TEXT NOT NULL DEFAULT '',
			effort           TEXT NOT NULL DEFAULT '',
			params           TEXT NOT NULL DEFAULT '{}',
			ancestry         TEXT NOT NULL DEFAULT '[]',
			agent_session_id TEXT NOT NULL DEFAULT '',
			turns            INTEGER NOT NULL DEFAULT 0,
			next_seq         INTEGER NOT NULL DEFAULT 1,
			queue            TEXT NOT NULL DEFAULT '[]',
			warm_pgid        INTEGER,
			created_at       INTEGER NOT NULL,
			updated_at       INTEGER NOT NULL,
			closed_at        INTEGER,
			close_reason     TEXT NOT NULL DEFAULT ''
		)`,
		`CREATE INDEX sessions_by_adapter ON sessions (adapter, id)`,
		`ALTER TABLE runs ADD COLUMN card_session_id TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE runs ADD COLUMN session_turn INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE runs ADD COLUMN session_seq_base INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX runs_by_card_session ON runs (card_session_id, session_turn) WHERE card_session_id != ''`,
	},
	// 4: the CLI's own running total for its session at a run's end (JSON
	// usage; NULL where the CLI reports only the run's part), so a
	// session's next turn, cold after a restart too, is charged only
	// what it added.
	{
		`ALTER TABLE runs ADD COLUMN session_usage TEXT`,
	},
	// 5: a session's own events between its turns (a change of its
	// settings while no turn runs), numbered in the session's seq. A turn's
	// events stay its run's; these have no run to belong to.
	{
		`CREATE TABLE session_events (
			session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
			seq        INTEGER NOT NULL,
			turn       INTEGER NOT NULL,
			kind       TEXT NOT NULL,
			payload    TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			PRIMARY KEY (session_id, seq)
		)`,
	},
	// 6: who started a session: the web origin of the connection, or ''
	// for a native client. Only the owner (and native clients) may change
	// or prompt a session; lists show each client its own.
	{
		`ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT ''`,
		`CREATE INDEX sessions_open_by_owner ON sessions (owner) WHERE state != 'closed'`,
	},
	// 7: an isolated session's git worktree (JSON: where it is, its branch
	// and base, what the checkout held, when it was discarded); NULL for a
	// session that runs in its cwd. git holds the turns' commits; this is
	// how a restarted daemon finds them.
	{
		`ALTER TABLE sessions ADD COLUMN worktree TEXT`,
	},
}

// SchemaVersion is the schema this code writes.
func SchemaVersion() int { return len(migrations) }

// migrate brings db up to SchemaVersion in one transaction, so a crash
// mid-migration leaves the old schema rather than half of the new one. A
// database from a newer card is refused: running old code over it would
// write rows the newer schema does not expect, a silent downgrade.
func migrate(ctx context.Context, db *sql.DB, path string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: migrate %s: %w", path, err)
	}
	defer func() { _ = tx.Rollback() }()
	var have int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return fmt.Errorf("store: read schema version of %s: %w", path, err)
	}
	if have > len(migrations) {
		return fmt.Errorf("store: %s has schema version %d but this card knows only up to %d; upgrade card, or point it at another home: %w",
			path, have, len(migrations), ErrSchemaTooNew)
	}
	if have == len(migrations) {
		return nil
	}
	for v := have; v < len(migrations); v++ {
		for _, stmt := range migrations[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("store: migrate %s to version %d: %w", path, v+1, err)
			}
		}
	}
	// PRAGMA takes no bound parameters; the value is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(migrations))); err != nil {
		return fmt.Errorf("store: set schema version of %s: %w", path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: migrate %s: %w", path, err)
	}
	return nil
}
