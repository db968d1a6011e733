package api

import "encoding/json"

// Event kinds: every agent's stream is mapped onto these.
const (
	EventSession = "session"
	EventText    = "text"
	// EventThinking is the model's visible reasoning, which is not part of
	// the answer; like text it comes in pieces (Delta) or whole.
	EventThinking   = "thinking"
	EventToolUse    = "tool_use"
	EventToolResult = "tool_result"
	EventRetry      = "retry"
	EventUsage      = "usage"
	EventError      = "error"
	// EventWarning is something the agent said went wrong that does not
	// stop the run (Codex's "Model metadata ... not found"): a client shows
	// it as a notice, never as a failure.
	EventWarning = "warning"
	// EventStalled says the agent has printed nothing for the run's
	// stall_secs while no question waited and no announced retry was
	// pending; it carries QuietMs and KillAfterMs. Output after it puts
	// the run back to working without an event of its own.
	EventStalled = "stalled"
	// EventRateLimit is the agent's report of its subscription's rate-limit
	// windows (RateLimits), as its CLI read them from the API's response
	// headers: how much of each window is used and when it resets. Only
	// some CLIs report them, and only on some sign-ins (see each agent's
	// page); the daemon keeps the latest per adapter for usage.summary and
	// health.
	EventRateLimit = "rate_limit"
	EventOther     = "other"
)

// Error kinds, in Result.Error.Kind and Error.Kind. The first group comes
// from the runner, the second from each CLI's own signals.
const (
	KindSpawn       = "spawn"
	KindTimeout     = "timeout"
	KindCancelled   = "cancelled"
	KindExit        = "exit"
	KindEmpty       = "empty"
	KindOutputLimit = "output_limit"

	KindAuth      = "auth"
	KindRateLimit = "rate_limit"
	// KindNetwork is an API the agent could not reach at all (connection
	// refused, no route, DNS): no HTTP status ever came back.
	KindNetwork            = "network"
	KindAPI                = "api"
	KindMaxTurns           = "max_turns"
	KindUntrustedWorkspace = "untrusted_workspace"
	KindBadOutput          = "bad_output"
	KindBadInput           = "bad_input"
	KindConfig             = "config"
	KindTool               = "tool"
	// KindStalled is a run the watchdog ended: no output from the agent
	// for stall_kill_secs.
	KindStalled = "stalled"
	// KindBudget is a run stopped because it passed its request's
	// max_cost_usd or max_tokens; the message names the cap, what was spent
	// and what the agent reported.
	KindBudget = "budget"
)

// Event is one step of a run as a client sees it; it goes on the wire inside
// `agents.event`, so its JSON names are part of the protocol.
type Event struct {
	Kind      string `json:"kind"`
	SessionID string `json:"session_id,omitempty"`
	Model     string `json:"model,omitempty"`
	// Text is assistant text for "text" and reasoning for "thinking" (a
	// piece when Delta, else whole), the notice of a "warning", or a
	// description for "other" lines that are not JSON.
	Text  string `json:"text,omitempty"`
	Delta bool   `json:"delta,omitempty"`
	Tool  *Tool  `json:"tool,omitempty"`
	// Output and IsError belong to "tool_result".
	Output  string `json:"output,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Attempt, MaxAttempts, DelayMs belong to "retry".
	Attempt     int   `json:"attempt,omitempty"`
	MaxAttempts int   `json:"max_attempts,omitempty"`
	DelayMs     int64 `json:"delay_ms,omitempty"`
	// QuietMs and KillAfterMs belong to "stalled": how long the agent has
	// been silent, and its silence after which the run is ended (absent
	// when the watchdog only warns).
	QuietMs     int64  `json:"quiet_ms,omitempty"`
	KillAfterMs int64  `json:"kill_after_ms,omitempty"`
	Usage       *Usage `json:"usage,omitempty"`
	// RateLimits belongs to "rate_limit": the windows this report covers.
	RateLimits []RateLimitWindow `json:"rate_limits,omitempty"`
	// Error is the message of an "error" event, or why a retry happened.
	Error string `json:"error,omitempty"`
	// Type is the CLI's own event type, for "other".
	Type string          `json:"type,omitempty"`
	Raw  json.RawMessage `json:"raw,omitempty"`
}

// Tool names a tool call; ID ties a tool_result to its tool_use.
type Tool struct {
	Name  string          `json:"name,omitempty"`
	ID    string          `json:"id,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// Result is the end of a run in CAR's field names.
type Result struct {
	Answer     string    `json:"answer"`
	SessionID  string    `json:"session_id,omitempty"`
	Turns      int       `json:"turns"`
	ToolCalls  int       `json:"tool_calls"`
	DurationMs int64     `json:"duration_ms"`
	CostUSD    *float64  `json:"total_cost_usd,omitempty"`
	Usage      Usage     `json:"usage"`
	IsError    bool      `json:"is_error"`
	Error      *RunError `json:"error,omitempty"`
}
