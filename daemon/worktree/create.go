package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Uncommitted says what the user's checkout held beyond its HEAD when the
// worktree was made: none of it is in the worktree.
type Uncommitted struct {
	// Tracked counts tracked files changed (staged or not, deletions
	// included); Untracked untracked files and directories (not ignored).
	Tracked, Untracked int
	// Paths are the first few of them (sorted), for a message.
	Paths []string
}

// Any reports whether the checkout had uncommitted changes.
func (u Uncommitted) Any() bool { return u.Tracked+u.Untracked > 0 }

// maxUncommittedPaths bounds Uncommitted.Paths.
const maxUncommittedPaths = 20

// Created is what Create made.
type Created struct {
	Worktree    Worktree
	Uncommitted Uncommitted
}

// CreateRequest is what a session asks isolation for.
type CreateRequest struct {
	SessionID string
	// Cwd is the session's cwd; it must be inside a git work tree.
	Cwd string
	// Base names the commit to start from (a branch, tag, commit); empty
	// is the checkout's HEAD.
	Base string
}

// Create adds a worktree of the repository Cwd is in, on a new branch named
// after the session, at Base (default HEAD), under Root/<session id>/. It
// writes nothing of the user's checkout: git adds the worktree's metadata
// (.git/worktrees/<name>/) and the branch (its ref and reflog), and
// nothing else. On failure nothing is left behind.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (Created, error) {
	id := req.SessionID
	if !validSessionID(id) {
		return Created{}, fmt.Errorf("session id %q: %w", id, ErrBadName)
	}
	unlock, err := m.locks.lock(ctx, "session\x00"+id)
	if err != nil {
		return Created{}, err
	}
	defer unlock()

	repo, err := m.discover(ctx, req.Cwd)
	if err != nil {
		return Created{}, err
	}
	if err := m.checkRootOutside(repo.top); err != nil {
		return Created{}, err
	}
	unlockRepo, err := m.locks.lock(ctx, "repo\x00"+repo.common)
	if err != nil {
		return Created{}, err
	}
	defer unlockRepo()

	wt, config, err := m.plan(ctx, id, repo, req.Base)
	if err != nil {
		return Created{}, err
	}
	uncommitted, err := m.uncommitted(ctx, wt, config)
	if err != nil {
		return Created{}, err
	}
	if wt, err = m.add(ctx, wt, config); err != nil {
		return Created{}, err
	}
	return Created{Worktree: wt, Uncommitted: uncommitted}, nil
}

// plan is the worktree session id gets in repo, from base: its place, its
// branch and the commit it starts from, with the repository's config for
// the calls that follow. Nothing is written yet; a base that names no
// commit, or a branch that is already there, refuses it.
func (m *Manager) plan(ctx context.Context, id string, repo repoInfo, base string) (Worktree, []kv, error) {
	wt := Worktree{
		Version:    recordVersion,
		SessionID:  id,
		Repo:       repo.top,
		RepoGitDir: repo.gitDir,
		CommonDir:  repo.common,
		Path:       filepath.Join(m.cfg.Root, id, worktreeName(repo.top)),
		Branch:     m.cfg.BranchPrefix + id,
		BaseRef:    base,
		Subdir:     repo.prefix,
		Created:    m.now().UTC().Truncate(time.Second),
	}
	if wt.BaseRef == "" {
		wt.BaseRef = "HEAD"
	}
	config, err := m.repoConfig(ctx, wt.Repo, wt.RepoGitDir, wt.Repo)
	if err != nil {
		return Worktree{}, nil, err
	}
	if wt.Base, err = m.resolveBase(ctx, wt, config); err != nil {
		return Worktree{}, nil, err
	}
	if _, err := m.output(ctx, wt.checkoutCall(config, "check-ref-format", wt.ref())); err != nil {
		return Worktree{}, nil, fmt.Errorf("branch %s: %w", wt.Branch, ErrBadName)
	}
	if ok, err := m.refExists(ctx, wt.checkoutCall(config), wt.ref()); err != nil {
		return Worktree{}, nil, err
	} else if ok {
		return Worktree{}, nil, fmt.Errorf("branch %s is already in %s: %w", wt.Branch, wt.Repo, ErrExists)
	}
	return wt, config, nil
}

// add makes the worktree plan gave: its private directory, its record,
// git's worktree and branch, and the directory the turns run in. It
// returns wt with its git directory; on failure it leaves nothing behind.
func (m *Manager) add(ctx context.Context, wt Worktree, config []kv) (Worktree, error) {
	sessionDir := filepath.Dir(wt.Path)
	if err := os.Mkdir(sessionDir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return Worktree{}, fmt.Errorf("%s: %w", sessionDir, ErrExists)
		}
		return Worktree{}, fmt.Errorf("worktree: %w", err)
	}
	// The record goes first, without GitDir: a daemon killed during the
	// add leaves a record that Discard and Prune can clean up after.
	if err := writeRecord(wt); err != nil {
		_ = os.RemoveAll(sessionDir)
		return Worktree{}, err
	}
	fail := func(err error) (Worktree, error) {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
		defer cancel()
		_ = m.discard(cleanup, wt)
		return Worktree{}, err
	}
	// The commit is given by its hash, and the path is absolute: neither
	// can be read as an option.
	if _, err := m.output(ctx, wt.checkoutCall(config, "worktree", "add", "--quiet", "-b", wt.Branch, wt.Path, wt.Base)); err != nil {
		// git removes a half-made worktree itself but may keep the
		// branch it made. That branch goes, and only if it is still
		// where git made it: a branch someone else created meanwhile
		// under the name (the reason the add failed) stays.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.CallTimeout)
		defer cancel()
		_, _ = m.output(cleanup, wt.checkoutCall(config, "update-ref", "-d", wt.ref(), wt.Base))
		_ = os.RemoveAll(sessionDir)
		return Worktree{}, err
	}
	// The new worktree's git directory is asked of git now, before any
	// agent has run in the worktree, and kept: later calls name it rather
	// than follow the worktree's .git file.
	out, err := m.output(ctx, call{dir: wt.Path, config: config, args: []string{"rev-parse", "--path-format=absolute", "--git-dir"}})
	if err != nil {
		return fail(err)
	}
	wt.GitDir = strings.TrimSuffix(string(out), "\n")
	if filepath.Dir(wt.GitDir) != filepath.Join(wt.CommonDir, "worktrees") {
		return fail(fmt.Errorf("worktree: git put the worktree's metadata in %s, not under %s", wt.GitDir, filepath.Join(wt.CommonDir, "worktrees")))
	}
	// The cwd may be a directory git does not track (empty, or ignored):
	// the worktree gets it too, empty, so the turns have it to run in.
	if err := os.MkdirAll(wt.Dir(), 0o755); err != nil {
		return fail(fmt.Errorf("worktree: %w", err))
	}
	if err := writeRecord(wt); err != nil {
		return fail(err)
	}
	return wt, nil
}

// repoInfo is the repository a cwd is in.
type repoInfo struct {
	top, gitDir, common, prefix string
}

// discover finds the repository of cwd. It is the one call that lets git
// discover a repository, from the cwd the user gave.
func (m *Manager) discover(ctx context.Context, cwd string) (repoInfo, error) {
	if !filepath.IsAbs(cwd) {
		return repoInfo{}, fmt.Errorf("cwd %q is not an absolute path: %w", cwd, ErrNotRepository)
	}
	if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
		return repoInfo{}, fmt.Errorf("cwd %s is not a directory: %w", cwd, ErrNotRepository)
	}
	out, err := m.output(ctx, call{dir: cwd, args: []string{"rev-parse", "--path-format=absolute",
		"--show-toplevel", "--git-dir", "--git-common-dir", "--show-prefix"}})
	if err != nil {
		var ge *GitError
		if errors.As(err, &ge) && ge.ExitCode > 0 {
			return repoInfo{}, fmt.Errorf("cwd %s: %s: %w", cwd, firstLine(ge.Stderr), ErrNotRepository)
		}
		return repoInfo{}, err
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) != 5 || lines[4] != "" {
		return repoInfo{}, fmt.Errorf("cwd %s: git's answer about its repository is not four lines (a path with a newline?): %w", cwd, ErrNotRepository)
	}
	r := repoInfo{top: lines[0], gitDir: lines[1], common: filepath.Clean(lines[2]), prefix: strings.TrimSuffix(lines[3], "/")}
	for _, p := range []string{r.top, r.gitDir, r.common} {
		if !filepath.IsAbs(p) {
			return repoInfo{}, fmt.Errorf("cwd %s: git named %q for its repository: %w", cwd, p, ErrNotRepository)
		}
	}
	return r, nil
}

// checkRootOutside refuses a root inside the user's checkout: a worktree
// there would be untracked files in the very checkout isolation leaves
// alone.
func (m *Manager) checkRootOutside(top string) error {
	root, err := filepath.EvalSymlinks(m.cfg.Root)
	if err != nil {
		return fmt.Errorf("worktree: %w", err)
	}
	if within(root, top) {
		return fmt.Errorf("the worktrees' root %s is inside the repository %s: %w", m.cfg.Root, top, ErrUnsafeRoot)
	}
	return nil
}

// resolveBase resolves wt.BaseRef to a commit hash in the user's checkout.
func (m *Manager) resolveBase(ctx context.Context, wt Worktree, config []kv) (string, error) {
	ref := wt.BaseRef
	if strings.HasPrefix(ref, "-") || strings.ContainsFunc(ref, func(r rune) bool { return r < ' ' || r == 0x7f }) || len(ref) > 1024 {
		return "", fmt.Errorf("base %q: %w", ref, ErrBadBase)
	}
	out, err := m.output(ctx, wt.checkoutCall(config, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}"))
	if err != nil {
		if exitCode(err) > 0 {
			if ref == "HEAD" {
				if ok, _ := m.refExists(ctx, wt.checkoutCall(config), "HEAD"); !ok {
					return "", fmt.Errorf("%s: %w", wt.Repo, ErrNoCommit)
				}
			}
			return "", fmt.Errorf("base %q in %s: %w", ref, wt.Repo, ErrBadBase)
		}
		return "", err
	}
	hash := strings.TrimSpace(string(out))
	if !isHash(hash) {
		return "", fmt.Errorf("base %q resolved to %q: %w", ref, hash, ErrBadBase)
	}
	return hash, nil
}

// refExists asks whether ref resolves, in the repository c names.
func (m *Manager) refExists(ctx context.Context, c call, ref string) (bool, error) {
	c.args = []string{"rev-parse", "--verify", "--quiet", "--end-of-options", ref}
	_, err := m.output(ctx, c)
	switch {
	case err == nil:
		return true, nil
	case exitCode(err) == 1:
		return false, nil
	default:
		return false, err
	}
}

// uncommitted reads the user's checkout's status without writing its index
// (GIT_OPTIONAL_LOCKS=0 in env).
func (m *Manager) uncommitted(ctx context.Context, wt Worktree, config []kv) (Uncommitted, error) {
	out, truncated, err := m.run(ctx, call{dir: wt.Repo, gitDir: wt.RepoGitDir, workTree: wt.Repo, config: config,
		max: maxListOutput, truncate: true,
		args: []string{"status", "--porcelain=v1", "-z", "--untracked-files=normal", "--ignore-submodules=all", "--no-renames"}})
	if err != nil {
		return Uncommitted{}, err
	}
	var u Uncommitted
	entries := strings.Split(string(out), "\x00")
	if truncated && len(entries) > 0 {
		entries = entries[:len(entries)-1] // the last one may be cut
	}
	for _, e := range entries {
		if len(e) < 4 {
			continue
		}
		if e[:2] == "??" {
			u.Untracked++
		} else {
			u.Tracked++
		}
		u.Paths = append(u.Paths, e[3:])
	}
	sort.Strings(u.Paths)
	if len(u.Paths) > maxUncommittedPaths {
		u.Paths = u.Paths[:maxUncommittedPaths]
	}
	return u, nil
}
