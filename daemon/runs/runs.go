// Package runs is card's run subsystem: it gates, records, starts and
// supervises agent runs, keeps each run's events in order (bounded), stores
// them, fans them out to subscribers, and cancels runs one by one or all at
// shutdown.
//
// It is built from narrow dependencies (Deps) rather than the daemon: where
// binaries are, the children's search path, the guard's snapshot, the run
// store, a config subset and a logger. It knows nothing of JSON-RPC: errors
// are typed (the daemon maps them onto codes) and events go to a subscriber
// through a Send function.
package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/spawn"
)

// killGrace is the SIGTERM→SIGKILL gap for runs: short enough that a cancel
// ends any run within 2 s even when the agent ignores SIGTERM.
const killGrace = 1500 * time.Millisecond

// Binaries resolves an adapter to the binary a run starts, with detection's
// facts about it (read-only enforcement), or a typed error
// (*detect.NotInstalledError, *detect.UnusableError). The daemon's
// *detect.Detector is one.
type Binaries interface {
	Binary(ctx context.Context, id string) (string, api.ExternalAgentSpec, error)
}

// Config is the part of card.toml the run subsystem reads.
type Config struct {
	// MaxConcurrentRuns bounds the children running at once; a run over it
	// is refused, never queued.
	MaxConcurrentRuns int
	// MaxEventsPerRun bounds the events kept (sent and stored) per run,
	// besides the terminal one.
	MaxEventsPerRun int
	// MaxOutputBytes bounds what one child may print.
	MaxOutputBytes int64
	// AllowBypass lets a run use permission_mode bypass.
	AllowBypass bool
	// RecordTasks keeps the task text, at most its first
	// MaxTaskRecordBytes bytes, and the attachments' names in the run
	// history.
	RecordTasks        bool
	MaxTaskRecordBytes int
	// CancelOnDisconnect ends a run when the connection that asked for it
	// ends (Request.Conn).
	CancelOnDisconnect bool
	// MaxSubscriberQueueBytes cuts off a subscriber that has more than this
	// many bytes of the run's new events yet to be sent (0: never).
	MaxSubscriberQueueBytes int64
	// Retention bounds the run history (MaxRuns, MaxAge); the manager
	// prunes at start, every PruneEvery, and once that many runs were
	// recorded since the last prune (a burst of refused invokes).
	Retention  store.Retention
	PruneEvery time.Duration
	// ImageMemory bounds the image bytes runs hold in memory at once
	// (spawn.RunSpec.ImageMemory); nil: no bound.
	ImageMemory *spawn.Budget
	// Budgets are the daily and monthly spending limits a start is checked
	// against.
	Budgets Budgets
}

// Deps is what the run subsystem needs from the daemon, and no more.
type Deps struct {
	Store    *store.Store
	Binaries Binaries
	// Guard is the ancestry the daemon read once at startup.
	Guard guard.Snapshot
	// Env is the environment read once at startup, the base of every
	// child's environment.
	Env map[string]string
	// PATH is the resolved search path children get (a supervisor-started
	// daemon's own PATH would not find node). It is asked at every start:
	// the login shell's part of it arrives after the daemon is up.
	PATH func() string
	Log  *zap.Logger
}

// Manager owns the live runs: the concurrency slots, each run's event log
// and its cancel, and the store.
type Manager struct {
	deps  Deps
	cfg   Config
	store *store.Store
	log   *zap.Logger

	mu sync.Mutex
	// live holds runs until their last event is stored; running counts the
	// children still going, which is what MaxConcurrentRuns bounds.
	live    map[string]*Run
	running int
	closing bool
	wg      sync.WaitGroup // one per live run

	// budgetMu orders the budget gate's reads of the history and the
	// reservations of runs in flight against each run's end; it is taken
	// before mu, never inside it. reserved holds each run in flight's
	// reservation, let go once its outcome is stored.
	budgetMu sync.Mutex
	reserved map[string]reservation

	// rateLimits is the latest rate-limit window each adapter reported.
	rateLimits rateLimitBook

	// The pruner: recorded counts runs written since the last prune, and
	// a burst past pruneAfter kicks a prune before the ticker would.
	recorded   atomic.Int64
	pruneAfter int64
	pruneKick  chan struct{}
	pruneStop  chan struct{}
	pruneDone  chan struct{}

	// finishing, when set, is called for each run between its terminal
	// event reaching its log and its outcome being answered
	// (SetFinishingHook).
	finishing atomic.Pointer[func(runID string)]
}

// New returns a manager; it starts nothing.
func New(deps Deps, cfg Config) *Manager {
	if deps.Log == nil {
		deps.Log = zap.NewNop()
	}
	m := &Manager{deps: deps, cfg: cfg, store: deps.Store, log: deps.Log, live: map[string]*Run{}, reserved: map[string]reservation{}, pruneKick: make(chan struct{}, 1)}
	if n := cfg.Retention.MaxRuns; n > 0 {
		m.pruneAfter = int64(min(max(n/10, 10), 1000))
	}
	return m
}

// Store is the run history the manager writes.
func (m *Manager) Store() *store.Store { return m.store }

// Prune applies r to the history now, keeping every run the manager still
// holds (running, or ended with events still being stored).
func (m *Manager) Prune(ctx context.Context, r store.Retention) (api.Pruned, error) {
	r.Keep = func(id string) bool { return m.lookup(id) != nil }
	return m.store.Prune(ctx, r)
}

// StartPruning prunes the history to the configured retention now, in the
// background, then every PruneEvery and whenever a burst of runs was
// recorded, until Shutdown. A history with no retention is never pruned.
func (m *Manager) StartPruning() {
	r := m.cfg.Retention
	if r.MaxRuns == 0 && r.MaxAge == 0 {
		return
	}
	every := m.cfg.PruneEvery
	if every <= 0 {
		every = 10 * time.Minute
	}
	m.pruneStop, m.pruneDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.pruneDone)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			m.pruneOnce(r)
			select {
			case <-m.pruneKick:
			case <-tick.C:
			case <-m.pruneStop:
				return
			}
		}
	}()
}

func (m *Manager) pruneOnce(r store.Retention) {
	m.recorded.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	res, err := m.Prune(ctx, r)
	if err != nil {
		m.log.Warn("could not prune the run history", zap.Error(err))
		return
	}
	if res.Runs > 0 {
		m.log.Info("pruned the run history", zap.Int64("runs", res.Runs), zap.Int64("events", res.Events),
			zap.Int64("kept", res.Kept), zap.Duration("took", time.Since(start)))
	}
}

// noteRecorded counts a run written to the history and kicks the pruner
// once a burst passes pruneAfter.
func (m *Manager) noteRecorded() {
	if m.pruneAfter > 0 && m.recorded.Add(1) >= m.pruneAfter {
		select {
		case m.pruneKick <- struct{}{}:
		default:
		}
	}
}

// EndLeftovers records the runs a previous daemon left running as
// interrupted and ends their process groups where they are provably that
// run's. Rows left running were left by a daemon that died mid-run; nobody
// will finish them, and their groups may still be alive (a grandchild
// survives its leader even on Linux).
func (m *Manager) EndLeftovers(ctx context.Context) error {
	left, err := m.store.InterruptRunning(ctx, "card stopped before this run ended (the daemon was killed or crashed)")
	if err != nil {
		return err
	}
	for _, r := range left {
		if err := m.endEvent(ctx, r); err != nil {
			m.log.Warn("could not record the end of a run a previous daemon left running", zap.String("run_id", r.RunID), zap.Error(err))
		}
		n := endLeftoverGroup(r.Pgid, r.RunID)
		m.log.Warn("a run was left running by a previous daemon; recorded it as interrupted",
			zap.String("run_id", r.RunID), zap.String("adapter", r.Adapter), zap.Int("pgid", r.Pgid), zap.Int("processes_ended", n))
	}
	return nil
}

// endEvent records the terminal event a run left running never got: a
// client that follows the run again after the restart (runs.subscribe with
// the last seq it saw) is promised that its stream ends with done or
// error, and without this event it would wait for ever. It takes the seq
// after the last one stored; events the dead daemon had not stored yet
// died with it.
func (m *Manager) endEvent(ctx context.Context, r api.Run) error {
	last, err := m.store.LastSeq(ctx, r.RunID)
	if err != nil {
		return err
	}
	res := api.InvokeResult{RunID: r.RunID, Adapter: r.Adapter, Ancestry: r.Ancestry, Status: api.StatusInterrupted}
	res.IsError, res.Error, res.SessionID, res.Answer = true, r.Error, r.SessionID, r.Answer
	res.Turns, res.ToolCalls, res.CostUSD = r.Turns, r.ToolCalls, r.TotalCostUSD
	if r.DurationMs != nil {
		res.DurationMs = *r.DurationMs
	}
	if r.Usage != nil {
		res.Usage = *r.Usage
	}
	ev := api.AgentEvent{RunID: r.RunID, Seq: last + 1, Event: api.Event{Kind: api.EventRunError, Error: res.Reason()}, Status: api.StatusInterrupted, Result: &res}
	raw, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return m.store.AppendEvent(ctx, r.RunID, ev.Seq, api.EventRunError, raw)
}

// Get is one recorded run with its approvals, or *NotFoundError.
func (m *Manager) Get(ctx context.Context, id string) (api.RunRecord, error) {
	run, err := m.store.Get(ctx, id)
	if err != nil {
		return api.RunRecord{}, notFound(id, err)
	}
	rec := api.RunRecord{Run: m.withState(run)}
	if run.PermissionMode == string(spawn.ModeAsk) {
		var total int
		if rec.Approvals, total, err = m.approvalsOf(ctx, id); err != nil {
			return api.RunRecord{}, err
		}
		if total > len(rec.Approvals) {
			rec.ApprovalsTruncated, rec.ApprovalsTotal = true, total
		}
	}
	return rec, nil
}

// List is the run history, newest first (never nil).
func (m *Manager) List(ctx context.Context, q store.ListQuery) ([]api.Run, error) {
	runs, err := m.store.List(ctx, q)
	if runs == nil && err == nil {
		runs = []api.Run{}
	}
	for i := range runs {
		runs[i] = m.withState(runs[i])
	}
	return runs, err
}

// withState is run with its live state, while it is running: the state is
// never stored, since it means nothing once the run has ended.
func (m *Manager) withState(run api.Run) api.Run {
	if run.Status != api.StatusRunning {
		return run
	}
	if lr := m.lookup(run.RunID); lr != nil && !lr.log.isEnded() {
		run.State = lr.State()
	}
	return run
}

// Cancel ends a live run and waits for its outcome to be recorded. A run
// that already ended is a no-op answer saying so.
func (m *Manager) Cancel(ctx context.Context, id string) (api.CancelResult, error) {
	lr := m.lookup(id)
	if lr == nil {
		run, err := m.store.Get(ctx, id)
		if err != nil {
			return api.CancelResult{}, notFound(id, err)
		}
		return api.CancelResult{RunID: id, Status: run.Status,
			Reason: fmt.Sprintf("run %s already ended with status %s; nothing to cancel", id, run.Status)}, nil
	}
	select {
	case <-lr.finished:
		// Ended, its events still being stored: nothing to cancel.
		return api.CancelResult{RunID: id, Status: lr.result.Status,
			Reason: fmt.Sprintf("run %s already ended with status %s; nothing to cancel", id, lr.result.Status)}, nil
	default:
	}
	lr.cancel(ErrCancelled)
	select {
	case <-lr.finished:
	case <-ctx.Done():
		return api.CancelResult{}, ctx.Err()
	}
	res := api.CancelResult{RunID: id, Status: lr.result.Status, Cancelled: lr.result.Status == api.StatusCancelled}
	if !res.Cancelled {
		res.Reason = fmt.Sprintf("run %s ended with status %s before the cancel took effect", id, res.Status)
	}
	return res, nil
}

func (m *Manager) lookup(id string) *Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}

// Shutdown refuses new runs, cancels every live one with ErrShutdown
// (recorded interrupted) and waits for their groups to end and their
// outcomes and events to be written. Subscriptions belong to their
// connections, which the daemon closes before this.
func (m *Manager) Shutdown(ctx context.Context) {
	if m.pruneStop != nil {
		close(m.pruneStop)
		<-m.pruneDone
		m.pruneStop = nil
	}
	m.mu.Lock()
	m.closing = true
	runs := make([]*Run, 0, len(m.live))
	for _, lr := range m.live {
		runs = append(runs, lr)
	}
	m.mu.Unlock()
	for _, lr := range runs {
		lr.cancel(ErrShutdown)
	}
	if len(runs) > 0 {
		m.log.Info("ending running agents for shutdown", zap.Int("runs", len(runs)))
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		// Runs end within killGrace of their cancel; give them that even
		// past the grace period, or a child would outlive the daemon.
		select {
		case <-done:
		case <-time.After(3 * killGrace):
			m.log.Error("runs did not end in time; their rows stay running and the next start marks them interrupted")
		}
	}
}

// notFound turns the store's not-found into the error naming the run, and
// passes any other error through.
func notFound(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &NotFoundError{RunID: id}
	}
	return err
}

// SetFinishingHook has the manager call f for every run after its terminal
// event is in its log, where followers may already read it, and before the
// run's outcome is answered (Wait, Done). Tests hold a run in that moment
// to show what a client finds there; nil removes the hook.
func (m *Manager) SetFinishingHook(f func(runID string)) {
	if f == nil {
		m.finishing.Store(nil)
		return
	}
	m.finishing.Store(&f)
}
