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
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/spawn"
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
	// CloseIdle closes a session that had no turn, and no change, for this
	// long (zero: never); PruneClosed deletes a session closed this long
	// ago (zero: never), its turns staying runs of the history.
	CloseIdle   time.Duration
	PruneClosed time.Duration
	// SweepEvery is how often idle sessions are closed and old ones
	// pruned (default an hour).
	SweepEvery time.Duration
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
	Log    *zap.Logger
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
	m := &Manager{deps: deps, cfg: cfg, st: deps.Store, log: deps.Log, live: map[string]*session{}}
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

// Start records a new session; nothing runs until its first prompt (or,
// with p.Warm, its warm agent starts at once). p is validated by the
// daemon; ancestry is the chain the guard seeded once for the session;
// owner is the web origin that starts it, "" for a native client.
func (m *Manager) Start(ctx context.Context, p api.SessionStartParams, ancestry []string, owner string) (api.Session, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return api.Session{}, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	row := store.Session{
		CreatedAt: now, UpdatedAt: now,
		ID: m.st.NewSessionID(), Adapter: p.ID, State: string(api.SessionIdle), Cwd: p.Cwd, PermissionMode: p.PermissionMode,
		Model: p.Model, Effort: p.Effort, Params: raw, Ancestry: ancestry, NextSeq: 1, Owner: owner,
	}
	if row.PermissionMode == "" {
		row.PermissionMode = string(spawn.ModeReadOnly)
	}
	if spawn.CardNamesSession(p.ID) {
		// The CLI keeps the conversation where card says: its id is
		// card's from the start, so the first turn (or the warm agent
		// started now) already writes the file every later turn resumes.
		row.AgentSessionID = uuid.NewString()
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return api.Session{}, runs.ErrShuttingDown
	}
	m.mu.Unlock()
	m.startMu.Lock()
	if err := m.boundLocked(ctx, owner); err != nil {
		m.startMu.Unlock()
		return api.Session{}, err
	}
	err = m.st.CreateSession(context.WithoutCancel(ctx), row)
	m.startMu.Unlock()
	if err != nil {
		return api.Session{}, err
	}
	row.Params = nil
	s := newSession(row, p)
	m.mu.Lock()
	m.live[row.ID] = s
	m.mu.Unlock()
	m.log.Info("session started", zap.String("session_id", row.ID), zap.String("adapter", p.ID), zap.String("mode", row.PermissionMode),
		zap.Strings("ancestry", ancestry))
	if p.Warm {
		m.warmAtStart(s, p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return m.viewLocked(s), nil
}

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

// boundLocked refuses a new session past MaxOpen or MaxOpenPerOwner, with
// startMu held.
func (m *Manager) boundLocked(ctx context.Context, owner string) error {
	if m.cfg.MaxOpen <= 0 && m.cfg.MaxOpenPerOwner <= 0 {
		return nil
	}
	all, owned, err := m.st.CountOpenSessions(ctx, owner)
	if err != nil {
		return err
	}
	if m.cfg.MaxOpen > 0 && all >= m.cfg.MaxOpen {
		return &TooManySessionsError{Open: all, Max: m.cfg.MaxOpen, Key: "max_open"}
	}
	if m.cfg.MaxOpenPerOwner > 0 && owned >= m.cfg.MaxOpenPerOwner {
		return &TooManySessionsError{Open: owned, Max: m.cfg.MaxOpenPerOwner, Key: "max_open_per_origin", Owner: owner}
	}
	return nil
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

// Prompt is one turn: it starts at once when the session is idle, else it
// waits in the queue. from is the prompting connection.
func (m *Manager) Prompt(ctx context.Context, p api.SessionPromptParams, from Sender) (api.SessionPromptResult, error) {
	s, err := m.lookup(ctx, p.SessionID)
	if err != nil {
		return api.SessionPromptResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked(ctx)
	if s.closed() {
		return api.SessionPromptResult{}, &ClosedError{SessionID: s.row.ID, Reason: s.row.CloseReason}
	}
	if err := s.capLocked(); err != nil {
		return api.SessionPromptResult{}, err
	}
	q := &queued{task: p.Task, atts: p.Attachments, sender: from, QueuedAt: time.Now().UTC().Truncate(time.Millisecond),
		TaskBytes: len(p.Task), Attachments: len(p.Attachments)}
	if s.current != nil {
		waiting := s.waitingLocked()
		if len(waiting) >= m.cfg.MaxQueue {
			return api.SessionPromptResult{}, &QueueFullError{SessionID: s.row.ID, Queued: len(waiting), Max: m.cfg.MaxQueue}
		}
		// Judge the prompt now, so a bad one is answered now rather than
		// refused later with nobody to tell.
		full, err := m.fullParamsLocked(s)
		if err != nil {
			return api.SessionPromptResult{}, err
		}
		if _, err := m.deps.Planner.Check(full, p.Task, p.Attachments, plan.Continue{}); err != nil {
			return api.SessionPromptResult{}, err
		}
		s.row.Turns++
		q.Turn = s.row.Turns
		s.queue = append(s.queue, q)
		m.saveLocked(s)
		pos := len(waiting) + 1
		m.deps.Runs.Note(s.current.ID(), api.EventPromptQueued, api.AgentEvent{Queued: &api.QueuedPrompt{
			Turn: q.Turn, Position: pos, QueuedAt: q.QueuedAt, TaskBytes: q.TaskBytes, Attachments: q.Attachments}})
		m.log.Info("session prompt queued", zap.String("session_id", s.row.ID), zap.Int("turn", q.Turn), zap.Int("position", pos))
		return api.SessionPromptResult{SessionID: s.row.ID, Turn: q.Turn, Queued: true, Position: pos}, nil
	}
	q.Turn = s.row.Turns + 1
	run, err := m.startLocked(ctx, s, q, false)
	if err != nil {
		return api.SessionPromptResult{}, err
	}
	return api.SessionPromptResult{SessionID: s.row.ID, Turn: q.Turn, RunID: run.ID()}, nil
}

// waitingLocked are the queued prompts still to run, in order.
func (s *session) waitingLocked() []*queued {
	var out []*queued
	for _, q := range s.queue {
		if q.Dropped == "" {
			out = append(out, q)
		}
	}
	return out
}

// capLocked refuses a prompt once the session has spent a cap.
func (s *session) capLocked() error {
	if c := s.params.MaxCostUSD; c != nil && s.spentUSD >= *c {
		return &CapError{SessionID: s.row.ID, Cap: "max_cost_usd", Limit: *c, Spent: s.spentUSD}
	}
	if c := s.params.MaxTokens; c != nil && s.spentTokens >= *c {
		return &CapError{SessionID: s.row.ID, Cap: "max_tokens", Limit: float64(*c), Spent: float64(s.spentTokens)}
	}
	return nil
}

// startLocked starts q as the session's next turn. dequeued says q came
// from the queue (its turn number is already taken). A start the gate
// refuses is recorded as a refused run of the turn; one refused before
// anything was recorded (bad params) takes no turn number unless dequeued,
// in which case it is recorded refused here, since nobody else will hear.
func (m *Manager) startLocked(ctx context.Context, s *session, q *queued, dequeued bool) (*runs.Run, error) {
	p, err := m.fullParamsLocked(s)
	if err != nil {
		if dequeued {
			m.refuseTurnLocked(s, q.Turn, "the queued prompt could not be started: "+err.Error())
		}
		return nil, err
	}
	if c := p.MaxCostUSD; c != nil {
		left := *c - s.spentUSD
		p.MaxCostUSD = &left
	}
	if c := p.MaxTokens; c != nil {
		left := *c - s.spentTokens
		p.MaxTokens = &left
	}
	t, chosen, warmOnly, err := m.prepareTurn(s, p, q)
	if err != nil {
		if dequeued {
			m.refuseTurnLocked(s, q.Turn, "the queued prompt could not be started: "+err.Error())
		}
		return nil, err
	}
	req := t.Run
	req.CardSessionID, req.SessionTurn, req.SessionSeqBase = s.row.ID, q.Turn, s.row.NextSeq-1
	req.Ancestry = s.row.Ancestry
	if req.Ancestry == nil {
		req.Ancestry = []string{}
	}
	req.AskAll, req.Always = true, s.always
	if q.sender.NoStandingAnswers {
		req.Always = s.always.Scoped()
	}
	req.Asker, req.Conn = q.sender.Asker, q.sender.Conn
	req.Exec = m.execFor(s, t.Spawn, warmOnly)
	run, err := m.deps.Runs.Start(context.WithoutCancel(ctx), req)
	if err != nil {
		var refused *runs.RefusedError
		if errors.As(err, &refused) {
			// The gate recorded the turn refused: its one event says why.
			m.addRefusalEvent(s, refused.RunID, q.Turn, refused.Error())
			s.row.Turns = max(s.row.Turns, q.Turn)
			m.saveLocked(s)
			s.notifyLocked()
		} else if dequeued {
			m.refuseTurnLocked(s, q.Turn, "the queued prompt could not be started: "+err.Error())
		}
		return nil, err
	}
	s.row.Turns = max(s.row.Turns, q.Turn)
	s.row.State = string(api.SessionRunning)
	if chosen != "" {
		s.row.AgentSessionID = chosen
	}
	s.current = run
	s.turns = append(s.turns, turnRef{turn: q.Turn, runID: run.ID(), base: req.SessionSeqBase})
	for id, a := range s.watchers {
		s.unwatch[id] = m.deps.Runs.Watch(run.ID(), a)
	}
	m.saveLocked(s)
	s.notifyLocked()
	m.wg.Add(1)
	go m.awaitTurn(s, run, req.SessionSeqBase)
	return run, nil
}

// prepareTurn plans q's turn: resuming the CLI session the conversation
// has, or for its first turn under a session id card chooses, where the
// adapter's CLI takes one (chosen says which; "" when the CLI picks its
// own, reported when the turn ends). warmOnly says the conversation can
// go on only over the session's warm agent, which holds it: the CLI
// cannot resume it cold (Gemini's ask channel).
func (m *Manager) prepareTurn(s *session, p api.SessionStartParams, q *queued) (t plan.Turn, chosen string, warmOnly bool, err error) {
	var fe *spawn.FieldError
	if s.row.AgentSessionID != "" {
		t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, plan.Continue{Resume: s.row.AgentSessionID, UsageBase: s.reported})
		if errors.As(err, &fe) && fe.Field == "resume" && m.warm.holds(s) {
			// The plan is the cold fallback's, which this turn never
			// takes: a new process would start a new conversation.
			t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, plan.Continue{})
			return t, "", err == nil, err
		}
		return t, "", false, err
	}
	if m.canWarm(s.row.Adapter) {
		// A warm agent's CLI names its own session and reports it (over
		// ACP, session/new takes no id), and the turn's result carries it.
		t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, plan.Continue{})
		return t, "", false, err
	}
	id := uuid.NewString()
	t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, plan.Continue{SessionID: id})
	if errors.As(err, &fe) && fe.Field == "session_id" {
		t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, plan.Continue{})
		return t, "", false, err
	}
	return t, id, false, err
}

// refuseTurnLocked records turn as a refused run of the session with its
// one event, for a prompt that never ran (dropped from the queue, or one
// the gate refused when its turn came).
func (m *Manager) refuseTurnLocked(s *session, turn int, reason string) {
	ctx := context.Background()
	rec := store.Run{RunID: m.st.NewRunID(), Adapter: s.row.Adapter, Status: store.StatusRefused, RefusalReason: reason,
		Ancestry: s.row.Ancestry, Cwd: s.row.Cwd, PermissionMode: s.row.PermissionMode, Model: s.row.Model,
		CardSessionID: s.row.ID, SessionTurn: turn, SessionSeqBase: s.row.NextSeq - 1}
	if err := m.st.Create(ctx, rec); err != nil {
		m.log.Error("could not record a session's refused turn", zap.String("session_id", s.row.ID), zap.Int("turn", turn), zap.Error(err))
		return
	}
	m.addRefusalEvent(s, rec.RunID, turn, reason)
	s.row.Turns = max(s.row.Turns, turn)
	m.saveLocked(s)
	s.notifyLocked()
}

// addRefusalEvent stores a refused turn's one event (an error event with
// status refused) and numbers it next in the session's stream.
func (m *Manager) addRefusalEvent(s *session, runID string, turn int, reason string) {
	base := s.row.NextSeq - 1
	ev := api.AgentEvent{RunID: runID, Seq: 1, Event: api.Event{Kind: api.EventRunError, Error: reason}, Status: store.StatusRefused,
		Result: &api.InvokeResult{RunID: runID, Adapter: s.row.Adapter, Ancestry: s.row.Ancestry, Status: store.StatusRefused,
			Result: api.Result{IsError: true, Error: &api.RunError{Kind: "refused", Message: reason}}}}
	raw, _ := json.Marshal(ev)
	if err := m.st.AppendEvent(context.Background(), runID, 1, api.EventRunError, raw); err != nil {
		m.log.Error("could not record a refused turn's event", zap.String("run_id", runID), zap.Error(err))
		return
	}
	s.turns = append(s.turns, turnRef{turn: turn, runID: runID, base: base, last: 1})
	s.row.NextSeq = base + 2
}

// awaitTurn waits for a turn's end, records it on the session, and starts
// the next queued prompt.
func (m *Manager) awaitTurn(s *session, run *runs.Run, base int64) {
	defer m.wg.Done()
	<-run.Done()
	res, _ := run.Wait(context.Background())
	s.mu.Lock()
	defer s.mu.Unlock()
	last := run.LastSeq()
	turn := 0
	for i := range s.turns {
		if s.turns[i].runID == run.ID() {
			s.turns[i].last, turn = last, s.turns[i].turn
		}
	}
	s.row.NextSeq = base + last + 1
	for _, n := range s.pending {
		m.addNoteLocked(s, turn, n.kind, n.ev)
	}
	s.pending = nil
	switch {
	case res.SessionID != "":
		if res.SessionID != s.row.AgentSessionID {
			// Another CLI session: the totals of the one before are not
			// its base.
			s.reported = api.Usage{}
		}
		s.row.AgentSessionID, s.confirmed = res.SessionID, true
	case !s.confirmed && res.Status != store.StatusSucceeded && !spawn.CardNamesSession(s.row.Adapter):
		// A session card named is kept: the file is card's to name, and
		// the CLI starts it whenever a turn first gets that far.
		s.row.AgentSessionID = ""
		s.reported = api.Usage{}
	}
	if res.SessionUsage != nil {
		s.reported = *res.SessionUsage
	}
	s.addSpentLocked(res.Result)
	s.current = nil
	for id, stop := range s.unwatch {
		stop()
		delete(s.unwatch, id)
	}
	if !s.closed() {
		s.row.State = string(api.SessionIdle)
	}
	m.saveLocked(s)
	s.notifyLocked()
	m.nextLocked(s)
}

func (s *session) addSpentLocked(r api.Result) {
	if r.CostUSD != nil {
		s.spentUSD += *r.CostUSD
	}
	s.spentTokens += r.Usage.InputTokens + r.Usage.OutputTokens
	s.usage.InputTokens += r.Usage.InputTokens
	s.usage.OutputTokens += r.Usage.OutputTokens
	s.usage.CachedInputTokens += r.Usage.CachedInputTokens
}

// nextLocked starts the next queued prompt, recording the dropped ones
// ahead of it as refused turns, while no turn runs.
func (m *Manager) nextLocked(s *session) {
	for s.current == nil && len(s.queue) > 0 {
		q := s.queue[0]
		s.queue = s.queue[1:]
		if q.Dropped == "" && !s.closed() {
			if err := s.capLocked(); err != nil {
				q.Dropped = err.Error()
			}
		}
		if q.Dropped == "" && m.isClosing() {
			q.Dropped = "card shut down before this queued prompt ran; send it again"
		}
		if q.Dropped == "" && q.sender.Judge != nil {
			// The session may have changed since the prompt was queued
			// (sessions.configure): its sender must still be one that may
			// prompt it as it is now.
			if p, err := m.fullParamsLocked(s); err != nil {
				q.Dropped = "the queued prompt could not be judged when its turn came: " + err.Error()
			} else if err := q.sender.Judge(p); err != nil {
				q.Dropped = "refused when its turn came, under the session's settings then: " + err.Error()
			}
		}
		if q.Dropped != "" {
			m.refuseTurnLocked(s, q.Turn, q.Dropped)
			continue
		}
		if _, err := m.startLocked(context.Background(), s, q, true); err != nil {
			m.log.Warn("a session's queued prompt was refused when its turn came", zap.String("session_id", s.row.ID),
				zap.Int("turn", q.Turn), zap.Error(err))
		}
	}
	m.saveLocked(s)
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

// Cancel ends the session's running turn and, with ClearQueue, drops its
// queued prompts (each recorded as a refused turn).
func (m *Manager) Cancel(ctx context.Context, p api.SessionCancelParams) (api.SessionCancelResult, error) {
	s, err := m.lookup(ctx, p.SessionID)
	if err != nil {
		return api.SessionCancelResult{}, err
	}
	s.mu.Lock()
	res := api.SessionCancelResult{SessionID: s.row.ID}
	if p.ClearQueue {
		for _, q := range s.waitingLocked() {
			q.Dropped = "cleared by sessions.cancel with clear_queue before it ran"
			res.Cleared++
		}
		m.saveLocked(s)
	}
	run := s.current
	s.mu.Unlock()
	if run == nil {
		res.Reason = "no turn is running in session " + p.SessionID
		return res, nil
	}
	cr, err := m.deps.Runs.Cancel(ctx, run.ID())
	if err != nil {
		return res, err
	}
	res.Cancelled, res.RunID, res.Reason = cr.Cancelled, run.ID(), cr.Reason
	return res, nil
}

// Close ends the session: its running turn is cancelled, its queued
// prompts dropped (recorded as refused turns), its warm agent ended. A
// closed session keeps its history and takes no more prompts.
func (m *Manager) Close(ctx context.Context, id, reason string) (api.Session, error) {
	s, err := m.lookup(ctx, id)
	var closed *ClosedError
	if errors.As(err, &closed) {
		return m.Get(ctx, id)
	}
	if err != nil {
		return api.Session{}, err
	}
	s.mu.Lock()
	if reason == "" {
		reason = "closed by sessions.close"
	}
	for _, q := range s.waitingLocked() {
		q.Dropped = "the session was closed before this queued prompt ran"
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	s.row.State, s.row.ClosedAt, s.row.CloseReason = string(api.SessionClosed), &now, reason
	run := s.current
	m.saveLocked(s)
	s.notifyLocked()
	s.mu.Unlock()
	if run != nil {
		_, _ = m.deps.Runs.Cancel(ctx, run.ID())
		select {
		case <-run.Done():
		case <-ctx.Done():
		}
	}
	m.warm.end(s, "the session closed")
	// The turn's waiter records the dropped prompts; wait until it has.
	s.mu.Lock()
	for s.current != nil || len(s.queue) > 0 {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return api.Session{}, ctx.Err()
		}
		s.mu.Lock()
	}
	m.saveLocked(s)
	view := m.viewLocked(s)
	s.mu.Unlock()
	m.mu.Lock()
	delete(m.live, id)
	m.mu.Unlock()
	m.log.Info("session closed", zap.String("session_id", id), zap.String("reason", reason))
	return view, nil
}

// Get is one session as the wire shows it.
func (m *Manager) Get(ctx context.Context, id string) (api.Session, error) {
	m.mu.Lock()
	s := m.live[id]
	m.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.settleLocked(ctx)
		return m.viewLocked(s), nil
	}
	row, err := m.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrSessionNotFound) {
		return api.Session{}, &NotFoundError{SessionID: id}
	}
	if err != nil {
		return api.Session{}, err
	}
	return m.viewOfRow(ctx, row)
}

// List is the sessions, newest first: every session for a native client
// (owner nil), and only its own for a web origin.
func (m *Manager) List(ctx context.Context, p api.SessionListParams, owner *string) (api.SessionList, error) {
	rows, err := m.st.ListSessions(ctx, store.SessionQuery{Adapter: p.Adapter, State: storedState(p.State), IncludeClosed: p.IncludeClosed, Limit: p.Limit,
		Owner: owner})
	if err != nil {
		return api.SessionList{}, err
	}
	out := api.SessionList{Sessions: []api.Session{}}
	for _, row := range rows {
		m.mu.Lock()
		s := m.live[row.ID]
		m.mu.Unlock()
		var v api.Session
		if s != nil {
			s.mu.Lock()
			s.settleLocked(ctx)
			v = m.viewLocked(s)
			s.mu.Unlock()
		} else if v, err = m.viewOfRow(ctx, row); err != nil {
			return api.SessionList{}, err
		}
		if p.State != "" && v.State != p.State {
			continue
		}
		out.Sessions = append(out.Sessions, v)
	}
	return out, nil
}

// storedState is the stored state a wire state filter reads: a turn
// waiting on a question is running in the store.
func storedState(s api.SessionState) string {
	if s == api.SessionWaitingApproval {
		return string(api.SessionRunning)
	}
	return string(s)
}

func (m *Manager) viewLocked(s *session) api.Session {
	v := viewOf(s.row)
	v.Turns = s.row.Turns
	v.Queue = []api.QueuedPrompt{}
	for i, q := range s.waitingLocked() {
		v.Queue = append(v.Queue, api.QueuedPrompt{Turn: q.Turn, Position: i + 1, QueuedAt: q.QueuedAt, TaskBytes: q.TaskBytes, Attachments: q.Attachments})
	}
	if s.current != nil {
		v.CurrentRunID = s.current.ID()
		v.State = api.SessionRunning
		if s.current.State() == api.StateWaitingApproval {
			v.State = api.SessionWaitingApproval
		}
		v.NextSeq = s.row.NextSeq + s.current.LastSeq()
	}
	if pid := m.warm.pidOf(s); pid > 0 {
		v.Warm, v.Pid = true, pid
	}
	v.TotalCostUSD, v.Usage = s.spentUSD, s.usage
	return v
}

func viewOf(row store.Session) api.Session {
	v := api.Session{SessionID: row.ID, Adapter: row.Adapter, State: api.SessionState(row.State), Cwd: row.Cwd,
		PermissionMode: row.PermissionMode, Model: row.Model, Effort: row.Effort, Ancestry: row.Ancestry, Turns: row.Turns, Queue: []api.QueuedPrompt{},
		AgentSessionID: row.AgentSessionID, NextSeq: row.NextSeq, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
		ClosedAt: row.ClosedAt, CloseReason: row.CloseReason, Origin: row.Owner}
	if v.Ancestry == nil {
		v.Ancestry = []string{}
	}
	return v
}

// viewOfRow is a session not in memory (closed): its spending is read from
// its turns.
func (m *Manager) viewOfRow(ctx context.Context, row store.Session) (api.Session, error) {
	v := viewOf(row)
	turns, err := m.st.SessionRuns(ctx, row.ID)
	if err != nil {
		return api.Session{}, err
	}
	for _, r := range turns {
		if r.TotalCostUSD != nil {
			v.TotalCostUSD += *r.TotalCostUSD
		}
		if r.Usage != nil {
			v.Usage.InputTokens += r.Usage.InputTokens
			v.Usage.OutputTokens += r.Usage.OutputTokens
			v.Usage.CachedInputTokens += r.Usage.CachedInputTokens
		}
	}
	return v, nil
}

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

// Configure gives the session new params for its next turns: p are its
// params with the change, judged by the daemon as sessions.start judges
// them. The turn running now keeps what it started with; the queued
// prompts run with p. A warm agent started with the old settings is ended
// now when idle, else when its turn ends, and the next turn starts its CLI
// anew, resuming the conversation by the id the last turn reported.
func (m *Manager) Configure(ctx context.Context, id string, p api.SessionStartParams) (api.SessionConfigureResult, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return api.SessionConfigureResult{}, err
	}
	s.mu.Lock()
	if s.closed() {
		s.mu.Unlock()
		return api.SessionConfigureResult{}, &ClosedError{SessionID: s.row.ID, Reason: s.row.CloseReason}
	}
	res := api.SessionConfigureResult{Changed: changedFields(s.params, p)}
	var retired *warmAgent
	if len(res.Changed) > 0 {
		raw, err := json.Marshal(p)
		if err != nil {
			s.mu.Unlock()
			return api.SessionConfigureResult{}, err
		}
		s.keepParams(p)
		s.row.PermissionMode, s.row.Model, s.row.Effort, s.row.Params = p.PermissionMode, p.Model, p.Effort, raw
		m.saveLocked(s)
		s.row.Params = nil
		res.WarmAgent, retired = m.warm.retire(s)
	}
	res.AppliesFromTurn = s.row.Turns + 1
	if s.current != nil {
		if n := len(s.turns); n > 0 {
			res.RunningTurn = s.turns[n-1].turn
		}
		if w := s.waitingLocked(); len(w) > 0 {
			res.AppliesFromTurn = w[0].Turn
		}
	}
	if len(res.Changed) > 0 {
		m.noteLocked(s, api.EventSessionConfigured, api.AgentEvent{Configured: &api.SessionConfigured{Changed: res.Changed,
			PermissionMode: s.row.PermissionMode, Model: s.row.Model, Effort: s.row.Effort, AppliesFromTurn: res.AppliesFromTurn}})
	}
	s.mu.Unlock()
	if retired != nil {
		m.log.Info("ended an idle warm agent started with settings its session no longer has", zap.String("session_id", id))
		m.warm.close(retired)
	}
	s.mu.Lock()
	res.Session = m.viewLocked(s)
	s.mu.Unlock()
	m.log.Info("session configured", zap.String("session_id", id), zap.Strings("changed", res.Changed),
		zap.String("mode", p.PermissionMode), zap.String("model", p.Model), zap.String("effort", p.Effort),
		zap.Int("applies_from_turn", res.AppliesFromTurn))
	return res, nil
}

// noteLocked adds an event of the session's own to its stream: on the
// running turn's stream while a turn runs (as a queued prompt's event
// goes), else between turns.
func (m *Manager) noteLocked(s *session, kind string, ev api.AgentEvent) {
	if s.current == nil {
		m.addNoteLocked(s, s.row.Turns, kind, ev)
		return
	}
	if !m.deps.Runs.Note(s.current.ID(), kind, ev) {
		// The turn is ending (its terminal event is out, or its stream
		// is full): its waiter adds the event once the end is numbered.
		s.pending = append(s.pending, pendingNote{kind: kind, ev: ev})
	}
}

// addNoteLocked stores an event of the session's own at the session's
// next seq, while no turn runs, and wakes its subscribers. It has no run:
// run_id is "" and the run seq 0.
func (m *Manager) addNoteLocked(s *session, turn int, kind string, ev api.AgentEvent) {
	ev.Kind, ev.RunID, ev.Seq = kind, "", 0
	raw, err := json.Marshal(ev)
	if err != nil {
		m.log.Error("could not encode a session's event", zap.String("session_id", s.row.ID), zap.String("kind", kind), zap.Error(err))
		return
	}
	seq := s.row.NextSeq
	if err := m.st.AppendSessionEvent(context.Background(), s.row.ID, store.SessionEvent{Seq: seq, Turn: turn, Kind: kind, Payload: raw}); err != nil {
		m.log.Error("could not record a session's event", zap.String("session_id", s.row.ID), zap.String("kind", kind), zap.Error(err))
		return
	}
	s.turns = append(s.turns, turnRef{turn: turn, base: seq - 1, last: 1, note: raw})
	s.row.NextSeq = seq + 1
	m.saveLocked(s)
	s.notifyLocked()
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

// changedFields names the configurable fields whose value differs.
func changedFields(was, now api.SessionStartParams) []string {
	out := []string{}
	if was.PermissionMode != now.PermissionMode {
		out = append(out, "permission_mode")
	}
	if was.Model != now.Model {
		out = append(out, "model")
	}
	if was.Effort != now.Effort {
		out = append(out, "effort")
	}
	return out
}

// Steer adds input to the running turn over its warm agent.
func (m *Manager) Steer(ctx context.Context, p api.SessionSteerParams) (api.SessionSteerResult, error) {
	s, err := m.lookup(ctx, p.SessionID)
	if err != nil {
		return api.SessionSteerResult{}, err
	}
	s.mu.Lock()
	run, turn := s.current, s.row.Turns
	adapter := s.row.Adapter
	s.mu.Unlock()
	w := m.warm.of(s)
	if run == nil {
		return api.SessionSteerResult{}, &SteerUnsupportedError{SessionID: p.SessionID, Adapter: adapter, Reason: "no turn is running"}
	}
	if w == nil || !w.turning(run.ID()) {
		return api.SessionSteerResult{}, &SteerUnsupportedError{SessionID: p.SessionID, Adapter: adapter,
			Reason: "the running turn is cold (a new process of the CLI, which reads its prompt once, on stdin)"}
	}
	st, ok := w.agent.(Steerer)
	if !ok {
		return api.SessionSteerResult{}, &SteerUnsupportedError{SessionID: p.SessionID, Adapter: adapter,
			Reason: "the adapter's CLI has no channel that takes input during a turn"}
	}
	if err := st.Steer(ctx, p.Task); err != nil {
		return api.SessionSteerResult{}, &SteerUnsupportedError{SessionID: p.SessionID, Adapter: adapter, Reason: err.Error()}
	}
	return api.SessionSteerResult{SessionID: p.SessionID, Turn: turn, RunID: run.ID(), Steered: true}, nil
}
