package sessions

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/worktree"
)

// gitRepo is a repository with one commit, made without the machine's git
// config.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644))
	for _, args := range [][]string{{"init", "-q"}, {"add", "a.txt"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "a"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	return dir
}

// The sweeper discards the worktree of a closed isolated session that has
// changed nothing for WorktreeMaxAge, and records it discarded; an open
// session's worktree, however old, and a recent one stay.
func TestTheSweeperPrunesOldWorktreesOfClosedSessionsOnly(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	var clock atomic.Int64
	clock.Store(time.Now().Add(-48 * time.Hour).UnixNano())
	wm, err := worktree.New(context.Background(), worktree.Config{Root: filepath.Join(t.TempDir(), "worktrees"), Git: git,
		Env: map[string]string{"PATH": os.Getenv("PATH"), "HOME": t.TempDir()}, Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	require.NoError(t, err)
	m := newWarmManager(t, &fakeWarmer{}, Config{MaxWarm: -1, WorktreeMaxAge: 24 * time.Hour})
	m.deps.Worktrees = wm
	repo := gitRepo(t)
	ctx := context.Background()
	start := func() api.Session {
		s, err := m.Start(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: api.IsolationWorktree}}, []string{}, "")
		require.NoError(t, err)
		require.NotNil(t, s.Worktree)
		return s
	}
	old, open := start(), start()
	clock.Store(time.Now().UnixNano())
	recent := start()
	for _, s := range []api.Session{old, recent} {
		_, err := m.Close(ctx, s.SessionID, "")
		require.NoError(t, err)
	}

	m.sweep()
	assert.NoDirExists(t, old.Worktree.Path, "a closed session's old worktree is pruned")
	got, err := m.Get(ctx, old.SessionID)
	require.NoError(t, err)
	require.NotNil(t, got.Worktree.DiscardedAt, "and recorded discarded")
	_, err = m.Diff(ctx, api.SessionDiffParams{SessionID: old.SessionID})
	var gone *WorktreeGoneError
	assert.ErrorAs(t, err, &gone)
	assert.DirExists(t, open.Worktree.Path, "an open session's worktree stays, however old")
	assert.DirExists(t, recent.Worktree.Path, "a recent one stays")
}
