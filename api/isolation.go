package api

import (
	"strings"
	"time"
)

// Isolation: a session (or one agents.invoke) whose agent works in a git
// worktree of its own, on a branch of its own, so the user's checkout is
// never written while it runs. Each turn that changed something is one
// commit on that branch; the session's changes can be shown, brought into
// the checkout, rewound to an earlier turn, or thrown away.

// IsolationWorktree is the one isolation card offers: a git worktree of
// the repository the cwd is in.
const IsolationWorktree = "worktree"

// MaxBaseBytes bounds the base a client names: a ref or a commit.
const MaxBaseBytes = 1024

// checkIsolation refuses an isolation card does not offer, and a base
// without isolation or one that could be read as an option.
func checkIsolation(isolation, base string) error {
	switch isolation {
	case "", IsolationWorktree:
	default:
		return InvalidField("isolation", "unknown isolation %q; the one isolation is %q (a git worktree of the cwd's repository)", isolation, IsolationWorktree)
	}
	if base == "" {
		return nil
	}
	switch {
	case isolation == "":
		return InvalidField("base", "applies only with isolation %q: the commit the session's worktree starts from", IsolationWorktree)
	case len(base) > MaxBaseBytes:
		return InvalidField("base", "is longer than %d bytes", MaxBaseBytes)
	case strings.HasPrefix(base, "-"):
		return InvalidField("base", "must not start with '-'")
	case strings.ContainsFunc(base, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return InvalidField("base", "contains a control character")
	}
	return nil
}

// CheckIsolation refuses isolation and base values card does not take
// (sessions.start's; agents.invoke's are checked the same way).
func (p *SessionStartParams) CheckIsolation() error { return checkIsolation(p.Isolation, p.Base) }

// CheckIsolation refuses isolation and base values card does not take.
func (p *InvokeParams) CheckIsolation() error { return checkIsolation(p.Isolation, p.Base) }

// SessionWorktree is an isolated session's worktree, as sessions.start,
// sessions.get and an isolated agents.invoke show it.
type SessionWorktree struct {
	// Path is the top of the worktree; Dir is where the turns run (the
	// directory of the worktree that matches the cwd given).
	Path string `json:"path"`
	Dir  string `json:"dir"`
	// Branch is the session's branch in the user's repository.
	Branch string `json:"branch"`
	// Base is the commit the worktree started from, and BaseRef what it
	// was named by (HEAD when no base was given).
	Base    string `json:"base"`
	BaseRef string `json:"base_ref"`
	// Repo is the top of the user's checkout, which sessions.apply writes.
	Repo string `json:"repo"`
	// Uncommitted is what the user's checkout held beyond its HEAD when
	// the worktree was made: none of it is in the worktree.
	Uncommitted Uncommitted `json:"uncommitted"`
	// DiscardedAt is set once the worktree and its branch are gone
	// (sessions.discard, or pruned by age).
	DiscardedAt *time.Time `json:"discarded_at,omitempty"`
}

// Uncommitted is the user's checkout's state beyond its HEAD.
type Uncommitted struct {
	// Any says the checkout had uncommitted changes.
	Any bool `json:"any"`
	// Tracked counts changed tracked files (staged or not), Untracked the
	// untracked files and directories that are not ignored.
	Tracked   int `json:"tracked"`
	Untracked int `json:"untracked"`
	// Paths are the first 20 of them, sorted.
	Paths []string `json:"paths"`
}

// EventChanges is the event an isolated session's turn ends with, just
// before its terminal event: what the turn changed in the worktree, now one
// commit on the session's branch.
const EventChanges = "changes"

// EventRewound is the event sessions.rewind adds to the session's stream,
// between turns (no run): the worktree is back to the state after a turn.
const EventRewound = "rewound"

// FileChange is one file a turn or a session changed.
type FileChange struct {
	Path string `json:"path"`
	// Status is added, modified, deleted or type_changed (a file that
	// became a link, say).
	Status  string `json:"status"`
	Added   int    `json:"added"`
	Deleted int    `json:"deleted"`
	// Binary files have no line counts.
	Binary bool `json:"binary,omitempty"`
}

// TurnChanges is what one turn changed in its session's worktree.
type TurnChanges struct {
	Turn int `json:"turn"`
	// Commit is the turn's commit on the session's branch; absent when
	// the turn changed nothing (no commit is made then).
	Commit  string       `json:"commit,omitempty"`
	Files   []FileChange `json:"files"`
	Added   int          `json:"added"`
	Deleted int          `json:"deleted"`
	// Error says card could not record the turn's changes as a commit;
	// they stay in the worktree and go into the next turn's commit.
	Error string `json:"error,omitempty"`
}

// SessionRewound is what sessions.rewind did, as its event says it.
type SessionRewound struct {
	// Turn is the turn the worktree is back to (0: its base), Commit that
	// turn's commit.
	Turn   int    `json:"turn"`
	Commit string `json:"commit"`
	// DroppedTurns are the later turns whose changes are gone from the
	// worktree and the branch.
	DroppedTurns []int `json:"dropped_turns"`
}

// WorktreeTurn is one committed turn of an isolated session.
type WorktreeTurn struct {
	Turn   int       `json:"turn"`
	Commit string    `json:"commit"`
	Time   time.Time `json:"time"`
}

// SessionDiffParams ask for an isolated session's changes: the whole
// session's, or one turn's.
type SessionDiffParams struct {
	SessionID string `json:"session_id"`
	Turn      int    `json:"turn,omitempty"`
	MaxBytes  int    `json:"max_bytes,omitempty"`
}

// Bounds on a diff's patch (max_bytes).
const (
	DefaultDiffBytes = 1 << 20
	MaxDiffBytes     = 64 << 20
)

// Validate requires the session id, a turn that is not negative and a cap
// within bounds.
func (p *SessionDiffParams) Validate() error {
	if err := requireSessionID(p.SessionID); err != nil {
		return err
	}
	if p.Turn < 0 {
		return InvalidField("turn", "must not be negative (0 or absent: the whole session)")
	}
	if p.MaxBytes < 0 || p.MaxBytes > MaxDiffBytes {
		return InvalidField("max_bytes", "must be between 1 and %d (or absent for %d), not %d", MaxDiffBytes, DefaultDiffBytes, p.MaxBytes)
	}
	return nil
}

// SessionDiff is sessions.diff's answer.
type SessionDiff struct {
	SessionID string `json:"session_id"`
	// Turn is the turn shown (0: the whole session). From and To are the
	// commits compared; equal when there is nothing to show.
	Turn int    `json:"turn"`
	From string `json:"from"`
	To   string `json:"to"`
	// Files lists every changed file, whatever the cap; Added and Deleted
	// count the lines of them all.
	Files   []FileChange `json:"files"`
	Added   int          `json:"added"`
	Deleted int          `json:"deleted"`
	// Patch is the unified diff, cut at MaxBytes when Truncated.
	Patch     string `json:"patch"`
	Truncated bool   `json:"truncated"`
	MaxBytes  int    `json:"max_bytes"`
	// Turns are the session's committed turns, oldest first.
	Turns []WorktreeTurn `json:"turns"`
}

// SessionApplyResult is sessions.apply's answer: the session's changes are
// in the user's checkout, uncommitted.
type SessionApplyResult struct {
	SessionID string `json:"session_id"`
	// Repo is the checkout written.
	Repo    string       `json:"repo"`
	From    string       `json:"from"`
	To      string       `json:"to"`
	Files   []FileChange `json:"files"`
	Added   int          `json:"added"`
	Deleted int          `json:"deleted"`
}

// SessionRewindParams put an isolated session's worktree back to the state
// after a turn.
type SessionRewindParams struct {
	SessionID string `json:"session_id"`
	Turn      *int   `json:"turn"`
}

// Validate requires the session id and a turn (0: the base).
func (p *SessionRewindParams) Validate() error {
	if err := requireSessionID(p.SessionID); err != nil {
		return err
	}
	if p.Turn == nil {
		return InvalidField("turn", "required: the turn whose state the worktree goes back to (0: the state the session started from)")
	}
	if *p.Turn < 0 {
		return InvalidField("turn", "must not be negative")
	}
	return nil
}

// SessionRewindResult is sessions.rewind's answer.
type SessionRewindResult struct {
	SessionID string `json:"session_id"`
	SessionRewound
	// Turns are the session's committed turns left, oldest first.
	Turns []WorktreeTurn `json:"turns"`
}

// SessionDiscardResult is sessions.discard's answer: the session as it now
// is (closed, its worktree discarded).
type SessionDiscardResult struct {
	Session Session `json:"session"`
	// Closed says the discard closed the session, which was open.
	Closed bool `json:"closed"`
}
