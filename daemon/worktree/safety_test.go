package worktree_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/card-dev/card/daemon/worktree"
)

// hooks are every hook git 2.39 knows.
var hooks = []string{
	"applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit", "prepare-commit-msg",
	"commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge", "pre-push", "pre-receive", "update",
	"proc-receive", "post-receive", "post-update", "reference-transaction", "push-to-checkout", "pre-auto-gc",
	"post-rewrite", "sendemail-validate", "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist",
	"p4-post-changelist", "p4-pre-submit", "post-index-change",
}

// hostile is a place for programs that, when run, write their name to a
// marker file.
type hostile struct {
	t      *testing.T
	dir    string
	marker string
}

func newHostile(t *testing.T) *hostile {
	dir := t.TempDir()
	return &hostile{t: t, dir: dir, marker: filepath.Join(dir, "MARKER")}
}

// program writes a script named role that records role in the marker and,
// as a filter, passes its input through.
func (h *hostile) program(role string) string {
	h.t.Helper()
	p := filepath.Join(h.dir, "bin", role)
	script := fmt.Sprintf("#!/bin/sh\necho %q \"$*\" >> %q\nif [ $# -eq 0 ]; then cat; fi\nexit 0\n", role, h.marker)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// installHooks puts every hook, recording itself, in dir.
func (h *hostile) installHooks(dir string) {
	h.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	for _, name := range hooks {
		script := fmt.Sprintf("#!/bin/sh\necho 'hook %s in %s' >> %q\nexit 0\n", name, dir, h.marker)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *hostile) ran() string {
	data, err := os.ReadFile(h.marker)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return string(data)
}

// arm makes repo hostile: hooks in .git/hooks and in a core.hooksPath,
// and every config key that names a program git might run pointing at a
// recording script, in the repository's config and the user's global one.
func (h *hostile) arm(e *env, repo string) {
	h.t.Helper()
	h.installHooks(filepath.Join(repo, ".git", "hooks"))
	h.installHooks(filepath.Join(h.dir, "hooks-path"))
	local := [][2]string{
		{"core.hooksPath", filepath.Join(h.dir, "hooks-path")},
		{"core.fsmonitor", h.program("fsmonitor")},
		{"filter.evil.clean", h.program("filter-clean")},
		{"filter.evil.smudge", h.program("filter-smudge")},
		{"filter.evil.required", "true"},
		{"filter.evilproc.process", h.program("filter-process")},
		{"diff.evil.textconv", h.program("textconv")},
		{"diff.evil.command", h.program("diff-driver")},
		{"diff.external", h.program("external-diff")},
		{"merge.evil.driver", h.program("merge-driver") + " %O %A %B"},
		{"commit.gpgSign", "true"},
		{"gpg.program", h.program("gpg")},
		{"log.showSignature", "true"},
		{"core.editor", h.program("editor")},
		{"sequence.editor", h.program("sequence-editor")},
		{"core.pager", h.program("pager")},
		{"gc.auto", "1"},
		{"gc.autoDetach", "false"},
		{"core.sshCommand", h.program("ssh")},
		{"credential.helper", h.program("credential")},
		{"core.askPass", h.program("askpass")},
		{"submodule.recurse", "true"},
		{"status.submoduleSummary", "true"},
	}
	for _, kv := range local {
		e.git(repo, "config", kv[0], kv[1])
	}
	global := fmt.Sprintf("[filter \"gevil\"]\n\tclean = %s\n\tsmudge = %s\n[core]\n\tfsmonitor = %s\n",
		h.program("global-filter-clean"), h.program("global-filter-smudge"), h.program("global-fsmonitor"))
	if err := os.WriteFile(filepath.Join(e.home, ".gitconfig"), []byte(global), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func TestNoRepositoryCodeRunsInAnyOperation(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	h := newHostile(t)
	repo := e.newRepo()
	writeFiles(t, repo, map[string]string{
		".gitattributes": "* filter=evil diff=evil merge=evil\n*.proc filter=evilproc\n*.g filter=gevil\n",
		"data.proc":      "processed\n",
		"global.g":       "global filter\n",
	})
	e.commitAll(repo, "attributes")
	h.arm(e, repo)
	// The user's checkout is dirty, so a status compares contents.
	writeFiles(t, repo, map[string]string{"src/main.go": "package main\n\n// the user's edit\nfunc main() {}\n", "scratch.txt": "x\n"})
	check := func(op string) {
		t.Helper()
		if ran := h.ran(); ran != "" {
			t.Fatalf("after %s, repository code ran:\n%s", op, ran)
		}
	}

	got, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: filepath.Join(repo, "src")})
	if err != nil {
		t.Fatal(err)
	}
	wt := got.Worktree
	check("create")
	if readFile(t, filepath.Join(wt.Path, "data.proc")) != "processed\n" {
		t.Error("the worktree's files are not the commit's")
	}

	// The agent's turn: files under every attribute, and a repository
	// of its own inside the worktree, hooks and fsmonitor and all.
	writeFiles(t, wt.Path, map[string]string{"data.proc": "changed\n", "global.g": "changed\n", "README.md": "agent\n"})
	inner := filepath.Join(wt.Path, "vendor", "inner")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	e.git(inner, "init", "-q")
	writeFiles(t, inner, map[string]string{"lib.txt": "lib\n"})
	e.commitAll(inner, "inner")
	h.installHooks(filepath.Join(inner, ".git", "hooks"))
	e.git(inner, "config", "core.fsmonitor", h.program("inner-fsmonitor"))
	e.git(inner, "config", "core.hooksPath", filepath.Join(inner, ".git", "hooks"))
	check("the test's own setup")

	mustCommit(t, m, wt, 1, "turn one")
	check("commit")
	if c, err := m.Commit(ctx(t), wt, 2, "nothing"); err != nil || c.Commit != "" {
		t.Fatalf("an unchanged turn: %+v, %v", c, err)
	}
	check("a commit of nothing")
	writeFiles(t, wt.Path, map[string]string{"docs/more.txt": "more\n"})
	mustCommit(t, m, wt, 3, "turn three")
	check("a second commit")
	if _, err := m.Turns(ctx(t), wt); err != nil {
		t.Fatal(err)
	}
	check("turns")
	for _, turn := range []int{0, 1, 3} {
		if _, err := m.Diff(ctx(t), wt, turn, 0); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("diff of turn %d", turn))
	}
	if _, err := m.Rewind(ctx(t), wt, 1); err != nil {
		t.Fatal(err)
	}
	check("rewind")
	if _, err := m.Apply(ctx(t), wt); err != nil {
		t.Fatal(err)
	}
	check("apply")
	if s := readFile(t, filepath.Join(repo, "data.proc")); s != "changed\n" {
		t.Errorf("apply wrote data.proc = %q", s)
	}
	if _, err := m.Open(wt.SessionID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Prune(ctx(t), time.Hour, func(worktree.Worktree) bool { return true }); err != nil {
		t.Fatal(err)
	}
	check("open and prune")
	if err := m.Discard(ctx(t), wt); err != nil {
		t.Fatal(err)
	}
	check("discard")

	// The test can fail: the same repository runs its code for git as a
	// user runs it.
	_, _ = e.rawGit(repo, "status")
	_, _ = e.rawGit(repo, "add", "-A")
	_, _ = e.rawGit(repo, "commit", "-m", "by hand")
	ran := h.ran()
	for _, want := range []string{"hook pre-commit in " + filepath.Join(h.dir, "hooks-path"), "fsmonitor", "filter-clean", "filter-process", "gpg"} {
		if !strings.Contains(ran, want) {
			t.Errorf("a plain git did not run %q, so its absence above proves nothing; it ran:\n%s", want, ran)
		}
	}
}

func TestAGitDirectoryTheAgentPlantsInItsWorktreeIsNeverRead(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	h := newHostile(t)
	repo, wt := e.session(m)

	// The agent replaces the worktree's .git file with a repository of
	// its own whose config and hooks run programs.
	planted := filepath.Join(t.TempDir(), "planted")
	e.git(filepath.Dir(planted), "init", "-q", planted)
	h.installHooks(filepath.Join(planted, ".git", "hooks"))
	e.git(planted, "config", "core.fsmonitor", h.program("planted-fsmonitor"))
	e.git(planted, "config", "core.hooksPath", filepath.Join(planted, ".git", "hooks"))
	if err := os.Remove(filepath.Join(wt.Path, ".git")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(planted, ".git"), filepath.Join(wt.Path, ".git")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, wt.Path, map[string]string{"work.txt": "the turn's work\n"})

	c := mustCommit(t, m, wt, 1, "work")
	if tip := strings.TrimSpace(e.git(repo, "rev-parse", "refs/heads/"+wt.Branch)); tip != c.Commit {
		t.Errorf("the session's branch in the user's repository is at %s, want the turn's %s", tip, c.Commit)
	}
	d, err := m.Diff(ctx(t), wt, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if names := fileNames(d.Changes); len(names) != 1 || names[0] != "work.txt" {
		t.Errorf("turn 1's files = %q, want work.txt alone", names)
	}
	if _, err := m.Rewind(ctx(t), wt, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Discard(ctx(t), wt); err != nil {
		t.Fatal(err)
	}
	if ran := h.ran(); ran != "" {
		t.Errorf("the planted repository's code ran:\n%s", ran)
	}
	if list := e.git(repo, "worktree", "list"); strings.Contains(list, wt.Path) {
		t.Errorf("the worktree is still listed:\n%s", list)
	}
	if exists(filepath.Dir(wt.Path)) {
		t.Error("the session's directory is still there")
	}
}
