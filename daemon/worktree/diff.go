package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Bounds on a shown diff's patch text.
const (
	// DefaultMaxDiffBytes is the patch's cap when the caller gives none.
	DefaultMaxDiffBytes = 1 << 20
	// MaxDiffBytes is the largest cap a caller may give.
	MaxDiffBytes = 64 << 20
	// maxApplyPatch bounds the patch Apply feeds to git apply, binary
	// files included.
	maxApplyPatch = 256 << 20
)

// FileChange is one file a diff changes, with its line counts.
type FileChange struct {
	Path string `json:"path"`
	// Status is "added", "deleted", "modified" or "type_changed" (a file
	// that became a link, say).
	Status  string `json:"status"`
	Added   int    `json:"added"`
	Deleted int    `json:"deleted"`
	// Binary files have no line counts, and the patch names them only.
	Binary bool `json:"binary,omitempty"`
}

// Changes are the files a turn, or a session, changed, in git's order
// (by path), and the lines added and deleted in all of them.
type Changes struct {
	Files   []FileChange `json:"files"`
	Added   int          `json:"added"`
	Deleted int          `json:"deleted"`
}

// Diff is the session's changes, or one turn's.
type Diff struct {
	// Turn is the turn shown (0: the whole session). From and To are the
	// commits compared; they are equal when nothing was committed yet.
	Turn     int
	From, To string
	// Changes lists every file, whatever the cap.
	Changes Changes
	// Patch is the unified diff (three lines of context, a/ and b/
	// prefixes, full object names, no renames: a renamed file is a
	// deletion and an addition). A binary file is named ("Binary files
	// ... differ"), not shown. When the patch is larger than the cap it is
	// cut at the last file that fits whole (or, when the first file alone
	// is larger, at its last whole line within the cap), and Truncated is
	// set. The same commits and cap give the same bytes, whatever the
	// user's diff settings.
	Patch     string
	Truncated bool
}

// diffFlags fix what a diff shows, whatever the user's config says, and
// keep programs out: no external diff, no textconv.
var diffFlags = []string{"--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--ignore-submodules=all",
	"--no-relative", "-O/dev/null"}

// patchFlags fix the patch's form.
var patchFlags = []string{"--full-index", "-U3", "--inter-hunk-context=0", "--diff-algorithm=myers", "--indent-heuristic",
	"--src-prefix=a/", "--dst-prefix=b/"}

// Diff is the unified diff of the whole session (turn 0: base to the last
// turn's commit) or of one turn (the previous turn's commit, or the base,
// to that turn's), with per-file stats and the patch cut at maxBytes
// (DefaultMaxDiffBytes when 0; at most MaxDiffBytes). Uncommitted changes
// (a turn still running) are not in it. A turn without a commit is
// ErrNoTurn: the caller, which knows its turns, answers an empty diff for a
// turn that ran and changed nothing.
func (m *Manager) Diff(ctx context.Context, wt Worktree, turn int, maxBytes int) (Diff, error) {
	switch {
	case turn < 0:
		return Diff{}, fmt.Errorf("turn %d: %w", turn, ErrNoTurn)
	case maxBytes < 0 || maxBytes > MaxDiffBytes:
		return Diff{}, fmt.Errorf("worktree: a diff's cap must be between 1 and %d bytes, not %d", MaxDiffBytes, maxBytes)
	case maxBytes == 0:
		maxBytes = DefaultMaxDiffBytes
	}
	unlock, config, err := m.begin(ctx, wt)
	if err != nil {
		return Diff{}, err
	}
	defer unlock()
	from, to, err := m.span(ctx, wt, config, turn)
	if err != nil {
		return Diff{}, err
	}
	d := Diff{Turn: turn, From: from, To: to, Changes: Changes{Files: []FileChange{}}}
	if from == to {
		return d, nil
	}
	if d.Changes, err = m.changes(ctx, wt, config, from, to); err != nil {
		return Diff{}, err
	}
	c := wt.call(config, append(append(append([]string{"diff"}, diffFlags...), patchFlags...), "--end-of-options", from, to, "--")...)
	c.max, c.truncate = maxBytes+1, true
	out, truncated, err := m.run(ctx, c)
	if err != nil {
		return Diff{}, err
	}
	if truncated || len(out) > maxBytes {
		out, d.Truncated = cutPatch(out, maxBytes), true
	}
	d.Patch = string(out)
	return d, nil
}

// cutPatch cuts a patch to at most max bytes: after the last file that fits
// whole, else after the last whole line.
func cutPatch(p []byte, max int) []byte {
	p = p[:min(len(p), max)]
	if i := bytes.LastIndex(p, []byte("\ndiff --git ")); i >= 0 {
		return p[:i+1]
	}
	if i := bytes.LastIndexByte(p, '\n'); i >= 0 {
		return p[:i+1]
	}
	return p[:0]
}

// span is the commits a diff of turn compares (0: the whole session).
func (m *Manager) span(ctx context.Context, wt Worktree, config []kv, turn int) (from, to string, err error) {
	turns, err := m.turns(ctx, wt, config)
	if err != nil {
		return "", "", err
	}
	if turn == 0 {
		if len(turns) == 0 {
			return wt.Base, wt.Base, nil
		}
		return wt.Base, turns[len(turns)-1].Commit, nil
	}
	for i, t := range turns {
		if t.Number == turn {
			if i == 0 {
				return wt.Base, t.Commit, nil
			}
			return turns[i-1].Commit, t.Commit, nil
		}
	}
	return "", "", fmt.Errorf("session %s, turn %d: %w", wt.SessionID, turn, ErrNoTurn)
}

// changes lists the files between two commits with their line counts.
func (m *Manager) changes(ctx context.Context, wt Worktree, config []kv, from, to string) (Changes, error) {
	c := wt.call(config, append(append([]string{"diff"}, diffFlags...), "--raw", "--numstat", "-z", "--no-abbrev",
		"--end-of-options", from, to, "--")...)
	c.max = maxListOutput
	out, err := m.output(ctx, c)
	if err != nil {
		return Changes{}, err
	}
	return parseRawNumstat(out)
}

// parseRawNumstat reads `git diff --raw --numstat -z --no-renames`: first a
// raw record per file (":modes hashes status" NUL path NUL), then a numstat
// record per file ("added TAB deleted TAB path" NUL; "-" counts for a
// binary file).
func parseRawNumstat(out []byte) (Changes, error) {
	ch := Changes{Files: []FileChange{}}
	index := map[string]int{}
	fields := strings.Split(string(out), "\x00")
	for i := 0; i < len(fields); i++ {
		f := strings.TrimPrefix(fields[i], "\n")
		if f == "" {
			continue
		}
		if strings.HasPrefix(f, ":") {
			if i+1 >= len(fields) {
				return Changes{}, fmt.Errorf("worktree: a raw diff record without its path: %q", f)
			}
			path := fields[i+1]
			i++
			meta := strings.Fields(f)
			status := "modified"
			if len(meta) == 5 {
				switch meta[4][:1] {
				case "A":
					status = "added"
				case "D":
					status = "deleted"
				case "T":
					status = "type_changed"
				}
			}
			index[path] = len(ch.Files)
			ch.Files = append(ch.Files, FileChange{Path: path, Status: status})
			continue
		}
		parts := strings.SplitN(f, "\t", 3)
		if len(parts) != 3 {
			return Changes{}, fmt.Errorf("worktree: cannot read numstat record %q", f)
		}
		j, ok := index[parts[2]]
		if !ok {
			return Changes{}, fmt.Errorf("worktree: numstat names %q, which the raw diff did not", parts[2])
		}
		if parts[0] == "-" && parts[1] == "-" {
			ch.Files[j].Binary = true
			continue
		}
		a, err1 := strconv.Atoi(parts[0])
		d, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil {
			return Changes{}, fmt.Errorf("worktree: cannot read numstat record %q", f)
		}
		ch.Files[j].Added, ch.Files[j].Deleted = a, d
		ch.Added += a
		ch.Deleted += d
	}
	return ch, nil
}

// Applied is what Apply brought into the user's checkout.
type Applied struct {
	From, To string
	Changes  Changes
}

// Conflict is a file Apply could not bring in, and git's reason.
type Conflict struct {
	Path string `json:"path"`
	// Reason is git apply's: "patch does not apply" (the checkout's file
	// changed where the session changed it), "already exists in working
	// directory" (the session adds a file the checkout has, untracked
	// ones included), "No such file or directory" (the session changes a
	// file the checkout no longer has), and the like.
	Reason string `json:"reason"`
}

// ConflictError is Apply's refusal: the files that conflict with the
// checkout's current state. Nothing was written.
type ConflictError struct {
	Repo  string
	Files []Conflict
}

func (e *ConflictError) Error() string {
	var names []string
	for i, f := range e.Files {
		if i == 10 {
			names = append(names, fmt.Sprintf("and %d more", len(e.Files)-i))
			break
		}
		names = append(names, fmt.Sprintf("%s (%s)", f.Path, f.Reason))
	}
	return fmt.Sprintf("the session's changes conflict with %s, which is unchanged: %s", e.Repo, strings.Join(names, ", "))
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Apply brings the session's changes (base to the last turn's commit) into
// the user's checkout as uncommitted changes: changed and deleted files in
// the work tree, new files untracked; the index, HEAD and every ref stay as
// they are. All or nothing: when any file conflicts with the checkout's
// state (changed there where the session changed it, an untracked file
// where the session adds one, a file the session changes that is gone) the
// whole apply is refused with a *ConflictError naming each, and nothing is
// written. A change the checkout made elsewhere in a file does not
// conflict: git applies by context, at the lines' new place.
//
// It is git apply, without --index (the index is not the session's to
// change) and without --3way (that writes the index, leaves conflict
// markers rather than refusing, and runs merge drivers); hooks and filters
// are off as for every call.
func (m *Manager) Apply(ctx context.Context, wt Worktree) (Applied, error) {
	unlock, config, err := m.begin(ctx, wt)
	if err != nil {
		return Applied{}, err
	}
	defer unlock()
	from, to, err := m.span(ctx, wt, config, 0)
	if err != nil {
		return Applied{}, err
	}
	a := Applied{From: from, To: to, Changes: Changes{Files: []FileChange{}}}
	if from == to {
		return a, nil
	}
	if a.Changes, err = m.changes(ctx, wt, config, from, to); err != nil {
		return Applied{}, err
	}
	if len(a.Changes.Files) == 0 {
		return a, nil
	}
	c := wt.call(config, append(append(append([]string{"diff", "--binary"}, diffFlags...), patchFlags...), "--end-of-options", from, to, "--")...)
	c.max = maxApplyPatch
	patch, err := m.output(ctx, c)
	if err != nil {
		return Applied{}, err
	}

	if st, err := os.Stat(wt.Repo); err != nil || !st.IsDir() {
		return Applied{}, fmt.Errorf("session %s: the checkout %s is gone: %w", wt.SessionID, wt.Repo, ErrNotFound)
	}
	unlockRepo, err := m.locks.lock(ctx, "repo\x00"+wt.CommonDir)
	if err != nil {
		return Applied{}, err
	}
	defer unlockRepo()
	repoConfig, err := m.repoConfig(ctx, wt.Repo, wt.RepoGitDir, wt.Repo)
	if err != nil {
		return Applied{}, err
	}
	ac := wt.checkoutCall(repoConfig, "apply", "--whitespace=nowarn", "-p1", "-")
	ac.stdin = patch
	if _, err := m.output(ctx, ac); err != nil {
		var ge *GitError
		if errors.As(err, &ge) && ge.ExitCode > 0 {
			if files := conflicts(ge.Stderr, a.Changes.Files); len(files) > 0 {
				return Applied{}, &ConflictError{Repo: wt.Repo, Files: files}
			}
		}
		return Applied{}, err
	}
	return a, nil
}

// conflicts reads git apply's complaints (in the C locale) about the
// files of the patch, one per file, in path order.
func conflicts(stderr string, files []FileChange) []Conflict {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	// Longest first: "a/b: ..." must not be read as a complaint about "a".
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	found := map[string]string{}
	for _, line := range strings.Split(stderr, "\n") {
		rest, ok := strings.CutPrefix(line, "error: ")
		if !ok || strings.HasPrefix(rest, "patch failed: ") {
			continue
		}
		for _, p := range paths {
			if reason, ok := strings.CutPrefix(rest, p+": "); ok {
				if _, seen := found[p]; !seen {
					found[p] = reason
				}
				break
			}
			if strings.Contains(rest, "'"+p+"'") {
				if _, seen := found[p]; !seen {
					found[p] = rest
				}
				break
			}
		}
	}
	var out []Conflict
	for _, f := range files {
		if r, ok := found[f.Path]; ok {
			out = append(out, Conflict{Path: f.Path, Reason: r})
		}
	}
	return out
}
