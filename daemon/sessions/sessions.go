// Package sessions is card's conversations: a session holds one agent
// conversation across turns. Each prompt is a turn, and each turn is a
// normal run of the run subsystem (its gate, record, events, approvals,
// attachments, cancel, deadline and budgets), recorded with its session
// and turn number. A session runs one turn at a time: a prompt sent while
// a turn runs waits in the session's queue (FIFO, bounded) and runs when
// the turn ends, so one conversation never has two agent processes.
//
// Turn N > 1 continues the CLI's own session: it resumes, by the id the
// previous turn reported, in a new process (cold), or takes the turn over
// the session's warm agent when the adapter has one.
//
// A session's events are one stream across turns: the concatenation of
// its turns' run events, each turn's events numbered after the previous
// turn's last (the base is stored on the turn's run), so sessions.subscribe
// replays and follows from any seq with nothing missed or repeated.
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/daemon/worktree"
)

// Config is the part of card.toml ([sessions]) sessions read.
type Config struct {
	// MaxQueue bounds the prompts waiting behind a session's running turn.
	MaxQueue int
	// IdleTimeout ends a warm agent that had no turn for this long.
	IdleTimeout time.Duration
	// MaxWarm bounds the warm agents alive at once; past it the least
	// recently used is ended.
	MaxWarm int
	// MaxOpen bounds the sessions open at once, and MaxOpenPerOwner those
	// of one owner (a web origin, or native clients together); zero is no
	// bound. A session holds its history and, while it runs, an agent: a
	// page that could open them without end could fill the disk and the
	// memory of every restart.
	MaxOpen         int
	MaxOpenPerOwner int
	// MaxWorktreesPerOwner bounds the worktrees one owner holds, its open
	// and closed isolated sessions' not yet discarded (zero: no bound): a
	// closed session keeps its worktree for review, so MaxOpenPerOwner
	// alone would let a page fill the disk with checkouts.
	MaxWorktreesPerOwner int
	// CloseIdle closes a session that had no turn, and no change, for this
	// long (zero: never); PruneClosed deletes a session closed this long
	// ago (zero: never), its turns staying runs of the history.
	CloseIdle   time.Duration
	PruneClosed time.Duration
	// SweepEvery is how often idle sessions are closed and old ones
	// pruned (default an hour).
	SweepEvery time.Duration
	// WorktreeMaxAge discards the worktree of a closed isolated session
	// that has changed nothing for this long (zero: never); an open
	// session's stays.
	WorktreeMaxAge time.Duration
	// PromptsInCommits puts each turn's prompt in its commit's message
	// (the operator's record_tasks: a prompt the history does not keep
	// is not written into the user's repository either).
	PromptsInCommits bool
}

// Planner plans a session's turns and judges its settings (*plan.Planner
// is one).
type Planner interface {
	SessionTurn(s api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Turn, error)
	Check(s api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Checked, error)
}

// Deps is what sessions need from the daemon.
type Deps struct {
	Store *store.Store
	Runs  *runs.Manager
	// Planner plans each turn from the session's settings as they are
	// then (caps lowered to what the session has left); its error is a
	// bad-params answer, and nothing is recorded.
	Planner Planner
	// Warmer starts warm agents; nil runs every turn cold.
	Warmer Warmer
	// Worktrees makes and keeps isolated sessions' worktrees; nil when
	// card has no usable git, NoWorktrees then saying why.
	Worktrees   *worktree.Manager
	NoWorktrees string
	Log         *zap.Logger
}

// Manager owns the sessions: the open ones in memory, every one in the
// store.
type Manager struct {
	deps Deps
	cfg  Config
	st   *store.Store
	log  *zap.Logger

	mu      sync.Mutex
	live    map[string]*session
	closing bool
	wg      sync.WaitGroup // one per turn waiter
	// startMu orders sessions.start's count of the open sessions and the
	// new session's record, so two starts cannot both pass a bound.
	startMu sync.Mutex
	// loadMu orders loading an open session from the store (load), so two
	// requests for a session not in memory load it once.
	loadMu sync.Mutex
	// closedMu orders the changes to closed sessions (a rewind's event,
	// a discard, a one-shot run's end), which no session in memory does.
	closedMu sync.Mutex
	// oneShots are the isolated agents.invoke runs whose end is not
	// recorded yet on their session.
	oneShots map[string]bool
	// sweepStop ends the sweeper (StartSweeping).
	sweepStop, sweepDone chan struct{}

	warm warmPool
}

// New returns a manager; Recover loads what a previous daemon left.
func New(deps Deps, cfg Config) *Manager {
	if deps.Log == nil {
		deps.Log = zap.NewNop()
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	m := &Manager{deps: deps, cfg: cfg, st: deps.Store, log: deps.Log, live: map[string]*session{}, oneShots: map[string]bool{}}
	m.warm.init(m)
	return m
}

// queued is one prompt waiting in a session's queue. Dropped prompts
// (cleared by a cancel, the session closed, the daemon restarted) stay in
// line, marked, until their turn comes: each is then recorded as a refused
// run of its turn, with one event saying why, so it is never lost silently
// and the session's seq stays in turn order.
type queued struct {
	Turn        int       `json:"turn"`
	QueuedAt    time.Time `json:"queued_at"`
	TaskBytes   int       `json:"task_bytes"`
	Attachments int       `json:"attachments"`
	Dropped     string    `json:"dropped,omitempty"`

	task   string
	atts   []api.Attachment
	sender Sender
}

// Sender is the connection a prompt came from, as its turn needs it: who
// its questions go to, and what it may do, judged again when a queued
// prompt's turn comes.
type Sender struct {
	// Asker is the prompting connection (the turn's questions go to it
	// and to every subscriber that may approve); Conn is its context.
	Asker runs.Asker
	Conn  context.Context
	// Judge, when set, says whether the sender may run a turn of a session
	// with these params: a prompt queued under one mode runs under the
	// mode the session has when its turn comes, and a sender that could not
	// have prompted the session in that mode does not get the turn.
	Judge func(api.SessionStartParams) error
	// NoStandingAnswers keeps the session's allow_always answers from the
	// turn: a sender that may not answer questions does not get, through
	// another's earlier answer, tool calls run unasked.
	NoStandingAnswers bool
}

// turnRef is one turn of a session in its event stream: its run, where its
// events start (base) and, once it has ended, its last run seq. A ref with
// a note is instead one event of the session's own between turns (no run),
// at seq base+1, turn the last turn taken before it.
type turnRef struct {
	turn  int
	runID string
	base  int64
	last  int64 // 0 while the turn runs
	note  json.RawMessage
}

// pendingNote is an event of the session's own that came while its turn
// was ending, too late for the turn's stream: it goes between that turn
// and the next once the turn's end is numbered.
type pendingNote struct {
	kind string
	ev   api.AgentEvent
}

// session is one open session in memory. mu orders everything about it:
// one turn at a time, the queue, the record.
type session struct {
	mu      sync.Mutex
	row     store.Session
	params  api.SessionStartParams
	queue   []*queued
	current *runs.Run
	turns   []turnRef
	changed chan struct{} // closed and replaced when a turn starts or ends, or the session closes
	always  *runs.Always
	// spent is what the session's finished turns cost, for its caps.
	spentUSD    float64
	spentTokens int64
	usage       api.Usage
	// reported is the CLI session's running total as the last turn that
	// reported one (spawn's Result.SessionUsage) left it: the base the
	// next turn resuming that session is charged from, in a new process
	// too. It is kept with each turn's run, so a restart reads it back.
	reported api.Usage
	// watchers are the connections subscribed to the session that may
	// approve; each is watching the current turn's run through unwatch.
	watchers map[uint64]runs.Asker
	unwatch  map[uint64]func()
	// confirmed says a CLI has reported the session id the conversation
	// resumes (row.AgentSessionID), not only card chosen it for a first
	// turn: a chosen id whose turn failed before the CLI said anything is
	// let go, or every later turn would resume a session that never began.
	confirmed bool
	// warm is the session's warm agent, nil when it has none; the warm
	// pool's mutex guards it.
	warm *warmAgent
	// pending are the session's own events waiting for the running turn's
	// end (see pendingNote).
	pending []pendingNote
	// trimmed says params lacks its system prompt, which stays in the
	// store (fullParamsLocked): it is read when a turn is planned, not held
	// between turns.
	trimmed bool
	// iso is an isolated session's worktree; nil for a session that runs
	// in its cwd.
	iso *isolation
}

// keptSystemPrompt is the longest system prompt a session keeps in memory
// between turns; a longer one is read from the store for each turn.
const keptSystemPrompt = 1 << 10

func (s *session) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// settleLocked waits, with s.mu held, until a turn whose run has ended is
// recorded on the session. The run's terminal event reaches subscribers
// just before awaitTurn adds the turn's spending and state, and a client
// that read that event and then asks for the session, or sends the next
// prompt, must find the turn counted: its cost in the totals and caps, the
// session idle rather than the prompt queued behind a turn that is over.
// Recording takes a store write or two; should it take longer than
// settleWait, or ctx end first, the answer is what is recorded so far.
func (s *session) settleLocked(ctx context.Context) {
	if s.current == nil || !s.current.Ended() {
		return
	}
	timer := time.NewTimer(settleWait)
	defer timer.Stop()
	for s.current != nil && s.current.Ended() {
		ch := s.changed
		s.mu.Unlock()
		var late bool
		select {
		case <-ch:
		case <-ctx.Done():
			late = true
		case <-timer.C:
			late = true
		}
		s.mu.Lock()
		if late {
			return
		}
	}
}

// settleWait bounds how long a read or a prompt waits for an ended turn to
// be recorded (settleLocked).
const settleWait = 2 * time.Second

func (s *session) closed() bool { return s.row.State == string(api.SessionClosed) }

func newSession(row store.Session, p api.SessionStartParams) *session {
	s := &session{row: row, changed: make(chan struct{}), always: runs.NewAlways(),
		watchers: map[uint64]runs.Asker{}, unwatch: map[uint64]func(){}}
	s.keepParams(p)
	return s
}

// keepParams holds p as the session's params, without a long system
// prompt, which the store keeps.
func (s *session) keepParams(p api.SessionStartParams) {
	s.trimmed = len(p.SystemPrompt) > keptSystemPrompt
	if s.trimmed {
		p.SystemPrompt = ""
	}
	s.params = p
}

// fullParamsLocked are the session's params whole, its system prompt read
// back from the store when it was too long to keep.
func (m *Manager) fullParamsLocked(s *session) (api.SessionStartParams, error) {
	if !s.trimmed {
		return s.params, nil
	}
	raw, err := m.st.SessionParams(context.Background(), s.row.ID)
	if err != nil {
		return api.SessionStartParams{}, err
	}
	var p api.SessionStartParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return api.SessionStartParams{}, fmt.Errorf("session %s: its params could not be read: %w", s.row.ID, err)
	}
	return p, nil
}

// lookup is an open session, or the error for an unknown or closed one.
// An open session not in memory (a restart loads none) is loaded now.
func (m *Manager) lookup(ctx context.Context, id string) (*session, error) {
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s != nil {
		return s, nil
	}
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	m.mu.Lock()
	s = m.live[id]
	m.mu.Unlock()
	if s != nil {
		return s, nil
	}
	row, err := m.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrSessionNotFound) {
		return nil, &NotFoundError{SessionID: id}
	}
	if err != nil {
		return nil, err
	}
	if row.State == string(api.SessionClosed) {
		return nil, &ClosedError{SessionID: id, Reason: row.CloseReason}
	}
	if s, err = m.load(ctx, row); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil, runs.ErrShuttingDown
	}
	m.live[id] = s
	m.mu.Unlock()
	return s, nil
}

func (m *Manager) isClosing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closing
}

// saveLocked writes the session's row; a failure is logged, the session
// goes on in memory.
func (m *Manager) saveLocked(s *session) {
	var q []*queued
	q = append(q, s.queue...)
	raw, _ := json.Marshal(q)
	if q == nil {
		raw = []byte("[]")
	}
	s.row.Queue = raw
	s.row.UpdatedAt = time.Now().UTC().Truncate(time.Millisecond)
	if err := m.st.UpdateSession(context.Background(), s.row); err != nil {
		m.log.Error("could not record a session's state", zap.String("session_id", s.row.ID), zap.Error(err))
	}
}

// Shutdown refuses new sessions, turns and warm agents. The running turns
// are the run subsystem's to end (recorded interrupted); their waiters
// record the queued prompts refused. Call it before the run subsystem's
// Shutdown, and Wait after it: the warm agents must outlive their turns'
// ends, or a turn sees its agent killed (and is recorded failed, with the
// agent's exit status) before its run is told the daemon is stopping.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	m.stopSweeping()
	m.warm.refuse()
}

// Wait ends the warm agents, now that the run subsystem has ended every
// turn, and waits for the turn waiters to finish recording.
func (m *Manager) Wait(ctx context.Context) {
	m.warm.shutdown()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Params are a session's start params (as stored, cwd resolved, as
// sessions.configure left them).
func (m *Manager) Params(ctx context.Context, id string) (api.SessionStartParams, error) {
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return m.fullParamsLocked(s)
	}
	raw, err := m.st.SessionParams(ctx, id)
	if errors.Is(err, store.ErrSessionNotFound) {
		return api.SessionStartParams{}, &NotFoundError{SessionID: id}
	}
	if err != nil {
		return api.SessionStartParams{}, err
	}
	var p api.SessionStartParams
	err = json.Unmarshal(raw, &p)
	return p, err
}

// Owner is who started the session: its web origin, or "" for a native
// client.
func (m *Manager) Owner(ctx context.Context, id string) (string, error) {
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s != nil {
		return s.row.Owner, nil // it never changes
	}
	row, err := m.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrSessionNotFound) {
		return "", &NotFoundError{SessionID: id}
	}
	if err != nil {
		return "", err
	}
	return row.Owner, nil
}
