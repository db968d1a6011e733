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

// ErrSessionNotFound is returned (wrapped, naming the id) for an unknown
// session.
var ErrSessionNotFound = errors.New("session not found")

// Session is one stored session: a conversation with one adapter across
// turns. Params is sessions.start's params as JSON (what holds for every
// turn); Queue is the prompts waiting, as JSON, without their text.
type Session struct {
	ID             string
	Adapter        string
	State          string // idle, running or closed
	Cwd            string
	PermissionMode string
	Model          string
	Effort         string
	Params         json.RawMessage
	Ancestry       []string
	AgentSessionID string
	Turns          int
	NextSeq        int64
	Queue          json.RawMessage
	WarmPgid       int
	// Owner is the web origin that started the session, "" for a native
	// client. It never changes.
	Owner string
	// Worktree is an isolated session's worktree record (JSON), nil for
	// one that runs in its cwd. SetSessionWorktree changes it.
	Worktree    json.RawMessage
	CreatedAt   time.Time
	UpdatedAt   time.Time
	ClosedAt    *time.Time
	CloseReason string
}

const sessionColumns = `id, adapter, state, cwd, permission_mode, model, effort, params, ancestry,
	agent_session_id, turns, next_seq, queue, warm_pgid, created_at, updated_at, closed_at, close_reason, owner, worktree`

// sessionColumnsNoParams reads every column but params, as NULL: a list of
// sessions, or the open ones a start reads, must not pull every session's
// params (a system prompt can be long) into memory at once.
var sessionColumnsNoParams = strings.Replace(sessionColumns, "params,", "NULL,", 1)

// NewSessionID returns a new session id: "ses_" and 26 characters of
// Crockford base32, time-ordered like run ids, so a list sorts by age.
func (s *Store) NewSessionID() string {
	id := s.ids.next(s.now())
	return "ses_" + strings.TrimPrefix(id, "run_")
}

// CreateSession records a new session.
func (s *Store) CreateSession(ctx context.Context, ss Session) error {
	if ss.ID == "" || ss.Adapter == "" {
		return errors.New("store: a session needs an id and an adapter")
	}
	if ss.CreatedAt.IsZero() {
		ss.CreatedAt = s.now()
	}
	ss.UpdatedAt = ss.CreatedAt
	if ss.State == "" {
		ss.State = "idle"
	}
	if ss.NextSeq == 0 {
		ss.NextSeq = 1
	}
	args, err := sessionArgs(ss)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO sessions (`+sessionColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, args...)
	if err != nil {
		return fmt.Errorf("store: create session %s: %w", ss.ID, err)
	}
	return nil
}

// UpdateSession writes a session's mutable fields (state, the CLI's
// session id, turns, next seq, queue, closed, and the permission mode,
// model, effort, params and, before a first turn, the adapter that
// sessions.configure changes) and stamps it
// updated now. Params nil leaves the stored params as they are: a session
// in memory keeps its params in the store, not beside every state change.
func (s *Store) UpdateSession(ctx context.Context, ss Session) error {
	if ss.UpdatedAt.IsZero() {
		ss.UpdatedAt = s.now()
	}
	args, err := sessionArgs(ss)
	if err != nil {
		return err
	}
	// args are in sessionColumns order; id is first.
	// The warm pgid is SetSessionWarmPgid's alone: it changes as the agent
	// starts and ends, not with the session's state.
	var params any
	if ss.Params != nil {
		params = args[7]
	}
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET adapter = ?, state = ?, permission_mode = ?, model = ?, effort = ?, params = COALESCE(?, params),
		agent_session_id = ?, turns = ?, next_seq = ?, queue = ?, updated_at = ?, closed_at = ?, close_reason = ? WHERE id = ?`,
		args[1], args[2], args[4], args[5], args[6], params, args[9], args[10], args[11], args[12], args[15], args[16], args[17], ss.ID)
	if err != nil {
		return fmt.Errorf("store: update session %s: %w", ss.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: session %s: %w", ss.ID, ErrSessionNotFound)
	}
	return nil
}

// SetSessionWorktree replaces a session's worktree record (JSON; nil
// clears it). UpdateSession leaves it alone: it changes when the worktree
// does (made, discarded), not with the session's state.
func (s *Store) SetSessionWorktree(ctx context.Context, id string, worktree json.RawMessage) error {
	var v any
	if len(worktree) > 0 {
		if !json.Valid(worktree) {
			return fmt.Errorf("store: session %s: its worktree record is not valid JSON", id)
		}
		v = string(worktree)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE sessions SET worktree = ? WHERE id = ?`, v, id)
	if err != nil {
		return fmt.Errorf("store: session %s: worktree: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: session %s: %w", id, ErrSessionNotFound)
	}
	return nil
}

// SetSessionWarmPgid records (pgid > 0) or clears (0) the process group
// of a session's warm agent, so a daemon restarted after a crash can end a
// group its predecessor left behind.
func (s *Store) SetSessionWarmPgid(ctx context.Context, id string, pgid int) error {
	var v any
	if pgid > 0 {
		v = pgid
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE sessions SET warm_pgid = ? WHERE id = ?`, v, id); err != nil {
		return fmt.Errorf("store: session %s: warm pgid: %w", id, err)
	}
	return nil
}

func sessionArgs(ss Session) ([]any, error) {
	ancestry := ss.Ancestry
	if ancestry == nil {
		ancestry = []string{}
	}
	anc, err := json.Marshal(ancestry)
	if err != nil {
		return nil, err
	}
	params, queue := ss.Params, ss.Queue
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	if len(queue) == 0 {
		queue = json.RawMessage("[]")
	}
	var pgid, closed any
	if ss.WarmPgid > 0 {
		pgid = ss.WarmPgid
	}
	if ss.ClosedAt != nil {
		closed = ms(*ss.ClosedAt)
	}
	updated := ss.UpdatedAt
	if updated.IsZero() {
		updated = ss.CreatedAt
	}
	var worktree any
	if len(ss.Worktree) > 0 {
		if !json.Valid(ss.Worktree) {
			return nil, fmt.Errorf("store: session %s: its worktree record is not valid JSON", ss.ID)
		}
		worktree = string(ss.Worktree)
	}
	return []any{ss.ID, ss.Adapter, ss.State, ss.Cwd, ss.PermissionMode, ss.Model, ss.Effort, string(params), string(anc),
		ss.AgentSessionID, ss.Turns, ss.NextSeq, string(queue), pgid, ms(ss.CreatedAt), ms(updated), closed, ss.CloseReason, ss.Owner, worktree}, nil
}

// GetSession returns one session, or an error wrapping ErrSessionNotFound.
func (s *Store) GetSession(ctx context.Context, id string) (Session, error) {
	ss, err := scanSession(s.db.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("store: session %s: %w", id, ErrSessionNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("store: read session %s: %w", id, err)
	}
	return ss, nil
}

// SessionParams is a session's stored params (sessions.start's, as
// sessions.configure left them).
func (s *Store) SessionParams(ctx context.Context, id string) (json.RawMessage, error) {
	var params string
	err := s.db.QueryRowContext(ctx, `SELECT params FROM sessions WHERE id = ?`, id).Scan(&params)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("store: session %s: %w", id, ErrSessionNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read session %s's params: %w", id, err)
	}
	return json.RawMessage(params), nil
}

// CountOpenSessions counts the sessions not closed: all of them, and those
// of owner.
func (s *Store) CountOpenSessions(ctx context.Context, owner string) (all, owned int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT count(*), count(CASE WHEN owner = ? THEN 1 END) FROM sessions WHERE state != 'closed'`, owner).Scan(&all, &owned)
	if err != nil {
		return 0, 0, fmt.Errorf("store: count open sessions: %w", err)
	}
	return all, owned, nil
}

// CountWorktrees counts owner's sessions, open or closed, whose worktree
// is not discarded: the worktrees it holds.
func (s *Store) CountWorktrees(ctx context.Context, owner string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE owner = ? AND worktree IS NOT NULL
		AND json_extract(worktree, '$.discarded_at') IS NULL`, owner).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: count worktrees: %w", err)
	}
	return n, nil
}

// IdleSessions are the ids of the open sessions not updated since before.
func (s *Store) IdleSessions(ctx context.Context, before time.Time) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM sessions WHERE state != 'closed' AND updated_at < ? ORDER BY id`, ms(before))
	if err != nil {
		return nil, fmt.Errorf("store: idle sessions: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: idle sessions: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// PruneClosedSessions deletes the sessions closed before before, with
// their own events; their turns are runs, which the run history's
// retention prunes. It returns how many it deleted.
func (s *Store) PruneClosedSessions(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sessions WHERE state = 'closed' AND closed_at IS NOT NULL AND closed_at < ?`, ms(before))
	if err != nil {
		return 0, fmt.Errorf("store: prune closed sessions: %w", err)
	}
	return res.RowsAffected()
}

// SessionQuery selects sessions for ListSessions.
type SessionQuery struct {
	Adapter       string
	State         string
	IncludeClosed bool
	Limit         int
	// Owner, when set, keeps only the sessions of that owner ("" is
	// native clients').
	Owner *string
}

// ListSessions returns sessions newest first.
func (s *Store) ListSessions(ctx context.Context, q SessionQuery) ([]Session, error) {
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = api.DefaultListLimit
	case limit > api.MaxListLimit:
		limit = api.MaxListLimit
	}
	var where []string
	var args []any
	if q.Adapter != "" {
		where, args = append(where, "adapter = ?"), append(args, q.Adapter)
	}
	if q.State != "" {
		where, args = append(where, "state = ?"), append(args, q.State)
	} else if !q.IncludeClosed {
		where = append(where, "state != 'closed'")
	}
	if q.Owner != nil {
		where, args = append(where, "owner = ?"), append(args, *q.Owner)
	}
	query := `SELECT ` + sessionColumnsNoParams + ` FROM sessions`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list sessions: %w", err)
	}
	defer rows.Close()
	out := []Session{}
	for rows.Next() {
		ss, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list sessions: %w", err)
		}
		out = append(out, ss)
	}
	return out, rows.Err()
}

// SessionRuns returns the runs of a card session, in turn order.
func (s *Store) SessionRuns(ctx context.Context, id string) ([]api.Run, error) {
	return queryRuns(ctx, s.db, `SELECT `+runColumns+` FROM runs WHERE card_session_id = ? ORDER BY session_turn, id`, id)
}

// LastEvent is the highest seq stored for a run and its kind (0, "":
// none).
func (s *Store) LastEvent(ctx context.Context, runID string) (int64, string, error) {
	var seq int64
	var kind string
	err := s.db.QueryRowContext(ctx, `SELECT seq, kind FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1`, runID).Scan(&seq, &kind)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("store: run %s: last event: %w", runID, err)
	}
	return seq, kind, nil
}

// OpenSessions returns every session not closed; a daemon starting reads
// them to carry their conversations on.
func (s *Store) OpenSessions(ctx context.Context) ([]Session, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sessionColumnsNoParams+` FROM sessions WHERE state != 'closed' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: open sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		ss, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("store: open sessions: %w", err)
		}
		out = append(out, ss)
	}
	return out, rows.Err()
}

// ClosedIsolatedSessionsWithoutTurns returns the closed sessions with a
// worktree record and no turn recorded on the session: an isolated
// agents.invoke's session records its one turn when its run ends, so one
// whose daemon died during the run is among them, its run's work still
// to be committed.
func (s *Store) ClosedIsolatedSessionsWithoutTurns(ctx context.Context) ([]Session, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sessionColumnsNoParams+` FROM sessions WHERE state = 'closed' AND turns = 0 AND worktree IS NOT NULL ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: closed isolated sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		ss, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("store: closed isolated sessions: %w", err)
		}
		out = append(out, ss)
	}
	return out, rows.Err()
}

func scanSession(sc rowScanner) (Session, error) {
	var (
		ss               Session
		anc, queue       string
		params, worktree sql.NullString
		created, updated int64
		pgid, closed     sql.NullInt64
	)
	err := sc.Scan(&ss.ID, &ss.Adapter, &ss.State, &ss.Cwd, &ss.PermissionMode, &ss.Model, &ss.Effort, &params, &anc,
		&ss.AgentSessionID, &ss.Turns, &ss.NextSeq, &queue, &pgid, &created, &updated, &closed, &ss.CloseReason, &ss.Owner, &worktree)
	if err != nil {
		return Session{}, err
	}
	ss.Queue = json.RawMessage(queue)
	if params.Valid {
		ss.Params = json.RawMessage(params.String)
	}
	if worktree.Valid {
		ss.Worktree = json.RawMessage(worktree.String)
	}
	if err := json.Unmarshal([]byte(anc), &ss.Ancestry); err != nil {
		return Session{}, fmt.Errorf("session %s: ancestry: %w", ss.ID, err)
	}
	ss.CreatedAt, ss.UpdatedAt = fromMs(created), fromMs(updated)
	ss.ClosedAt = optTime(closed)
	if pgid.Valid {
		ss.WarmPgid = int(pgid.Int64)
	}
	return ss, nil
}

// SessionEvent is one event of a session's own, between its turns: Seq in
// the session's stream, Turn the last turn the session had taken then.
type SessionEvent struct {
	Seq     int64
	Turn    int
	Kind    string
	Payload json.RawMessage
}

// AppendSessionEvent records one event of a session's own under its seq
// in the session; a seq already recorded is an error.
func (s *Store) AppendSessionEvent(ctx context.Context, id string, ev SessionEvent) error {
	if !json.Valid(ev.Payload) {
		return fmt.Errorf("store: session %s: event %d: payload is not valid JSON", id, ev.Seq)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO session_events (session_id, seq, turn, kind, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		id, ev.Seq, ev.Turn, ev.Kind, string(ev.Payload), ms(s.now()))
	if err != nil {
		return fmt.Errorf("store: session %s: event %d: %w", id, ev.Seq, err)
	}
	return nil
}

// SessionEvents are a session's own events, in seq order.
func (s *Store) SessionEvents(ctx context.Context, id string) ([]SessionEvent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, turn, kind, payload FROM session_events WHERE session_id = ? ORDER BY seq`, id)
	if err != nil {
		return nil, fmt.Errorf("store: session %s: events: %w", id, err)
	}
	defer rows.Close()
	var out []SessionEvent
	for rows.Next() {
		var ev SessionEvent
		var payload string
		if err := rows.Scan(&ev.Seq, &ev.Turn, &ev.Kind, &payload); err != nil {
			return nil, fmt.Errorf("store: session %s: events: %w", id, err)
		}
		ev.Payload = json.RawMessage(payload)
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: session %s: events: %w", id, err)
	}
	return out, nil
}
