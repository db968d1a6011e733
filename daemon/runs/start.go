package runs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/spawn"
)

// Request is one run, validated and planned: everything Start needs and
// nothing it must judge again. The daemon's prepare step builds it from the
// params; every bad-params answer is decided there.
type Request struct {
	Adapter   string
	InvokedBy string
	// Task is the prompt; it goes to the agent on stdin.
	Task string
	// Mode is the permission mode, with the default filled in. Whether the
	// operator allows bypass is a gate of Start's, reported after the guard.
	Mode spawn.Mode
	// Plan is the adapter's argv, environment additions and private files,
	// built once; Start sets its Program to the binary detection resolved.
	Plan spawn.Plan
	// Model and Cwd are recorded on the run (Plan.Dir is where it runs).
	Model string
	Cwd   string
	// Timeout is the run's deadline.
	Timeout time.Duration
	// AcknowledgeUnenforcedReadOnly lets a read_only run start on an
	// adapter that cannot enforce read_only.
	AcknowledgeUnenforcedReadOnly bool
	// AcknowledgeUnenforcedEdit lets an edit run start on an adapter
	// whose edit mode card cannot hold.
	AcknowledgeUnenforcedEdit bool
	// Conn is the context of the connection that asked for the run, if
	// any: with Config.CancelOnDisconnect its end cancels the run.
	Conn context.Context
	// Asker is the connection that asked for the run, which an ask-mode
	// run's questions go to first; nil when there is none to ask: with
	// Conn set, a connection that may not approve.
	Asker Asker
	// ApprovalTimeout is how long an ask-mode run's question waits for an
	// answer before it is denied.
	ApprovalTimeout time.Duration
	// Attachments describe the request's attachments for the record, those
	// dropped with why; the images themselves are in Plan.
	Attachments []api.AttachmentRecord
	// Stage, when set, is the request's costly part: reading its
	// attachments into card's private copies, which the plan's images
	// refer to. Start calls it once the gate has passed, with the run's
	// slot held, so a refused request never pays for it and no number of
	// them can take the daemon's memory or disk. Its error is the request's
	// answer, with nothing recorded; it returns the attachments' records
	// (digests filled in) and what to call once the run is over.
	Stage func(ctx context.Context) ([]api.AttachmentRecord, func(), error)
	// Discard lets go of what a request with Stage holds (the client's
	// files, open since they were checked) when it is refused before
	// Stage; call Release, not Discard.
	Discard func()

	// A session's turn: the card session it belongs to, its turn number
	// and where its events start in the session's seq, all recorded on
	// the run. Empty for agents.invoke.
	CardSessionID  string
	SessionTurn    int
	SessionSeqBase int64
	// Ancestry, when set, is the chain the guard judges the run against
	// instead of the daemon's: a session seeds it once, at its start, and
	// every turn carries it.
	Ancestry []string
	// AskAll sends an ask-mode run's questions to Asker and every
	// connection watching the run at once (the first answer wins), instead
	// of to the watchers only once Asker is gone.
	AskAll bool
	// Always, when set, is the allow_always set the run shares (a
	// session's turns share one); nil gives the run its own.
	Always *Always
	// Exec, when set, runs the child instead of spawn.Run, with the spec
	// spawn.Run would have been given (a session's turn over a warm agent);
	// everything else about the run (gate, record, events, approvals,
	// cancel, deadline) is as for any run.
	Exec func(ctx context.Context, spec spawn.RunSpec) (api.Result, error)
}

// Release lets go of what the request holds (its attachments' files) when
// it will not be started: refused, or planned only to judge it.
func (r Request) Release() {
	if r.Discard != nil {
		r.Discard()
	}
}

// Run is one started run: its event log, its cancel and, once finished, its
// outcome. It stays usable (Wait, Follow) after it leaves the live set.
type Run struct {
	id       string
	adapter  string
	ancestry []string
	cancel   context.CancelCauseFunc
	finished chan struct{}    // closed once the outcome is recorded and announced
	result   api.InvokeResult // valid once finished is closed
	log      *eventLog
	// approvals is the broker of an ask-mode run; nil in other modes.
	approvals *approvals
	// dropped are the attachments the agent was not given.
	dropped []api.DroppedAttachment
	// state is what the run is doing (an api.RunState), as the runner's
	// watchdog last said; runs.get and runs.list show it while it runs.
	state atomic.Value
}

// State is what the running run is doing now: starting until the runner
// says otherwise.
func (r *Run) State() api.RunState {
	if s, ok := r.state.Load().(api.RunState); ok {
		return s
	}
	return api.StateStarting
}

// ID is the run's id.
func (r *Run) ID() string { return r.id }

// Ended reports whether the run's terminal event is in its log, so that a
// subscriber may already have it; Done follows once the outcome is
// recorded.
func (r *Run) Ended() bool { return r.log.isEnded() }

// Accepted is what a streaming invoke answers: the run started.
func (r *Run) Accepted() api.InvokeAccepted {
	return api.InvokeAccepted{RunID: r.id, Accepted: true, Adapter: r.adapter, Ancestry: r.ancestry, DroppedAttachments: r.dropped}
}

// Wait returns the run's outcome once it is recorded, or a *WaitEndedError
// when ctx ends first; the run goes on either way.
func (r *Run) Wait(ctx context.Context) (api.InvokeResult, error) {
	select {
	case <-r.finished:
		return r.result, nil
	case <-ctx.Done():
		return api.InvokeResult{}, &WaitEndedError{RunID: r.id, Err: ctx.Err()}
	}
}

// Follow sends every event of the run, from the first, until its last or
// until ctx ends; a *BehindError when the subscriber fell further behind
// than limit (0: no limit) and was cut off.
func (r *Run) Follow(ctx context.Context, send Send, limit int64) error {
	return follow(ctx, send, r.log, 0, limit)
}

// outcome is the run's status once its terminal event exists.
func (r *Run) outcome() (api.Status, bool) {
	if !r.log.isEnded() {
		return api.StatusRunning, false
	}
	return r.result.Status, true
}

// Start gates, records and starts a run. A refused run is recorded too
// (status refused) and comes back as *RefusedError naming that record. ctx
// bounds only the gating; the run itself belongs to the manager.
func (m *Manager) Start(ctx context.Context, req Request) (*Run, error) {
	bin, spec, binErr := m.deps.Binaries.Binary(ctx, req.Adapter)
	rec := m.recordOf(req)
	// With a budget on the adapter, the history is read and the
	// reservation taken under budgetMu, held until the run is counted in
	// flight or refused.
	var budgetErr error
	var res reservation
	unlockBudget := func() {}
	if m.cfg.Budgets.active(req.Adapter) {
		m.budgetMu.Lock()
		unlockBudget = m.budgetMu.Unlock
		res, budgetErr = m.checkBudgets(ctx, req.Adapter, req.Plan.Caps)
	}
	snap := m.deps.Guard
	if req.Ancestry != nil {
		snap.Ancestry = req.Ancestry
	}
	m.mu.Lock()
	seeded, refusal := gate(gateInput{
		Adapter: req.Adapter, InvokedBy: req.InvokedBy, Mode: req.Mode, Acknowledge: req.AcknowledgeUnenforcedReadOnly,
		AcknowledgeEdit: req.AcknowledgeUnenforcedEdit, Edit: spec.EditEnforcement,
		Guard: snap, AllowBypass: m.cfg.AllowBypass, BinaryErr: binErr, ReadOnly: spec.ReadOnlyEnforcement,
		Running: m.running, MaxRuns: m.cfg.MaxConcurrentRuns, ShuttingDown: m.closing, Budget: budgetErr,
	})
	rec.Ancestry = seeded
	if refusal != nil {
		m.mu.Unlock()
		unlockBudget()
		req.Release()
		return nil, m.refuse(ctx, rec, refusal)
	}
	runCtx, cancelCause := context.WithCancelCause(context.Background())
	lr := &Run{id: rec.RunID, adapter: req.Adapter, ancestry: seeded, cancel: cancelCause,
		finished: make(chan struct{}), log: newEventLog(rec.RunID, m.cfg.MaxEventsPerRun), dropped: droppedOf(req.Attachments)}
	if req.Mode == spawn.ModeAsk {
		lr.approvals = newApprovals(rec.RunID, req.Adapter, req.ApprovalTimeout, req.Asker, lr.log, m.log)
		lr.approvals.starterMayNotApprove = req.Asker == nil && req.Conn != nil
		lr.approvals.askAll = req.AskAll
		if req.Always != nil {
			lr.approvals.always = req.Always
		}
	}
	m.live[rec.RunID] = lr
	m.running++ // the slot is held while the attachments are read and the row is written
	m.mu.Unlock()
	if m.cfg.Budgets.active(req.Adapter) {
		m.reserved[rec.RunID] = res
	}
	unlockBudget()
	unstart := func() {
		m.mu.Lock()
		delete(m.live, rec.RunID)
		m.running--
		m.mu.Unlock()
		m.unreserve(rec.RunID)
		cancelCause(nil)
	}

	release := func() {}
	if req.Stage != nil {
		atts, rel, err := req.Stage(ctx)
		if err != nil {
			unstart()
			return nil, err
		}
		rec.Attachments, release = m.recordable(atts), rel
	}

	// The row exists before the child does: a daemon killed from here on
	// still leaves a record that says so.
	if err := m.store.Create(context.WithoutCancel(ctx), rec); err != nil {
		unstart()
		release()
		return nil, fmt.Errorf("could not start run %s: %w", rec.RunID, err)
	}
	m.noteRecorded()

	plan := req.Plan
	plan.Program = bin
	runCtx, cancelTimeout := context.WithTimeout(runCtx, req.Timeout)
	stopWatching := func() bool { return false }
	if m.cfg.CancelOnDisconnect && req.Conn != nil {
		stopWatching = context.AfterFunc(req.Conn, func() { cancelCause(ErrDisconnected) })
	}
	m.log.Info("run started", zap.String("run_id", rec.RunID), zap.String("adapter", req.Adapter),
		zap.String("mode", rec.PermissionMode), zap.String("cwd", rec.Cwd), zap.Strings("ancestry", seeded),
		zap.Int("task_bytes", rec.TaskLen), zap.Int("attachments", len(rec.Attachments)), zap.Duration("timeout", req.Timeout))

	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cancelTimeout()
		defer stopWatching()
		m.execute(runCtx, lr, plan, req.Task, req.Exec, release)
	}()
	return lr, nil
}

// recordOf is the run's first record: what was asked, with its task kept
// as the configuration says.
func (m *Manager) recordOf(req Request) api.Run {
	rec := api.Run{
		RunID: m.store.NewRunID(), Adapter: req.Adapter, InvokedBy: req.InvokedBy, Cwd: req.Cwd,
		PermissionMode: string(req.Mode), Model: req.Model, Attachments: req.Attachments,
		CardSessionID: req.CardSessionID, SessionTurn: req.SessionTurn, SessionSeqBase: req.SessionSeqBase,
	}
	keep := 0
	if m.cfg.RecordTasks {
		keep = m.cfg.MaxTaskRecordBytes
	}
	rec.SetTask(req.Task, keep)
	rec.Attachments = m.recordable(rec.Attachments)
	return rec
}

// refuse records rec refused by the gate and returns the error that names
// that record.
func (m *Manager) refuse(ctx context.Context, rec api.Run, refusal error) error {
	rec.Status, rec.RefusalReason = api.StatusRefused, refusal.Error()
	if err := m.store.Create(context.WithoutCancel(ctx), rec); err != nil {
		m.log.Error("could not record a refused run", zap.String("run_id", rec.RunID), zap.Error(err))
	}
	m.noteRecorded()
	m.log.Info("refused a run", zap.String("run_id", rec.RunID), zap.String("adapter", rec.Adapter), zap.String("reason", refusal.Error()))
	return &RefusedError{RunID: rec.RunID, Err: refusal}
}

// unreserve lets go of a run's budget reservation.
func (m *Manager) unreserve(id string) {
	m.budgetMu.Lock()
	delete(m.reserved, id)
	m.budgetMu.Unlock()
}

// recordable is what the record keeps of attachments: a name
// ("passport.jpg") says as much as a task can, so with record_tasks off
// only the types, sizes and digests stay.
func (m *Manager) recordable(atts []api.AttachmentRecord) []api.AttachmentRecord {
	if m.cfg.RecordTasks || len(atts) == 0 {
		return atts
	}
	atts = slices.Clone(atts)
	for i := range atts {
		atts[i].Name = ""
	}
	return atts
}

// execute runs the child and records its events and outcome.
// release lets go of the run's staged attachments once the child is gone.
func (m *Manager) execute(ctx context.Context, lr *Run, plan spawn.Plan, task string, exec func(context.Context, spawn.RunSpec) (api.Result, error), release func()) {
	a, _ := spawn.Lookup(lr.adapter)
	persisted := make(chan struct{})
	go m.persist(lr, persisted)

	env := childEnv(m.deps.Env, m.deps.PATH(), guard.Child(lr.ancestry, lr.adapter), lr.id)
	var approver spawn.Approver
	if lr.approvals != nil {
		approver = lr.approvals
	}
	if exec == nil {
		exec = spawn.Run
	}
	res, err := exec(ctx, spawn.RunSpec{
		Plan: plan, Prompt: task, BaseEnv: env, Parser: a.NewParser(), Approver: approver, ImageMemory: m.cfg.ImageMemory,
		Limits: spawn.Limits{MaxOutput: m.cfg.MaxOutputBytes, KillGrace: killGrace},
		OnStart: func(pid, pgid int) {
			if err := m.store.SetPgid(context.WithoutCancel(ctx), lr.id, pgid); err != nil {
				m.log.Warn("could not record the run's process group", zap.String("run_id", lr.id), zap.Error(err))
			}
		},
		OnState: func(s api.RunState) { lr.state.Store(s) },
		OnEvent: func(ev spawn.Event) {
			kind := ev.Kind
			if kind == api.EventError {
				ev.Kind, kind = api.EventAgentError, api.EventAgentError
			}
			if kind == api.EventRateLimit {
				m.NoteRateLimits(lr.adapter, lr.id, ev.RateLimits)
			}
			lr.log.add(kind, api.AgentEvent{Event: ev.Wire()}, false)
		},
	})
	release()
	if lr.approvals != nil {
		// Before the terminal event: every question has its decision in
		// the record, and none is asked after the run.
		lr.approvals.end()
	}
	status := outcome(err, context.Cause(ctx))
	if status == api.StatusInterrupted && res.Error != nil {
		res.Error.Kind = "interrupted"
		res.Error.Message = "card shut down while the run was going; its process group was ended"
	}
	if err := m.store.Finish(context.Background(), lr.id, finish(res, err, status, lr.log.droppedCount())); err != nil {
		m.log.Error("could not record how a run ended", zap.String("run_id", lr.id), zap.Error(err))
	} else if d, err := m.store.DurationMs(context.Background(), lr.id); err == nil {
		// The run's duration is card's: from the child's start to the
		// outcome, as the history has it. What an agent reports of its own
		// (Claude Code's duration_ms leaves out its start-up and its
		// retries' waits) is a different figure for each CLI, and was the
		// one `card invoke` printed while `card runs` printed this one.
		res.DurationMs = d
	}
	lr.result = api.InvokeResult{Result: res, RunID: lr.id, Adapter: lr.adapter, Ancestry: lr.ancestry, Status: status, DroppedAttachments: lr.dropped}
	// Only now that its cost is in the history does the run stop holding
	// its reservation against the budgets.
	m.unreserve(lr.id)
	m.log.Info("run ended", zap.String("run_id", lr.id), zap.String("adapter", lr.adapter), zap.String("status", string(status)),
		zap.Int64("duration_ms", res.DurationMs))
	// The outcome is in the store before any client hears "done", so a
	// runs.get right after the terminal event already shows it.
	ev := api.Event{Kind: api.EventDone}
	if status != api.StatusSucceeded {
		ev = api.Event{Kind: api.EventRunError, Error: lr.result.Reason()}
	}
	result := lr.result
	lr.log.add(ev.Kind, api.AgentEvent{Event: ev, Status: status, Result: &result}, true)
	m.mu.Lock()
	m.running--
	m.mu.Unlock()
	// The answer waits for the store to have every event, as followers
	// wait for it to send the terminal one: a runs.get or a replay right
	// after the answer finds the whole run. The events are stored while the
	// agent prints them, a batch per transaction, so what is left here is
	// the last batch.
	<-persisted
	if f := m.finishing.Load(); f != nil {
		(*f)(lr.id)
	}
	close(lr.finished)
	// With the answer out, the log's pages go into the database now,
	// rather than inside a commit some later run waits for.
	if err := m.store.Checkpoint(context.Background()); err != nil {
		m.log.Debug("could not checkpoint the run history", zap.Error(err))
	}

	m.mu.Lock()
	delete(m.live, lr.id)
	m.mu.Unlock()
}

// finish is the recorded outcome of a run. dropped is final here: every
// event but the terminal one has been added.
func finish(res api.Result, err error, status api.Status, dropped int64) store.Finish {
	fin := store.Finish{Status: status, SessionID: res.SessionID, Answer: res.Answer, TotalCostUSD: res.CostUSD,
		Turns: res.Turns, ToolCalls: res.ToolCalls, EventsDropped: dropped, SessionUsage: res.SessionUsage,
		Usage: &api.Usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CachedInputTokens: res.Usage.CachedInputTokens}}
	var se *spawn.Error
	if errors.As(err, &se) && se.ExitCode >= 0 {
		code := se.ExitCode
		fin.ExitCode = &code
	} else if err == nil {
		zero := 0
		fin.ExitCode = &zero
	}
	if res.Error != nil {
		fin.Error = &api.RunError{Kind: res.Error.Kind, Message: res.Error.Message, ExitCode: res.Error.ExitCode, StderrExcerpt: res.Error.StderrExcerpt}
	}
	return fin
}

// outcome maps how spawn ended a run onto the recorded status. cause is why
// the run's context was cancelled, when it was.
func outcome(err error, cause error) api.Status {
	if err == nil {
		return api.StatusSucceeded
	}
	if errors.Is(cause, ErrShutdown) {
		// However the run saw its end (cancelled, its agent killed), it
		// ended because card stopped.
		return api.StatusInterrupted
	}
	var se *spawn.Error
	if errors.As(err, &se) {
		switch se.Kind {
		case api.KindTimeout:
			return api.StatusTimedOut
		case api.KindCancelled:
			return api.StatusCancelled
		}
	}
	return api.StatusFailed
}

// LastSeq is the seq of the run's last event so far (its terminal one once
// it has ended): a session numbers the next turn's events after it.
func (r *Run) LastSeq() int64 {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return r.log.nextSeq - 1
}

// Done is closed once the run's outcome is recorded and announced.
func (r *Run) Done() <-chan struct{} { return r.finished }

// Note adds one event that is not the agent's to a live run's stream
// (a session records a prompt queued behind the running turn this way),
// kept within the run's event bound like any other. It reports false when
// the run has ended or was never live: nothing follows a terminal event.
func (m *Manager) Note(runID, kind string, ev api.AgentEvent) bool {
	lr := m.lookup(runID)
	if lr == nil {
		return false
	}
	ev.Kind = kind
	lr.log.mu.Lock()
	defer lr.log.mu.Unlock()
	if lr.log.ended || len(lr.log.events) >= lr.log.max {
		return false
	}
	return lr.log.putLocked(kind, ev, false, false)
}

// Live is the live run of that id, or nil once it has left the live set.
func (m *Manager) Live(id string) *Run { return m.lookup(id) }

// WarmSpec is the spec a warm agent of a session starts with before any
// turn of it runs (sessions.start with warm): the binary detection
// resolved, the environment a run of the adapter would get under the
// session's chain (no run id: the agent outlives any one run), and the
// runner's limits. The session's start has passed the guard and the
// bypass gate already; its turns each pass the whole gate.
func (m *Manager) WarmSpec(ctx context.Context, adapter string, ancestry []string, plan spawn.Plan) (spawn.RunSpec, error) {
	bin, _, err := m.deps.Binaries.Binary(ctx, adapter)
	if err != nil {
		return spawn.RunSpec{}, err
	}
	plan.Program = bin
	return spawn.RunSpec{Plan: plan, BaseEnv: childEnv(m.deps.Env, m.deps.PATH(), guard.Child(ancestry, adapter), ""),
		Limits: spawn.Limits{MaxOutput: m.cfg.MaxOutputBytes, KillGrace: killGrace}, ImageMemory: m.cfg.ImageMemory}, nil
}
