package worktree_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// env is one test's world: a HOME of its own (so the machine's global git
// config plays no part unless the test writes one), git, and the root card
// keeps worktrees in.
type env struct {
	t      *testing.T
	home   string
	gitBin string
	root   string
	now    time.Time
}

func newEnv(t *testing.T) *env {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	base := t.TempDir()
	e := &env{t: t, home: filepath.Join(base, "home"), gitBin: git, root: filepath.Join(base, "card", "worktrees"),
		now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		t.Fatal(err)
	}
	return e
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
