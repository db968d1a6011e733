package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// RunsDBName is the run history's file inside the home directory.
const RunsDBName = "runs.db"

// Event kinds on the agents.event wire beyond spawn's: a run's stream ends
// with exactly one EventDone (it succeeded) or EventRunError (any other
// ending), both carrying the result. An "error" the agent reports mid-run
// (it may still recover, e.g. after a retry) travels as EventAgentError so
// a client can rely on "error" meaning "this run is over".
const (
	EventDone       = "done"
	EventRunError   = "error"
	EventAgentError = "agent_error"
)

// persistBatch bounds how many events one store transaction writes.
const persistBatch = 512

// killGrace is the SIGTERM→SIGKILL gap for runs: short enough that
// agents.cancel ends any run within 2 s even when the agent ignores SIGTERM.
const killGrace = 1500 * time.Millisecond

// AgentEvent is one agents.event notification (and one stored event).
type AgentEvent struct {
	RunID string `json:"run_id"`
	Seq   int64  `json:"seq"`
	spawn.Event
	// Status and Result are set on the terminal done / error event only.
	Status store.Status  `json:"status,omitempty"`
	Result *InvokeResult `json:"result,omitempty"`
}

// CancelParams are agents.cancel's params.
type CancelParams struct {
	RunID string `json:"run_id"`
}

// Validate requires the run id.
func (p *CancelParams) Validate() error { return requireRunID(p.RunID) }

// requireRunID is the one check every run-addressed method makes.
func requireRunID(id string) error {
	if id == "" {
		return rpc.InvalidField("run_id", "required")
	}
	return nil
}

// CancelResult says what agents.cancel did.
type CancelResult struct {
	RunID  string       `json:"run_id"`
	Status store.Status `json:"status"`
	// Cancelled is false when the run had already ended; Reason says so.
	Cancelled bool   `json:"cancelled"`
	Reason    string `json:"reason,omitempty"`
}

// ListParams are runs.list's params.
type ListParams struct {
	Limit   int    `json:"limit,omitempty"`
	Before  string `json:"before,omitempty"`
	Adapter string `json:"adapter,omitempty"`
	Status  string `json:"status,omitempty"`
}

// Validate checks the status filter and the limit.
func (p *ListParams) Validate() error {
	if p.Status != "" && !store.Status(p.Status).Valid() {
		return rpc.InvalidField("status", "unknown status %q; one of %v", p.Status, store.Statuses)
	}
	if p.Limit < 0 {
		return rpc.InvalidField("limit", "must be positive (at most %d)", store.MaxListLimit)
	}
	return nil
}

// GetParams are runs.get's params.
type GetParams struct {
	RunID string `json:"run_id"`
}

// Validate requires the run id.
func (p *GetParams) Validate() error { return requireRunID(p.RunID) }

// SubscribeParams are runs.subscribe's params.
type SubscribeParams struct {
	RunID string `json:"run_id"`
	// AfterSeq replays only events after it (0: from the start).
	AfterSeq int64 `json:"after_seq,omitempty"`
}

// Validate requires the run id.
func (p *SubscribeParams) Validate() error {
	if err := requireRunID(p.RunID); err != nil {
		return err
	}
	if p.AfterSeq < 0 {
		return rpc.InvalidField("after_seq", "must not be negative")
	}
	return nil
}

// SubscribeResult is runs.subscribe's immediate answer; the events follow as
// agents.event notifications.
type SubscribeResult struct {
	RunID  string       `json:"run_id"`
	Status store.Status `json:"status"`
	// Live is true when the run is still running and will be followed.
	Live bool `json:"live"`
}

// runManager owns the live runs: the concurrency slots, each run's event log
// and its cancel, and the store.
type runManager struct {
	d     *Daemon
	store *store.Store
	log   *zap.Logger

	mu sync.Mutex
	// live holds runs until their last event is stored; running counts the
	// children still going, which is what max_concurrent_runs bounds.
	live    map[string]*liveRun
	running int
	closing bool
	wg      sync.WaitGroup // one per live run
}

// entry is one event as sent and stored.
type entry struct {
	seq  int64
	kind string
	raw  json.RawMessage
}

// liveRun is a run whose child may still be running.
type liveRun struct {
	id       string
	adapter  string
	ancestry []string
	cancel   context.CancelCauseFunc
	finished chan struct{} // closed once the outcome is recorded and announced
	done     chan struct{} // closed once every event is stored too
	result   InvokeResult  // valid after finished

	mu      sync.Mutex
	events  []entry // the first maxEvents events, plus the terminal one
	nextSeq int64
	dropped int  // events past the bound: counted, not kept
	written int  // events[:written] are in the store
	ended   bool // the terminal event is in events
	changed chan struct{}
}

func newLiveRun(id, adapter string, ancestry []string, cancel context.CancelCauseFunc) *liveRun {
	return &liveRun{id: id, adapter: adapter, ancestry: ancestry, cancel: cancel, finished: make(chan struct{}), done: make(chan struct{}), nextSeq: 1, changed: make(chan struct{})}
}

// add appends one event. It is called on the child's stdout goroutine, so it
// only takes a lock and wakes waiters: a slow client or a slow disk never
// holds up the reading of the agent's output.
func (lr *liveRun) add(kind string, ev AgentEvent, max int, terminal bool) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	ev.RunID, ev.Seq = lr.id, lr.nextSeq
	lr.nextSeq++
	if !terminal && len(lr.events) >= max {
		lr.dropped++
	} else {
		raw, err := json.Marshal(ev)
		if err != nil {
			raw, _ = json.Marshal(AgentEvent{RunID: lr.id, Seq: ev.Seq, Event: spawn.Event{Kind: spawn.EventOther, Text: "event could not be encoded"}})
		}
		lr.events = append(lr.events, entry{seq: ev.Seq, kind: kind, raw: raw})
	}
	if terminal {
		lr.ended = true
	}
	close(lr.changed)
	lr.changed = make(chan struct{})
}

// after returns the events with seq > after, whether the stream has ended,
// and a channel closed at the next change.
func (lr *liveRun) after(seq int64) ([]entry, bool, <-chan struct{}) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	i := sort.Search(len(lr.events), func(i int) bool { return lr.events[i].seq > seq })
	return append([]entry(nil), lr.events[i:]...), lr.ended, lr.changed
}

func (d *Daemon) setupRuns() error {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, filepath.Join(d.home, RunsDBName), store.Options{})
	if err != nil {
		return fmt.Errorf("open the run history: %w (move %s aside to start with an empty history)", err, filepath.Join(d.home, RunsDBName))
	}
	d.onClose(func(context.Context) { _ = st.Close() })
	m := &runManager{d: d, store: st, log: d.log.Named("runs"), live: map[string]*liveRun{}}
	d.runs = m

	// Rows left running were left by a daemon that died mid-run; nobody
	// will finish them. Their process groups may still be alive (a
	// grandchild survives its leader even on Linux): end the ones that are
	// provably ours.
	left, err := st.InterruptRunning(ctx, "card stopped before this run ended (the daemon was killed or crashed)")
	if err != nil {
		return err
	}
	for _, r := range left {
		n := endLeftoverGroup(r.Pgid, r.RunID)
		m.log.Warn("a run was left running by a previous daemon; recorded it as interrupted",
			zap.String("run_id", r.RunID), zap.String("adapter", r.Adapter), zap.Int("pgid", r.Pgid), zap.Int("processes_ended", n))
	}
	d.onClose(m.shutdown)
	m.register()
	return nil
}

func (m *runManager) register() {
	r := m.d.registry
	invokeDoc := rpc.Doc{
		Summary: "Run an installed agent on a task, inside its permission boundary, and record the run.",
		Description: "Checks, in order: params (-32602 naming the field; an unknown id lists the known ones), the ancestry guard, " +
			"bypass allowed, agent installed and usable, unenforced read-only acknowledged, and the concurrency cap " +
			"(max_concurrent_runs; a run over the cap is refused, never queued). Every invoke past params validation is recorded " +
			"as a run, refused ones with status `refused`. Without `stream` the answer is the finished run (InvokeResult: the " +
			"agent's result plus run_id, adapter, ancestry, status — a failed run is an answer with is_error, not a JSON-RPC error). " +
			"With `stream` the answer is {run_id, accepted: true} at once, and the run's events follow it as agents.event " +
			"notifications (never before it). A run belongs to the daemon: it " +
			"goes on when the client disconnects unless cancel_on_disconnect = true.",
		Errors: []int64{CodeGuardRefused, CodeBypassNotAllowed, CodeAgentNotInstalled, CodeAgentUnusable,
			CodeUnenforcedReadOnly, CodeTooManyRuns, rpc.CodeShuttingDown},
	}
	rpc.RegisterThen(r, "agents.invoke", invokeDoc, func(ctx context.Context, p InvokeParams) (any, rpc.Then, error) {
		return m.invoke(ctx, p)
	})
	r.Alias("agents.invoke_external", "agents.invoke")
	rpc.Register(r, "agents.cancel", rpc.Doc{
		Summary:     "End a running run, streaming or not, with its whole process group, within 2 s; status `cancelled`.",
		Description: "Answers once the run has ended. A run that already ended is a no-op answer with cancelled = false and a reason.",
		Errors:      []int64{CodeRunNotFound},
	}, func(ctx context.Context, p CancelParams) (CancelResult, error) {
		return m.cancel(ctx, p.RunID)
	})
	rpc.Register(r, "runs.list", rpc.Doc{
		Summary:     "The run history, newest first, filtered by adapter and status; page with before = the last run_id of a page.",
		Description: "limit defaults to 50, at most 500.",
	}, func(ctx context.Context, p ListParams) ([]store.Run, error) {
		runs, err := m.store.List(ctx, store.ListQuery{Limit: p.Limit, Before: p.Before, Adapter: p.Adapter, Status: store.Status(p.Status)})
		if runs == nil && err == nil {
			runs = []store.Run{}
		}
		return runs, err
	})
	rpc.Register(r, "runs.get", rpc.Doc{
		Summary: "One recorded run: status, ancestry, timestamps, answer, error, usage, cost.",
		Errors:  []int64{CodeRunNotFound},
	}, func(ctx context.Context, p GetParams) (store.Run, error) {
		run, err := m.store.Get(ctx, p.RunID)
		return run, notFound(p.RunID, err)
	})
	rpc.RegisterThen(r, "runs.subscribe", rpc.Doc{
		Summary: "Replay a run's events after after_seq as agents.event notifications, then follow it live to its end.",
		Description: "Each event arrives exactly once and in seq order; the last is `done` or `error`. Reconnecting clients pass " +
			"the last seq they saw. Events past max_events_per_run are not kept (the run's events_dropped counts them).",
		Errors: []int64{CodeRunNotFound},
	}, func(ctx context.Context, p SubscribeParams) (SubscribeResult, rpc.Then, error) {
		return m.subscribe(ctx, p)
	})
	rpc.Notification[AgentEvent](r, "agents.event", rpc.Doc{
		Summary: "One event of a run: {run_id, seq, kind, …}; seq rises by one per event from 1.",
		Description: "kinds: session, text (delta when streamed in pieces), tool_use, tool_result, retry, usage, other, agent_error " +
			"(the agent reported an error and may still recover), and exactly one terminal event: done (status succeeded) or error " +
			"(failed, cancelled, timed_out, interrupted), each with status and result.",
	})
}

// invoke gates, records and starts a run. A streamed run's events are sent
// by the returned Then, after the answer that names the run.
func (m *runManager) invoke(ctx context.Context, p InvokeParams) (any, rpc.Then, error) {
	d := m.d
	if _, ok := spawn.Lookup(p.ID); !ok {
		return nil, nil, &detect.UnknownAdapterError{ID: p.ID, Known: spawn.IDs()}
	}
	req := p.spawnRequest()
	req.AllowBypass = true
	if req.Cwd == "" {
		req.Cwd = d.env["HOME"]
	}
	// The adapter-specific argv check needs no binary; done here it keeps a
	// field the CLI cannot honour a -32602 instead of a recorded run.
	if _, err := spawn.Build("/card/placeholder/"+p.ID, req); err != nil {
		return nil, nil, err
	}
	req.AllowBypass = d.cfg.AllowBypass
	a := d.cfg.Adapters[p.ID]
	req.Extras = spawn.Extras{Args: a.Args, Env: a.Env}

	bin, spec, binErr := d.detector.Binary(ctx, p.ID)
	run := store.Run{
		RunID: m.store.NewRunID(), Adapter: p.ID, InvokedBy: p.InvokedBy, Cwd: req.Cwd,
		PermissionMode: string(req.EffectiveMode()), Model: p.Model,
	}
	run.SetTask(p.Task, d.cfg.RecordTasks == nil || *d.cfg.RecordTasks)

	m.mu.Lock()
	seeded, refusal := gate(gateInput{
		Adapter: p.ID, InvokedBy: p.InvokedBy, Mode: req.EffectiveMode(), Acknowledge: p.AcknowledgeUnenforcedReadOnly,
		Guard: d.guard, AllowBypass: d.cfg.AllowBypass, BinaryErr: binErr, ReadOnly: spec.ReadOnlyEnforcement,
		Running: m.running, MaxRuns: d.cfg.MaxConcurrentRuns, ShuttingDown: m.closing,
	})
	run.Ancestry = seeded
	if refusal != nil {
		m.mu.Unlock()
		run.Status, run.RefusalReason = store.StatusRefused, refusal.Error()
		if err := m.store.Create(context.WithoutCancel(ctx), run); err != nil {
			m.log.Error("could not record a refused run", zap.String("run_id", run.RunID), zap.Error(err))
		}
		m.log.Info("refused a run", zap.String("run_id", run.RunID), zap.String("adapter", p.ID), zap.String("reason", refusal.Error()))
		return nil, nil, &refusedError{RunID: run.RunID, Err: refusal}
	}
	runCtx, cancelCause := context.WithCancelCause(context.WithoutCancel(d.ctx))
	lr := newLiveRun(run.RunID, p.ID, seeded, cancelCause)
	m.live[run.RunID] = lr
	m.running++ // the slot is held while the row is written
	m.mu.Unlock()

	plan, err := spawn.Build(bin, req)
	if err == nil {
		// The row exists before the child does: a daemon killed from here
		// on still leaves a record that says so.
		err = m.store.Create(context.WithoutCancel(ctx), run)
	}
	if err != nil {
		m.mu.Lock()
		delete(m.live, run.RunID)
		m.running--
		m.mu.Unlock()
		cancelCause(nil)
		return nil, nil, fmt.Errorf("could not start run %s: %w", run.RunID, err)
	}

	runCtx, cancelTimeout := context.WithTimeout(runCtx, p.Timeout())
	peer := rpc.PeerFrom(ctx)
	stopWatching := func() bool { return false }
	if d.cfg.CancelOnDisconnect && peer != nil {
		stopWatching = context.AfterFunc(peer.Context(), func() { cancelCause(errDisconnected) })
	}
	m.log.Info("run started", zap.String("run_id", run.RunID), zap.String("adapter", p.ID),
		zap.String("mode", run.PermissionMode), zap.String("cwd", run.Cwd), zap.Strings("ancestry", seeded),
		zap.Int("task_bytes", run.TaskLen), zap.Duration("timeout", p.Timeout()))

	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cancelTimeout()
		defer stopWatching()
		m.execute(runCtx, lr, plan, p.Task)
	}()

	if p.Stream {
		accepted := InvokeAccepted{RunID: run.RunID, Accepted: true, Adapter: p.ID, Ancestry: seeded}
		if peer == nil {
			return accepted, nil, nil
		}
		return accepted, func(ctx context.Context) { follow(ctx, peer, lr, 0) }, nil
	}
	select {
	case <-lr.finished:
		return lr.result, nil, nil
	case <-ctx.Done():
		// The client went away or withdrew the request; the run is the
		// daemon's and goes on.
		return nil, nil, &waitEndedError{RunID: run.RunID, Err: ctx.Err()}
	}
}

// execute runs the child and records its events and outcome.
func (m *runManager) execute(ctx context.Context, lr *liveRun, plan spawn.Plan, task string) {
	d := m.d
	a, _ := spawn.Lookup(lr.adapter)
	maxEvents := d.cfg.MaxEventsPerRun
	persisted := make(chan struct{})
	go m.persist(lr, persisted)

	env := childEnv(d.env, d.detector.SearchPath().PATH(), guard.Child(lr.ancestry, lr.adapter), lr.id)
	res, err := spawn.Run(ctx, spawn.RunSpec{
		Plan: plan, Prompt: task, BaseEnv: env, Parser: a.NewParser(),
		Limits: spawn.Limits{MaxOutput: d.cfg.MaxOutputBytes, KillGrace: killGrace},
		OnStart: func(pid, pgid int) {
			if err := m.store.SetPgid(context.WithoutCancel(ctx), lr.id, pgid); err != nil {
				m.log.Warn("could not record the run's process group", zap.String("run_id", lr.id), zap.Error(err))
			}
		},
		OnEvent: func(ev spawn.Event) {
			kind := ev.Kind
			if kind == spawn.EventError {
				ev.Kind, kind = EventAgentError, EventAgentError
			}
			lr.add(kind, AgentEvent{Event: ev}, maxEvents, false)
		},
	})
	status := outcome(err, context.Cause(ctx))
	if status == store.StatusInterrupted && res.Error != nil {
		res.Error.Kind = "interrupted"
		res.Error.Message = "card shut down while the run was going; its process group was ended"
	}
	lr.result = InvokeResult{Result: res, RunID: lr.id, Adapter: lr.adapter, Ancestry: lr.ancestry, Status: status}
	fin := store.Finish{Status: status, SessionID: res.SessionID, Answer: res.Answer, TotalCostUSD: res.CostUSD,
		Turns: res.Turns, ToolCalls: res.ToolCalls,
		Usage: &store.Usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CachedInputTokens: res.Usage.CachedInputTokens}}
	var se *spawn.Error
	if errors.As(err, &se) && se.ExitCode >= 0 {
		code := se.ExitCode
		fin.ExitCode = &code
	} else if err == nil {
		zero := 0
		fin.ExitCode = &zero
	}
	if res.Error != nil {
		fin.Error = &store.RunError{Kind: res.Error.Kind, Message: res.Error.Message, ExitCode: res.Error.ExitCode, StderrExcerpt: res.Error.StderrExcerpt}
	}
	// Every event but the terminal one is in: the count is final.
	lr.mu.Lock()
	fin.EventsDropped = int64(lr.dropped)
	lr.mu.Unlock()
	if err := m.store.Finish(context.Background(), lr.id, fin); err != nil {
		m.log.Error("could not record how a run ended", zap.String("run_id", lr.id), zap.Error(err))
	}
	m.log.Info("run ended", zap.String("run_id", lr.id), zap.String("adapter", lr.adapter), zap.String("status", string(status)),
		zap.Int64("duration_ms", res.DurationMs))
	// The outcome is in the store before any client hears "done", so a
	// runs.get right after the terminal event already shows it.
	kind := EventDone
	if status != store.StatusSucceeded {
		kind = EventRunError
	}
	result := lr.result
	lr.add(kind, AgentEvent{Event: spawn.Event{Kind: kind}, Status: status, Result: &result}, maxEvents, true)
	m.mu.Lock()
	m.running--
	m.mu.Unlock()
	close(lr.finished)
	// The run stays live (its events served from memory) until the store
	// has them all, so a replay from the store is never missing a tail.
	// Storing a chatty run's events can take longer than the run itself;
	// nobody waits for it but shutdown.
	<-persisted

	m.mu.Lock()
	delete(m.live, lr.id)
	m.mu.Unlock()
	close(lr.done)
}

// persist writes a run's kept events to the store in order, off the
// child's stdout goroutine, until the terminal event is written.
func (m *runManager) persist(lr *liveRun, done chan<- struct{}) {
	defer close(done)
	ctx := context.Background()
	for {
		lr.mu.Lock()
		pending := append([]entry(nil), lr.events[lr.written:]...)
		ended := lr.ended
		changed := lr.changed
		lr.mu.Unlock()
		// One transaction per batch: a commit per event would leave a
		// chatty run's history seconds behind it.
		for start := 0; start < len(pending); start += persistBatch {
			chunk := pending[start:min(start+persistBatch, len(pending))]
			batch := make([]store.NewEvent, len(chunk))
			for i, e := range chunk {
				batch[i] = store.NewEvent{Seq: e.seq, Kind: e.kind, Payload: e.raw}
			}
			if err := m.store.AppendEvents(ctx, lr.id, batch); err != nil {
				m.log.Warn("could not record run events", zap.String("run_id", lr.id),
					zap.Int64("first_seq", chunk[0].seq), zap.Int("count", len(chunk)), zap.Error(err))
			}
		}
		lr.mu.Lock()
		lr.written += len(pending)
		caughtUp := lr.written == len(lr.events)
		lr.mu.Unlock()
		if ended && caughtUp {
			return
		}
		if caughtUp {
			<-changed
		}
	}
}

// follow sends a live run's events after seq to peer until the run's last
// event or until ctx (the connection) ends. One goroutine per subscription
// sends them, so they arrive in order and a slow client slows only itself.
func follow(ctx context.Context, peer *rpc.Peer, lr *liveRun, seq int64) {
	for {
		pending, ended, changed := lr.after(seq)
		for _, e := range pending {
			if err := peer.Notify(ctx, "agents.event", e.raw); err != nil {
				return
			}
			seq = e.seq
		}
		if ended && len(pending) == 0 {
			return
		}
		if len(pending) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// subscribe replays a run and, while it is live, follows it. The events are
// sent by the returned Then, after the answer.
func (m *runManager) subscribe(ctx context.Context, p SubscribeParams) (SubscribeResult, rpc.Then, error) {
	peer := rpc.PeerFrom(ctx)
	m.mu.Lock()
	lr := m.live[p.RunID]
	m.mu.Unlock()
	if lr != nil {
		// A live run's events are all in memory (the store has a prefix of
		// them), so the replay and the follow are one ordered pass.
		res := SubscribeResult{RunID: p.RunID, Status: store.StatusRunning, Live: true}
		if status, ended := lr.outcome(); ended {
			res = SubscribeResult{RunID: p.RunID, Status: status}
		}
		if peer == nil {
			return res, nil, nil
		}
		return res, func(ctx context.Context) { follow(ctx, peer, lr, p.AfterSeq) }, nil
	}
	// A finished run (its outcome and every event are in the store before it
	// leaves the live set) is replayed from the store.
	run, err := m.store.Get(ctx, p.RunID)
	if err != nil {
		return SubscribeResult{}, nil, notFound(p.RunID, err)
	}
	res := SubscribeResult{RunID: p.RunID, Status: run.Status}
	if peer == nil {
		return res, nil, nil
	}
	return res, func(ctx context.Context) { m.replay(ctx, peer, p.RunID, p.AfterSeq) }, nil
}

// outcome is the run's status once its terminal event exists.
func (lr *liveRun) outcome() (store.Status, bool) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if !lr.ended {
		return store.StatusRunning, false
	}
	return lr.result.Status, true
}

// replay sends a finished run's stored events after seq to peer.
func (m *runManager) replay(ctx context.Context, peer *rpc.Peer, id string, after int64) {
	for {
		evs, err := m.store.Events(ctx, id, after, store.DefaultEventsLimit)
		if err != nil || len(evs) == 0 {
			return
		}
		for _, e := range evs {
			if err := peer.Notify(ctx, "agents.event", e.Payload); err != nil {
				return
			}
			after = e.Seq
		}
	}
}

// cancel ends a live run and waits for its outcome to be recorded.
func (m *runManager) cancel(ctx context.Context, id string) (CancelResult, error) {
	m.mu.Lock()
	lr := m.live[id]
	m.mu.Unlock()
	if lr == nil {
		run, err := m.store.Get(ctx, id)
		if err != nil {
			return CancelResult{}, notFound(id, err)
		}
		return CancelResult{RunID: id, Status: run.Status,
			Reason: fmt.Sprintf("run %s already ended with status %s; nothing to cancel", id, run.Status)}, nil
	}
	lr.cancel(errUserCancel)
	select {
	case <-lr.finished:
	case <-ctx.Done():
		return CancelResult{}, ctx.Err()
	}
	res := CancelResult{RunID: id, Status: lr.result.Status, Cancelled: lr.result.Status == store.StatusCancelled}
	if !res.Cancelled {
		res.Reason = fmt.Sprintf("run %s ended with status %s before the cancel took effect", id, res.Status)
	}
	return res, nil
}

// shutdown cancels every live run with errShutdown (recorded interrupted)
// and waits for their groups to end and their outcomes to be written.
// Subscriptions belong to their connections, which are closed before this.
func (m *runManager) shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closing = true
	runs := make([]*liveRun, 0, len(m.live))
	for _, lr := range m.live {
		runs = append(runs, lr)
	}
	m.mu.Unlock()
	for _, lr := range runs {
		lr.cancel(errShutdown)
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
