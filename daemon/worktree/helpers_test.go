package worktree_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/card-dev/card/daemon/worktree"
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

// manager is a Manager over the env's root, with the env's clock.
func (e *env) manager() *worktree.Manager {
	e.t.Helper()
	m, err := worktree.New(ctx(e.t), worktree.Config{
		Root: e.root,
		Git:  e.gitBin,
		Env:  map[string]string{"PATH": os.Getenv("PATH"), "HOME": e.home},
		Now:  func() time.Time { return e.now },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// safeArgs keep the test's own git calls from running the hooks, filters
// and fsmonitor the hostile repositories install, so that a marker can only
// come from card.
var safeArgs = []string{
	"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "commit.gpgSign=false",
	"-c", "filter.evil.clean=", "-c", "filter.evil.smudge=", "-c", "filter.evil.required=false",
	"-c", "filter.evilproc.process=", "-c", "filter.gevil.clean=", "-c", "filter.gevil.smudge=",
	"-c", "user.name=Test User", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main",
	"-c", "log.showSignature=false", "-c", "gc.auto=0", "-c", "core.pager=cat", "-c", "color.ui=false",
	"-c", "protocol.file.allow=always",
}

// git runs the test's own git in dir, with hooks and programs off, and
// returns its stdout.
func (e *env) git(dir string, args ...string) string {
	e.t.Helper()
	out, err := e.gitErr(dir, args...)
	if err != nil {
		e.t.Fatalf("git %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	return out
}

func (e *env) gitErr(dir string, args ...string) (string, error) {
	cmd := exec.Command(e.gitBin, append(slices.Clone(safeArgs), args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.home, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
		"GIT_AUTHOR_DATE=@1700000000 +0000", "GIT_COMMITTER_DATE=@1700000000 +0000"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%v: %s", err, stderr.String())
	}
	return string(out), nil
}

// rawGit runs git as a user would, hooks and all.
func (e *env) rawGit(dir string, args ...string) (string, error) {
	cmd := exec.Command(e.gitBin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.home, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
		"GIT_AUTHOR_NAME=U", "GIT_AUTHOR_EMAIL=u@example.com", "GIT_COMMITTER_NAME=U", "GIT_COMMITTER_EMAIL=u@example.com"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// newRepo makes a repository with one commit:
//
//	README.md, src/main.go, src/util/util.go, docs/guide.txt, .gitignore (*.log)
func (e *env) newRepo() string {
	e.t.Helper()
	dir := filepath.Join(e.t.TempDir(), "project")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	e.git(dir, "init", "-q")
	writeFiles(e.t, dir, map[string]string{
		"README.md":        "# project\n\nhello\n",
		"src/main.go":      "package main\n\nfunc main() {}\n",
		"src/util/util.go": "package util\n",
		"docs/guide.txt":   "line 1\nline 2\nline 3\n",
		".gitignore":       "*.log\n",
	})
	e.commitAll(dir, "init")
	return dir
}

func (e *env) commitAll(dir, msg string) string {
	e.t.Helper()
	e.git(dir, "add", "-A")
	e.git(dir, "commit", "-q", "--allow-empty", "-m", msg)
	return strings.TrimSpace(e.git(dir, "rev-parse", "HEAD"))
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// snapshot is every entry under dir: its kind, mode and content (a hash),
// by slash path, leaving out what skip says.
func snapshot(t *testing.T, dir string, skip func(rel string) bool) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if skip != nil && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			snap[rel] = "link " + target
		case d.IsDir():
			snap[rel] = fmt.Sprintf("dir %v", info.Mode().Perm())
		default:
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			snap[rel] = fmt.Sprintf("file %v %s", info.Mode().Perm(), hex.EncodeToString(sum[:8]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// snapshotDiff names what differs between two snapshots.
func snapshotDiff(before, after map[string]string) []string {
	var out []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			out = append(out, "removed "+k)
		} else if w != v {
			out = append(out, "changed "+k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, "added "+k)
		}
	}
	slices.Sort(out)
	return out
}

func fileNames(ch worktree.Changes) []string {
	var names []string
	for _, f := range ch.Files {
		names = append(names, f.Path)
	}
	return names
}

// newID is a session id as card makes them (a UUID), distinct per call.
var idCounter atomic.Int64

func newID() string {
	return fmt.Sprintf("0f8c3c1e-7b1a-4a2e-9d7e-%012d", idCounter.Add(1))
}

func mustCommit(t *testing.T, m *worktree.Manager, wt worktree.Worktree, turn int, prompt string) worktree.Committed {
	t.Helper()
	c, err := m.Commit(ctx(t), wt, turn, prompt)
	if err != nil {
		t.Fatalf("commit turn %d: %v", turn, err)
	}
	if c.Commit == "" {
		t.Fatalf("turn %d made no commit", turn)
	}
	return c
}
