package api

import (
	"fmt"
	"slices"
	"time"
)

// FieldError says which request field was wrong and why. It is the one
// type for it everywhere: params' Validate methods, the daemon's handlers
// and the agent planners return it, and the transport answers it as
// invalid params (-32602) with data.field, so every bad-params answer
// names its field the same way.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Message)
}

// InvalidField is a shorthand for a *FieldError.
func InvalidField(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// InfoParams is daemon.info's (empty) params.
type InfoParams struct{}

// Info is what daemon.info answers: enough for a client to check it reached
// the daemon it meant to and speaks its protocol.
type Info struct {
	Version         string   `json:"version"`
	ProtocolVersion string   `json:"protocol_version"`
	PID             int      `json:"pid"`
	StartedAt       string   `json:"started_at"`
	Home            string   `json:"home"`
	Addr            string   `json:"addr"`
	URL             string   `json:"url"`
	Ancestry        []string `json:"ancestry"`
	MaxChain        int      `json:"max_chain"`
	// LastCrash is the last time a daemon of this home did not stop
	// cleanly, as a later start of it found; absent when none ever did.
	LastCrash *CrashReport `json:"last_crash,omitempty"`
}

// CrashKind says how a daemon that did not stop cleanly ended.
type CrashKind string

const (
	// CrashOutput: the Go runtime wrote why (a fatal error, an unrecovered
	// panic, a SIGQUIT dump) to the crash log File.
	CrashOutput CrashKind = "crash"
	// CrashUncleanExit: the daemon ended with nothing written, by a signal
	// no handler sees (SIGKILL, the out-of-memory killer, a fault in C
	// code) or because the machine stopped.
	CrashUncleanExit CrashKind = "unclean_exit"
)

// CrashReport is what a start of the daemon found of the one before it
// that did not stop cleanly. Times are RFC 3339, UTC.
type CrashReport struct {
	Kind CrashKind `json:"kind"`
	// PID and StartedAt name the daemon that ended.
	PID       int    `json:"pid"`
	StartedAt string `json:"started_at"`
	// At is when its crash output was written (kind crash).
	At string `json:"at,omitempty"`
	// LastActivityAt is when it last wrote the run history (kind
	// unclean_exit): the nearest card knows of when it stopped.
	LastActivityAt string `json:"last_activity_at,omitempty"`
	// NoticedAt is when the next start found it.
	NoticedAt string `json:"noticed_at"`
	// File is the crash log, kept under <home>/crashes (kind crash).
	File string `json:"file,omitempty"`
	// FirstLines are the first lines of the crash output.
	FirstLines []string `json:"first_lines,omitempty"`
	// Summary says it in one sentence.
	Summary string `json:"summary"`
}

// DetectParams are agents.detect's params (and its CAR aliases').
type DetectParams struct {
	// IncludeHealth adds each adapter's health (cached for 30 s, except on
	// a refresh).
	IncludeHealth bool `json:"include_health,omitempty"`
	// Refresh re-detects instead of serving the cached answer, and checks
	// health again with include_health.
	Refresh bool `json:"refresh,omitempty"`
	// InvokedBy is the calling host's own adapter id; adapters this caller
	// could not spawn carry spawn_block_reason.
	InvokedBy string `json:"invoked_by,omitempty"`
}

// HealthParams are agents.health_external's params.
type HealthParams struct {
	// ID asks for one adapter; without it the answer is an array of every
	// detected (installed) adapter.
	ID string `json:"id,omitempty"`
	// Force bypasses the 30 s cache.
	Force bool `json:"force,omitempty"`
}

// Timeout bounds for agents.invoke: a run with no deadline is a process that
// can sit on a model session forever, and one over an hour is almost always
// a client bug. agents.invoke and sessions.start refuse a timeout_secs
// outside them (-32602); agents.invoke_external clamps it into them, as
// CAR documents for its own.
const (
	DefaultInvokeTimeout = 300 * time.Second
	MinInvokeTimeoutSecs = 1
	MaxInvokeTimeoutSecs = 3600
)

// AgentSettings are what agents.invoke and sessions.start share: which
// agent runs, where, in what mode and within what bounds. One type, so a
// setting means the same in both and the planner judges it once; a
// session's settings hold for every turn, TimeoutSecs, the stall limits
// and the approval timeout for each turn, the caps for the whole session.
type AgentSettings struct {
	// ID is the adapter to run (claude-code, codex, gemini, ...).
	ID string `json:"id"`
	// InvokedBy is the calling host's own adapter id, when the host is
	// itself an agent; the guard seeds the chain with it.
	InvokedBy string `json:"invoked_by,omitempty"`
	// Cwd is where the agent runs: an absolute, existing directory. It may
	// be omitted only in read_only mode (then the daemon user's home): a
	// run that may change files (edit, ask, bypass) names where.
	Cwd string `json:"cwd,omitempty"`
	// PermissionMode is read_only (default), edit, ask or bypass.
	PermissionMode string   `json:"permission_mode,omitempty"`
	AllowedTools   []string `json:"allowed_tools,omitempty"`
	Model          string   `json:"model,omitempty"`
	Effort         string   `json:"effort,omitempty"`
	// SystemPrompt replaces the agent's own system prompt, or with
	// SystemPromptAppend is added to it. It travels in a private file, never
	// on argv.
	SystemPrompt       string `json:"system_prompt,omitempty"`
	SystemPromptAppend bool   `json:"system_prompt_append,omitempty"`
	// TimeoutSecs defaults to 300 (0 or absent); outside
	// [MinInvokeTimeoutSecs, MaxInvokeTimeoutSecs] it is refused.
	TimeoutSecs int `json:"timeout_secs,omitempty"`
	// MaxAPIRetries bounds the agent's own retries of a failed model call
	// (rate limit, overload, network), 0 to 10; omitted, card.toml's
	// max_api_retries (default 3). A refused key gets at most one retry,
	// for a login token that expired.
	MaxAPIRetries *int `json:"max_api_retries,omitempty"`
	// StallSecs is the watchdog's warning: after this many seconds with
	// no output from the agent (no question waiting, no announced retry
	// pending) the run is "stalled" and a stalled event is sent; 1 to
	// 3600, omitted card.toml's stall_secs (default 300).
	StallSecs *int `json:"stall_secs,omitempty"`
	// StallKillSecs ends the run (kind stalled, its process group gone)
	// after this many seconds of such silence: 0 never, else more than
	// StallSecs and at most 3600; omitted card.toml's stall_kill_secs
	// (default 0).
	StallKillSecs *int `json:"stall_kill_secs,omitempty"`
	// MaxCostUSD caps what the run may spend, in US dollars, as the agent
	// reports it; MaxTokens caps its input plus output tokens. A run that
	// passes either ends with kind budget, its usage recorded. Each is
	// enforced with the CLI's own control where it has one, otherwise by
	// card from the usage the agent reports (after each model call or only
	// at the end of its turn, per adapter); an adapter that reports no cost
	// refuses max_cost_usd.
	MaxCostUSD *float64 `json:"max_cost_usd,omitempty"`
	MaxTokens  *int64   `json:"max_tokens,omitempty"`
	// MCPEndpoint is CAR's mcp_endpoint: the URL of an MCP server
	// (streamable HTTP) handed to the agent for this run, for the adapters
	// whose CLI can take one (claude-code, codex, copilot); the others
	// refuse it naming why. "" or leaving it out runs without one (card has
	// no MCP server of its own to fill in).
	MCPEndpoint string `json:"mcp_endpoint,omitempty"`
	// ApprovalTimeoutSecs is how long a question of an ask-mode run waits
	// for an answer before it is denied; default approval_timeout_secs from
	// card.toml (120), at most 3600. Refused in other modes.
	ApprovalTimeoutSecs int `json:"approval_timeout_secs,omitempty"`
	// AcknowledgeUnenforcedReadOnly must be true to run an adapter whose
	// read-only mode nothing enforces (detect's read_only_enforcement =
	// not_enforced) in read_only mode: the caller has to know that "read
	// only" is then only a request to the model.
	AcknowledgeUnenforcedReadOnly bool `json:"acknowledge_unenforced_read_only,omitempty"`
	// AcknowledgeUnenforcedEdit must be true to run an adapter whose edit
	// mode card cannot hold (detect's edit_enforcement = not_enforced) in
	// edit mode: the agent may write without asking, so "only inside the
	// cwd" is then only what card refuses of what it is asked.
	AcknowledgeUnenforcedEdit bool `json:"acknowledge_unenforced_edit,omitempty"`
	// RequireAttachments refuses the request (-32602) rather than run an
	// agent that takes no images without them.
	RequireAttachments bool `json:"require_attachments,omitempty"`
	// Isolation "worktree" runs the agent in a git worktree of the cwd's
	// repository, on a branch of its own, from Base (a ref or commit;
	// default HEAD), never in the checkout itself. An isolated
	// agents.invoke is recorded as a closed session of one turn to review.
	Isolation string `json:"isolation,omitempty"`
	Base      string `json:"base,omitempty"`
}

// InvokeParams are agents.invoke's (and agents.invoke_external's) params:
// the agent's settings and one task.
type InvokeParams struct {
	AgentSettings
	// Task is the prompt. It goes to the agent on stdin, never on argv.
	Task     string `json:"task"`
	MaxTurns int    `json:"max_turns,omitempty"`
	// SessionID asks for a new session with this UUID; Resume continues one;
	// DiscardSession leaves no resumable session behind (where the agent
	// can: the refusal names the adapters that cannot).
	SessionID      string `json:"session_id,omitempty"`
	Resume         string `json:"resume,omitempty"`
	DiscardSession bool   `json:"discard_session,omitempty"`
	// Stream answers at once with {run_id, accepted} and sends agents.event
	// notifications; without it the answer is the finished run.
	Stream bool `json:"stream,omitempty"`
	// Attachments are images for the agent, each a path or data_b64 with
	// mime_type: PNG, JPEG, GIF or WebP by their bytes, at most
	// [attachments] max_count of them, each at most max_bytes.
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Timeout is the run's deadline, with the default applied (and the
// bounds, which the daemon has refused or, for CAR, clamped to already).
func (p *InvokeParams) Timeout() time.Duration {
	secs := p.TimeoutSecs
	switch {
	case secs == 0:
		return DefaultInvokeTimeout
	case secs < MinInvokeTimeoutSecs:
		secs = MinInvokeTimeoutSecs
	case secs > MaxInvokeTimeoutSecs:
		secs = MaxInvokeTimeoutSecs
	}
	return time.Duration(secs) * time.Second
}

// Attachment is one image attached to agents.invoke: a file on this
// machine (Path) or the image itself (DataB64 with MimeType), with an
// optional Name.
type Attachment struct {
	// Path is an absolute path to an image file. card reads it once, when
	// the request arrives, and the agent gets card's private copy.
	Path string `json:"path,omitempty"`
	// DataB64 is the image, standard base64.
	DataB64 string `json:"data_b64,omitempty"`
	// MimeType is the image's type: required with data_b64, optional with
	// path; either way it must be what the bytes are.
	MimeType string `json:"mime_type,omitempty"`
	// Name is what the run's record calls it (a path's base name when
	// omitted). It never becomes part of a path.
	Name string `json:"name,omitempty"`
}

// ApproveMethod is the server-to-client request of ask mode.
const ApproveMethod = "agents.approve"

// Approval timeout bounds: card owns the timeout (no agent CLI bounds a
// question within any sensible wait), so it is always set and clamped.
const (
	DefaultApprovalTimeoutSecs = 120
	MaxApprovalTimeoutSecs     = 3600
)

// DecideParams are agents.approval_decide's params.
type DecideParams struct {
	RunID string `json:"run_id"`
	// RequestID is the question's id, from agents.approve or the run's
	// approval_requested event.
	RequestID string `json:"request_id"`
	// Decision is allow, allow_always (this tool, for the rest of the run)
	// or deny.
	Decision string `json:"decision" jsonschema:"enum=allow,enum=allow_always,enum=deny"`
	// Message is told to the agent with a deny.
	Message string `json:"message,omitempty"`
}

// Validate requires the ids and a decision that is one of the three.
func (p *DecideParams) Validate() error {
	if err := requireRunID(p.RunID); err != nil {
		return err
	}
	if p.RequestID == "" {
		return InvalidField("request_id", "required: the id agents.approve gave the question")
	}
	if !slices.Contains(Decisions, p.Decision) {
		return InvalidField("decision", "unknown decision %q; answer allow, allow_always or deny", p.Decision)
	}
	return nil
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
		return InvalidField("run_id", "required")
	}
	return nil
}

// PruneParams are runs.prune's params.
type PruneParams struct {
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// MaxRuns and MaxAgeDays replace card.toml's max_runs and max_age_days
	// for this prune (0: no bound of that kind).
	MaxRuns    *int `json:"max_runs,omitempty"`
	MaxAgeDays *int `json:"max_age_days,omitempty"`
}

// Validate refuses negative bounds.
func (p *PruneParams) Validate() error {
	if p.MaxRuns != nil && *p.MaxRuns < 0 {
		return InvalidField("max_runs", "must not be negative (0: no bound on the count)")
	}
	if p.MaxAgeDays != nil && (*p.MaxAgeDays < 0 || *p.MaxAgeDays > MaxAgeDaysLimit) {
		return InvalidField("max_age_days", "must be 0 to %d days, not %d (0: no bound on age)", MaxAgeDaysLimit, *p.MaxAgeDays)
	}
	return nil
}

// MaxAgeDaysLimit is the largest max_age_days, in card.toml and in
// runs.prune: a hundred years. Days become a time.Duration, which overflows
// past about 106,751 days and wraps to an age that is negative or tiny, and
// a tiny age prunes every finished run.
const MaxAgeDaysLimit = 36500

// PruneResult is what runs.prune deleted (or would delete, with dry_run),
// how many runs are kept, and the retention it applied.
type PruneResult struct {
	Pruned
	DryRun     bool `json:"dry_run"`
	MaxRuns    int  `json:"max_runs"`
	MaxAgeDays int  `json:"max_age_days"`
}

// ListParams are runs.list's params.
type ListParams struct {
	Limit   int    `json:"limit,omitempty"`
	Before  string `json:"before,omitempty"`
	Adapter string `json:"adapter,omitempty"`
	Status  Status `json:"status,omitempty"`
}

// Validate checks the status filter and the limit.
func (p *ListParams) Validate() error {
	if p.Status != "" && !p.Status.Valid() {
		return InvalidField("status", "unknown status %q; one of %v", p.Status, Statuses)
	}
	return checkListLimit(p.Limit)
}

// checkListLimit refuses a list's limit outside 1..MaxListLimit (0 is the
// default): a larger one answered with MaxListLimit rows would look like
// the whole list to a client that asked for more.
func checkListLimit(limit int) error {
	if limit < 0 || limit > MaxListLimit {
		return InvalidField("limit", "must be between 1 and %d (default %d), not %d", MaxListLimit, DefaultListLimit, limit)
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
		return InvalidField("after_seq", "must not be negative")
	}
	return nil
}

// SubscriptionEndedMethod is the notification that tells a client one of its
// subscriptions was cut off while the run goes on.
const SubscriptionEndedMethod = "runs.subscription_ended"

// SubscriptionEnded is runs.subscription_ended's params.
type SubscriptionEnded struct {
	RunID string `json:"run_id"`
	// Reason is "behind": the run added more than Limit bytes of events
	// this subscriber had yet to be sent.
	Reason string `json:"reason"`
	// NextSeq is the first event it was not sent; runs.subscribe with
	// after_seq = NextSeq-1 continues from there.
	NextSeq int64 `json:"next_seq"`
	// SessionID is set when the subscription cut off was a session's
	// (sessions.subscribe), the run being its turn's; a client then takes
	// up the session, not the run. SessionNextSeq is NextSeq in the
	// session's seq: sessions.subscribe with after_seq = SessionNextSeq-1
	// continues from there.
	SessionID      string `json:"session_id,omitempty"`
	SessionNextSeq int64  `json:"session_next_seq,omitempty"`
	BehindBytes    int64  `json:"behind_bytes"`
	Limit          int64  `json:"limit"`
	ConfigKey      string `json:"config_key"`
	Message        string `json:"message"`
}
