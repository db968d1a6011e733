package api

import "time"

// Sessions: one agent conversation across turns. A session is started for
// an adapter with everything that holds for the whole conversation; each
// sessions.prompt is a turn, recorded as a run that names its session and
// turn number. A prompt sent while a turn runs waits in the session's queue
// (FIFO, bounded) and runs when the turn ends.

// SessionState is what a session is doing.
type SessionState string

const (
	// SessionIdle: no turn is running; the next prompt starts one at once.
	SessionIdle SessionState = "idle"
	// SessionRunning: a turn is running.
	SessionRunning SessionState = "running"
	// SessionWaitingApproval: the running turn's agent waits on a question.
	SessionWaitingApproval SessionState = "waiting_approval"
	// SessionClosed: the session was closed; it takes no more prompts and
	// its history stays.
	SessionClosed SessionState = "closed"
)

// SessionStartParams are sessions.start's params: the agent's settings,
// which hold for every turn of the conversation.
type SessionStartParams struct {
	AgentSettings
	// Warm starts the agent's process at once instead of at the first
	// prompt, so the first turn does not wait for the CLI's start-up.
	Warm bool `json:"warm,omitempty"`
}

// SessionPromptParams are sessions.prompt's params: one turn.
type SessionPromptParams struct {
	SessionID   string       `json:"session_id"`
	Task        string       `json:"task"`
	Attachments []Attachment `json:"attachments,omitempty"`
}

// SessionPromptResult is sessions.prompt's answer, given at once: the turn
// started (RunID set) or waits in the queue at Position (1: next).
type SessionPromptResult struct {
	SessionID string `json:"session_id"`
	Turn      int    `json:"turn"`
	RunID     string `json:"run_id,omitempty"`
	Queued    bool   `json:"queued"`
	Position  int    `json:"position,omitempty"`
}

// SessionSteerParams add input to the running turn, for a CLI with a
// channel for it.
type SessionSteerParams struct {
	SessionID string `json:"session_id"`
	Task      string `json:"task"`
}

// SessionSteerResult says the input reached the running turn.
type SessionSteerResult struct {
	SessionID string `json:"session_id"`
	Turn      int    `json:"turn"`
	RunID     string `json:"run_id"`
	Steered   bool   `json:"steered"`
}

// SessionCancelParams end the running turn, and with ClearQueue every
// queued prompt too.
type SessionCancelParams struct {
	SessionID  string `json:"session_id"`
	ClearQueue bool   `json:"clear_queue,omitempty"`
}

// SessionCancelResult says what a cancel did.
type SessionCancelResult struct {
	SessionID string `json:"session_id"`
	// Cancelled is false when no turn was running; Reason says so.
	Cancelled bool   `json:"cancelled"`
	RunID     string `json:"run_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Cleared is how many queued prompts were dropped.
	Cleared int `json:"cleared"`
}

// SessionConfigureParams change what a session's next turns run with: the
// permission mode, the model and the effort, each left as it is when
// absent or "". A turn already running keeps what it started with. Model
// or effort "default" goes back to the CLI's own default (card passes no
// flag for it).
type SessionConfigureParams struct {
	SessionID string `json:"session_id"`
	// ID changes the session's adapter, only before its first turn: after
	// one, another CLI could not carry the conversation.
	ID             string `json:"id,omitempty"`
	PermissionMode string `json:"permission_mode,omitempty"`
	Model          string `json:"model,omitempty"`
	Effort         string `json:"effort,omitempty"`
	// Isolation changes where the session's turns run, only before its
	// first turn (after one, its conversation and its changes are where
	// they ran): "worktree" makes the session's worktree now, from Base
	// (default HEAD), as sessions.start's isolation does; "off" removes it.
	Isolation string `json:"isolation,omitempty"`
	Base      string `json:"base,omitempty"`
}

// IsolationOff is sessions.configure's isolation value that removes the
// session's worktree before its first turn: its turns then run in its cwd.
const IsolationOff = "off"

// ConfigureDefault is the model or effort value of sessions.configure that
// drops the session's own, so the CLI uses its default.
const ConfigureDefault = "default"

// SessionConfigureResult is sessions.configure's answer: the session as it
// now is, and from which turn the change holds.
type SessionConfigureResult struct {
	Session Session `json:"session"`
	// Changed names the fields whose value changed (empty: nothing did).
	Changed []string `json:"changed"`
	// AppliesFromTurn is the first turn that runs with the new settings: the
	// next one to start (a queued prompt's turn included).
	AppliesFromTurn int `json:"applies_from_turn"`
	// RunningTurn is the turn running now, which keeps the settings it
	// started with (0: none runs).
	RunningTurn int `json:"running_turn,omitempty"`
	// WarmAgent says what became of the session's warm agent, whose CLI
	// was started with the old settings: "ended" (it was idle), "ends_after_turn"
	// (it is in the running turn), or "" (there was none, or nothing changed).
	WarmAgent string `json:"warm_agent,omitempty"`
}

// SessionReleaseResult is sessions.release's answer: the session, still
// open, and what became of its warm agent.
type SessionReleaseResult struct {
	Session Session `json:"session"`
	// WarmAgent is "ended" (it was idle), "ends_after_turn" (it is in the
	// running turn), "kept" (it alone holds the conversation, which the CLI
	// cannot resume in a new process, so it ends at idle_secs as before)
	// or "" (there was none).
	WarmAgent string `json:"warm_agent,omitempty"`
}

// SessionIDParams name one session (sessions.get, sessions.close,
// sessions.release).
type SessionIDParams struct {
	SessionID string `json:"session_id"`
}

// SessionListParams filter sessions.list.
type SessionListParams struct {
	Adapter string `json:"adapter,omitempty"`
	// State filters by state; IncludeClosed lists closed sessions too
	// (they are left out by default).
	State         SessionState `json:"state,omitempty"`
	IncludeClosed bool         `json:"include_closed,omitempty"`
	Limit         int          `json:"limit,omitempty"`
}

// SessionSubscribeParams follow a session's events across turns from
// after AfterSeq (0: from the start).
type SessionSubscribeParams struct {
	SessionID string `json:"session_id"`
	AfterSeq  int64  `json:"after_seq,omitempty"`
}

// SessionSubscribeResult is a subscription's answer; sessions.event
// notifications follow it.
type SessionSubscribeResult struct {
	SessionID string       `json:"session_id"`
	State     SessionState `json:"state"`
	// NextSeq is the seq the session's next event will have.
	NextSeq int64 `json:"next_seq"`
	// Live is false for a closed session: its history is replayed and
	// nothing follows.
	Live bool `json:"live"`
}

// SessionEvent is one sessions.event notification: one event of one of
// the session's turns, numbered in the session (Seq counts across turns,
// from 1, with no gaps) and carrying the run's own event whole.
type SessionEvent struct {
	SessionID string     `json:"session_id"`
	Seq       int64      `json:"seq"`
	Turn      int        `json:"turn"`
	Event     AgentEvent `json:"event"`
}

// EventPromptQueued is the event a session adds to its running turn's
// stream when a prompt is queued behind it; its queued field says which
// turn the prompt will be and where it waits.
const EventPromptQueued = "prompt_queued"

// EventSessionConfigured is the event a session adds to its stream when
// sessions.configure changes its settings, so every client following the
// session (an editor over ACP beside the one that changed them) hears the
// change: on the running turn's stream while a turn runs, else between
// turns, with no run (run_id "", seq 0). Its configured field says what
// the settings now are and from which turn they hold.
const EventSessionConfigured = "session_configured"

// SessionConfigured is a session's settings after a sessions.configure
// that changed them. Model and Effort are "" for the CLI's default.
type SessionConfigured struct {
	Changed []string `json:"changed"`
	// Adapter is the session's adapter, which may change before its
	// first turn.
	Adapter         string `json:"adapter,omitempty"`
	PermissionMode  string `json:"permission_mode"`
	Model           string `json:"model"`
	Effort          string `json:"effort"`
	AppliesFromTurn int    `json:"applies_from_turn"`
	// Isolation is "worktree" for a session whose turns run in its
	// worktree, absent for one that runs in its cwd; Worktree is that
	// worktree, as sessions.get shows it.
	Isolation string           `json:"isolation,omitempty"`
	Worktree  *SessionWorktree `json:"worktree,omitempty"`
}

// QueuedPrompt is one prompt waiting in a session's queue. The task's
// text is not shown: only whoever sent it needs it back.
type QueuedPrompt struct {
	Turn        int       `json:"turn"`
	Position    int       `json:"position"`
	QueuedAt    time.Time `json:"queued_at"`
	TaskBytes   int       `json:"task_bytes"`
	Attachments int       `json:"attachments"`
}

// Session is one session as sessions.start, sessions.get and
// sessions.list show it.
type Session struct {
	SessionID      string       `json:"session_id"`
	Adapter        string       `json:"adapter"`
	State          SessionState `json:"state"`
	Cwd            string       `json:"cwd"`
	PermissionMode string       `json:"permission_mode"`
	Model          string       `json:"model,omitempty"`
	Effort         string       `json:"effort,omitempty"`
	Ancestry       []string     `json:"ancestry"`
	// Turns is how many turns have started; CurrentRunID is the running
	// one's run.
	Turns        int            `json:"turns"`
	CurrentRunID string         `json:"current_run_id,omitempty"`
	Queue        []QueuedPrompt `json:"queue"`
	// AgentSessionID is the CLI's own session id, which a cold turn
	// resumes.
	AgentSessionID string `json:"agent_session_id,omitempty"`
	// Warm says whether the agent's process is running between turns, and
	// Pid which it is.
	Warm bool `json:"warm"`
	Pid  int  `json:"pid,omitempty"`
	// NextSeq is the seq the session's next event will have.
	NextSeq      int64      `json:"next_seq"`
	TotalCostUSD float64    `json:"total_cost_usd"`
	Usage        Usage      `json:"usage"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	ClosedAt     *time.Time `json:"closed_at,omitempty"`
	CloseReason  string     `json:"close_reason,omitempty"`
	// Origin is the web origin that started the session; absent when a
	// native client did. Only that origin (and native clients) may prompt
	// or change the session.
	Origin string `json:"origin,omitempty"`
	// Worktree is an isolated session's worktree, where its turns run
	// (Cwd is the directory the session was started in).
	Worktree *SessionWorktree `json:"worktree,omitempty"`
}

// SessionList is sessions.list's answer.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}
