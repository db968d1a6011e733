package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/sessions"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
	"github.com/card-dev/card/spawn"
	"github.com/card-dev/card/substrate"
)

// The daemon's application error codes. rpc owns the JSON-RPC and transport
// codes; these are the product's, registered on the registry so rpc.discover
// and docs/protocol.md list them beside rpc's. Every mapping of a domain
// error onto a code is in this file, so a client-visible code is decided in
// one place and handlers return their errors as they are.
const (
	CodeGuardRefused        int64 = -32010
	CodeAgentNotInstalled   int64 = -32011
	CodeAgentUnusable       int64 = -32012
	CodeBypassNotAllowed    int64 = -32013
	CodeTooManyRuns         int64 = -32014
	CodeUnenforcedReadOnly  int64 = -32015
	CodeRunNotFound         int64 = -32016
	CodeApprovalNotFound    int64 = -32017
	CodeApprovalClosed      int64 = -32018
	CodeApprovalNotAsked    int64 = -32019
	CodeSubstrateReadOnly   int64 = -32020
	CodeSubstrateFailed     int64 = -32021
	CodeSubstrateTransport  int64 = -32022
	CodeSubstrateNotSupport int64 = -32023
	CodeAccessDenied        int64 = -32030
	CodeTooManySubs         int64 = -32031
	CodeBudgetExceeded      int64 = -32050

	CodeSessionNotFound  int64 = -32043
	CodeSessionClosed    int64 = -32044
	CodeSessionQueueFull int64 = -32045
	CodeSteerUnsupported int64 = -32046
	CodeAdapterGone      int64 = -32047
	CodeNotSessionOwner  int64 = -32051
	CodeTooManySessions  int64 = -32052
	CodeApplyConflict    int64 = -32053
	CodeSessionBusy      int64 = -32054
	CodeWorktreeGone     int64 = -32055
)

// codes documents the application codes, in table order.
var codes = []rpc.CodeInfo{
	{Code: CodeGuardRefused, Name: "guard_refused", Meaning: "The ancestry guard refused the spawn: the adapter is already in the chain (cycle) or the chain is at its limit (depth)."},
	{Code: CodeAgentNotInstalled, Name: "agent_not_installed", Meaning: "The adapter is known but no binary for it was found."},
	{Code: CodeAgentUnusable, Name: "agent_unusable", Meaning: "A binary was found but cannot run; data.reason says why."},
	{Code: CodeBypassNotAllowed, Name: "bypass_not_allowed", Meaning: "permission_mode bypass needs allow_bypass = true in card.toml."},
	{Code: CodeTooManyRuns, Name: "too_many_runs", Meaning: "The daemon is already running its maximum number of agents (max_concurrent_runs)."},
	{Code: CodeUnenforcedReadOnly, Name: "read_only_not_enforced", Meaning: "The adapter cannot enforce read_only (or edit, where its edit_enforcement is not_enforced); the request must acknowledge that explicitly."},
	{Code: CodeRunNotFound, Name: "run_not_found", Meaning: "No run with that id."},
	{Code: CodeApprovalNotFound, Name: "approval_not_found", Meaning: "The run asked no question with that request_id."},
	{Code: CodeApprovalClosed, Name: "approval_closed", Meaning: "The question was already decided (by a client, the timeout, a rule or the run's end), or the run has ended."},
	{Code: CodeApprovalNotAsked, Name: "approval_not_asked", Meaning: "The question was not sent to this connection, so it may not answer it."},
	{Code: CodeSubstrateReadOnly, Name: "substrate_read_only", Meaning: "The substrate is read-only ([substrate] read_only = true) and refuses exec and writes."},
	{Code: CodeSubstrateFailed, Name: "substrate_failed", Meaning: "The substrate operation failed; the message names the path or command."},
	{Code: CodeSubstrateTransport, Name: "substrate_transport", Meaning: "The MCP bridge behind the substrate could not be reached; retrying later may help."},
	{Code: CodeSubstrateNotSupport, Name: "substrate_not_supported", Meaning: "The substrate does not offer that operation (for example a PTY)."},
	{Code: CodeAccessDenied, Name: "access_denied", Meaning: "The connection is not granted the access class the method, or a param's value (permission_mode edit, ask, bypass), needs (a browser origin gets read and agents unless card.toml grants it more); data names the class, the param and the card.toml key."},
	{Code: CodeTooManySubs, Name: "too_many_subscriptions", Meaning: "This connection already follows max_subscriptions_per_connection runs; a subscription ends with its run's last event."},
	{Code: CodeBudgetExceeded, Name: "budget_exceeded", Meaning: "A daily or monthly budget in card.toml ([budget]) is reached, counting what the runs in flight reserve; data names the budget, its scope (an adapter or all), period, limit, spent, in_flight and resets_at."},
	{Code: CodeSessionNotFound, Name: "session_not_found", Meaning: "No session with that session_id; data names it."},
	{Code: CodeSessionClosed, Name: "session_closed", Meaning: "The session was closed and takes no more prompts; data names it and why it closed."},
	{Code: CodeSessionQueueFull, Name: "session_queue_full", Meaning: "The session already holds [sessions] max_queue prompts behind its running turn; the prompt was refused, not queued."},
	{Code: CodeSteerUnsupported, Name: "steer_unsupported", Meaning: "The running turn cannot take more input: no turn runs, the turn is cold, or the adapter's CLI has no channel for it; data.reason says which."},
	{Code: CodeAdapterGone, Name: "adapter_gone", Meaning: "The session's adapter is no longer installed or usable; data names the adapter and detection's reason."},
	{Code: CodeNotSessionOwner, Name: "not_session_owner", Meaning: "The session was started by another client (another web origin): only the client that started it, or a native client, may prompt, steer, configure, cancel, release, load or close it; data names the session and the method."},
	{Code: CodeTooManySessions, Name: "too_many_sessions", Meaning: "[sessions] max_open sessions are open, or max_open_per_origin of this client's, or (an isolated start) this client holds max_worktrees_per_origin worktrees; data names the key, the bound and how many there are. Close a session with sessions.close, or discard a worktree with sessions.discard."},
	{Code: CodeApplyConflict, Name: "apply_conflict", Meaning: "sessions.apply: the session's changes conflict with the user's checkout, which is unchanged; data.files lists each file with git's reason, data.repo the checkout."},
	{Code: CodeSessionBusy, Name: "session_busy", Meaning: "sessions.rewind or sessions.discard while a turn of the session runs or prompts wait; data names the run and how many are queued. End them with sessions.cancel first."},
	{Code: CodeWorktreeGone, Name: "worktree_gone", Meaning: "The isolated session's worktree is gone: discarded, pruned by age ([sessions] worktree_max_age_days), or removed by hand; data.reason says which."},
	{Code: CodeSessionInUse, Name: "session_in_use", Meaning: "agents.invoke_external: this connection already has a running run under that session_id; data names it."},
}

// wireError maps a domain error onto the wire. The registry applies it to
// every handler's and Validate method's error (rpc.Registry.MapErrors); what
// it does not know is left to rpc (an *rpc.Error or *api.FieldError as is,
// anything else -32603).
func wireError(err error) error {
	var (
		refused    *runs.RefusedError
		unknown    *detect.UnknownAdapterError
		missing    *detect.NotInstalledError
		unusable   *detect.UnusableError
		loop       *guard.Refusal
		bypass     *spawn.BypassRefusedError
		unenforced *runs.UnenforcedReadOnlyError
		busy       *runs.TooManyRunsError
		denied     *rpc.AccessDeniedError
		subs       *TooManySubscriptionsError
		inUse      *SessionInUseError
		overBudget *runs.BudgetExceededError
		cwdRefused *plan.CwdRefusedError
	)
	if e := sessionError(err); e != nil {
		return e
	}
	if e := isolationError(err); e != nil {
		return e
	}
	if e := runError(err); e != nil {
		return e
	}
	switch {
	case errors.As(err, &inUse):
		return &rpcclient.Error{Code: CodeSessionInUse, Message: inUse.Error(), Data: map[string]any{"session_id": inUse.SessionID, "run_id": inUse.RunID}}
	case errors.As(err, &subs):
		return &rpcclient.Error{Code: CodeTooManySubs, Message: subs.Error(),
			Data: map[string]any{"open": subs.Open, "max_subscriptions_per_connection": subs.Max, "config_key": "max_subscriptions_per_connection"}}
	case errors.As(err, &denied):
		return accessDenied(denied)
	case errors.As(err, &refused):
		// A refused run was recorded: its error names the record.
		e := rpc.ToError(wireError(refused.Err))
		data, ok := e.Data.(map[string]any)
		if !ok {
			data = map[string]any{}
		}
		data["run_id"] = refused.RunID
		return &rpcclient.Error{Code: e.Code, Message: e.Message, Data: data}
	case errors.As(err, &cwdRefused):
		return &rpcclient.Error{Code: rpcclient.CodeInvalidParams, Message: "invalid params: " + cwdRefused.Error(),
			Data: map[string]any{"field": "cwd", "resolved": cwdRefused.Resolved, "rule": cwdRefused.Rule, "config_key": plan.AllowedEditDirsKey}}
	case errors.As(err, &unknown):
		return &rpcclient.Error{Code: rpcclient.CodeInvalidParams, Message: "invalid params: id: " + unknown.Error(),
			Data: map[string]any{"field": "id", "id": unknown.ID, "known": unknown.Known}}
	case errors.As(err, &missing):
		return &rpcclient.Error{Code: CodeAgentNotInstalled, Message: missing.Error(),
			Data: map[string]any{"adapter": missing.ID, "binary": missing.Binary, "pin_env": missing.PinEnv, "install_hint": missing.InstallHint}}
	case errors.As(err, &unusable):
		return &rpcclient.Error{Code: CodeAgentUnusable, Message: unusable.Error(),
			Data: map[string]any{"adapter": unusable.ID, "path": unusable.Path, "reason": unusable.Reason}}
	case errors.As(err, &loop):
		return &rpcclient.Error{Code: CodeGuardRefused, Message: loop.Error(),
			Data: map[string]any{"adapter": loop.Adapter, "ancestry": loop.Ancestry, "max_chain": loop.MaxChain, "reason": loop.Reason}}
	case errors.Is(err, runs.ErrShuttingDown):
		return &rpcclient.Error{Code: rpcclient.CodeShuttingDown, Message: err.Error()}
	case errors.As(err, &bypass):
		return &rpcclient.Error{Code: CodeBypassNotAllowed, Message: bypass.Error(),
			Data: map[string]any{"adapter": bypass.Adapter, "permission_mode": string(spawn.ModeBypass), "config_key": "allow_bypass"}}
	case errors.As(err, &unenforced):
		return &rpcclient.Error{Code: CodeUnenforcedReadOnly, Message: unenforced.Error(),
			Data: unenforcedData(unenforced)}
	case errors.As(err, &busy):
		return &rpcclient.Error{Code: CodeTooManyRuns, Message: busy.Error(),
			Data: map[string]any{"running": busy.Running, "max_concurrent_runs": busy.Max}}
	case errors.As(err, &overBudget):
		return &rpcclient.Error{Code: CodeBudgetExceeded, Message: overBudget.Error(),
			Data: map[string]any{"budget": overBudget.Budget, "scope": overBudget.Scope, "period": overBudget.Period,
				"limit": overBudget.Limit, "spent": overBudget.Spent, "in_flight": overBudget.InFlight,
				"in_flight_runs": overBudget.InFlightRuns, "resets_at": overBudget.ResetsAt.Format(time.RFC3339),
				"config_key": overBudget.ConfigKey()}}
	}
	return err
}

// runError maps the errors of a run once started (its wait, its record,
// its questions) onto the wire; nil for any other error.
func runError(err error) error {
	var (
		waitEnded  *runs.WaitEndedError
		notFound   *runs.NotFoundError
		noQuestion *runs.ApprovalNotFoundError
		closedQ    *runs.ApprovalClosedError
		notAsked   *runs.ApprovalNotAskedError
		badChoice  *runs.BadDecisionError
	)
	switch {
	case errors.As(err, &waitEnded):
		// Only a client that withdrew the request reads this answer (one
		// that went away reads nothing), and it needs the run's id to end
		// the run or to follow it.
		return &rpcclient.Error{Code: rpcclient.CodeRequestCancelled, Message: waitEnded.Error(), Data: map[string]any{"run_id": waitEnded.RunID}}
	case errors.As(err, &notFound):
		return &rpcclient.Error{Code: CodeRunNotFound, Message: notFound.Error(), Data: map[string]any{"run_id": notFound.RunID}}
	case errors.As(err, &noQuestion):
		return &rpcclient.Error{Code: CodeApprovalNotFound, Message: noQuestion.Error(),
			Data: map[string]any{"run_id": noQuestion.RunID, "request_id": noQuestion.RequestID}}
	case errors.As(err, &closedQ):
		data := map[string]any{"run_id": closedQ.RunID}
		if closedQ.RequestID != "" {
			data["request_id"], data["decision"], data["by"] = closedQ.RequestID, closedQ.Decision, closedQ.By
		}
		return &rpcclient.Error{Code: CodeApprovalClosed, Message: closedQ.Error(), Data: data}
	case errors.As(err, &notAsked):
		return &rpcclient.Error{Code: CodeApprovalNotAsked, Message: notAsked.Error(),
			Data: map[string]any{"run_id": notAsked.RunID, "request_id": notAsked.RequestID}}
	case errors.As(err, &badChoice):
		return api.InvalidField("decision", "%s", badChoice.Error())
	}
	return nil
}

// substrateError maps the substrate's typed errors onto the wire codes. It
// is applied by every substrate method (subMethod), because there an error
// the substrate does not type is still the substrate's failure (-32021), not
// the daemon's (-32603).
func substrateError(err error) error {
	var ro *substrate.ReadOnlyError
	var te *substrate.TransportError
	var to *substrate.TimeoutError
	var fe *api.FieldError
	switch {
	case errors.As(err, &fe):
		return err
	case errors.As(err, &ro) || errors.Is(err, substrate.ErrReadOnly):
		return &rpcclient.Error{Code: CodeSubstrateReadOnly, Message: err.Error(), Data: map[string]any{"config_key": "[substrate] read_only"}}
	case errors.Is(err, substrate.ErrInvalidPath):
		return &rpcclient.Error{Code: rpcclient.CodeInvalidParams, Message: "invalid params: path: " + err.Error(), Data: map[string]any{"field": "path"}}
	case errors.Is(err, substrate.ErrNotSupported):
		return &rpcclient.Error{Code: CodeSubstrateNotSupport, Message: err.Error()}
	case errors.As(err, &te):
		return &rpcclient.Error{Code: CodeSubstrateTransport, Message: err.Error(), Data: map[string]any{"op": te.Op, "target": te.Target, "timeout": te.Timeout, "attempts": te.Attempts}}
	case errors.As(err, &to):
		return &rpcclient.Error{Code: CodeSubstrateFailed, Message: err.Error(), Data: map[string]any{"reason": "timeout", "command": to.Command, "after_secs": to.After.Seconds()}}
	case errors.Is(err, substrate.ErrPathExists), errors.Is(err, substrate.ErrPathStateUnknown):
		return &rpcclient.Error{Code: CodeSubstrateFailed, Message: err.Error(), Data: map[string]any{"reason": "create_only"}}
	}
	return &rpcclient.Error{Code: CodeSubstrateFailed, Message: err.Error()}
}

// accessDenied names what the connection lacks and where an operator grants
// it. Only a browser origin can lack a class: a native client holds all.
func accessDenied(e *rpc.AccessDeniedError) error {
	data := map[string]any{"method": e.Method, "access": e.Need, "grants": e.Have.List(), "origin": e.Origin}
	msg := e.Error()
	if e.Param != "" {
		// The param that needed the class, by its own name, so a client
		// reads data.permission_mode as it sent it.
		data["param"] = e.Param
		data[e.Param] = e.Value
	}
	if e.Origin != "" {
		key := OriginGrantsKey(e.Origin)
		data["config_key"] = key
		msg += fmt.Sprintf("; an operator who trusts that page with it adds %q to %s in %s", e.Need, key, ConfigFileName)
		if e.Param == "permission_mode" && e.Value == string(spawn.ModeBypass) {
			msg += " (allow_bypass alone never opens bypass to a web page)"
		}
	}
	return &rpcclient.Error{Code: CodeAccessDenied, Message: msg, Data: data}
}

// sessionError maps the session manager's errors onto the wire, or nil
// for another error.
func sessionError(err error) error {
	var (
		notFound *sessions.NotFoundError
		closed   *sessions.ClosedError
		full     *sessions.QueueFullError
		steer    *sessions.SteerUnsupportedError
		adapter  *sessions.AdapterGoneError
		capped   *sessions.CapError
		notOwner *sessions.NotOwnerError
		tooMany  *sessions.TooManySessionsError
		plain    *sessions.NotIsolatedError
		gone     *sessions.WorktreeGoneError
		busy     *sessions.BusyError
	)
	switch {
	case errors.As(err, &notFound):
		return &rpcclient.Error{Code: CodeSessionNotFound, Message: notFound.Error(), Data: map[string]any{"field": "session_id", "session_id": notFound.SessionID}}
	case errors.As(err, &closed):
		return &rpcclient.Error{Code: CodeSessionClosed, Message: closed.Error(), Data: map[string]any{"field": "session_id", "session_id": closed.SessionID, "close_reason": closed.Reason}}
	case errors.As(err, &full):
		return &rpcclient.Error{Code: CodeSessionQueueFull, Message: full.Error(),
			Data: map[string]any{"session_id": full.SessionID, "queued": full.Queued, "max_queue": full.Max, "config_key": "[sessions] max_queue"}}
	case errors.As(err, &steer):
		return &rpcclient.Error{Code: CodeSteerUnsupported, Message: steer.Error(), Data: map[string]any{"session_id": steer.SessionID, "adapter": steer.Adapter, "reason": steer.Reason}}
	case errors.As(err, &adapter):
		data := map[string]any{"field": "session_id", "session_id": adapter.SessionID, "adapter": adapter.Adapter, "reason": adapter.Err.Error()}
		var refused *runs.RefusedError
		if errors.As(err, &refused) {
			data["run_id"] = refused.RunID
		}
		return &rpcclient.Error{Code: CodeAdapterGone, Message: adapter.Error(), Data: data}
	case errors.As(err, &plain):
		return &rpcclient.Error{Code: rpcclient.CodeInvalidParams, Message: "invalid params: session_id: " + plain.Error(),
			Data: map[string]any{"field": "session_id", "session_id": plain.SessionID}}
	case errors.As(err, &gone):
		return &rpcclient.Error{Code: CodeWorktreeGone, Message: gone.Error(), Data: map[string]any{"session_id": gone.SessionID, "reason": gone.Reason}}
	case errors.As(err, &busy):
		data := map[string]any{"session_id": busy.SessionID, "method": busy.Method, "queued": busy.Queued}
		if busy.RunID != "" {
			data["run_id"] = busy.RunID
		}
		return &rpcclient.Error{Code: CodeSessionBusy, Message: busy.Error(), Data: data}
	case errors.As(err, &notOwner):
		return &rpcclient.Error{Code: CodeNotSessionOwner, Message: notOwner.Error(),
			Data: map[string]any{"field": "session_id", "session_id": notOwner.SessionID, "method": notOwner.Method, "origin": notOwner.Origin}}
	case errors.As(err, &tooMany):
		return &rpcclient.Error{Code: CodeTooManySessions, Message: tooMany.Error(),
			Data: map[string]any{"open": tooMany.Open, "max": tooMany.Max, "config_key": "[sessions] " + tooMany.Key}}
	case errors.As(err, &capped):
		return &rpcclient.Error{Code: CodeBudgetExceeded, Message: capped.Error(),
			Data: map[string]any{"kind": "budget", "session_id": capped.SessionID, "cap": capped.Cap, "field": capped.Cap, "limit": capped.Limit, "spent": capped.Spent}}
	}
	return nil
}

// unenforcedData is -32015's data: the adapter, how the refused mode is
// (not) enforced under the mode's own key, and the param to set.
func unenforcedData(e *runs.UnenforcedReadOnlyError) map[string]any {
	key := "read_only_enforcement"
	if e.Mode == spawn.ModeEdit {
		key = "edit_enforcement"
	}
	return map[string]any{"adapter": e.Adapter, key: string(e.Enforcement), "field": e.Field()}
}
