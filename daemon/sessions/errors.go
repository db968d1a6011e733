package sessions

import (
	"fmt"

	"github.com/card-dev/card/daemon/runs"
)

// NotFoundError is an unknown session id.
type NotFoundError struct{ SessionID string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no session %q: sessions.list shows the sessions (include_closed for closed ones)", e.SessionID)
}

// ClosedError refuses a prompt, steer or cancel to a closed session.
type ClosedError struct {
	SessionID string
	Reason    string
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("session %s is closed (%s); it takes no more prompts: start a new one with sessions.start", e.SessionID, e.Reason)
}

// QueueFullError refuses a prompt when the session's queue holds max
// prompts already.
type QueueFullError struct {
	SessionID string
	Queued    int
	Max       int
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("session %s already has %d prompts queued behind the running turn ([sessions] max_queue = %d); "+
		"the prompt was refused, not queued: send it once a turn ends, or cancel with clear_queue", e.SessionID, e.Queued, e.Max)
}

// SteerUnsupportedError refuses a steer: Reason says why (no running turn,
// a cold turn, or the adapter's CLI has no channel for it).
type SteerUnsupportedError struct {
	SessionID string
	Adapter   string
	Reason    string
}

func (e *SteerUnsupportedError) Error() string {
	return fmt.Sprintf("session %s (%s) cannot be steered: %s; send the text with sessions.prompt instead (it queues behind the running turn)",
		e.SessionID, e.Adapter, e.Reason)
}

// AdapterGoneError refuses a prompt to a session whose adapter's CLI is no
// longer installed (or no longer runs). Err is detection's error.
type AdapterGoneError struct {
	SessionID string
	Adapter   string
	Err       error
}

func (e *AdapterGoneError) Error() string {
	return fmt.Sprintf("session %s: its agent %s is no longer installed or usable: %v; reinstall it, or start a new session with another adapter",
		e.SessionID, e.Adapter, e.Err)
}

func (e *AdapterGoneError) Unwrap() error { return e.Err }

// CapError refuses a prompt once the session spent its cap
// (max_cost_usd or max_tokens of sessions.start).
type CapError struct {
	SessionID string
	Cap       string // "max_cost_usd" or "max_tokens"
	Limit     float64
	Spent     float64
}

func (e *CapError) Error() string {
	return fmt.Sprintf("session %s has spent %g of its %s = %g; it takes no more prompts (start a new session, with a higher cap if need be)",
		e.SessionID, e.Spent, e.Cap, e.Limit)
}

// BehindError is a session subscriber cut off for falling too far behind
// one of its turns: the turn's run's cut-off, with where it stands in the
// session's seq.
type BehindError struct {
	*runs.BehindError
	SessionID string
	// NextSessionSeq is the session seq of the first event not sent.
	NextSessionSeq int64
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("session %s: this subscriber was cut off %d bytes behind turn run %s (max_subscriber_queue_bytes = %d); "+
		"the session goes on: sessions.subscribe with after_seq = %d continues from where it stopped",
		e.SessionID, e.Behind, e.RunID, e.Limit, e.NextSessionSeq-1)
}

func (e *BehindError) Unwrap() error { return e.BehindError }

// TooManySessionsError refuses sessions.start past [sessions] max_open,
// or max_open_per_origin for the owner starting it, and an isolated start
// past max_worktrees_per_origin.
type TooManySessionsError struct {
	// Open is how many there are: open sessions, or for
	// max_worktrees_per_origin the worktrees held.
	Open, Max int
	// Key is the [sessions] key reached; Owner the origin it counts, for
	// the per-origin keys ("" for native clients).
	Key   string
	Owner string
}

func (e *TooManySessionsError) Error() string {
	if e.Key == "max_worktrees_per_origin" {
		who := "this client"
		if e.Owner != "" {
			who = e.Owner
		}
		return fmt.Sprintf("%s holds %d worktrees already, of open and closed isolated sessions ([sessions] %s = %d): discard one with "+
			"sessions.discard (sessions.list shows the sessions, sessions.get their worktree), or raise the bound", who, e.Open, e.Key, e.Max)
	}
	who := "open sessions"
	if e.Key == "max_open_per_origin" {
		who = "open sessions of this client"
		if e.Owner != "" {
			who = "open sessions of " + e.Owner
		}
	}
	return fmt.Sprintf("%d %s already ([sessions] %s = %d): close one with sessions.close (sessions.list shows them), or raise the bound",
		e.Open, who, e.Key, e.Max)
}

// NotOwnerError refuses a change to a session by a client other than the
// one that started it (a native client may change any session).
type NotOwnerError struct {
	SessionID string
	Method    string
	// Origin is the refused connection's.
	Origin string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("%s: session %s was started by another client; only the client that started it (or a native client) may prompt, steer, "+
		"configure, cancel, release, load or close it, and another may only follow it; start a session of your own with sessions.start", e.Method, e.SessionID)
}

// NotIsolatedError refuses a review of a session that runs in its cwd:
// it has no worktree, and its changes are the cwd's own.
type NotIsolatedError struct {
	SessionID string
	Method    string
}

func (e *NotIsolatedError) Error() string {
	return fmt.Sprintf("%s: session %s was not started with isolation \"worktree\", so it has no worktree and no changes of its own to show; "+
		"its turns ran in its cwd (start a session with isolation \"worktree\" to review its changes)", e.Method, e.SessionID)
}

// WorktreeGoneError refuses what needs an isolated session's worktree
// once it is gone: discarded, pruned by age, or removed by hand.
type WorktreeGoneError struct {
	SessionID string
	Reason    string
}

func (e *WorktreeGoneError) Error() string {
	return fmt.Sprintf("session %s has no worktree any more (%s): its changes are gone with it", e.SessionID, e.Reason)
}

// BusyError refuses a rewind or discard while a turn of the session runs
// or prompts wait for their turn: the agent would go on writing in a
// worktree changed (or removed) under it.
type BusyError struct {
	SessionID string
	Method    string
	RunID     string
	Queued    int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("%s: session %s has a turn running (run %s) or prompts queued (%d); wait for them, or end them with sessions.cancel "+
		"(clear_queue to drop the queue), then send it again", e.Method, e.SessionID, e.RunID, e.Queued)
}
