// Package store is card's run history: every invocation of an agent, its
// outcome and its streamed events, in an embedded SQLite database
// (modernc.org/sqlite, so no cgo).
//
// The rule it serves is "nothing is lost": a run row is written before the
// child starts and finished after it ends, so a daemon killed in between
// leaves a row that says so (InterruptRunning turns it into "interrupted" at
// the next start, and hands back the process group to clean up). A recorded
// outcome is never overwritten.
//
// The database runs in WAL mode with synchronous=NORMAL: a committed run
// survives the daemon being killed (the WAL is on disk); only an OS crash or
// power loss can roll back the last few commits, never corrupt the file. All
// access goes through a single connection, since SQLite allows one writer at
// a time anyway and one connection makes that a queue instead of SQLITE_BUSY
// retries; write transactions begin IMMEDIATE so a second process (a `card
// runs` reader, a second daemon by mistake) waits on busy_timeout rather than
// failing midway.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Defaults for Options.
const (
	DefaultBusyTimeout = 5 * time.Second
	DefaultEventsLimit = 1000
	MaxEventsLimit     = 10000
)

var (
	// ErrNotFound is returned (wrapped, naming the id) for an unknown run.
	ErrNotFound = errors.New("run not found")
	// ErrFinished is returned when a finished run is asked to change.
	ErrFinished = errors.New("run already finished")
	// ErrSchemaTooNew is returned by Open for a database written by a newer
	// card, which this one must not touch.
	ErrSchemaTooNew = errors.New("run store schema is newer than this card")
)

// Options tune a Store. The zero value is usable.
type Options struct {
	// BusyTimeout is how long a write waits for another process holding
	// the database. Zero means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Now is the clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// Store is an open run history. Its methods are safe for concurrent use.
type Store struct {
	db   *sql.DB
	path string
	now  func() time.Time
	ids  idGenerator

	// stmtMu guards inserts, the prepared INSERTs of events by row count.
	stmtMu  sync.Mutex
	inserts map[int]*sql.Stmt
}

// Open opens (creating if needed) the run store at path and brings its
// schema up to date. The file is created 0600 in a 0700 directory, because
// run history holds task text and answers.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("store: database path %q must be a plain file path (no '?' or '#')", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("store: create directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	_ = f.Close()

	s := &Store{path: path, now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	dsn := fmt.Sprintf("%s?_busy_timeout=%d&_foreign_keys=1&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate",
		path, busy.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s.db = db

	if err := s.init(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("store: open %s: %w", s.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("store: %s is in journal mode %q, not WAL; is it on a filesystem without shared memory (a network mount)? Move card's home to a local disk", s.path, mode)
	}
	return migrate(ctx, s.db, s.path)
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database. Pending WAL content is already durable; SQLite
// checkpoints it on close.
func (s *Store) Close() error {
	s.stmtMu.Lock()
	for _, st := range s.inserts {
		_ = st.Close()
	}
	s.inserts = nil
	s.stmtMu.Unlock()
	return s.db.Close()
}

// NewRunID returns a new run id: "run_" and 26 characters of Crockford
// base32 over 48 bits of milliseconds and 80 random bits, like a ULID. Ids
// sort by creation time, which is what makes them a usable "before" cursor
// for List; within one millisecond they still increase, so two runs created
// together list in the order they were made.
func (s *Store) NewRunID() string { return s.ids.next(s.now()) }

// Checkpoint copies what the write-ahead log holds into the database
// (PRAGMA wal_checkpoint(PASSIVE): it waits for no reader). SQLite does this
// by itself inside the commit that takes the log past 1,000 pages, which
// made that commit, and whoever waited for it, pay for the pages of every
// commit before: a chatty run's history is about 400 of them. The run
// subsystem calls it once a run's answer is out, so a run's commits find
// the log short.
func (s *Store) Checkpoint(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
		return fmt.Errorf("store: checkpoint %s: %w", s.path, err)
	}
	return nil
}

// IntegrityCheck runs PRAGMA integrity_check and reports anything but "ok".
func (s *Store) IntegrityCheck(ctx context.Context) error {
	problems, err := s.integrityProblems(ctx)
	if err == nil && len(problems) == 0 {
		return nil
	}
	if err != nil {
		problems = append(problems, err.Error())
	}
	report := strings.Join(problems, "; ")
	if len(report) > 400 { // a corrupt file can report thousands of lines
		report = report[:400] + " …"
	}
	return fmt.Errorf("store: %s failed its integrity check (stop card, move the file aside and restart to begin a fresh history): %s",
		s.path, report)
}

func (s *Store) integrityProblems(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return problems, err
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	return problems, rows.Err()
}

// inTx runs fn in a write transaction (IMMEDIATE, from the DSN).
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

// marshalOrNull stores a nil pointer as SQL NULL rather than "null", so
// "absent" has one representation.
func marshalOrNull[T any](v *T) (any, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}
