package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
	"github.com/card-dev/card/spawn"
)

// setupRuns opens the run history, ends what a previous daemon left
// running, and registers the run methods.
func (d *Daemon) setupRuns() error {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	path := filepath.Join(d.home, home.RunsDBName)
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
		PATH:     func() string { return d.detector.SearchPath().PATH() },
		Log:      d.log.Named("runs"),
	}, runs.Config{
		MaxConcurrentRuns:       d.cfg.MaxConcurrentRuns,
		MaxEventsPerRun:         d.cfg.MaxEventsPerRun,
		MaxOutputBytes:          d.cfg.MaxOutputBytes,
		AllowBypass:             d.cfg.AllowBypass,
		RecordTasks:             d.cfg.RecordTasks == nil || *d.cfg.RecordTasks,
		MaxTaskRecordBytes:      d.cfg.MaxTaskRecordBytes,
		MaxSubscriberQueueBytes: d.cfg.MaxSubscriberQueueBytes,
		Retention:               d.cfg.retention(),
		CancelOnDisconnect:      d.cfg.CancelOnDisconnect,
		ImageMemory:             spawn.NewBudget(d.cfg.Attachments.MaxBytesInFlight),
		Budgets:                 d.cfg.budgets(),
	})
	if err := d.runs.EndLeftovers(ctx); err != nil {
		return err
	}
	d.runs.StartPruning()
	d.onClose(d.runs.Shutdown)
	d.registerRuns()
	d.registerApprovals()
	d.registerUsage()
	return nil
}

// sendTo delivers a run's events to one client as agents.event
// notifications.
func sendTo(peer *rpc.Peer) runs.Send {
	return func(ctx context.Context, _ int64, ev json.RawMessage) error {
		return peer.Notify(ctx, "agents.event", ev)
	}
}

// follow sends a run's events to peer with events, and, when the subscriber
// fell too far behind and was cut off, tells it so. release, when set,
// frees the subscription's slot first: a client that hears it was cut off
// subscribes again at once.
func follow(ctx context.Context, peer *rpc.Peer, events func(context.Context, runs.Send) error, release func()) {
	err := events(ctx, sendTo(peer))
	if release != nil {
		release()
	}
	var behind *runs.BehindError
	if errors.As(err, &behind) {
		_ = peer.Notify(ctx, api.SubscriptionEndedMethod, cutOff(behind, behind.Error()))
	}
}

// cutOff is the runs.subscription_ended of a subscriber that fell too far
// behind a run, saying message; a session's subscriber adds its session.
func cutOff(behind *runs.BehindError, message string) api.SubscriptionEnded {
	return api.SubscriptionEnded{RunID: behind.RunID, Reason: "behind", NextSeq: behind.NextSeq,
		BehindBytes: behind.Behind, Limit: behind.Limit, ConfigKey: "max_subscriber_queue_bytes", Message: message}
}

// subscriptions counts the runs.subscribe streams each connection has open.
type subscriptions struct {
	mu sync.Mutex
	n  map[*rpc.Peer]int
}

// take counts one more subscription of peer, or refuses it past max.
func (s *subscriptions) take(peer *rpc.Peer, max int) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[*rpc.Peer]int{}
	}
	if s.n[peer] >= max {
		return nil, &TooManySubscriptionsError{Open: s.n[peer], Max: max}
	}
	s.n[peer]++
	var once sync.Once
	var stop func() bool
	release = func() {
		once.Do(func() {
			if stop != nil {
				stop()
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.n[peer]--; s.n[peer] <= 0 {
				delete(s.n, peer)
			}
		})
	}
	// A subscription whose answer never reached its client never runs its
	// stream, and must not hold its count past the connection.
	stop = context.AfterFunc(peer.Context(), release)
	return release, nil
}

// TooManySubscriptionsError refuses a runs.subscribe past
// max_subscriptions_per_connection.
type TooManySubscriptionsError struct{ Open, Max int }

func (e *TooManySubscriptionsError) Error() string {
	return fmt.Sprintf("this connection already follows %d runs (max_subscriptions_per_connection = %d); "+
		"a subscription ends with its run's last event: wait for one to end", e.Open, e.Max)
}

func (d *Daemon) registerRuns() {
	r := d.registry
	invokeDoc := rpc.Doc{
		Access:      rpc.AccessAgents,
		AccessRules: invokeAccessRules,
		Summary:     "Run an installed agent on a task, inside its permission boundary, and record the run.",
		Description: "Checks, in order: params (-32602 naming the field; an unknown id lists the known ones), the ancestry guard, " +
			"the daemon not shutting down, bypass allowed, agent installed and usable, unenforced read-only acknowledged, the concurrency cap " +
			"(max_concurrent_runs; a run over the cap is refused, never queued), and the budgets ([budget] in card.toml). Every invoke past params validation is recorded " +
			"as a run, refused ones with status `refused`. Without `stream` the answer is the finished run (InvokeResult: the " +
			"agent's result plus run_id, adapter, ancestry, status — a failed run is an answer with is_error, not a JSON-RPC error). " +
			"With `stream` the answer is {run_id, accepted: true} at once, and the run's events follow it as agents.event " +
			"notifications (never before it). A run belongs to the daemon: it " +
			"goes on when the client disconnects unless cancel_on_disconnect = true. With isolation \"worktree\" the run works in a git worktree " +
			"made for it from base (default HEAD) instead of the cwd's checkout, its changes become one commit, and the answer's " +
			"card_session_id names the closed session of one turn that holds the worktree for sessions.diff, apply, rewind and discard.",
		Errors: []int64{CodeGuardRefused, CodeBypassNotAllowed, CodeAgentNotInstalled, CodeAgentUnusable,
			CodeUnenforcedReadOnly, CodeTooManyRuns, CodeBudgetExceeded, rpcclient.CodeShuttingDown},
	}
	rpc.RegisterThen(r, "agents.invoke", invokeDoc, d.invoke)
	d.registerCAR()
	rpc.Register(r, "agents.cancel", rpc.Doc{
		Access:      rpc.AccessAgents,
		Summary:     "End a running run, streaming or not, with its whole process group, within 2 s; status `cancelled`.",
		Description: "Answers once the run has ended. A run that already ended is a no-op answer with cancelled = false and a reason.",
		Errors:      []int64{CodeRunNotFound},
	}, func(ctx context.Context, p api.CancelParams) (api.CancelResult, error) {
		return d.runs.Cancel(ctx, p.RunID)
	})
	rpc.Register(r, "runs.list", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "The run history, newest first, filtered by adapter and status; page with before = the last run_id of a page.",
		Description: "limit defaults to 50, at most 500; a larger one is refused (-32602 naming limit).",
	}, func(ctx context.Context, p api.ListParams) ([]api.Run, error) {
		return d.runs.List(ctx, store.ListQuery{Limit: p.Limit, Before: p.Before, Adapter: p.Adapter, Status: api.Status(p.Status)})
	})
	rpc.Register(r, "runs.get", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "One recorded run: status, ancestry, timestamps, answer, error, usage, cost.",
		Description: "An ask-mode run also lists its approvals: the questions it asked, in order, with their decisions (absent while one waits), at most 1,000; approvals_truncated and approvals_total say when it recorded more.",
		Errors:      []int64{CodeRunNotFound},
	}, func(ctx context.Context, p api.GetParams) (api.RunRecord, error) {
		return d.runs.Get(ctx, p.RunID)
	})
	d.registerRunSubscribe()
	rpc.Register(r, "runs.prune", rpc.Doc{
		Access:  rpc.AccessHost,
		Summary: "Delete finished runs past the retention (max_runs, max_age_days, or the params' own) with their events; dry_run only counts.",
		Description: "Never a running run, nor one whose events are still being stored. The daemon also prunes by itself at start, " +
			"every 10 minutes and after a burst of recorded runs. Answers what was (or would be) deleted and how many runs are kept.",
	}, func(ctx context.Context, p api.PruneParams) (api.PruneResult, error) {
		r := d.cfg.retention()
		if p.MaxRuns != nil {
			r.MaxRuns = *p.MaxRuns
		}
		if p.MaxAgeDays != nil {
			r.MaxAge = time.Duration(*p.MaxAgeDays) * 24 * time.Hour
		}
		r.DryRun = p.DryRun
		res, err := d.runs.Prune(ctx, r)
		return api.PruneResult{Pruned: res, DryRun: p.DryRun, MaxRuns: r.MaxRuns, MaxAgeDays: int(r.MaxAge / (24 * time.Hour))}, err
	})
	rpc.Notification[api.AgentEvent](r, "agents.event", rpc.Doc{
		Summary: "One event of a run: {run_id, seq, kind, …}; seq rises by one per event from 1.",
		Description: "kinds: session, text (delta when streamed in pieces), thinking (the model's reasoning, not the answer; delta when " +
			"in pieces), tool_use, tool_result, retry, usage, warning (the agent noted something that does not stop the run), other, " +
			"agent_error (the agent reported an error and may still recover), approval_requested and approval_decided (ask mode: a " +
			"question with tool and approval, and its decision), prompt_queued (a session's turn: a prompt now waits behind it, with queued), session_configured (a session's settings changed, with configured), changes (an isolated run's or turn's changes to its worktree, with changes, just before the terminal event), rewound (an isolated session's worktree went back to an earlier turn, with rewound), and exactly one terminal event: done (status succeeded) or error " +
			"(failed, cancelled, timed_out, interrupted), each with status and result.",
	})
}

// registerRunSubscribe registers runs.subscribe and the notification that
// ends a subscription cut off behind its run.
func (d *Daemon) registerRunSubscribe() {
	r := d.registry
	rpc.RegisterThen(r, "runs.subscribe", rpc.Doc{
		Access:  rpc.AccessRead,
		Summary: "Replay a run's events after after_seq as agents.event notifications, then follow it live to its end.",
		Description: "Each event arrives exactly once and in seq order; the last is `done` or `error`. Reconnecting clients pass " +
			"the last seq they saw. Events past max_events_per_run are not kept (the run's events_dropped counts them). While it " +
			"follows an ask-mode run whose starting connection is gone, a connection granted the approve access class is sent the run's questions (agents.approve); one without it is never asked.",
		Errors: []int64{CodeRunNotFound, CodeTooManySubs},
	}, func(ctx context.Context, p api.SubscribeParams) (api.SubscribeResult, rpc.Then, error) {
		peer := rpc.PeerFrom(ctx)
		release := func() {}
		if peer != nil {
			var err error
			if release, err = d.subs.take(peer, d.cfg.MaxSubscriptionsPerConn); err != nil {
				return api.SubscribeResult{}, nil, err
			}
		}
		res, events, err := d.runs.Subscribe(ctx, p.RunID, p.AfterSeq)
		if err != nil || peer == nil {
			release()
			return res, nil, err
		}
		return res, func(ctx context.Context) {
			defer release()
			// A follower of an ask-mode run is asked its questions once
			// the connection that started it is gone.
			// Only one that may approve: following a run is only read.
			if a := approverOf(peer); a != nil {
				defer d.runs.Watch(p.RunID, a)()
			}
			follow(ctx, peer, events, release)
		}, nil
	})
	rpc.Notification[api.SubscriptionEnded](r, api.SubscriptionEndedMethod, rpc.Doc{
		Summary: "A subscription was cut off, the run unaffected: the run added more than max_subscriber_queue_bytes of events this subscriber had yet to be sent.",
		Description: "Sent instead of the rest of the run's events, on runs.subscribe and streamed agents.invoke alike. " +
			"runs.subscribe with after_seq = next_seq - 1 continues from where it stopped. " +
			"On sessions.subscribe it names the session too (session_id), and sessions.subscribe with after_seq = session_next_seq - 1 continues.",
	})
}

// InvokeAnswer is agents.invoke's result: the finished run without stream,
// the acceptance with it.
type InvokeAnswer = rpc.Either[api.InvokeResult, api.InvokeAccepted]

// invoke prepares, starts and, without stream, waits for a run. A streamed
// run's events are sent by the returned Then, after the answer that names
// the run.
func (d *Daemon) invoke(ctx context.Context, p api.InvokeParams) (InvokeAnswer, rpc.Then, error) {
	peer := rpc.PeerFrom(ctx)
	if peer != nil {
		if err := plan.MayNameFiles(peer.Origin(), p.Attachments); err != nil {
			return InvokeAnswer{}, nil, err
		}
	}
	if p.Isolation != "" {
		return d.invokeIsolated(ctx, p, peer)
	}
	t, err := d.planner.Invoke(p)
	if err != nil {
		return InvokeAnswer{}, nil, err
	}
	req := t.Run
	if peer != nil {
		req.Conn = peer.Context()
		// A starter that may not approve is not asked: its run's questions
		// go to the connections following it that may.
		req.Asker = approverOf(peer)
	}
	run, err := d.runs.Start(ctx, req)
	if err != nil {
		return InvokeAnswer{}, nil, err
	}
	return d.answerRun(ctx, p, peer, run, nil)
}

// answerRun is agents.invoke's answer for a started run: at once with
// stream (its events then follow), else once it ended. add, when set,
// adds to the answer what the run's request made beside it.
func (d *Daemon) answerRun(ctx context.Context, p api.InvokeParams, peer *rpc.Peer, run *runs.Run, add func(*api.InvokeAccepted, *api.InvokeResult)) (InvokeAnswer, rpc.Then, error) {
	if p.Stream {
		acc := run.Accepted()
		if add != nil {
			add(&acc, nil)
		}
		accepted := rpc.Second[api.InvokeResult](acc)
		if peer == nil {
			return accepted, nil, nil
		}
		return accepted, func(ctx context.Context) {
			follow(ctx, peer, func(ctx context.Context, send runs.Send) error {
				return run.Follow(ctx, send, d.cfg.MaxSubscriberQueueBytes)
			}, nil)
		}, nil
	}
	res, err := run.Wait(ctx)
	if err != nil {
		return InvokeAnswer{}, nil, err
	}
	if add != nil {
		add(nil, &res)
	}
	return rpc.First[api.InvokeResult, api.InvokeAccepted](res), nil, nil
}
