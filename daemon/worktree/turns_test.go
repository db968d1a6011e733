package worktree_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/card-dev/card/daemon/worktree"
)

// session is a repository and one session's worktree of it.
func (e *env) session(m *worktree.Manager) (repo string, wt worktree.Worktree) {
	e.t.Helper()
	repo = e.newRepo()
	got, err := m.Create(ctx(e.t), worktree.CreateRequest{SessionID: newID(), Cwd: repo})
	if err != nil {
		e.t.Fatal(err)
	}
	return repo, got.Worktree
}

func TestATurnsChangesBecomeOneCommitByCardNamingTheTurnAndPrompt(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo, wt := e.session(m)
	repoBefore := snapshot(t, repo, func(rel string) bool { return rel == ".git" })
	writeFiles(t, wt.Path, map[string]string{
		"README.md":   "# project\n\nhello\nworld\n", // one line added
		"src/new.go":  "package main\n\nvar x = 1\n", // untracked, new
		"ignored.log": "build output\n",              // ignored: stays out
	})
	if err := os.Remove(filepath.Join(wt.Path, "docs", "guide.txt")); err != nil { // three lines deleted
		t.Fatal(err)
	}

	c, err := m.Commit(ctx(t), wt, 1, "Add a greeting\nand a new file")
	if err != nil {
		t.Fatal(err)
	}
	if c.Turn != 1 || c.Commit == "" {
		t.Fatalf("commit = %+v, want turn 1 with a commit", c)
	}
	want := worktree.Changes{Files: []worktree.FileChange{
		{Path: "README.md", Status: "modified", Added: 1},
		{Path: "docs/guide.txt", Status: "deleted", Deleted: 3},
		{Path: "src/new.go", Status: "added", Added: 3},
	}, Added: 4, Deleted: 3}
	if !reflect.DeepEqual(c.Changes, want) {
		t.Errorf("changes = %+v\nwant %+v", c.Changes, want)
	}
	log := e.git(wt.Path, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%P|%B", c.Commit)
	who, rest, _ := strings.Cut(log, "|")
	if who != "card <card@localhost>" || !strings.HasPrefix(rest, "card <card@localhost>|"+wt.Base+"|") {
		t.Errorf("author, committer, parent = %q", log)
	}
	for _, s := range []string{"card turn 1: Add a greeting\n", "\nAdd a greeting\nand a new file\n", "Card-Session: " + wt.SessionID + "\n", "Card-Turn: 1\n"} {
		if !strings.Contains(rest, s) {
			t.Errorf("the message lacks %q:\n%s", s, rest)
		}
	}
	if tip := strings.TrimSpace(e.git(wt.Path, "rev-parse", "refs/heads/"+wt.Branch)); tip != c.Commit {
		t.Errorf("the branch is at %s, want the turn's commit %s", tip, c.Commit)
	}
	if st := e.git(wt.Path, "status", "--porcelain"); st != "" {
		t.Errorf("the worktree is not clean after the commit:\n%s", st)
	}
	if files := e.git(wt.Path, "ls-tree", "-r", "--name-only", c.Commit); strings.Contains(files, "ignored.log") {
		t.Error("an ignored file was committed")
	}
	if d := snapshotDiff(repoBefore, snapshot(t, repo, func(rel string) bool { return rel == ".git" })); len(d) > 0 {
		t.Errorf("the commit changed the user's checkout: %q", d)
	}
}

func TestATurnThatChangedNothingMakesNoCommit(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	writeFiles(t, wt.Path, map[string]string{"only-ignored.log": "x\n"})
	c, err := m.Commit(ctx(t), wt, 1, "look around")
	if err != nil {
		t.Fatal(err)
	}
	if c.Commit != "" || len(c.Changes.Files) != 0 {
		t.Errorf("commit = %+v, want none", c)
	}
	if tip := strings.TrimSpace(e.git(wt.Path, "rev-parse", "refs/heads/"+wt.Branch)); tip != wt.Base {
		t.Errorf("the branch moved to %s", tip)
	}
	turns, err := m.Turns(ctx(t), wt)
	if err != nil || len(turns) != 0 {
		t.Errorf("turns = %+v, %v; want none", turns, err)
	}
	if _, err := m.Diff(ctx(t), wt, 1, 0); !errors.Is(err, worktree.ErrNoTurn) {
		t.Errorf("the diff of a turn without a commit: %v, want ErrNoTurn", err)
	}
}

func TestAPromptIsBoundedAndCleanedInTheCommitMessage(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	long := "do it\x1b[31m now\r\n" + strings.Repeat("é", 5000) + "\n---\nCard-Turn: 99\n"
	writeFiles(t, wt.Path, map[string]string{"a.txt": "a\n"})
	c := mustCommit(t, m, wt, 1, long)
	msg := e.git(wt.Path, "log", "-1", "--format=%B", c.Commit)
	if len(msg) > worktree.MaxPromptBytes+300 {
		t.Errorf("the message is %d bytes, more than the prompt's bound", len(msg))
	}
	if strings.ContainsAny(msg, "\x1b\r") {
		t.Errorf("control characters reached the message: %q", msg[:40])
	}
	if !strings.HasPrefix(msg, "card turn 1: do it[31m now\n") || !strings.Contains(msg, "[prompt cut at ") {
		t.Errorf("message starts %q; want the turn, the prompt's first line and a note of the cut", msg[:60])
	}
	// The prompt's fake trailer does not make it another turn.
	turns, err := m.Turns(ctx(t), wt)
	if err != nil || len(turns) != 1 || turns[0].Number != 1 {
		t.Errorf("turns = %+v, %v", turns, err)
	}
}

func TestCommittingTheLastTurnAgainAnswersItsCommitAndAnEarlierTurnIsRefused(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	writeFiles(t, wt.Path, map[string]string{"a.txt": "a\n"})
	first := mustCommit(t, m, wt, 2, "turn two")
	again, err := m.Commit(ctx(t), wt, 2, "turn two")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, first) {
		t.Errorf("again = %+v, want %+v", again, first)
	}
	if _, err := m.Commit(ctx(t), wt, 1, "late"); !errors.Is(err, worktree.ErrTurnOrder) {
		t.Errorf("an earlier turn: %v, want ErrTurnOrder", err)
	}
	writeFiles(t, wt.Path, map[string]string{"b.txt": "b\n"})
	if _, err := m.Commit(ctx(t), wt, 2, "turn two"); !errors.Is(err, worktree.ErrTurnOrder) {
		t.Errorf("the same turn with new changes: %v, want ErrTurnOrder", err)
	}
	if _, err := m.Commit(ctx(t), wt, 0, "zero"); !errors.Is(err, worktree.ErrTurnOrder) {
		t.Errorf("turn 0: %v, want ErrTurnOrder", err)
	}
}

func TestCommitsTheAgentMadeItselfCountAsItsTurnAndItsBranchSwitchIsUndone(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	// The agent commits one file on the session's branch, then switches
	// to a branch of its own and leaves another file uncommitted.
	writeFiles(t, wt.Path, map[string]string{"agent-committed.txt": "x\n"})
	e.git(wt.Path, "add", "-A")
	e.git(wt.Path, "commit", "-q", "-m", "agent's own commit")
	e.git(wt.Path, "checkout", "-q", "-b", "agent-branch")
	writeFiles(t, wt.Path, map[string]string{"left-over.txt": "y\n"})

	c := mustCommit(t, m, wt, 1, "do things")
	if got := fileNames(c.Changes); !reflect.DeepEqual(got, []string{"agent-committed.txt", "left-over.txt"}) {
		t.Errorf("turn 1's files = %q, want both the agent's commit and what it left", got)
	}
	if ref := strings.TrimSpace(e.git(wt.Path, "symbolic-ref", "HEAD")); ref != "refs/heads/"+wt.Branch {
		t.Errorf("HEAD = %s, want back on the session's branch", ref)
	}
	if st := e.git(wt.Path, "status", "--porcelain"); st != "" {
		t.Errorf("the worktree is not clean:\n%s", st)
	}
	d, err := m.Diff(ctx(t), wt, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.From != wt.Base || d.To != c.Commit {
		t.Errorf("turn 1's diff spans %s..%s, want base..its commit", d.From, d.To)
	}
}

func TestRewindToTurnOneRemovesTurnTwosFiles(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	writeFiles(t, wt.Path, map[string]string{"one.txt": "turn one\n"})
	c1 := mustCommit(t, m, wt, 1, "one")
	writeFiles(t, wt.Path, map[string]string{"two.txt": "turn two\n", "one.txt": "changed in two\n", "deps/x.log": "ignored\n"})
	if err := os.Remove(filepath.Join(wt.Path, "README.md")); err != nil {
		t.Fatal(err)
	}
	c2 := mustCommit(t, m, wt, 2, "two")
	writeFiles(t, wt.Path, map[string]string{"stray/after.txt": "never committed\n"})

	r, err := m.Rewind(ctx(t), wt, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Commit != c1.Commit || len(r.Dropped) != 1 || r.Dropped[0].Commit != c2.Commit || r.Dropped[0].Number != 2 {
		t.Errorf("rewound = %+v, want to %s dropping turn 2 (%s)", r, c1.Commit, c2.Commit)
	}
	if exists(filepath.Join(wt.Path, "two.txt")) || exists(filepath.Join(wt.Path, "stray")) {
		t.Error("turn two's file, or an uncommitted one, is still in the worktree")
	}
	if s := readFile(t, filepath.Join(wt.Path, "one.txt")); s != "turn one\n" || !exists(filepath.Join(wt.Path, "README.md")) {
		t.Errorf("one.txt = %q, README.md there: %v; want turn one's state", s, exists(filepath.Join(wt.Path, "README.md")))
	}
	if !exists(filepath.Join(wt.Path, "deps", "x.log")) {
		t.Error("an ignored file was removed")
	}
	if tip := strings.TrimSpace(e.git(wt.Path, "rev-parse", "refs/heads/"+wt.Branch)); tip != c1.Commit {
		t.Errorf("the branch is at %s, want turn one's %s", tip, c1.Commit)
	}
	if st := e.git(wt.Path, "status", "--porcelain"); st != "" {
		t.Errorf("the worktree differs from turn one's commit:\n%s", st)
	}
	if reflog := e.git(wt.Path, "reflog", "show", "--format=%H", "refs/heads/"+wt.Branch); !strings.Contains(reflog, c2.Commit) {
		t.Error("the dropped turn's commit is not in the branch's reflog")
	}
	turns, _ := m.Turns(ctx(t), wt)
	if len(turns) != 1 || turns[0].Number != 1 {
		t.Errorf("turns after the rewind = %+v", turns)
	}
	// The conversation goes on: turn three follows turn one.
	writeFiles(t, wt.Path, map[string]string{"three.txt": "3\n"})
	c3 := mustCommit(t, m, wt, 3, "three")
	if d, _ := m.Diff(ctx(t), wt, 3, 0); d.From != c1.Commit || d.To != c3.Commit {
		t.Errorf("turn three's diff spans %s..%s, want from turn one", d.From, d.To)
	}

	r, err = m.Rewind(ctx(t), wt, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Commit != wt.Base || len(r.Dropped) != 2 || exists(filepath.Join(wt.Path, "one.txt")) || exists(filepath.Join(wt.Path, "three.txt")) {
		t.Errorf("rewind to 0 = %+v; one.txt there: %v", r, exists(filepath.Join(wt.Path, "one.txt")))
	}
	if _, err := m.Rewind(ctx(t), wt, -1); !errors.Is(err, worktree.ErrNoTurn) {
		t.Errorf("rewind to -1: %v, want ErrNoTurn", err)
	}
}

func TestRewindToATurnThatChangedNothingKeepsTheTurnBeforeIt(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	writeFiles(t, wt.Path, map[string]string{"one.txt": "1\n"})
	c1 := mustCommit(t, m, wt, 1, "one")
	if c, _ := m.Commit(ctx(t), wt, 2, "nothing"); c.Commit != "" {
		t.Fatal("turn 2 changed nothing but made a commit")
	}
	writeFiles(t, wt.Path, map[string]string{"three.txt": "3\n"})
	mustCommit(t, m, wt, 3, "three")
	r, err := m.Rewind(ctx(t), wt, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Commit != c1.Commit || exists(filepath.Join(wt.Path, "three.txt")) || !exists(filepath.Join(wt.Path, "one.txt")) {
		t.Errorf("rewind to 2 = %+v, want turn one's state", r)
	}
}

func TestDiscardLeavesNoWorktreeNoBranchAndNoDirectory(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo, wt := e.session(m)
	writeFiles(t, wt.Path, map[string]string{"one.txt": "1\n"})
	mustCommit(t, m, wt, 1, "one")
	writeFiles(t, wt.Path, map[string]string{"dirty.txt": "uncommitted\n"})

	if err := m.Discard(ctx(t), wt); err != nil {
		t.Fatal(err)
	}
	if list := e.git(repo, "worktree", "list", "--porcelain"); strings.Contains(list, wt.Path) || strings.Count(list, "worktree ") != 1 {
		t.Errorf("git worktree list still shows it:\n%s", list)
	}
	if branches := e.git(repo, "branch", "--list", "--all"); strings.Contains(branches, "card/") {
		t.Errorf("git branch still shows it:\n%s", branches)
	}
	if exists(filepath.Dir(wt.Path)) {
		t.Error("the session's directory is still there")
	}
	if _, err := m.Open(wt.SessionID); !errors.Is(err, worktree.ErrNotFound) {
		t.Errorf("Open after discard: %v, want ErrNotFound", err)
	}
	if _, err := m.Diff(ctx(t), wt, 0, 0); !errors.Is(err, worktree.ErrNotFound) {
		t.Errorf("Diff after discard: %v, want ErrNotFound", err)
	}
	if err := m.Discard(ctx(t), wt); err != nil {
		t.Errorf("discarding again: %v, want nothing to do", err)
	}
}

func TestDiscardCleansUpAWorktreeWhoseRepositoryOrGitFileIsGone(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	cases := []struct {
		name   string
		break_ func(repo string, wt worktree.Worktree)
	}{
		{"the agent removed the worktree's .git file", func(_ string, wt worktree.Worktree) {
			if err := os.Remove(filepath.Join(wt.Path, ".git")); err != nil {
				t.Fatal(err)
			}
		}},
		{"the user removed the repository", func(repo string, _ worktree.Worktree) {
			if err := os.RemoveAll(repo); err != nil {
				t.Fatal(err)
			}
		}},
		{"the user removed the worktree by hand", func(repo string, wt worktree.Worktree) {
			e.git(repo, "worktree", "remove", "--force", wt.Path)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			repo, wt := e.session(m)
			c.break_(repo, wt)
			if err := m.Discard(ctx(t), wt); err != nil {
				t.Fatal(err)
			}
			if exists(filepath.Dir(wt.Path)) {
				t.Error("the session's directory is still there")
			}
			if exists(repo) {
				if list := e.git(repo, "worktree", "list"); strings.Contains(list, wt.Path) {
					t.Errorf("git still lists the worktree:\n%s", list)
				}
				if branches := e.git(repo, "branch", "--list"); strings.Contains(branches, "card/") {
					t.Errorf("the branch is still there:\n%s", branches)
				}
			}
		})
	}
}
