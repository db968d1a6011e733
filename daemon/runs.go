package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
)

// The run subsystem's wire types and names, for clients of this package
// (the CLI, the end-to-end tests) that should not need to know where the
// run subsystem lives.
type (
	AgentEvent      = runs.AgentEvent
	InvokeResult    = runs.InvokeResult
	InvokeAccepted  = runs.InvokeAccepted
	CancelResult    = runs.CancelResult
	SubscribeResult = runs.SubscribeResult
)

// Event kinds and the run-id variable; see package runs.
const (
	EventDone       = runs.EventDone
	EventRunError   = runs.EventRunError
	EventAgentError = runs.EventAgentError
	RunIDEnv        = runs.RunIDEnv
)

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

// setupRuns opens the run history, ends what a previous daemon left
// running, and registers the run methods.
func (d *Daemon) setupRuns() error {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	path := filepath.Join(d.home, RunsDBName)
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		return fmt.Errorf("open the run history: %w (move %s aside to start with an empty history)", err, path)
	}
	d.onClose(func(context.Context) { _ = st.Close() })
	d.runs = runs.New(runs.Deps{
		Store:    st,
		Binaries: d.detector,
		Guard:    d.guard,
		Env:      d.env,
		PATH:     d.detector.SearchPath().PATH(),
		Log:      d.log.Named("runs"),
	}, runs.Config{
		MaxConcurrentRuns:  d.cfg.MaxConcurrentRuns,
		MaxEventsPerRun:    d.cfg.MaxEventsPerRun,
		MaxOutputBytes:     d.cfg.MaxOutputBytes,
		AllowBypass:        d.cfg.AllowBypass,
		RecordTasks:        d.cfg.RecordTasks == nil || *d.cfg.RecordTasks,
		CancelOnDisconnect: d.cfg.CancelOnDisconnect,
	})
	if err := d.runs.EndLeftovers(ctx); err != nil {
		return err
	}
	d.onClose(d.runs.Shutdown)
	d.registerRuns()
	d.registerApprovals()
	return nil
}

// sendTo delivers a run's events to one client as agents.event
// notifications.
func sendTo(peer *rpc.Peer) runs.Send {
	return func(ctx context.Context, ev json.RawMessage) error { return peer.Notify(ctx, "agents.event", ev) }
}

func (d *Daemon) registerRuns() {
	r := d.registry
	invokeDoc := rpc.Doc{
		Summary: "Run an installed agent on a task, inside its permission boundary, and record the run.",
		Description: "Checks, in order: params (-32602 naming the field; an unknown id lists the known ones), the ancestry guard, " +
			"the daemon not shutting down, bypass allowed, agent installed and usable, unenforced read-only acknowledged, and the concurrency cap " +
			"(max_concurrent_runs; a run over the cap is refused, never queued). Every invoke past params validation is recorded " +
			"as a run, refused ones with status `refused`. Without `stream` the answer is the finished run (InvokeResult: the " +
			"agent's result plus run_id, adapter, ancestry, status — a failed run is an answer with is_error, not a JSON-RPC error). " +
			"With `stream` the answer is {run_id, accepted: true} at once, and the run's events follow it as agents.event " +
			"notifications (never before it). A run belongs to the daemon: it " +
			"goes on when the client disconnects unless cancel_on_disconnect = true.",
		Errors: []int64{CodeGuardRefused, CodeBypassNotAllowed, CodeAgentNotInstalled, CodeAgentUnusable,
			CodeUnenforcedReadOnly, CodeTooManyRuns, rpc.CodeShuttingDown},
	}
	rpc.RegisterThen(r, "agents.invoke", invokeDoc, d.invoke)
	r.Alias("agents.invoke_external", "agents.invoke")
	rpc.Register(r, "agents.cancel", rpc.Doc{
		Summary:     "End a running run, streaming or not, with its whole process group, within 2 s; status `cancelled`.",
		Description: "Answers once the run has ended. A run that already ended is a no-op answer with cancelled = false and a reason.",
		Errors:      []int64{CodeRunNotFound},
	}, func(ctx context.Context, p CancelParams) (CancelResult, error) {
		return d.runs.Cancel(ctx, p.RunID)
	})
	rpc.Register(r, "runs.list", rpc.Doc{
		Summary:     "The run history, newest first, filtered by adapter and status; page with before = the last run_id of a page.",
		Description: "limit defaults to 50, at most 500.",
	}, func(ctx context.Context, p ListParams) ([]store.Run, error) {
		return d.runs.List(ctx, store.ListQuery{Limit: p.Limit, Before: p.Before, Adapter: p.Adapter, Status: store.Status(p.Status)})
	})
	rpc.Register(r, "runs.get", rpc.Doc{
		Summary:     "One recorded run: status, ancestry, timestamps, answer, error, usage, cost.",
		Description: "An ask-mode run also lists its approvals: every question it asked, in order, with its decision (absent while it waits).",
		Errors:      []int64{CodeRunNotFound},
	}, func(ctx context.Context, p GetParams) (RunRecord, error) {
		return d.runs.Get(ctx, p.RunID)
	})
	rpc.RegisterThen(r, "runs.subscribe", rpc.Doc{
		Summary: "Replay a run's events after after_seq as agents.event notifications, then follow it live to its end.",
		Description: "Each event arrives exactly once and in seq order; the last is `done` or `error`. Reconnecting clients pass " +
			"the last seq they saw. Events past max_events_per_run are not kept (the run's events_dropped counts them). While it " +
			"follows an ask-mode run whose starting connection is gone, the connection is sent the run's questions (agents.approve).",
		Errors: []int64{CodeRunNotFound},
	}, func(ctx context.Context, p SubscribeParams) (SubscribeResult, rpc.Then, error) {
		res, events, err := d.runs.Subscribe(ctx, p.RunID, p.AfterSeq)
		peer := rpc.PeerFrom(ctx)
		if err != nil || peer == nil {
			return res, nil, err
		}
		return res, func(ctx context.Context) {
			// A follower of an ask-mode run is asked its questions once
			// the connection that started it is gone.
			defer d.runs.Watch(p.RunID, peerAsker{peer})()
			events(ctx, sendTo(peer))
		}, nil
	})
	rpc.Notification[AgentEvent](r, "agents.event", rpc.Doc{
		Summary: "One event of a run: {run_id, seq, kind, …}; seq rises by one per event from 1.",
		Description: "kinds: session, text (delta when streamed in pieces), thinking (the model's reasoning, not the answer; delta when " +
			"in pieces), tool_use, tool_result, retry, usage, warning (the agent noted something that does not stop the run), other, " +
			"agent_error (the agent reported an error and may still recover), approval_requested and approval_decided (ask mode: a " +
			"question with tool and approval, and its decision), and exactly one terminal event: done (status succeeded) or error " +
			"(failed, cancelled, timed_out, interrupted), each with status and result.",
	})
}

// InvokeAnswer is agents.invoke's result: the finished run without stream,
// the acceptance with it.
type InvokeAnswer = rpc.Either[InvokeResult, InvokeAccepted]

// invoke prepares, starts and, without stream, waits for a run. A streamed
// run's events are sent by the returned Then, after the answer that names
// the run.
func (d *Daemon) invoke(ctx context.Context, p InvokeParams) (InvokeAnswer, rpc.Then, error) {
	req, err := d.prepare(p)
	if err != nil {
		return InvokeAnswer{}, nil, err
	}
	peer := rpc.PeerFrom(ctx)
	if peer != nil {
		req.Conn = peer.Context()
		req.Asker = peerAsker{peer}
	}
	run, err := d.runs.Start(ctx, req)
	if err != nil {
		return InvokeAnswer{}, nil, err
	}
	if p.Stream {
		accepted := rpc.Second[InvokeResult](run.Accepted())
		if peer == nil {
			return accepted, nil, nil
		}
		return accepted, func(ctx context.Context) { run.Follow(ctx, sendTo(peer)) }, nil
	}
	res, err := run.Wait(ctx)
	if err != nil {
		return InvokeAnswer{}, nil, err
	}
	return rpc.First[InvokeResult, InvokeAccepted](res), nil, nil
}
