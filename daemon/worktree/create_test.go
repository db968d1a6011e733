package worktree_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/card-dev/card/daemon/worktree"
)

func TestCreateAddsAWorktreeOfHEADOnTheSessionsBranchInTheSameSubdirectory(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo := e.newRepo()
	head := strings.TrimSpace(e.git(repo, "rev-parse", "HEAD"))
	id := newID()

	got, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: id, Cwd: filepath.Join(repo, "src", "util")})
	if err != nil {
		t.Fatal(err)
	}
	wt := got.Worktree
	if wt.Base != head || wt.BaseRef != "HEAD" {
		t.Errorf("base = %s (%s), want HEAD %s", wt.Base, wt.BaseRef, head)
	}
	if want := filepath.Join(e.root, id, "project"); wt.Path != want {
		t.Errorf("path = %s, want %s", wt.Path, want)
	}
	if wt.Subdir != "src/util" || wt.Dir() != filepath.Join(wt.Path, "src", "util") {
		t.Errorf("subdir = %q, dir = %s; want src/util inside the worktree", wt.Subdir, wt.Dir())
	}
	if readFile(t, filepath.Join(wt.Dir(), "util.go")) != "package util\n" {
		t.Error("the worktree does not hold the repository's files")
	}
	if wt.Branch != "card/"+id {
		t.Errorf("branch = %s, want card/%s", wt.Branch, id)
	}
	if tip := strings.TrimSpace(e.git(repo, "rev-parse", "refs/heads/card/"+id)); tip != head {
		t.Errorf("the branch is at %s, want %s", tip, head)
	}
	if ref := strings.TrimSpace(e.git(wt.Path, "symbolic-ref", "HEAD")); ref != "refs/heads/card/"+id {
		t.Errorf("the worktree's HEAD is %s, want the session's branch", ref)
	}
	if list := e.git(repo, "worktree", "list", "--porcelain"); !strings.Contains(list, "worktree "+wt.Path+"\n") {
		t.Errorf("git worktree list does not show %s:\n%s", wt.Path, list)
	}
	if got.Uncommitted.Any() {
		t.Errorf("a clean checkout reported uncommitted changes: %+v", got.Uncommitted)
	}
	if filepath.Dir(wt.GitDir) != filepath.Join(repo, ".git", "worktrees") {
		t.Errorf("git dir = %s, want under the repository's .git/worktrees", wt.GitDir)
	}
}

func TestTheWorktreesDirectoriesAreReadableByTheUserAlone(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(e.root, 0o755); err != nil {
		t.Fatal(err)
	}
	m := e.manager() // makes an existing root private
	got, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: e.newRepo()})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{e.root, filepath.Dir(got.Worktree.Path)} {
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want 0700", dir, st.Mode().Perm())
		}
	}
	st, err := os.Stat(filepath.Join(filepath.Dir(got.Worktree.Path), worktree.RecordName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the record: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
}

func TestCreateStartsFromTheBaseGiven(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo := e.newRepo()
	first := strings.TrimSpace(e.git(repo, "rev-parse", "HEAD"))
	e.git(repo, "tag", "v1")
	writeFiles(t, repo, map[string]string{"README.md": "changed\n"})
	e.commitAll(repo, "second")

	got, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: repo, Base: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Worktree.Base != first || got.Worktree.BaseRef != "v1" {
		t.Errorf("base = %s (%s), want v1's %s", got.Worktree.Base, got.Worktree.BaseRef, first)
	}
	if s := readFile(t, filepath.Join(got.Worktree.Path, "README.md")); s != "# project\n\nhello\n" {
		t.Errorf("README.md in the worktree = %q, want v1's", s)
	}
}

func TestCreateReportsTheCheckoutsUncommittedChangesAndLeavesThemOut(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo := e.newRepo()
	writeFiles(t, repo, map[string]string{"README.md": "edited by the user\n", "notes/todo.txt": "mine\n", "build.log": "ignored\n"})
	e.git(repo, "add", "README.md")
	if err := os.Remove(filepath.Join(repo, "docs", "guide.txt")); err != nil {
		t.Fatal(err)
	}

	got, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: repo})
	if err != nil {
		t.Fatal(err)
	}
	u := got.Uncommitted
	if !u.Any() || u.Tracked != 2 || u.Untracked != 1 {
		t.Errorf("uncommitted = %+v, want 2 tracked (README.md staged, docs/guide.txt deleted) and 1 untracked (notes/)", u)
	}
	if want := []string{"README.md", "docs/guide.txt", "notes/"}; !reflect.DeepEqual(u.Paths, want) {
		t.Errorf("paths = %q, want %q", u.Paths, want)
	}
	wt := got.Worktree.Path
	if s := readFile(t, filepath.Join(wt, "README.md")); s != "# project\n\nhello\n" {
		t.Errorf("the worktree has the user's uncommitted README.md: %q", s)
	}
	if !exists(filepath.Join(wt, "docs", "guide.txt")) || exists(filepath.Join(wt, "notes")) || exists(filepath.Join(wt, "build.log")) {
		t.Error("the worktree holds the checkout's uncommitted state, not its HEAD")
	}
}

func TestCreateRefusesWhatIsNotAUsableRepositoryNameOrBase(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo := e.newRepo()
	plain := t.TempDir()
	bare := filepath.Join(t.TempDir(), "bare.git")
	e.git(plain, "init", "-q", "--bare", bare)
	empty := filepath.Join(t.TempDir(), "empty")
	e.git(plain, "init", "-q", empty)
	e.git(repo, "branch", "card/taken-session")

	cases := []struct {
		name string
		req  worktree.CreateRequest
		want error
	}{
		{"a plain directory", worktree.CreateRequest{Cwd: plain}, worktree.ErrNotRepository},
		{"a bare repository", worktree.CreateRequest{Cwd: bare}, worktree.ErrNotRepository},
		{"inside .git", worktree.CreateRequest{Cwd: filepath.Join(repo, ".git", "refs")}, worktree.ErrNotRepository},
		{"a relative cwd", worktree.CreateRequest{Cwd: "project"}, worktree.ErrNotRepository},
		{"a cwd that does not exist", worktree.CreateRequest{Cwd: filepath.Join(repo, "nope")}, worktree.ErrNotRepository},
		{"a repository without a commit", worktree.CreateRequest{Cwd: empty}, worktree.ErrNoCommit},
		{"a base that is an option", worktree.CreateRequest{Cwd: repo, Base: "--output=/tmp/x"}, worktree.ErrBadBase},
		{"a base with a dash", worktree.CreateRequest{Cwd: repo, Base: "-q"}, worktree.ErrBadBase},
		{"a base that names nothing", worktree.CreateRequest{Cwd: repo, Base: "no-such-branch"}, worktree.ErrBadBase},
		{"a base that is a file, not a commit", worktree.CreateRequest{Cwd: repo, Base: "HEAD:README.md"}, worktree.ErrBadBase},
		{"a base with a newline", worktree.CreateRequest{Cwd: repo, Base: "HEAD\nmain"}, worktree.ErrBadBase},
		{"a session id that is an option", worktree.CreateRequest{SessionID: "-D", Cwd: repo}, worktree.ErrBadName},
		{"a session id with a slash", worktree.CreateRequest{SessionID: "a/../../b", Cwd: repo}, worktree.ErrBadName},
		{"a session id with dots", worktree.CreateRequest{SessionID: "..", Cwd: repo}, worktree.ErrBadName},
		{"a session id with a space", worktree.CreateRequest{SessionID: "a b", Cwd: repo}, worktree.ErrBadName},
		{"an empty session id", worktree.CreateRequest{SessionID: "", Cwd: repo}, worktree.ErrBadName},
		{"a session whose branch is taken", worktree.CreateRequest{SessionID: "taken-session", Cwd: repo}, worktree.ErrExists},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.req.SessionID == "" && c.want != worktree.ErrBadName {
				c.req.SessionID = newID()
			}
			_, err := m.Create(ctx(t), c.req)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	entries, err := os.ReadDir(e.root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("refused creations left %d entries in the root", len(entries))
	}
	if list := e.git(repo, "worktree", "list"); strings.Count(list, "\n") != 1 {
		t.Errorf("refused creations left worktrees:\n%s", list)
	}
}

func TestCreateRefusesASecondWorktreeForOneSession(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo := e.newRepo()
	id := newID()
	first, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: id, Cwd: repo})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: id, Cwd: repo}); !errors.Is(err, worktree.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	if _, err := m.Open(id); err != nil {
		t.Errorf("the first worktree was harmed by the refused second: %v", err)
	}
	if !exists(first.Worktree.Path) {
		t.Error("the first worktree is gone")
	}
}

func TestCreateRefusesARootInsideTheRepository(t *testing.T) {
	e := newEnv(t)
	repo := e.newRepo()
	e.root = filepath.Join(repo, ".card-worktrees")
	m := e.manager()
	if _, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: repo}); !errors.Is(err, worktree.ErrUnsafeRoot) {
		t.Fatalf("err = %v, want ErrUnsafeRoot", err)
	}
}

func TestCardWritesNothingInTheUsersCheckoutButGitsWorktreeMetadataTheBranchAndObjects(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo := e.newRepo()
	// A file whose stat no longer matches the index, with its content
	// unchanged: a git status that may write would refresh the index.
	past := e.now.Add(-48 * 3600e9)
	if err := os.Chtimes(filepath.Join(repo, "README.md"), past, past); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, repo, nil)

	got, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: repo})
	if err != nil {
		t.Fatal(err)
	}
	wt := got.Worktree
	writeFiles(t, wt.Path, map[string]string{"one.txt": "1\n"})
	mustCommit(t, m, wt, 1, "write one")
	writeFiles(t, wt.Path, map[string]string{"two.txt": "2\n"})
	mustCommit(t, m, wt, 2, "write two")
	for _, turn := range []int{0, 1, 2} {
		if _, err := m.Diff(ctx(t), wt, turn, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Rewind(ctx(t), wt, 1); err != nil {
		t.Fatal(err)
	}
	allowed := func(rel string) bool {
		for _, p := range []string{".git/worktrees", ".git/refs/heads/card", ".git/logs/refs/heads/card", ".git/objects"} {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return true
			}
		}
		return false
	}
	during := snapshot(t, repo, nil)
	var outside []string
	for _, d := range snapshotDiff(before, during) {
		if !allowed(strings.SplitN(d, " ", 2)[1]) {
			outside = append(outside, d)
		}
	}
	if len(outside) > 0 {
		t.Errorf("card wrote in the checkout outside git's worktree metadata, the branch and objects: %q", outside)
	}

	if err := m.Discard(ctx(t), wt); err != nil {
		t.Fatal(err)
	}
	if d := filterOut(snapshotDiff(before, snapshot(t, repo, nil)), ".git/objects/"); len(d) > 0 {
		t.Errorf("after discard the checkout differs from before beyond new objects: %q", d)
	}

	// The check can fail: a git status that may write the index does
	// rewrite this one.
	index := readFile(t, filepath.Join(repo, ".git", "index"))
	if _, err := e.rawGit(repo, "status"); err != nil {
		t.Fatal(err)
	}
	if readFile(t, filepath.Join(repo, ".git", "index")) == index {
		t.Error("a plain git status did not rewrite the index either, so the check above proved nothing")
	}
}

// filterOut drops the snapshot differences under prefix (objects only
// ever get added: git never rewrites one).
func filterOut(diffs []string, prefix string) []string {
	var out []string
	for _, d := range diffs {
		kind, rel, _ := strings.Cut(d, " ")
		if strings.HasPrefix(rel, prefix) && kind == "added" {
			continue
		}
		if strings.HasPrefix(rel, prefix) && kind == "changed" && strings.Count(rel, "/") == 2 {
			continue // an object fan-out directory got a new entry
		}
		out = append(out, d)
	}
	return out
}

func TestAWorktreeValueSurvivesJSONAndARestartedManager(t *testing.T) {
	e := newEnv(t)
	repo := e.newRepo()
	first := e.manager()
	got, err := first.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: filepath.Join(repo, "src")})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, got.Worktree.Path, map[string]string{"src/new.go": "package main\n"})
	c1 := mustCommit(t, first, got.Worktree, 1, "add new.go")

	stored, err := json.Marshal(got.Worktree)
	if err != nil {
		t.Fatal(err)
	}
	// A new daemon: a new Manager, nothing in memory.
	second := e.manager()
	var back worktree.Worktree
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, got.Worktree) {
		t.Errorf("JSON round trip changed the value:\n%+v\n%+v", back, got.Worktree)
	}
	opened, err := second.Open(got.Worktree.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(opened, got.Worktree) {
		t.Errorf("Open = %+v, want %+v", opened, got.Worktree)
	}
	listed, orphans, err := second.List()
	if err != nil || len(listed) != 1 || len(orphans) != 0 || listed[0].SessionID != got.Worktree.SessionID {
		t.Errorf("List = %v, %v, %v; want the one worktree", listed, orphans, err)
	}
	turns, err := second.Turns(ctx(t), back)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 1 || turns[0].Number != 1 || turns[0].Commit != c1.Commit {
		t.Errorf("turns after the restart = %+v, want turn 1 at %s", turns, c1.Commit)
	}
	d, err := second.Diff(ctx(t), back, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Patch, "+++ b/src/new.go") {
		t.Errorf("the diff after the restart lacks the turn's file:\n%s", d.Patch)
	}
}

func TestATamperedRecordIsRefusedBeforeAnythingActsOnIt(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	got, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: e.newRepo()})
	if err != nil {
		t.Fatal(err)
	}
	victim := t.TempDir()
	writeFiles(t, victim, map[string]string{"precious.txt": "keep me\n"})
	cases := []struct {
		name   string
		change func(w *worktree.Worktree)
	}{
		{"a path outside the root", func(w *worktree.Worktree) { w.Path = victim }},
		{"a path in another session's directory", func(w *worktree.Worktree) {
			w.Path = filepath.Join(e.root, "other", "project")
		}},
		{"a git dir outside the repository's worktrees", func(w *worktree.Worktree) { w.GitDir = victim }},
		{"a branch of someone else's", func(w *worktree.Worktree) { w.Branch = "main" }},
		{"a base that is not a hash", func(w *worktree.Worktree) { w.Base = "--all" }},
		{"a subdirectory that climbs out", func(w *worktree.Worktree) { w.Subdir = "../../x" }},
		{"another version", func(w *worktree.Worktree) { w.Version = 99 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := got.Worktree
			c.change(&w)
			if err := m.Discard(ctx(t), w); err == nil {
				t.Error("Discard accepted it")
			}
			if _, err := m.Turns(ctx(t), w); err == nil {
				t.Error("Turns accepted it")
			}
			if !exists(filepath.Join(victim, "precious.txt")) || !exists(got.Worktree.Path) {
				t.Fatal("a refused record still removed files")
			}
		})
	}
}

func TestPruneDiscardsOldWorktreesTheCallerDoesNotKeep(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, idle := e.session(m)
	_, open := e.session(m)
	_, busy := e.session(m)
	orphan := filepath.Join(e.root, newID())
	if err := os.Mkdir(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	old := e.now.Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(10 * 24 * time.Hour)
	// busy had a turn a day ago.
	writeFiles(t, busy.Path, map[string]string{"x.txt": "x\n"})
	e.now = e.now.Add(-24 * time.Hour)
	mustCommit(t, m, busy, 1, "recent")
	e.now = e.now.Add(24 * time.Hour)

	keep := func(w worktree.Worktree) bool { return w.SessionID == open.SessionID }
	removed, err := m.Prune(ctx(t), 7*24*time.Hour, keep)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{idle.SessionID: true, filepath.Base(orphan): true}
	if len(removed) != 2 || !want[removed[0]] || !want[removed[1]] {
		t.Errorf("removed = %q, want the idle session and the orphan", removed)
	}
	if exists(filepath.Dir(idle.Path)) || exists(orphan) {
		t.Error("pruned directories are still there")
	}
	for _, w := range []worktree.Worktree{open, busy} {
		if _, err := m.Open(w.SessionID); err != nil {
			t.Errorf("session %s was pruned: %v", w.SessionID, err)
		}
	}
}
