package api

import (
	"encoding/json"
	"time"
)

// Decisions a client may give.
const (
	DecisionAllow       = "allow"
	DecisionAllowAlways = "allow_always"
	DecisionDeny        = "deny"
)

// Decisions lists the decisions, in the order docs name them.
var Decisions = []string{DecisionAllow, DecisionAllowAlways, DecisionDeny}

// Who decided a question (Approval.By).
const (
	// ByClient: a client's answer.
	ByClient = "client"
	// ByTimeout: nobody answered within the approval timeout; denied.
	ByTimeout = "timeout"
	// ByRule: allowed by an earlier allow_always for the same tool.
	ByRule = "rule"
	// ByNoClient: there was nobody to ask, or every connection asked
	// answered with an error; denied.
	ByNoClient = "no_client"
	// ByRunEnd: the run ended (cancelled, timed out, shut down) while the
	// question waited; denied.
	ByRunEnd = "run_ended"
	// ByEventBound: the run has kept max_events_per_run events, so the
	// question could not be recorded; denied, since a tool call the
	// history cannot show is never run.
	ByEventBound = "event_bound"
)

// Event kinds of the broker.
const (
	EventApprovalRequested = "approval_requested"
	EventApprovalDecided   = "approval_decided"
)

// ApproveParams are the params of agents.approve, the question the daemon
// sends a client.
type ApproveParams struct {
	RunID     string `json:"run_id"`
	RequestID string `json:"request_id"`
	Adapter   string `json:"adapter"`
	// Tool is the call the agent wants to make, as the agent named it.
	Tool ToolCall `json:"tool"`
	// Summary says in one line what the call would do.
	Summary string `json:"summary"`
	// ExpiresAt is when card denies the call if nobody has answered.
	ExpiresAt time.Time `json:"expires_at"`
}

// ToolCall is a tool call put to a client.
type ToolCall struct {
	Name string `json:"name"`
	// Input is the tool's input, a JSON object whose fields depend on the
	// tool (Bash: command; Write: file_path, content; ...).
	Input json.RawMessage `json:"input"`
	// ID is the agent's id for the call, as its tool_use event carries it.
	ID string `json:"id,omitempty"`
}

// ApproveAnswer is a client's answer to agents.approve.
type ApproveAnswer struct {
	// Decision is allow, allow_always (this tool, for the rest of the run)
	// or deny.
	Decision string `json:"decision" jsonschema:"enum=allow,enum=allow_always,enum=deny"`
	// Message is told to the agent with a deny.
	Message string `json:"message,omitempty"`
}

// Approval is the approval part of an approval_requested or
// approval_decided event.
type Approval struct {
	RequestID   string     `json:"request_id"`
	Summary     string     `json:"summary,omitempty"`
	RequestedAt *time.Time `json:"requested_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Decision    string     `json:"decision,omitempty"`
	By          string     `json:"by,omitempty"`
	// Message is what the agent was told with a deny.
	Message   string     `json:"message,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
}

// DecideResult is the answer to agents.approval_decide: the decision as
// recorded.
type DecideResult struct {
	RunID     string `json:"run_id"`
	RequestID string `json:"request_id"`
	Decision  string `json:"decision"`
	By        string `json:"by"`
}

// RunRecord is runs.get's answer: the recorded run and, for an ask-mode run,
// the questions it asked with their decisions, in the order asked: the
// first MaxApprovalRecords of them. A run that recorded more says so with
// ApprovalsTruncated and ApprovalsTotal, never a silent cut.
type RunRecord struct {
	Run
	Approvals          []ApprovalRecord `json:"approvals,omitempty"`
	ApprovalsTruncated bool             `json:"approvals_truncated,omitempty"`
	// ApprovalsTotal is how many questions the run recorded, set with
	// ApprovalsTruncated.
	ApprovalsTotal int `json:"approvals_total,omitempty"`
}

// MaxApprovalRecords bounds the approvals one runs.get answer lists, so the
// answer of a run that asked thousands of questions stays a size a client
// reads in one frame.
const MaxApprovalRecords = 1000

// ApprovalRecord is one question of a run and its decision (absent while it
// waits).
type ApprovalRecord struct {
	Tool ToolCall `json:"tool"`
	Approval
}
