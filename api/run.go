package api

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
	"unicode/utf8"
)

// Status is where a run is in its life. Every status but StatusRunning is
// terminal: once a run has one, its recorded outcome never changes.
type Status string

const (
	StatusRunning     Status = "running"
	StatusSucceeded   Status = "succeeded"
	StatusFailed      Status = "failed"
	StatusCancelled   Status = "cancelled"
	StatusTimedOut    Status = "timed_out"
	StatusRefused     Status = "refused"
	StatusInterrupted Status = "interrupted"
)

// RunState is what a running run is doing now, as its watchdog sees it.
type RunState string

const (
	// StateStarting: the agent has printed nothing yet.
	StateStarting RunState = "starting"
	// StateWorking: the agent printed within its stall_secs.
	StateWorking RunState = "working"
	// StateWaitingApproval: a question of an ask-mode run waits for its
	// answer; the watchdog's clock is paused.
	StateWaitingApproval RunState = "waiting_approval"
	// StateWaitingAPI: the agent announced a retry of its model call with
	// a delay, and the delay has not passed; the clock is paused.
	StateWaitingAPI RunState = "waiting_api"
	// StateStalled: the agent has printed nothing for stall_secs.
	StateStalled RunState = "stalled"
)

// Statuses lists every status, in lifecycle order.
var Statuses = []Status{StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled, StatusTimedOut, StatusRefused, StatusInterrupted}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reports whether s ends a run.
func (s Status) Terminal() bool { return s.Valid() && s != StatusRunning }

// Run is one invocation of an agent, as recorded. The daemon returns it as is
// for runs.get and runs.list, so the JSON names are the wire names. Times are
// UTC with millisecond precision (what the store keeps).
type Run struct {
	RunID   string `json:"run_id"`
	Adapter string `json:"adapter"`
	Status  Status `json:"status"`
	// State is what a running run is doing (starting, working,
	// waiting_approval, waiting_api, stalled); absent once it has ended.
	// It is live, never stored.
	State RunState `json:"state,omitempty"`
	// InvokedBy is the caller's own adapter id as it named itself, if it did.
	InvokedBy string `json:"invoked_by,omitempty"`
	// Ancestry is the seeded chain the guard judged this run against.
	Ancestry       []string `json:"ancestry"`
	Cwd            string   `json:"cwd,omitempty"`
	PermissionMode string   `json:"permission_mode,omitempty"`
	Model          string   `json:"model,omitempty"`

	CreatedAt time.Time  `json:"created_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// DurationMs is EndedAt minus StartedAt (or CreatedAt when the child
	// never started); absent while running.
	DurationMs *int64 `json:"duration_ms,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`

	SessionID    string    `json:"session_id,omitempty"`
	Answer       string    `json:"answer,omitempty"`
	Error        *RunError `json:"error,omitempty"`
	Usage        *Usage    `json:"usage,omitempty"`
	TotalCostUSD *float64  `json:"total_cost_usd,omitempty"`
	Turns        int       `json:"turns"`
	ToolCalls    int       `json:"tool_calls"`

	// Task is the task text, or its first bytes when it was longer than
	// the operator keeps (max_task_record_bytes; TaskTruncated says so), or
	// empty when the operator set record_tasks = false; TaskLen (the whole
	// task's length) and TaskSHA256 identify it either way (see SetTask).
	Task          string `json:"task,omitempty"`
	TaskTruncated bool   `json:"task_truncated,omitempty"`
	TaskLen       int    `json:"task_len"`
	TaskSHA256    string `json:"task_sha256,omitempty"`

	// Pgid is the child's process group, recorded so a daemon restarted after
	// a crash can end a group its predecessor left behind.
	Pgid int `json:"pgid,omitempty"`
	// RefusalReason is the guard's (or another gate's) text for a refused run.
	RefusalReason string `json:"refusal_reason,omitempty"`
	// EventsDropped counts the events the run's writer did not keep because
	// the run passed its bound (max_events_per_run); recorded with the
	// outcome (Finish.EventsDropped), so it is 0 while the run is going.
	EventsDropped int64 `json:"events_dropped"`

	// Attachments describes the images the request attached, in order,
	// including those the agent could not take: never their bytes.
	Attachments []AttachmentRecord `json:"attachments,omitempty"`

	// CardSessionID names the card session (sessions.start) this run is a
	// turn of, and SessionTurn which turn (from 1); both absent for a run
	// of agents.invoke. It is card's id, never the CLI's own (SessionID).
	// SessionSeqBase is where the run's events start in the session's
	// seq: run event seq N is session event seq SessionSeqBase+N.
	CardSessionID  string `json:"card_session_id,omitempty"`
	SessionTurn    int    `json:"session_turn,omitempty"`
	SessionSeqBase int64  `json:"session_seq_base,omitempty"`
	// SessionUsage is the CLI's running total for its session at the
	// run's end, where the CLI reports one (Result.SessionUsage): the base
	// the session's next turn is charged from, read back after a restart.
	// Not on the wire: Usage is what the run used.
	SessionUsage *Usage `json:"-"`
}

// AttachmentRecord is what the history keeps of one image a run was handed:
// enough to tell which image it was (its digest) without keeping the image,
// which may hold anything a screenshot can.
type AttachmentRecord struct {
	Index int `json:"index"`
	// Name is the client's name for it (a path's base name by default),
	// kept only when the operator keeps task text (record_tasks).
	Name string `json:"name,omitempty"`
	// MimeType is the type card recognised from the bytes.
	MimeType string `json:"mime_type"`
	// Size is the image's size in bytes.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Dropped says why the agent was not given it (its adapter takes no
	// images); empty when it was.
	Dropped string `json:"dropped,omitempty"`
}

// SetTask records task on r. TaskLen (bytes) and TaskSHA256 are always set, so
// two runs of the same task can be matched; of the text itself at most keep
// bytes are kept, cut at a character boundary: none when the operator set
// record_tasks = false (a task can hold secrets an operator does not want on
// disk), and a bounded prefix otherwise, since a client that sends large
// tasks, refused or not, must not grow the history by their size.
func (r *Run) SetTask(task string, keep int) {
	r.TaskLen, r.TaskSHA256 = TaskDigest(task)
	r.Task, r.TaskTruncated = task, false
	if len(task) > keep {
		r.Task, r.TaskTruncated = prefix(task, keep), keep > 0
	}
}

// prefix is at most n bytes of s, cut so no UTF-8 character is split.
func prefix(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// TaskDigest is the length in bytes and the hex SHA-256 of task.
func TaskDigest(task string) (length int, sha256Hex string) {
	sum := sha256.Sum256([]byte(task))
	return len(task), hex.EncodeToString(sum[:])
}

// RunError is why a run did not succeed.
type RunError struct {
	// Kind is a short machine-readable class (e.g. "auth", "rate_limit",
	// "timeout", "interrupted").
	Kind    string `json:"kind" jsonschema_extras:"x-enum=spawn,x-enum=timeout,x-enum=cancelled,x-enum=exit,x-enum=empty,x-enum=output_limit,x-enum=auth,x-enum=rate_limit,x-enum=network,x-enum=api,x-enum=max_turns,x-enum=untrusted_workspace,x-enum=bad_output,x-enum=bad_input,x-enum=config,x-enum=tool,x-enum=stalled,x-enum=budget,x-enum=interrupted"`
	Message string `json:"message"`
	// ExitCode is the child's exit code when the error came from it.
	ExitCode *int `json:"exit_code,omitempty"`
	// StderrExcerpt is a bounded tail of the child's stderr.
	StderrExcerpt string `json:"stderr_excerpt,omitempty"`
}

// Usage is token accounting as the agent reported it.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
}

// List limits of runs.list.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// Pruned is what a prune deleted (or, for a dry run, would delete), and how
// many runs are left.
type Pruned struct {
	Runs   int64 `json:"runs"`
	Events int64 `json:"events"`
	Kept   int64 `json:"kept"`
}
