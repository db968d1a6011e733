package worktree_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/card-dev/card/daemon/worktree"
)

// twoTurns gives the session two turns: turn 1 changes README.md's last
// line, adds new.txt and deletes docs/guide.txt; turn 2 adds a binary file
// and an executable script.
func twoTurns(t *testing.T, m *worktree.Manager, wt worktree.Worktree) {
	t.Helper()
	writeFiles(t, wt.Path, map[string]string{"README.md": "# project\n\nhello from the agent\n", "new.txt": "new\n"})
	if err := os.Remove(filepath.Join(wt.Path, "docs", "guide.txt")); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, m, wt, 1, "one")
	writeFiles(t, wt.Path, map[string]string{"img.bin": "\x00\x01\x02\x03binary\xff"})
	if err := os.WriteFile(filepath.Join(wt.Path, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, m, wt, 2, "two")
}

func TestApplyBringsTheSessionsChangesIntoTheCheckoutAsUncommittedChanges(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo, wt := e.session(m)
	twoTurns(t, m, wt)
	head := e.git(repo, "rev-parse", "HEAD")
	index := readFile(t, filepath.Join(repo, ".git", "index"))
	// A change of the user's elsewhere does not stand in the way.
	writeFiles(t, repo, map[string]string{"src/main.go": "package main\n\nfunc main() { println() }\n"})

	a, err := m.Apply(ctx(t), wt)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileNames(a.Changes); !reflect.DeepEqual(got, []string{"README.md", "docs/guide.txt", "img.bin", "new.txt", "run.sh"}) {
		t.Errorf("applied files = %q", got)
	}
	if s := readFile(t, filepath.Join(repo, "README.md")); s != "# project\n\nhello from the agent\n" {
		t.Errorf("README.md = %q", s)
	}
	if readFile(t, filepath.Join(repo, "img.bin")) != "\x00\x01\x02\x03binary\xff" {
		t.Error("the binary file did not arrive whole")
	}
	if st, err := os.Stat(filepath.Join(repo, "run.sh")); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("run.sh: %v, mode %v; want it executable", err, st.Mode())
	}
	status := e.git(repo, "status", "--porcelain", "--untracked-files=all")
	want := " M README.md\n D docs/guide.txt\n M src/main.go\n?? img.bin\n?? new.txt\n?? run.sh\n"
	if status != want {
		t.Errorf("status after apply:\n%s\nwant:\n%s", status, want)
	}
	if e.git(repo, "rev-parse", "HEAD") != head || readFile(t, filepath.Join(repo, ".git", "index")) != index {
		t.Error("apply moved HEAD or wrote the index")
	}
	if s := readFile(t, filepath.Join(repo, "src", "main.go")); !strings.Contains(s, "println") {
		t.Error("the user's own change was lost")
	}
}

func TestApplyOfAConflictIsRefusedNamingTheFileAndTheCheckoutIsUnchanged(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, repo string)
		file   string
		reason string
	}{
		{"the checkout changed the line the session changed", func(t *testing.T, repo string) {
			writeFiles(t, repo, map[string]string{"README.md": "# project\n\nhello from the user\n"})
		}, "README.md", "patch does not apply"},
		{"an untracked file is where the session adds one", func(t *testing.T, repo string) {
			writeFiles(t, repo, map[string]string{"new.txt": "the user's own\n"})
		}, "new.txt", "already exists in working directory"},
		{"the checkout changed a file the session deletes", func(t *testing.T, repo string) {
			writeFiles(t, repo, map[string]string{"docs/guide.txt": "line 1\nline 2\nline 3\nline 4\n"})
		}, "docs/guide.txt", "patch does not apply"},
		{"the checkout deleted a file the session changes", func(t *testing.T, repo string) {
			if err := os.Remove(filepath.Join(repo, "README.md")); err != nil {
				t.Fatal(err)
			}
		}, "README.md", "No such file or directory"},
		{"the user committed a change to the same line since", func(t *testing.T, repo string) {
			writeFiles(t, repo, map[string]string{"README.md": "# project\n\nhello, committed\n"})
			e := newEnv(t)
			e.commitAll(repo, "the user's commit")
		}, "README.md", "patch does not apply"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			m := e.manager()
			repo, wt := e.session(m)
			twoTurns(t, m, wt)
			c.change(t, repo)
			before := snapshot(t, repo, nil)

			_, err := m.Apply(ctx(t), wt)
			var ce *worktree.ConflictError
			if !errors.Is(err, worktree.ErrConflict) || !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConflictError", err)
			}
			if want := []worktree.Conflict{{Path: c.file, Reason: c.reason}}; !reflect.DeepEqual(ce.Files, want) {
				t.Errorf("conflicts = %+v, want %+v", ce.Files, want)
			}
			if !strings.Contains(err.Error(), c.file) {
				t.Errorf("the error does not name %s: %v", c.file, err)
			}
			if d := snapshotDiff(before, snapshot(t, repo, nil)); len(d) > 0 {
				t.Errorf("the refused apply changed the checkout: %q", d)
			}
		})
	}
}

func TestApplyNamesEveryConflictingFile(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo, wt := e.session(m)
	twoTurns(t, m, wt)
	writeFiles(t, repo, map[string]string{"README.md": "mine\n", "new.txt": "mine\n", "run.sh": "mine\n"})
	before := snapshot(t, repo, nil)
	_, err := m.Apply(ctx(t), wt)
	var ce *worktree.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a ConflictError", err)
	}
	var names []string
	for _, f := range ce.Files {
		names = append(names, f.Path)
	}
	if !reflect.DeepEqual(names, []string{"README.md", "new.txt", "run.sh"}) {
		t.Errorf("conflicting files = %q", names)
	}
	if d := snapshotDiff(before, snapshot(t, repo, nil)); len(d) > 0 {
		t.Errorf("the refused apply changed the checkout: %q", d)
	}
}

func TestApplyOfASessionWithoutTurnsChangesNothing(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo, wt := e.session(m)
	before := snapshot(t, repo, nil)
	a, err := m.Apply(ctx(t), wt)
	if err != nil || len(a.Changes.Files) != 0 {
		t.Fatalf("apply = %+v, %v; want nothing", a, err)
	}
	if d := snapshotDiff(before, snapshot(t, repo, nil)); len(d) > 0 {
		t.Errorf("an empty apply changed the checkout: %q", d)
	}
}

func TestTwoSessionsOnOneRepositoryEachSeeOnlyTheirOwnChanges(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo := e.newRepo()
	before := snapshot(t, repo, func(rel string) bool { return rel == ".git" })
	wts := make([]worktree.Worktree, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range wts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := m.Create(ctx(t), worktree.CreateRequest{SessionID: newID(), Cwd: repo})
			wts[i], errs[i] = got.Worktree, err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"first.txt", "second.txt"}
	for i, wt := range wts {
		writeFiles(t, wt.Path, map[string]string{names[i]: "session " + names[i] + "\n", "README.md": "edited by " + names[i] + "\n"})
	}
	for i := range wts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Commit(ctx(t), wts[i], 1, "write "+names[i])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, wt := range wts {
		other := names[1-i]
		d, err := m.Diff(ctx(t), wt, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := fileNames(d.Changes); !reflect.DeepEqual(got, []string{"README.md", names[i]}) || strings.Contains(d.Patch, other) {
			t.Errorf("session %d sees %q, want only its own README.md and %s", i, got, names[i])
		}
		if exists(filepath.Join(wt.Path, other)) {
			t.Errorf("session %d's worktree has the other session's %s", i, other)
		}
		if s := readFile(t, filepath.Join(wt.Path, "README.md")); s != "edited by "+names[i]+"\n" {
			t.Errorf("session %d's README.md = %q", i, s)
		}
	}
	if d := snapshotDiff(before, snapshot(t, repo, func(rel string) bool { return rel == ".git" })); len(d) > 0 {
		t.Errorf("two sessions changed the user's checkout: %q", d)
	}
	if list := e.git(repo, "worktree", "list"); strings.Count(list, "\n") != 3 {
		t.Errorf("want the checkout and two worktrees:\n%s", list)
	}
}
