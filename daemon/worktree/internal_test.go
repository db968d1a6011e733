package worktree

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestALockedKeyWaitsForItsHolderAndGivesUpWithItsContext(t *testing.T) {
	var k keyedLock
	unlock, err := k.lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := k.lock(context.Background(), "b")
	if err != nil {
		t.Fatal("another key waited for a held one")
	}
	other()

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := k.lock(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a held key was taken twice: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := k.lock(context.Background(), "a")
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case <-got:
		t.Fatal("the waiter did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) != 0 {
		t.Errorf("released keys are still held in memory: %v", k.keys)
	}
}

func TestEveryFilterDriverOfEveryConfigScopeIsEmptied(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	home := t.TempDir()
	repo := t.TempDir()
	gitEnv := []string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "PATH=" + os.Getenv("PATH")}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(git, args...)
		cmd.Dir, cmd.Env = repo, gitEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	run("init", "-q")
	run("config", "filter.lfs.process", "git-lfs filter-process")
	run("config", "filter.lfs.required", "true")
	run("config", "filter.we=ird.smudge", "sh -c evil")
	run("config", "filter.plain", "a key of the section itself, no driver")
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[filter \"global\"]\n\tclean = evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), Config{Root: filepath.Join(t.TempDir(), "root"), Git: git,
		Env: map[string]string{"HOME": home, "PATH": os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.repoConfig(context.Background(), repo, filepath.Join(repo, ".git"), repo)
	if err != nil {
		t.Fatal(err)
	}
	var want []kv
	for _, d := range []string{"global", "lfs", "we=ird"} {
		p := "filter." + d + "."
		want = append(want, kv{p + "clean", ""}, kv{p + "smudge", ""}, kv{p + "process", ""}, kv{p + "required", "false"})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("overrides = %q\nwant %q", got, want)
	}

	empty := t.TempDir()
	run2 := exec.Command(git, "init", "-q", empty)
	run2.Env = gitEnv
	if out, err := run2.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := os.Remove(filepath.Join(home, ".gitconfig")); err != nil {
		t.Fatal(err)
	}
	if got, err := m.repoConfig(context.Background(), empty, filepath.Join(empty, ".git"), empty); err != nil || got != nil {
		t.Errorf("a repository without filters: %q, %v; want none", got, err)
	}
}
