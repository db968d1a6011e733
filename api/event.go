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
	// KindInterrupted is a run card's daemon shut down or lost while it
	// went on.
	KindInterrupted = "interrupted"
)

// Event is one step of a run as a client sees it; it goes on the wire inside
// `agents.event`, so its JSON names are part of the protocol.
//
// The jsonschema_extras tags go into rpc.discover's schema: x-enum on kind
// lists the kinds (an open list: a client ignores one it does not know),
// and x-kinds on a field names the kinds that carry it, so a client can be
// generated with one type per kind instead of one bag of optional fields.
type Event struct {
	Kind      string `json:"kind" jsonschema_extras:"x-enum=session,x-enum=text,x-enum=thinking,x-enum=tool_use,x-enum=tool_result,x-enum=retry,x-enum=usage,x-enum=warning,x-enum=stalled,x-enum=rate_limit,x-enum=other,x-enum=agent_error,x-enum=approval_requested,x-enum=approval_decided,x-enum=prompt_queued,x-enum=session_configured,x-enum=changes,x-enum=rewound,x-enum=done,x-enum=error"`
	SessionID string `json:"session_id,omitempty" jsonschema_extras:"x-kinds=session"`
	Model     string `json:"model,omitempty" jsonschema_extras:"x-kinds=session"`
	// Commands are the slash commands the CLI says it takes, where its
	// start-up line lists them (Claude Code's init).
	Commands []SlashCommand `json:"commands,omitempty" jsonschema_extras:"x-kinds=session"`
	// Text is assistant text for "text" and reasoning for "thinking" (a
	// piece when Delta, else whole), the notice of a "warning", or a
	// description for "other" lines that are not JSON.
	Text  string `json:"text,omitempty" jsonschema_extras:"x-kinds=text,x-kinds=thinking,x-kinds=warning,x-kinds=stalled,x-kinds=other"`
	Delta bool   `json:"delta,omitempty" jsonschema_extras:"x-kinds=text,x-kinds=thinking"`
	Tool  *Tool  `json:"tool,omitempty" jsonschema_extras:"x-kinds=tool_use,x-kinds=tool_result,x-kinds=approval_requested,x-kinds=approval_decided"`
	// Output and IsError belong to "tool_result".
	Output  string `json:"output,omitempty" jsonschema_extras:"x-kinds=tool_result"`
	IsError bool   `json:"is_error,omitempty" jsonschema_extras:"x-kinds=tool_result"`
	// Attempt, MaxAttempts, DelayMs belong to "retry".
	Attempt     int   `json:"attempt,omitempty" jsonschema_extras:"x-kinds=retry"`
	MaxAttempts int   `json:"max_attempts,omitempty" jsonschema_extras:"x-kinds=retry"`
	DelayMs     int64 `json:"delay_ms,omitempty" jsonschema_extras:"x-kinds=retry"`
	// QuietMs and KillAfterMs belong to "stalled": how long the agent has
	// been silent, and its silence after which the run is ended (absent
	// when the watchdog only warns).
	QuietMs     int64  `json:"quiet_ms,omitempty" jsonschema_extras:"x-kinds=stalled"`
	KillAfterMs int64  `json:"kill_after_ms,omitempty" jsonschema_extras:"x-kinds=stalled"`
	Usage       *Usage `json:"usage,omitempty" jsonschema_extras:"x-kinds=usage"`
	// RateLimits belongs to "rate_limit": the windows this report covers.
	RateLimits []RateLimitWindow `json:"rate_limits,omitempty" jsonschema_extras:"x-kinds=rate_limit"`
	// Error is why a run did not succeed on its terminal "error" event (its
	// result's error message, or its status in words), why a retry
	// happened, or what the agent reported on "agent_error".
	Error string `json:"error,omitempty" jsonschema_extras:"x-kinds=retry,x-kinds=agent_error,x-kinds=error"`
	// Type is the CLI's own event type, for "other".
	Type string          `json:"type,omitempty" jsonschema_extras:"x-kinds=other"`
	Raw  json.RawMessage `json:"raw,omitempty" jsonschema_extras:"x-kinds=other"`
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
	// SessionUsage is the CLI's own running total for its session at the
	// run's end, where what the CLI reports is that total rather than the
	// run's part (Usage is then the part). A session keeps it as the base
	// its next turn's part is taken from; it is not on the wire.
	SessionUsage *Usage `json:"-"`
}

// SlashCommand is one slash command an agent's CLI lists: its name
// without the slash, and what it does and what it takes where the CLI
// says so.
type SlashCommand struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	InputHint   string `json:"input_hint,omitempty"`
}
