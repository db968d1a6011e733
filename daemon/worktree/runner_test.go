package worktree_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/card-dev/card/daemon/worktree"
)

// fakeGit is a git that answers `version` with version and does what
// rest says for anything else; it writes its environment to envFile.
func fakeGit(t *testing.T, version, rest string) (bin, envFile string) {
	dir := t.TempDir()
	bin = filepath.Join(dir, "git")
	envFile = filepath.Join(dir, "env")
	script := fmt.Sprintf("#!/bin/sh\nenv > %q\ncase \"$*\" in *version) echo 'git version %s'; exit 0;; esac\n%s\n", envFile, version, rest)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, envFile
}

func TestGitRunsWithCardsEnvironmentAndNoneThatRedirectsIt(t *testing.T) {
	bin, envFile := fakeGit(t, "2.39.5", "exit 0")
	base := map[string]string{
		"PATH": "/usr/bin:/bin", "HOME": "/home/u",
		"GIT_DIR": "/elsewhere/.git", "GIT_WORK_TREE": "/elsewhere", "GIT_CONFIG_PARAMETERS": "'core.hookspath'='/tmp/h'",
		"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_EXTERNAL_DIFF": "/bin/evil",
		"GIT_SSH_COMMAND": "/bin/evil", "GIT_ASKPASS": "/bin/evil", "GIT_EXEC_PATH": "/evil/libexec",
		"GIT_AUTHOR_NAME": "Mallory", "EMAIL": "m@example.com", "LANGUAGE": "fr", "LC_ALL": "fr_FR.UTF-8",
		"NOTIFY_SOCKET": "/run/systemd/notify", "GIT_PAGER": "less", "EDITOR": "vim",
	}
	_, err := worktree.New(ctx(t), worktree.Config{Root: filepath.Join(t.TempDir(), "r"), Git: bin, Env: base})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(readFile(t, envFile), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	want := map[string]string{
		"PATH": "/usr/bin:/bin", "HOME": "/home/u", "LC_ALL": "C",
		"GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true", "GIT_PAGER": "cat", "PAGER": "cat",
		"GIT_OPTIONAL_LOCKS": "0", "GIT_NO_REPLACE_OBJECTS": "1",
		"GIT_AUTHOR_NAME": "card", "GIT_AUTHOR_EMAIL": "card@localhost", "GIT_COMMITTER_NAME": "card", "GIT_COMMITTER_EMAIL": "card@localhost",
		"GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": "/dev/null",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_PARAMETERS", "GIT_EXTERNAL_DIFF", "GIT_SSH_COMMAND",
		"GIT_ASKPASS", "GIT_EXEC_PATH", "EMAIL", "LANGUAGE", "NOTIFY_SOCKET"} {
		if v, ok := got[k]; ok {
			t.Errorf("%s reached git: %q", k, v)
		}
	}
	keys := map[string]string{}
	for k, v := range got {
		if strings.HasPrefix(k, "GIT_CONFIG_KEY_") {
			keys[v] = got["GIT_CONFIG_VALUE_"+strings.TrimPrefix(k, "GIT_CONFIG_KEY_")]
		}
	}
	for k, v := range map[string]string{"core.fsmonitor": "false", "commit.gpgSign": "false", "gc.auto": "0", "protocol.allow": "never"} {
		if keys[k] != v {
			t.Errorf("config %s = %q, want %q", k, keys[k], v)
		}
	}
}

func TestAGitCallPastItsDeadlineIsEnded(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "git")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := worktree.New(ctx(t), worktree.Config{Root: filepath.Join(dir, "r"), Git: bin,
		Env: map[string]string{"PATH": os.Getenv("PATH")}, CallTimeout: 300 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the call took %v to end", took)
	}
}

func TestAnOldGitIsRefused(t *testing.T) {
	bin, _ := fakeGit(t, "2.30.9", "exit 0")
	_, err := worktree.New(ctx(t), worktree.Config{Root: filepath.Join(t.TempDir(), "r"), Git: bin})
	if err == nil || !strings.Contains(err.Error(), "older than 2.31") {
		t.Errorf("err = %v, want git refused as too old", err)
	}
}

func TestARootThatIsALinkIsRefused(t *testing.T) {
	e := newEnv(t)
	target := t.TempDir()
	link := filepath.Join(t.TempDir(), "root")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err := worktree.New(ctx(t), worktree.Config{Root: link, Git: e.gitBin})
	if !errors.Is(err, worktree.ErrUnsafeRoot) {
		t.Errorf("err = %v, want ErrUnsafeRoot", err)
	}
}
