package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
)

// The review of an isolated session (card chat --worktree, or a client's
// sessions.start with isolation "worktree"): its diff, bringing it into the
// checkout, rewinding it and throwing it away.

var diffDoc = doc{
	name:  "diff",
	usage: "diff SESSION [--turn N] [--stat] [--max-bytes N] [--json] [--home DIR]",
	about: `Prints what an isolated session changed in its worktree, as a unified diff: the whole
session's (from where it started to its last turn), or one turn's with --turn. Only turns that
have ended are in it. A diff larger than --max-bytes is cut after the last whole file that fits,
and a line on stderr says so; --stat lists the files with their added and deleted lines instead.`,
	examples: []string{
		"card diff ses_06H4X9881V4CCE6QG0SQZBXPVC",
		"card diff ses_06H4X9881V4CCE6QG0SQZBXPVC --turn 2",
		"card diff ses_06H4X9881V4CCE6QG0SQZBXPVC --stat",
	},
}

var applyDoc = doc{
	name:  "apply",
	usage: "apply SESSION [--json] [--home DIR]",
	about: `Brings an isolated session's changes into the checkout it was started in, as uncommitted
changes (new files untracked, nothing staged, no commit). All or nothing: when a file conflicts
with the checkout (changed there too, or already there), nothing is written and each file is
named with the reason.`,
	more:     "Exit codes: 4 when the changes conflict with the checkout, which is then unchanged.",
	examples: []string{"card apply ses_06H4X9881V4CCE6QG0SQZBXPVC"},
}

var rewindDoc = doc{
	name:  "rewind",
	usage: "rewind SESSION TURN [--json] [--home DIR]",
	about: `Puts an isolated session's worktree back to the state after TURN (0: where it started);
the later turns' changes are gone from it. The conversation goes on, but the agent still
remembers the later turns: tell it in your next prompt that their changes were undone.`,
	examples: []string{
		"card rewind ses_06H4X9881V4CCE6QG0SQZBXPVC 1",
		"card rewind ses_06H4X9881V4CCE6QG0SQZBXPVC 0  # back to where it started",
	},
}

var discardDoc = doc{
	name:  "discard",
	usage: "discard SESSION [--json] [--home DIR]",
	about: `Removes an isolated session's worktree and its branch, with every turn's commit, and closes
the session if it is open. The checkout it was started in is not touched.`,
	examples: []string{"card discard ses_06H4X9881V4CCE6QG0SQZBXPVC"},
}

func (e env) diff(args []string) int {
	fs, home := e.newFlags(diffDoc)
	turn := fs.Int("turn", 0, "one turn's changes (default: the whole session's)")
	stat := fs.Bool("stat", false, "list the changed files and their line counts instead of the diff")
	maxBytes := fs.Int("max-bytes", 0, "cut the diff at this many bytes (default 1 MiB, at most 64 MiB)")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	pos, code, done := e.parse(diffDoc, fs, args)
	if done {
		return code
	}
	if len(pos) != 1 {
		return e.usageError(diffDoc, "one SESSION (the id card chat --worktree printed)")
	}
	var d api.SessionDiff
	if code := e.call("diff", *home, func(ctx context.Context, c *client.Client) (err error) {
		d, err = c.SessionDiff(ctx, api.SessionDiffParams{SessionID: pos[0], Turn: *turn, MaxBytes: *maxBytes})
		return err
	}); code != exitOK {
		return code
	}
	switch {
	case *asJSON:
		return printJSON(e.stdout, d)
	case *stat:
		writeFileChanges(e, d.Files)
		fmt.Fprintf(e.stdout, "%d files changed, +%d -%d\n", len(d.Files), d.Added, d.Deleted)
	default:
		// The patch is the agent's text: a terminal shows it, never
		// obeys it; a pipe gets the bytes (git apply reads them).
		patch := d.Patch
		if isTerminal(e.stdout) {
			patch = termSafe(patch)
		}
		fmt.Fprint(e.stdout, patch)
		if d.Truncated {
			fmt.Fprintf(e.stderr, "card diff: cut at %d bytes; %d files changed in all (--stat lists them, --max-bytes shows more)\n", d.MaxBytes, len(d.Files))
		}
	}
	return exitOK
}

func writeFileChanges(e env, files []api.FileChange) {
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	for _, f := range files {
		counts := fmt.Sprintf("+%d -%d", f.Added, f.Deleted)
		if f.Binary {
			counts = "binary"
		}
		path := f.Path
		if isTerminal(e.stdout) {
			path = termSafe(path)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", f.Status, counts, path)
	}
	_ = w.Flush()
}

func (e env) apply(args []string) int {
	id, home, asJSON, code, done := e.oneSession(applyDoc, args, 1)
	if done {
		return code
	}
	var a api.SessionApplyResult
	if code := e.call("apply", *home, func(ctx context.Context, c *client.Client) (err error) {
		a, err = c.ApplySession(ctx, id[0])
		return err
	}); code != exitOK {
		return code
	}
	if asJSON {
		return printJSON(e.stdout, a)
	}
	writeFileChanges(e, a.Files)
	fmt.Fprintf(e.stdout, "applied %d files to %s, uncommitted (+%d -%d)\n", len(a.Files), a.Repo, a.Added, a.Deleted)
	return exitOK
}

func (e env) rewind(args []string) int {
	pos, home, asJSON, code, done := e.oneSession(rewindDoc, args, 2)
	if done {
		return code
	}
	turn, err := strconv.Atoi(pos[1])
	if err != nil || turn < 0 {
		return e.usageError(rewindDoc, fmt.Sprintf("TURN %q is not a turn number (0 or more)", pos[1]))
	}
	var r api.SessionRewindResult
	if code := e.call("rewind", *home, func(ctx context.Context, c *client.Client) (err error) {
		r, err = c.RewindSession(ctx, pos[0], turn)
		return err
	}); code != exitOK {
		return code
	}
	if asJSON {
		return printJSON(e.stdout, r)
	}
	fmt.Fprintf(e.stdout, "session %s's worktree is back to turn %d (commit %s); dropped turns: %v\n", r.SessionID, r.Turn, shortCommit(r.Commit), r.DroppedTurns)
	fmt.Fprintln(e.stderr, "card rewind: the agent still remembers the dropped turns; say in your next prompt that their changes are gone")
	return exitOK
}

func (e env) discard(args []string) int {
	id, home, asJSON, code, done := e.oneSession(discardDoc, args, 1)
	if done {
		return code
	}
	var r api.SessionDiscardResult
	if code := e.call("discard", *home, func(ctx context.Context, c *client.Client) (err error) {
		r, err = c.DiscardSession(ctx, id[0])
		return err
	}); code != exitOK {
		return code
	}
	if asJSON {
		return printJSON(e.stdout, r)
	}
	what := "its worktree and branch are gone"
	if r.Closed {
		what += "; the session is closed"
	}
	fmt.Fprintf(e.stdout, "session %s: %s\n", r.Session.SessionID, what)
	return exitOK
}

// oneSession parses the args of a review command: a session id and n-1
// more positional arguments, --json and --home.
func (e env) oneSession(d doc, args []string, n int) (pos []string, home *string, asJSON bool, code int, done bool) {
	fs, home := e.newFlags(d)
	j := fs.Bool("json", false, "print the answer as JSON")
	pos, code, done = e.parse(d, fs, args)
	if done {
		return nil, nil, false, code, true
	}
	if len(pos) != n {
		return nil, nil, false, e.usageError(d, fmt.Sprintf("want %s", d.usage[len(d.name)+1:])), true
	}
	return pos, home, *j, exitOK, false
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
