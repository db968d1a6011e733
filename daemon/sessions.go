package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/sessions"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
	"github.com/card-dev/card/spawn"
)

// setupSessions builds the session manager over the run subsystem, carries
// on the sessions a previous daemon left open, and registers the methods.
func (d *Daemon) setupSessions() error {
	if d.warmer == nil {
		d.warmer = sessions.SpawnWarmer{}
	}
	wts, noWorktrees := d.setupWorktrees()
	d.sessions = sessions.New(sessions.Deps{
		Store:       d.runs.Store(),
		Runs:        d.runs,
		Planner:     d.planner,
		Warmer:      d.warmer,
		Worktrees:   wts,
		NoWorktrees: noWorktrees,
		Log:         d.log.Named("sessions"),
	}, sessions.Config{
		MaxQueue:             d.cfg.Sessions.MaxQueue,
		IdleTimeout:          time.Duration(d.cfg.Sessions.IdleSecs) * time.Second,
		MaxWarm:              d.cfg.Sessions.MaxWarm,
		MaxOpen:              d.cfg.Sessions.MaxOpen,
		MaxOpenPerOwner:      d.cfg.Sessions.MaxOpenPerOrigin,
		MaxWorktreesPerOwner: d.cfg.Sessions.MaxWorktreesPerOrigin,
		CloseIdle:            time.Duration(d.cfg.Sessions.CloseIdleHours) * time.Hour,
		PruneClosed:          d.cfg.retention().MaxAge,
		WorktreeMaxAge:       time.Duration(d.cfg.Sessions.WorktreeMaxAgeDays) * 24 * time.Hour,
		PromptsInCommits:     d.cfg.RecordTasks == nil || *d.cfg.RecordTasks,
	})
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	if err := d.sessions.Recover(ctx); err != nil {
		return err
	}
	// Closers run last registered first: sessions stop taking turns and end
	// their warm agents, the run subsystem ends the running turns, and the
	// turns' waiters record what was queued before the store closes.
	d.sessions.StartSweeping()
	d.onClose(func(ctx context.Context) {
		d.sessions.Shutdown(ctx)
		d.runs.Shutdown(ctx)
		d.sessions.Wait(ctx)
	})
	d.registerSessions()
	return nil
}

// sessionAccess is the class a session's turns need beyond agents, by its
// start params: what agents.invoke's access rules would ask of one of its
// runs. A prompt is held to it, so a connection that could not have
// started the session cannot run a turn of it either.
func sessionAccess(p api.SessionStartParams) (rpc.Access, string, any) {
	switch {
	case p.PermissionMode == string(spawn.ModeBypass):
		return rpc.AccessHost, "permission_mode", p.PermissionMode
	case p.PermissionMode == string(spawn.ModeEdit), p.PermissionMode == string(spawn.ModeAsk):
		return rpc.AccessWrite, "permission_mode", p.PermissionMode
	case p.AcknowledgeUnenforcedReadOnly:
		return rpc.AccessWrite, "acknowledge_unenforced_read_only", true
	case p.MCPEndpoint != "":
		return rpc.AccessWrite, "mcp_endpoint", p.MCPEndpoint
	}
	return "", "", nil
}

// mayAct refuses a change to a session (a prompt, steer, configure,
// cancel, release or close) from a web origin that did not start it. A
// native client may act on any session: it is the user's own program.
func (d *Daemon) mayAct(ctx context.Context, method, id string) error {
	peer := rpc.PeerFrom(ctx)
	if peer == nil || peer.Origin() == "" {
		return nil
	}
	owner, err := d.sessions.Owner(ctx, id)
	if err != nil {
		return err
	}
	if owner != peer.Origin() {
		return &sessions.NotOwnerError{SessionID: id, Method: method, Origin: peer.Origin()}
	}
	return nil
}

// mayPrompt refuses a prompt from a connection that may not act on the
// session, or is not granted what the session's turns need.
func (d *Daemon) mayPrompt(ctx context.Context, method, id string) error {
	if err := d.mayAct(ctx, method, id); err != nil {
		return err
	}
	peer := rpc.PeerFrom(ctx)
	if peer == nil {
		return nil
	}
	p, err := d.sessions.Params(ctx, id)
	if err != nil {
		return err
	}
	return grantsCover(method, peer, p)
}

// grantsCover refuses a turn of a session with params p to a connection
// not granted the class such a turn needs.
func grantsCover(method string, peer *rpc.Peer, p api.SessionStartParams) error {
	need, param, value := sessionAccess(p)
	if need == "" || peer.Grants().Has(need) {
		return nil
	}
	return &rpc.AccessDeniedError{Method: method, Need: need, Have: peer.Grants(), Origin: peer.Origin(), Param: param, Value: value}
}

func (d *Daemon) sessionStart(ctx context.Context, p api.SessionStartParams) (api.Session, error) {
	if strings.TrimSpace(p.ID) == "" {
		return api.Session{}, api.InvalidField("id", "required: the adapter of the conversation, one of %s", strings.Join(spawn.IDs(), ", "))
	}
	// The params are judged as a turn's would be.
	checked, err := d.planner.Check(p, "", nil, plan.Continue{})
	if err != nil {
		return api.Session{}, err
	}
	// The session runs where the check resolved it, whatever a link there
	// points to later.
	p.Cwd = checked.Cwd
	if p.PermissionMode == "" {
		p.PermissionMode = string(checked.Mode)
	}
	if p.Isolation != "" {
		if err := d.checkIsolatedCwd(p.Cwd); err != nil {
			return api.Session{}, err
		}
	}
	if _, _, err := d.detector.Binary(ctx, p.ID); err != nil {
		return api.Session{}, err
	}
	// The guard seeds the session's chain once; every turn is judged
	// against it and carries it.
	refusal, seeded := d.guard.Check(p.ID, p.InvokedBy)
	if refusal != nil {
		return api.Session{}, refusal
	}
	if p.PermissionMode == string(spawn.ModeBypass) && !d.cfg.AllowBypass {
		return api.Session{}, &spawn.BypassRefusedError{Adapter: p.ID}
	}
	owner := ""
	if peer := rpc.PeerFrom(ctx); peer != nil {
		owner = peer.Origin()
	}
	return d.sessions.Start(ctx, p, seeded, owner)
}

// sessionConfigure changes a session's mode, model or effort for its next
// turns. The new params are judged exactly as sessions.start judges a
// session's (the cwd against the new mode's roots, the adapter's modes and
// flags, allow_bypass), and the connection must hold what the new params
// need, as it must to start such a session.
func (d *Daemon) sessionConfigure(ctx context.Context, p api.SessionConfigureParams) (api.SessionConfigureResult, error) {
	if err := d.mayAct(ctx, "sessions.configure", p.SessionID); err != nil {
		return api.SessionConfigureResult{}, err
	}
	sp, err := d.sessions.Params(ctx, p.SessionID)
	if err != nil {
		return api.SessionConfigureResult{}, err
	}
	cur, err := d.sessions.Get(ctx, p.SessionID)
	if err != nil {
		return api.SessionConfigureResult{}, err
	}
	if cur.State == api.SessionClosed {
		return api.SessionConfigureResult{}, &sessions.ClosedError{SessionID: cur.SessionID, Reason: cur.CloseReason}
	}
	next := sp
	if p.ID != "" && p.ID != sp.ID {
		if err := d.mayChangeAdapter(ctx, cur, sp, p.ID); err != nil {
			return api.SessionConfigureResult{}, err
		}
		next.ID = p.ID
	}
	if p.PermissionMode != "" {
		next.PermissionMode = p.PermissionMode
	}
	switch p.Model {
	case "":
	case api.ConfigureDefault:
		next.Model = ""
	default:
		next.Model = p.Model
	}
	switch p.Effort {
	case "":
	case api.ConfigureDefault:
		next.Effort = ""
	default:
		next.Effort = p.Effort
	}
	if p.Isolation != "" {
		var err error
		if next.Isolation, next.Base, err = d.isolationChange(cur, sp, p); err != nil {
			return api.SessionConfigureResult{}, err
		}
	}
	if peer := rpc.PeerFrom(ctx); peer != nil {
		if need, param, value := sessionAccess(next); need != "" && !peer.Grants().Has(need) {
			return api.SessionConfigureResult{}, &rpc.AccessDeniedError{Method: "sessions.configure", Need: need, Have: peer.Grants(),
				Origin: peer.Origin(), Param: param, Value: value}
		}
	}
	if _, err := d.planner.Check(next, "", nil, plan.Continue{}); err != nil {
		return api.SessionConfigureResult{}, err
	}
	if next.PermissionMode == string(spawn.ModeBypass) && !d.cfg.AllowBypass {
		return api.SessionConfigureResult{}, &spawn.BypassRefusedError{Adapter: next.ID}
	}
	// A conversation under way must go on after the change: where the CLI
	// cannot resume it with the new settings (Gemini's ask channel is an
	// ACP session card cannot load), the change is refused now rather than
	// at the next prompt.
	if cur.AgentSessionID != "" {
		if _, err := d.planner.Check(next, "", nil, plan.Continue{Resume: cur.AgentSessionID}); err != nil {
			field := "permission_mode"
			if p.PermissionMode == "" {
				field = "model"
				if p.Model == "" {
					field = "effort"
				}
			}
			return api.SessionConfigureResult{}, api.InvalidField(field, "the session's conversation could not go on after this change: %v", err)
		}
	}
	return d.sessions.Configure(ctx, p.SessionID, next)
}

// isolationChange is the session's isolation and base after p: a worktree
// is made or removed only before the first turn (after one, the turns'
// conversation and changes are where they ran), from a cwd that may be
// isolated; a session already in a worktree keeps its base, and a new base
// for it is refused (the worktree is made once: set isolation off first).
func (d *Daemon) isolationChange(cur api.Session, sp api.SessionStartParams, p api.SessionConfigureParams) (string, string, error) {
	isolation, base := p.Isolation, p.Base
	if isolation == api.IsolationOff {
		isolation = ""
	}
	if isolation == sp.Isolation && (base == "" || cur.Worktree == nil || base == cur.Worktree.BaseRef) {
		return sp.Isolation, sp.Base, nil // no change
	}
	if cur.Turns > 0 {
		return "", "", api.InvalidField("isolation", "session %s has taken %d turn(s) where it runs now; isolation is chosen before its first turn: "+
			"start a new session for another", cur.SessionID, cur.Turns)
	}
	if isolation == sp.Isolation {
		return "", "", api.InvalidField("base", "session %s already works in a worktree from %s; set isolation %q first, then %q with the new base",
			cur.SessionID, cur.Worktree.BaseRef, api.IsolationOff, api.IsolationWorktree)
	}
	if isolation != "" {
		if err := d.checkIsolatedCwd(cur.Cwd); err != nil {
			return "", "", err
		}
	}
	return isolation, base, nil
}

// mayChangeAdapter refuses a session's change to adapter id after its
// first turn (another CLI could not carry the conversation), to an adapter
// that is not installed, or to one the guard refuses in the session's
// chain.
func (d *Daemon) mayChangeAdapter(ctx context.Context, cur api.Session, sp api.SessionStartParams, id string) error {
	if cur.Turns > 0 {
		return api.InvalidField("id", "session %s has taken %d turn(s) with %s, and another agent cannot carry its conversation; start a new session for %s",
			cur.SessionID, cur.Turns, sp.ID, id)
	}
	if _, _, err := d.detector.Binary(ctx, id); err != nil {
		return err
	}
	if refusal, _ := d.guard.Check(id, sp.InvokedBy); refusal != nil {
		return refusal
	}
	return nil
}

func (d *Daemon) sessionPrompt(ctx context.Context, p api.SessionPromptParams) (api.SessionPromptResult, error) {
	if strings.TrimSpace(p.SessionID) == "" {
		return api.SessionPromptResult{}, api.InvalidField("session_id", "required: the session sessions.start answered")
	}
	if err := d.mayPrompt(ctx, "sessions.prompt", p.SessionID); err != nil {
		return api.SessionPromptResult{}, err
	}
	peer := rpc.PeerFrom(ctx)
	if peer != nil {
		if err := plan.MayNameFiles(peer.Origin(), p.Attachments); err != nil {
			return api.SessionPromptResult{}, err
		}
	}
	if err := d.adapterStillThere(ctx, p.SessionID); err != nil {
		return api.SessionPromptResult{}, err
	}
	var from sessions.Sender
	if peer != nil {
		from.Asker, from.Conn = approverOf(peer), peer.Context()
		from.Judge = func(sp api.SessionStartParams) error { return grantsCover("sessions.prompt", peer, sp) }
		from.NoStandingAnswers = !peer.Grants().Has(rpc.AccessApprove)
	}
	res, err := d.sessions.Prompt(ctx, p, from)
	if err != nil {
		var missing *detect.NotInstalledError
		var unusable *detect.UnusableError
		if errors.As(err, &missing) || errors.As(err, &unusable) {
			adapter := ""
			if s, gerr := d.sessions.Get(ctx, p.SessionID); gerr == nil {
				adapter = s.Adapter
			}
			return res, &sessions.AdapterGoneError{SessionID: p.SessionID, Adapter: adapter, Err: err}
		}
	}
	return res, err
}

func (d *Daemon) registerSessions() {
	r := d.registry
	rpc.Register(r, "sessions.start", rpc.Doc{
		Access:      rpc.AccessAgents,
		AccessRules: sessionStartAccessRules,
		Summary:     "Start a conversation with an adapter: what holds for every turn (cwd, mode, model, caps, …); nothing runs until the first prompt.",
		Description: "The params are agents.invoke's, without the task, and are judged as a turn's would be (-32602 naming the field). " +
			"The guard seeds the session's ancestry once; every turn carries it. max_cost_usd and max_tokens cap the whole session. " +
			"With warm, the agent's process starts at once where the adapter can keep one across turns. " +
			"With isolation \"worktree\" every turn runs in a git worktree of the cwd's repository, on a branch of the session's own " +
			"(card/<session_id>) from base (default HEAD), and the user's checkout is never written; the answer's worktree says where, and " +
			"whether the checkout had uncommitted changes (they are not in the worktree). A cwd outside a git repository is refused (-32602 naming isolation).",
		Errors: []int64{CodeGuardRefused, CodeBypassNotAllowed, CodeAgentNotInstalled, CodeAgentUnusable, rpcclient.CodeShuttingDown},
	}, d.sessionStart)
	rpc.Register(r, "sessions.prompt", rpc.Doc{
		Access:  rpc.AccessAgents,
		Summary: "One turn: run the prompt now if the session is idle, else queue it (FIFO, [sessions] max_queue); the answer says which turn and where it waits.",
		Description: "Each turn is a run (runs.get shows it, with card_session_id and session_turn), with agents.invoke's gates, events, " +
			"approvals, attachments and budgets; a turn after the first continues the CLI's own session. The prompt needs the access " +
			"class the session's params need (write for edit or ask, host for bypass). A queued prompt adds a prompt_queued event to the " +
			"running turn's stream. Once a session cap is spent the prompt is refused (-32050, data.cap).",
		Errors: []int64{CodeSessionNotFound, CodeSessionClosed, CodeSessionQueueFull, CodeAdapterGone, CodeGuardRefused,
			CodeAgentUnusable, CodeTooManyRuns, CodeBudgetExceeded, rpcclient.CodeShuttingDown},
	}, d.sessionPrompt)
	rpc.Register(r, "sessions.steer", rpc.Doc{
		Access:      rpc.AccessAgents,
		Summary:     "Add input to the running turn, where the agent's CLI has a channel for it; refused with the reason elsewhere.",
		Description: "Only a turn over a warm agent whose CLI takes input during a turn can be steered; a cold turn, an idle session, or an adapter without such a channel is refused with -32046 and data.reason.",
		Errors:      []int64{CodeSessionNotFound, CodeSessionClosed, CodeSteerUnsupported},
	}, func(ctx context.Context, p api.SessionSteerParams) (api.SessionSteerResult, error) {
		if err := d.mayPrompt(ctx, "sessions.steer", p.SessionID); err != nil {
			return api.SessionSteerResult{}, err
		}
		return d.sessions.Steer(ctx, p)
	})
	rpc.Register(r, "sessions.configure", rpc.Doc{
		Access:      rpc.AccessAgents,
		AccessRules: sessionConfigureAccessRules,
		Summary:     "Change the session's permission_mode, model or effort from its next turn on, and before its first turn its adapter or isolation; the running turn keeps what it started with.",
		Description: "The new params are judged as sessions.start judges a session's (-32602 naming the field: a cwd the new mode may not run in, " +
			"a mode or flag the adapter does not take), and need the access class sessions.start would (write for edit or ask, host for bypass; " +
			"bypass also needs allow_bypass). model or effort \"default\" goes back to the CLI's own. The change is recorded with the session. " +
			"A warm agent started with the old settings ends now when idle, else when its turn ends (warm_agent says which); the next turn starts " +
			"the CLI anew and resumes the conversation. applies_from_turn is the first turn that runs with the change. A change adds a " +
			"session_configured event to the session's stream, so every subscriber hears it. Before the first turn, id changes the adapter, " +
			"and isolation \"worktree\" makes the session's worktree (from base) or \"off\" removes it, which needs write as sessions.discard " +
			"does; after it both are refused (-32602 naming the field). A new worktree counts against [sessions] max_worktrees_per_origin.",
		Errors: []int64{CodeSessionNotFound, CodeSessionClosed, CodeBypassNotAllowed, CodeTooManySessions},
	}, d.sessionConfigure)
	rpc.Register(r, "sessions.cancel", rpc.Doc{
		Access:      rpc.AccessAgents,
		Summary:     "End the session's running turn (its run ends cancelled); with clear_queue, drop the queued prompts too.",
		Description: "Answers once the turn has ended. Without clear_queue the next queued prompt then runs. Each dropped prompt is recorded as a refused turn with one event saying so; cleared counts them.",
		Errors:      []int64{CodeSessionNotFound, CodeSessionClosed},
	}, func(ctx context.Context, p api.SessionCancelParams) (api.SessionCancelResult, error) {
		if err := d.mayAct(ctx, "sessions.cancel", p.SessionID); err != nil {
			return api.SessionCancelResult{}, err
		}
		return d.sessions.Cancel(ctx, p)
	})
	rpc.Register(r, "sessions.close", rpc.Doc{
		Access:      rpc.AccessAgents,
		Summary:     "End the session: its running turn is cancelled, its queue dropped (recorded), its warm agent ended; its history stays.",
		Description: "Closing a closed session answers it as it is.",
		Errors:      []int64{CodeSessionNotFound},
	}, func(ctx context.Context, p api.SessionIDParams) (api.Session, error) {
		if err := d.mayAct(ctx, "sessions.close", p.SessionID); err != nil {
			return api.Session{}, err
		}
		return d.sessions.Close(ctx, p.SessionID, "")
	})
	rpc.Register(r, "sessions.release", rpc.Doc{
		Access:  rpc.AccessAgents,
		Summary: "End the session's warm agent now (an idle one at once, one in a turn when the turn ends) and keep the session open.",
		Description: "For a client that will not prompt again soon, such as an editor that exited: without it the agent holds its process for " +
			"[sessions] idle_secs. The next turn resumes the CLI's session, cold or in a new warm agent. warm_agent says ended, ends_after_turn, " +
			"kept (the agent alone holds a conversation its CLI cannot resume in a new process, Gemini CLI's ask sessions, so it stays until idle_secs), " +
			"or is absent when there was none.",
		Errors: []int64{CodeSessionNotFound, CodeSessionClosed},
	}, func(ctx context.Context, p api.SessionIDParams) (api.SessionReleaseResult, error) {
		if err := d.mayAct(ctx, "sessions.release", p.SessionID); err != nil {
			return api.SessionReleaseResult{}, err
		}
		return d.sessions.Release(ctx, p.SessionID)
	})
	// What one connection sends a session is taken in the order it was
	// sent: prompts queue in that order, and a steer, configure, cancel or
	// close applies after the prompts sent before it and before those sent
	// after it.
	for _, m := range []string{"sessions.prompt", "sessions.steer", "sessions.configure", "sessions.cancel", "sessions.close", "sessions.release"} {
		rpc.Ordered(r, m, "session_id")
	}
	d.registerSessionReads()
	d.registerReview()
}

// registerSessionReads registers what follows a session without changing
// it: its list, one session, its stream and the stream's notification.
func (d *Daemon) registerSessionReads() {
	r := d.registry
	rpc.Register(r, "sessions.list", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "The sessions, newest first: open ones by default, closed ones too with include_closed; filter by adapter and state.",
		Description: "limit defaults to 50, at most 500; a larger one is refused (-32602 naming limit). A web origin is shown only the sessions it started; a native client every one.",
	}, func(ctx context.Context, p api.SessionListParams) (api.SessionList, error) {
		var owner *string
		if peer := rpc.PeerFrom(ctx); peer != nil && peer.Origin() != "" {
			o := peer.Origin()
			owner = &o
		}
		return d.sessions.List(ctx, p, owner)
	})
	rpc.Register(r, "sessions.get", rpc.Doc{
		Access:  rpc.AccessRead,
		Summary: "One session: its state (idle, running, waiting_approval, closed), turns, queue, the CLI's session id, warm agent, spending and next seq.",
		Errors:  []int64{CodeSessionNotFound},
	}, func(ctx context.Context, p api.SessionIDParams) (api.Session, error) {
		return d.sessions.Get(ctx, p.SessionID)
	})
	d.registerSessionStream()
}

// registerSessionStream registers sessions.subscribe and its events.
func (d *Daemon) registerSessionStream() {
	r := d.registry
	rpc.RegisterThen(r, "sessions.subscribe", rpc.Doc{
		Access:  rpc.AccessRead,
		Summary: "Replay a session's events after after_seq as sessions.event notifications, across its turns, then follow it live until it closes.",
		Description: "seq counts across the turns from 1; a reconnecting client passes the last seq it saw and misses nothing. " +
			"A connection granted the approve class is also asked the questions of the session's ask-mode turns while it follows (the first answer wins).",
		Errors: []int64{CodeSessionNotFound, CodeTooManySubs},
	}, func(ctx context.Context, p api.SessionSubscribeParams) (api.SessionSubscribeResult, rpc.Then, error) {
		peer := rpc.PeerFrom(ctx)
		release := func() {}
		if peer != nil {
			var err error
			if release, err = d.subs.take(peer, d.cfg.MaxSubscriptionsPerConn); err != nil {
				return api.SessionSubscribeResult{}, nil, err
			}
		}
		var watcher runs.Asker
		if peer != nil {
			watcher = approverOf(peer)
		}
		res, events, err := d.sessions.Subscribe(ctx, p.SessionID, p.AfterSeq, watcher)
		if err != nil || peer == nil {
			release()
			return res, nil, err
		}
		send := func(ctx context.Context, ev json.RawMessage) error { return peer.Notify(ctx, "sessions.event", ev) }
		return res, func(ctx context.Context) {
			err := events(ctx, send)
			// The slot is free before the client hears it was cut off: it
			// subscribes again at once.
			release()
			var behind *sessions.BehindError
			if errors.As(err, &behind) {
				// Cut off for falling too far behind a turn: the session and
				// the turn go on; the client subscribes again after the last
				// session seq it saw.
				ended := cutOff(behind.BehindError, behind.Error())
				ended.SessionID, ended.SessionNextSeq = behind.SessionID, behind.NextSessionSeq
				_ = peer.Notify(ctx, api.SubscriptionEndedMethod, ended)
			}
		}, nil
	})
	rpc.Notification[api.SessionEvent](r, "sessions.event", rpc.Doc{
		Summary: "One event of a session: {session_id, seq, turn, event}, event being the turn's run event whole (agents.event's shape); seq counts across turns from 1.",
		Description: "Besides a run's kinds, a session's stream has prompt_queued (a prompt waits behind this turn; queued says its turn and position) " +
			"and session_configured (sessions.configure changed the session's settings; configured says what they now are and from which turn; " +
			"on the running turn's stream, or between turns with run_id \"\" and seq 0, turn then being the last turn taken). " +
			"An isolated session's turn ends with changes (what it changed, now its commit) just before its terminal event, and sessions.rewind " +
			"adds rewound between turns. " +
			"A turn that never ran (dropped from the queue, refused when it came up) has one error event with status refused.",
	})
}

// sessionStartAccessRules are agents.invoke's access rules, on
// sessions.start's params of the same names.
var sessionStartAccessRules = invokeAccessRules

// sessionConfigureAccessRules are the permission-mode rules of
// sessions.start: a session changed to a mode needs what starting one in
// it needs. The session's other params (an MCP endpoint, an acknowledged
// read-only) are held to their rules by the handler, from the session.
var sessionConfigureAccessRules = []rpc.AccessRule{
	// Removing a worktree is sessions.discard's act, which needs write;
	// making one needs what starting an isolated session needs.
	{Param: "isolation", Value: api.IsolationOff, Access: rpc.AccessWrite},
	{Param: "permission_mode", Value: string(spawn.ModeEdit), Access: rpc.AccessWrite},
	{Param: "permission_mode", Value: string(spawn.ModeAsk), Access: rpc.AccessWrite},
	{Param: "permission_mode", Value: string(spawn.ModeBypass), Access: rpc.AccessHost},
}

// adapterStillThere refuses a prompt to a session whose adapter's CLI is
// gone since the session started: detection's answer is cached, so the
// binary it found is looked at again, and a turn is not recorded as a run
// that failed to start when the CLI was uninstalled.
func (d *Daemon) adapterStillThere(ctx context.Context, id string) error {
	sp, err := d.sessions.Params(ctx, id)
	if err != nil {
		return err
	}
	bin, _, err := d.detector.Binary(ctx, sp.ID)
	if err == nil {
		if _, serr := os.Stat(bin); serr != nil {
			err = fmt.Errorf("its binary %s is gone (%v)", bin, serr)
		}
	}
	if err != nil {
		return &sessions.AdapterGoneError{SessionID: id, Adapter: sp.ID, Err: err}
	}
	return nil
}
