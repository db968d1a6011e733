package api

import "strings"

// Event kinds on the agents.event wire beyond the agents' own: a run's stream ends
// with exactly one EventDone (it succeeded) or EventRunError (any other
// ending), both carrying the result. An "error" the agent reports mid-run
// (it may still recover, e.g. after a retry) travels as EventAgentError so
// a client can rely on "error" meaning "this run is over".
const (
	EventDone       = "done"
	EventRunError   = "error"
	EventAgentError = "agent_error"
)

// AgentEvent is one event of a run: one agents.event notification, and one
// stored event.
type AgentEvent struct {
	RunID string `json:"run_id"`
	Seq   int64  `json:"seq"`
	Event
	// Status and Result are set on the terminal done / error event only.
	Status Status        `json:"status,omitempty" jsonschema_extras:"x-kinds=done,x-kinds=error"`
	Result *InvokeResult `json:"result,omitempty" jsonschema_extras:"x-kinds=done,x-kinds=error"`
	// Approval is set on approval_requested and approval_decided only.
	Approval *Approval `json:"approval,omitempty" jsonschema_extras:"x-kinds=approval_requested,x-kinds=approval_decided"`
	// Queued is set on prompt_queued only: a session's prompt that waits
	// behind this turn.
	Queued *QueuedPrompt `json:"queued,omitempty" jsonschema_extras:"x-kinds=prompt_queued"`
	// Configured is set on session_configured only: the session's
	// settings as sessions.configure left them.
	Configured *SessionConfigured `json:"configured,omitempty" jsonschema_extras:"x-kinds=session_configured"`
	// Changes is set on changes only: what an isolated session's turn
	// changed in its worktree.
	Changes *TurnChanges `json:"changes,omitempty" jsonschema_extras:"x-kinds=changes"`
	// Rewound is set on rewound only: the worktree went back to an
	// earlier turn's state.
	Rewound *SessionRewound `json:"rewound,omitempty" jsonschema_extras:"x-kinds=rewound"`
}

// InvokeResult is a finished run: the agent's result in CAR's names plus
// which run it was and how it ended.
type InvokeResult struct {
	Result
	RunID    string   `json:"run_id"`
	Adapter  string   `json:"adapter"`
	Ancestry []string `json:"ancestry"`
	Status   Status   `json:"status"`
	// DroppedAttachments are the request's attachments the agent was not
	// given (its adapter takes no images), by index.
	DroppedAttachments []DroppedAttachment `json:"dropped_attachments,omitempty"`
	// CardSessionID and Worktree are set on an isolated agents.invoke's
	// answer: the closed session of one turn that holds its worktree, to
	// review with sessions.diff, apply, rewind and discard.
	CardSessionID string           `json:"card_session_id,omitempty"`
	Worktree      *SessionWorktree `json:"worktree,omitempty"`
}

// Reason is what the terminal error event says in its own error field: why
// the run did not succeed, as its result's error has it, else its status
// in words. A client reads the one field on every error event, whether the
// run failed, timed out, was cancelled or was cut off by a restart.
func (r InvokeResult) Reason() string {
	if r.Error != nil && r.Error.Message != "" {
		return r.Error.Message
	}
	return "the run " + strings.ReplaceAll(string(r.Status), "_", " ")
}

// DroppedAttachment is an attachment a run did not hand its agent, and
// why: CAR's shape.
type DroppedAttachment struct {
	Index  int    `json:"index"`
	Reason string `json:"reason"`
}

// InvokeAccepted says a run started: the immediate answer to a streaming
// invoke, whose events follow it.
type InvokeAccepted struct {
	RunID    string   `json:"run_id"`
	Accepted bool     `json:"accepted"`
	Adapter  string   `json:"adapter"`
	Ancestry []string `json:"ancestry"`
	// DroppedAttachments is said at once, before any event: a client that
	// sent an image learns here that the agent will not see it.
	DroppedAttachments []DroppedAttachment `json:"dropped_attachments,omitempty"`
	// CardSessionID and Worktree are set for an isolated run (see
	// InvokeResult).
	CardSessionID string           `json:"card_session_id,omitempty"`
	Worktree      *SessionWorktree `json:"worktree,omitempty"`
}

// CancelResult says what a cancel did.
type CancelResult struct {
	RunID  string `json:"run_id"`
	Status Status `json:"status"`
	// Cancelled is false when the run had already ended; Reason says so.
	Cancelled bool   `json:"cancelled"`
	Reason    string `json:"reason,omitempty"`
}

// SubscribeResult is a subscription's answer; the events follow it.
type SubscribeResult struct {
	RunID  string `json:"run_id"`
	Status Status `json:"status"`
	// Live is true when the run is still running and will be followed.
	Live bool `json:"live"`
}
