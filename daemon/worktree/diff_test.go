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

func TestDiffShowsTheWholeSessionOrOneTurn(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	writeFiles(t, wt.Path, map[string]string{"one.txt": "1\n1\n"})
	c1 := mustCommit(t, m, wt, 1, "one")
	writeFiles(t, wt.Path, map[string]string{"two.txt": "2\n", "README.md": "# project\n\nbye\n"})
	c2 := mustCommit(t, m, wt, 2, "two")
	writeFiles(t, wt.Path, map[string]string{"uncommitted.txt": "running turn\n"})

	cases := []struct {
		turn     int
		from, to string
		files    []string
	}{
		{0, wt.Base, c2.Commit, []string{"README.md", "one.txt", "two.txt"}},
		{1, wt.Base, c1.Commit, []string{"one.txt"}},
		{2, c1.Commit, c2.Commit, []string{"README.md", "two.txt"}},
	}
	for _, c := range cases {
		d, err := m.Diff(ctx(t), wt, c.turn, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.From != c.from || d.To != c.to || !reflect.DeepEqual(fileNames(d.Changes), c.files) {
			t.Errorf("turn %d: %s..%s %q, want %s..%s %q", c.turn, d.From, d.To, fileNames(d.Changes), c.from, c.to, c.files)
		}
		for _, f := range c.files {
			if !strings.Contains(d.Patch, "diff --git a/"+f+" b/"+f+"\n") {
				t.Errorf("turn %d's patch lacks %s:\n%s", c.turn, f, d.Patch)
			}
		}
		if strings.Contains(d.Patch, "uncommitted.txt") || d.Truncated {
			t.Errorf("turn %d's patch shows uncommitted work or says it was cut", c.turn)
		}
	}
	if d, _ := m.Diff(ctx(t), wt, 2, 0); d.Changes.Added != 2 || d.Changes.Deleted != 1 {
		t.Errorf("turn 2 counts +%d -%d, want +2 -1", d.Changes.Added, d.Changes.Deleted)
	}
	if _, err := m.Diff(ctx(t), wt, 3, 0); !errors.Is(err, worktree.ErrNoTurn) {
		t.Errorf("a turn that never ran: %v, want ErrNoTurn", err)
	}
}

func TestDiffOfASessionWithoutTurnsIsEmpty(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	d, err := m.Diff(ctx(t), wt, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.From != wt.Base || d.To != wt.Base || d.Patch != "" || len(d.Changes.Files) != 0 || d.Changes.Files == nil {
		t.Errorf("diff = %+v, want an empty one at the base", d)
	}
}

func TestDiffNamesABinaryFileWithoutDumpingIt(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	secret := "\x00\x01\x02PAYLOAD-BYTES\xff\xfe"
	writeFiles(t, wt.Path, map[string]string{"img.bin": secret, "text.txt": "t\n"})
	mustCommit(t, m, wt, 1, "binary")
	d, err := m.Diff(ctx(t), wt, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []worktree.FileChange{
		{Path: "img.bin", Status: "added", Binary: true},
		{Path: "text.txt", Status: "added", Added: 1},
	}
	if !reflect.DeepEqual(d.Changes.Files, want) {
		t.Errorf("files = %+v, want %+v", d.Changes.Files, want)
	}
	if !strings.Contains(d.Patch, "Binary files /dev/null and b/img.bin differ\n") {
		t.Errorf("the patch does not name the binary file:\n%s", d.Patch)
	}
	if strings.Contains(d.Patch, "PAYLOAD") || strings.Contains(d.Patch, "GIT binary patch") {
		t.Error("the patch dumps the binary file")
	}
}

func TestDiffIsCutAtTheCapAndSaysSo(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	_, wt := e.session(m)
	writeFiles(t, wt.Path, map[string]string{
		"a.txt": strings.Repeat("a line of text\n", 40), // ~700 bytes of patch
		"b.txt": strings.Repeat("b line of text\n", 40),
		"c.txt": strings.Repeat("c line of text\n", 40),
	})
	mustCommit(t, m, wt, 1, "three files")
	whole, err := m.Diff(ctx(t), wt, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Truncated {
		t.Fatal("the whole patch was cut at the default cap")
	}
	firstFile := strings.Index(whole.Patch, "diff --git a/b.txt")

	cases := []struct {
		name      string
		cap       int
		truncated bool
		want      string
	}{
		{"a cap the patch fits in", len(whole.Patch), false, whole.Patch},
		{"a cap one byte short", len(whole.Patch) - 1, true, whole.Patch[:strings.Index(whole.Patch, "diff --git a/c.txt")]},
		{"a cap past the first file", firstFile + 100, true, whole.Patch[:firstFile]},
		{"a cap inside the first file", 300, true, whole.Patch[:strings.LastIndex(whole.Patch[:300], "\n")+1]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := m.Diff(ctx(t), wt, 0, c.cap)
			if err != nil {
				t.Fatal(err)
			}
			if d.Truncated != c.truncated || d.Patch != c.want {
				t.Errorf("truncated = %v, patch %d bytes; want %v, %d bytes", d.Truncated, len(d.Patch), c.truncated, len(c.want))
			}
			if len(d.Patch) > c.cap {
				t.Errorf("the patch is %d bytes, over the cap of %d", len(d.Patch), c.cap)
			}
			if len(d.Changes.Files) != 3 {
				t.Errorf("the cut patch lost files from the list: %q", fileNames(d.Changes))
			}
			again, _ := m.Diff(ctx(t), wt, 0, c.cap)
			if again.Patch != d.Patch {
				t.Error("the same diff twice gave different bytes")
			}
		})
	}
	if _, err := m.Diff(ctx(t), wt, 0, worktree.MaxDiffBytes+1); err == nil {
		t.Error("a cap above MaxDiffBytes was accepted")
	}
}

func TestTheDiffDoesNotFollowTheUsersDiffSettings(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	repo, wt := e.session(m)
	writeFiles(t, wt.Path, map[string]string{"src/main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println() }\n"})
	if err := os.Rename(filepath.Join(wt.Path, "docs", "guide.txt"), filepath.Join(wt.Path, "docs", "moved.txt")); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, m, wt, 1, "edit")
	plain, err := m.Diff(ctx(t), wt, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{
		{"diff.noprefix", "true"}, {"diff.mnemonicPrefix", "true"}, {"color.ui", "always"}, {"color.diff", "always"},
		{"diff.algorithm", "histogram"}, {"diff.renames", "copies"}, {"core.abbrev", "7"}, {"diff.context", "10"},
		{"diff.interHunkContext", "20"}, {"diff.relative", "true"}, {"core.quotePath", "false"},
		{"diff.orderFile", filepath.Join(repo, "order")},
	} {
		e.git(repo, "config", kv[0], kv[1])
	}
	writeFiles(t, repo, map[string]string{"order": "src/*\ndocs/*\n"})
	styled, err := m.Diff(ctx(t), wt, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if styled.Patch != plain.Patch || !reflect.DeepEqual(styled.Changes, plain.Changes) {
		t.Errorf("the user's settings changed the diff:\n%s\n---\n%s", plain.Patch, styled.Patch)
	}
	if !strings.Contains(plain.Patch, "deleted file mode") || !strings.Contains(plain.Patch, "--- a/docs/guide.txt") {
		t.Errorf("a rename is not a deletion and an addition:\n%s", plain.Patch)
	}
}
