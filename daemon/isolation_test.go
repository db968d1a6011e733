package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// startIsolated starts an edit session of the fake Claude Code isolated in
// repo, and follows it.
func startIsolated(t *testing.T, c *client.Client, repo string) (api.Session, *sessionEvents) {
	t.Helper()
	ctx := daemontest.Context(t)
	s, err := c.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, PermissionMode: "edit", Isolation: api.IsolationWorktree}})
	require.NoError(t, err)
	require.NotNil(t, s.Worktree)
	evs := &sessionEvents{}
	_, err = c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	return s, evs
}

// turn prompts s and waits for the turn's end.
func turn(t *testing.T, c *client.Client, s api.Session, evs *sessionEvents, n int, task string) []api.SessionEvent {
	t.Helper()
	res, err := c.PromptSession(daemontest.Context(t), api.SessionPromptParams{SessionID: s.SessionID, Task: task})
	require.NoError(t, err)
	require.Equal(t, n, res.Turn)
	all := evs.waitEnds(t, n, 15*time.Second)
	waitSessionIdle(t, c, s.SessionID)
	return all
}

func diffPaths(d api.SessionDiff) []string {
	var out []string
	for _, f := range d.Files {
		out = append(out, f.Path)
	}
	return out
}

func TestAnIsolatedSessionLeavesTheCheckoutAsItWasAndEachTurnIsACommitToReview(t *testing.T) {
	rd := startRunsDaemon(t, "")
	rd.agents["claude-code"].TeachWriting(t)
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "project")
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "src"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("mine, uncommitted\n"), 0o644))
	before, status := daemontest.Snapshot(t, repo), daemontest.Git(t, repo, "status", "--porcelain")

	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{
		AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: filepath.Join(repo, "src"), PermissionMode: "edit", Isolation: api.IsolationWorktree},
	})
	require.NoError(t, err)
	wt := s.Worktree
	require.NotNil(t, wt)
	assert.Equal(t, filepath.Join(repo, "src"), s.Cwd, "the session's cwd is the one given")
	assert.Equal(t, repo, wt.Repo)
	assert.Equal(t, "card/"+s.SessionID, wt.Branch)
	assert.Equal(t, "HEAD", wt.BaseRef)
	assert.Equal(t, filepath.Join(wt.Path, "src"), wt.Dir, "turns run at the cwd's place in the worktree")
	assert.True(t, strings.HasPrefix(wt.Path, filepath.Join(rd.Home, "worktrees", s.SessionID)+"/"), wt.Path)
	assert.Equal(t, api.Uncommitted{Any: true, Tracked: 0, Untracked: 1, Paths: []string{"notes.txt"}}, wt.Uncommitted,
		"the answer says the checkout had changes the worktree does not")
	st, err := os.Stat(filepath.Join(rd.Home, "worktrees"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "no other user can read the worktrees")
	evs := &sessionEvents{}
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)

	turn(t, rd.Client, s, evs, 1, "WRITE one.txt the first file")
	all := turn(t, rd.Client, s, evs, 2, "WRITE two.txt the second file")
	assert.Equal(t, before, daemontest.Snapshot(t, repo), "the user's checkout is byte for byte as it was")
	assert.Equal(t, status, daemontest.Git(t, repo, "status", "--porcelain"))
	b, err := os.ReadFile(filepath.Join(wt.Dir, "two.txt"))
	require.NoError(t, err)
	assert.Equal(t, "the second file\n", string(b), "the agent wrote in the worktree, at the cwd's place")

	// Each turn ends with its changes, just before its terminal event.
	var kinds []string
	for _, ev := range all {
		if ev.Event.Kind == api.EventChanges || client.Terminal(ev.Event) {
			kinds = append(kinds, ev.Event.Kind)
		}
		if ev.Event.Kind == api.EventChanges {
			ch := ev.Event.Changes
			require.NotNil(t, ch)
			assert.Equal(t, ev.Turn, ch.Turn)
			assert.NotEmpty(t, ch.Commit)
			require.Len(t, ch.Files, 1)
			assert.Equal(t, api.FileChange{Path: map[int]string{1: "src/one.txt", 2: "src/two.txt"}[ev.Turn], Status: "added", Added: 1}, ch.Files[0])
			assert.NotEmpty(t, ev.Event.RunID, "it is the turn's own event")
		}
	}
	assert.Equal(t, []string{"changes", "done", "changes", "done"}, kinds)
	gapFree(t, all, 0)

	whole, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.Equal(t, []string{"src/one.txt", "src/two.txt"}, diffPaths(whole))
	assert.Equal(t, 2, whole.Added)
	assert.Contains(t, whole.Patch, "+++ b/src/two.txt\n")
	assert.False(t, whole.Truncated)
	require.Len(t, whole.Turns, 2)
	for n, want := range map[int]string{1: "src/one.txt", 2: "src/two.txt"} {
		d, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, Turn: n})
		require.NoError(t, err)
		assert.Equal(t, []string{want}, diffPaths(d), "turn %d", n)
		assert.Equal(t, whole.Turns[n-1].Commit, d.To)
	}
	cut, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, MaxBytes: 100})
	require.NoError(t, err)
	assert.True(t, cut.Truncated)
	assert.LessOrEqual(t, len(cut.Patch), 100)
	assert.Len(t, cut.Files, 2, "the file list is whole whatever the cap")

	applied, err := rd.Client.ApplySession(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, repo, applied.Repo)
	assert.Len(t, applied.Files, 2)
	assert.Equal(t, "?? notes.txt\n?? src/\n", daemontest.Git(t, repo, "status", "--porcelain"), "the changes are in the checkout, uncommitted")
	b, err = os.ReadFile(filepath.Join(repo, "src", "one.txt"))
	require.NoError(t, err)
	assert.Equal(t, "the first file\n", string(b))
	assert.Equal(t, strings.TrimSpace(daemontest.Git(t, repo, "rev-parse", "main")), strings.TrimSpace(daemontest.Git(t, repo, "rev-parse", "HEAD")))

	rw, err := rd.Client.RewindSession(ctx, s.SessionID, 1)
	require.NoError(t, err)
	assert.Equal(t, []int{2}, rw.DroppedTurns)
	assert.Equal(t, whole.Turns[0].Commit, rw.Commit)
	assert.NoFileExists(t, filepath.Join(wt.Dir, "two.txt"), "turn 2's file is gone from the worktree")
	assert.FileExists(t, filepath.Join(wt.Dir, "one.txt"))
	require.Eventually(t, func() bool {
		for _, ev := range evs.all() {
			if ev.Event.Kind == api.EventRewound {
				return ev.Event.Rewound.Turn == 1 && ev.Event.RunID == "" && ev.Turn == 2
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "the stream says the worktree was rewound")
	after, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.Equal(t, []string{"src/one.txt"}, diffPaths(after))
	rewound, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, Turn: 2})
	require.NoError(t, err)
	assert.Empty(t, rewound.Files, "a turn rewound away shows no changes")
	// The conversation goes on, numbered after every turn taken.
	turn(t, rd.Client, s, evs, 3, "WRITE three.txt after the rewind")
	after, err = rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.Equal(t, []string{"src/one.txt", "src/three.txt"}, diffPaths(after))

	gone, err := rd.Client.DiscardSession(ctx, s.SessionID)
	require.NoError(t, err)
	assert.True(t, gone.Closed)
	assert.Equal(t, api.SessionClosed, gone.Session.State)
	require.NotNil(t, gone.Session.Worktree.DiscardedAt)
	assert.NoDirExists(t, wt.Path)
	assert.NotContains(t, daemontest.Git(t, repo, "worktree", "list"), wt.Path)
	assert.Empty(t, daemontest.Git(t, repo, "branch", "--list", "card/*"), "no branch is left")
	again, err := rd.Client.DiscardSession(ctx, s.SessionID)
	require.NoError(t, err, "discarding twice answers the session as it is")
	assert.False(t, again.Closed)
	_, err = rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	assert.Equal(t, daemon.CodeWorktreeGone, rpcCode(t, err).Code)
}

func TestTwoIsolatedSessionsOnOneRepositorySeeOnlyTheirOwnChanges(t *testing.T) {
	rd := startRunsDaemon(t, "")
	rd.agents["claude-code"].TeachWriting(t)
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "shared")
	a, aevs := startIsolated(t, rd.Client, repo)
	b, bevs := startIsolated(t, rd.Client, repo)
	require.NotEqual(t, a.Worktree.Path, b.Worktree.Path)
	// Both turns at once.
	_, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: a.SessionID, Task: "WRITE a.txt from a"})
	require.NoError(t, err)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: b.SessionID, Task: "WRITE b.txt from b"})
	require.NoError(t, err)
	aevs.waitEnds(t, 1, 15*time.Second)
	bevs.waitEnds(t, 1, 15*time.Second)
	waitSessionIdle(t, rd.Client, a.SessionID)
	waitSessionIdle(t, rd.Client, b.SessionID)
	for _, c := range []struct {
		s          api.Session
		mine, not_ string
	}{{a, "a.txt", "b.txt"}, {b, "b.txt", "a.txt"}} {
		d, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: c.s.SessionID})
		require.NoError(t, err)
		assert.Equal(t, []string{c.mine}, diffPaths(d), c.s.SessionID)
		assert.FileExists(t, filepath.Join(c.s.Worktree.Dir, c.mine))
		assert.NoFileExists(t, filepath.Join(c.s.Worktree.Dir, c.not_))
	}
	assert.NoFileExists(t, filepath.Join(repo, "a.txt"))
	assert.NoFileExists(t, filepath.Join(repo, "b.txt"))
}

// A hook of the repository, wherever git would find one, must never run:
// card runs no code of the repository's in any operation.
func TestNoHookOfTheRepositoryRunsInAnyCardOperation(t *testing.T) {
	rd := startRunsDaemon(t, "")
	rd.agents["claude-code"].TeachWriting(t)
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "hooked")
	markers := t.TempDir()
	hook := "#!/bin/sh\necho \"$0 $*\" >> " + filepath.Join(markers, "ran") + "\n"
	hooksDir := filepath.Join(t.TempDir(), "hooks")
	require.NoError(t, os.MkdirAll(hooksDir, 0o755))
	for _, name := range []string{"pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-index-change",
		"reference-transaction", "post-merge", "pre-auto-gc", "post-rewrite", "pre-push"} {
		for _, dir := range []string{filepath.Join(repo, ".git", "hooks"), hooksDir} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(hook), 0o755))
		}
	}
	before := daemontest.Snapshot(t, repo)
	s, evs := startIsolated(t, rd.Client, repo)
	turn(t, rd.Client, s, evs, 1, "WRITE one.txt one")
	daemontest.Git(t, repo, "config", "core.hooksPath", hooksDir)
	turn(t, rd.Client, s, evs, 2, "WRITE two.txt two")
	_, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	_, err = rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, Turn: 1})
	require.NoError(t, err)
	_, err = rd.Client.RewindSession(ctx, s.SessionID, 1)
	require.NoError(t, err)
	_, err = rd.Client.ApplySession(ctx, s.SessionID)
	require.NoError(t, err)
	_, err = rd.Client.DiscardSession(ctx, s.SessionID)
	require.NoError(t, err)
	assert.NoFileExists(t, filepath.Join(markers, "ran"), "a hook ran")
	assert.NotEqual(t, before, daemontest.Snapshot(t, repo), "the apply did reach the checkout")
}

func TestAnApplyThatConflictsNamesTheFileAndLeavesTheCheckoutAsItWas(t *testing.T) {
	rd := startRunsDaemon(t, "")
	rd.agents["claude-code"].TeachWriting(t)
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "clash")
	s, evs := startIsolated(t, rd.Client, repo)
	turn(t, rd.Client, s, evs, 1, "WRITE README.md the agent's readme")
	turn(t, rd.Client, s, evs, 2, "WRITE new.txt a new file")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("the user's own edit\n"), 0o644))
	before, status := daemontest.Snapshot(t, repo), daemontest.Git(t, repo, "status", "--porcelain")

	_, err := rd.Client.ApplySession(ctx, s.SessionID)
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeApplyConflict, re.Code)
	data := errData(t, re)
	assert.Equal(t, repo, data["repo"])
	files, _ := data["files"].([]any)
	require.Len(t, files, 1, "%v", data)
	f := files[0].(map[string]any)
	assert.Equal(t, "README.md", f["path"])
	assert.NotEmpty(t, f["reason"])
	assert.Contains(t, re.Message, "README.md")
	assert.Equal(t, before, daemontest.Snapshot(t, repo), "nothing was written: not even new.txt")
	assert.Equal(t, status, daemontest.Git(t, repo, "status", "--porcelain"))
}

func TestAKilledDaemonKeepsAnIsolatedSessionsWorktreeTurnsAndDiff(t *testing.T) {
	bin := daemontest.Build(t)
	agents, pins := replayAgents(t)
	agents["claude-code"].TeachWriting(t)
	repo := daemontest.GitRepo(t, "durable")
	opts := daemontest.Options{Config: "login_shell_path = false\n", Agents: pins}
	first := daemontest.Serve(t, bin, opts)
	ctx := daemontest.Context(t)
	s, evs := startIsolated(t, first.Client, repo)
	turn(t, first.Client, s, evs, 1, "WRITE one.txt one")
	turn(t, first.Client, s, evs, 2, "WRITE two.txt two")
	before, err := first.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)

	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	first.Wait(t, 10*time.Second)
	opts.Home = first.Home
	second := daemontest.Serve(t, bin, opts)

	got, err := second.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, s.Worktree.Path, got.Worktree.Path)
	assert.Equal(t, api.SessionIdle, got.State)
	after, err := second.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.Equal(t, before, after, "the worktree, its turns and the diff are all there")
	one, err := second.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, Turn: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{"one.txt"}, diffPaths(one))
	// And the session goes on in its worktree.
	again := &sessionEvents{}
	_, err = second.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, again.add)
	require.NoError(t, err)
	turn(t, second.Client, s, again, 3, "WRITE three.txt three")
	whole, err := second.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.Equal(t, []string{"one.txt", "three.txt", "two.txt"}, diffPaths(whole))
	assert.NoFileExists(t, filepath.Join(repo, "three.txt"))
}

func TestAKilledDaemonCommitsWhatTheTurnItCutHadChanged(t *testing.T) {
	bin := daemontest.Build(t)
	agents, pins := replayAgents(t)
	script, err := os.ReadFile(agents["claude-code"].Path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(agents["claude-code"].Path, []byte(strings.Replace(string(script), "*SLEEP*)",
		"*SLEEP*) echo half > half.txt;", 1)), 0o755))
	repo := daemontest.GitRepo(t, "cut")
	opts := daemontest.Options{Config: "login_shell_path = false\n", Agents: pins}
	first := daemontest.Serve(t, bin, opts)
	ctx := daemontest.Context(t)
	s, _ := startIsolated(t, first.Client, repo)
	res, err := first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "SLEEP through the kill"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(s.Worktree.Dir, "half.txt"))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	first.Wait(t, 10*time.Second)
	opts.Home = first.Home
	second := daemontest.Serve(t, bin, opts)
	waitNoProcesses(t, res.RunID, 5*time.Second)

	d, err := second.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, Turn: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{"half.txt"}, diffPaths(d), "the cut turn's work is its commit")
	evs := &sessionEvents{}
	_, err = second.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		all := evs.all()
		return len(all) > 0 && all[len(all)-1].Event.Kind == api.EventChanges
	}, 5*time.Second, 10*time.Millisecond)
	all := evs.all()
	gapFree(t, all, 0)
	last := all[len(all)-1]
	assert.Equal(t, 1, last.Turn)
	assert.Equal(t, api.StatusInterrupted, all[len(all)-2].Event.Status, "the turn's end comes first, then what it changed")
}

// An isolated agents.invoke is a closed session of one turn: a daemon
// killed during its run must not leave that run's work uncommitted in the
// worktree, out of the session's diff.
func TestAKilledDaemonCommitsWhatAnIsolatedInvokeItCutHadChanged(t *testing.T) {
	bin := daemontest.Build(t)
	agents, pins := replayAgents(t)
	script, err := os.ReadFile(agents["claude-code"].Path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(agents["claude-code"].Path, []byte(strings.Replace(string(script), "*SLEEP*)",
		"*SLEEP*) echo half > half.txt;", 1)), 0o755))
	repo := daemontest.GitRepo(t, "cutinvoke")
	opts := daemontest.Options{Config: "login_shell_path = false\n", Agents: pins}
	first := daemontest.Serve(t, bin, opts)
	ctx := daemontest.Context(t)
	acc, err := first.Client.Stream(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, PermissionMode: "edit",
		Isolation: api.IsolationWorktree}, Task: "SLEEP through the kill"}, nil)
	require.NoError(t, err)
	require.NotNil(t, acc.Worktree)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(acc.Worktree.Dir, "half.txt"))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	first.Wait(t, 10*time.Second)
	opts.Home = first.Home
	second := daemontest.Serve(t, bin, opts)
	waitNoProcesses(t, acc.RunID, 5*time.Second)

	d, err := second.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: acc.CardSessionID})
	require.NoError(t, err)
	assert.Equal(t, []string{"half.txt"}, diffPaths(d), "the cut run's work is its commit")
	one, err := second.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: acc.CardSessionID, Turn: 1})
	require.NoError(t, err)
	assert.Equal(t, d.Files, one.Files, "it is turn 1's")
	s, err := second.Client.Session(ctx, acc.CardSessionID)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Turns)
	assert.Empty(t, daemontest.Git(t, s.Worktree.Path, "status", "--porcelain"), "nothing is left uncommitted in the worktree")

	// The session's stream says how the run ended, then what it changed.
	evs := &sessionEvents{}
	_, err = second.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: acc.CardSessionID}, evs.add)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		all := evs.all()
		return len(all) > 0 && all[len(all)-1].Event.Kind == api.EventChanges
	}, 5*time.Second, 10*time.Millisecond)
	all := evs.all()
	gapFree(t, all, 0)
	assert.Equal(t, api.StatusInterrupted, all[len(all)-2].Event.Status, "the run's end comes first, then what it changed")
	require.NotNil(t, all[len(all)-1].Event.Changes)
	assert.Equal(t, 1, all[len(all)-1].Event.Changes.Turn)
	assert.NotEmpty(t, all[len(all)-1].Event.Changes.Commit)
	assert.NoFileExists(t, filepath.Join(repo, "half.txt"), "the checkout is untouched")

	// A second restart commits nothing again.
	require.NoError(t, second.Cmd.Process.Signal(syscall.SIGKILL))
	second.Wait(t, 10*time.Second)
	third := daemontest.Serve(t, bin, opts)
	again, err := third.Client.Session(ctx, acc.CardSessionID)
	require.NoError(t, err)
	assert.Equal(t, s.NextSeq, again.NextSeq, "no second changes event")
}

func TestIsolationRefusalsNameWhatWasRefused(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "refusals")
	for _, c := range []struct {
		name, field string
		params      api.SessionStartParams
	}{
		{"not a repository", "isolation", api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd, Isolation: "worktree"}}},
		{"an unknown isolation", "isolation", api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: "container"}}},
		{"a base that is no commit", "base", api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: "worktree", Base: "no-such-branch"}}},
		{"a base read as an option", "base", api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: "worktree", Base: "--all"}}},
		{"a base without isolation", "base", api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Base: "main"}}},
	} {
		_, err := rd.Client.StartSession(ctx, c.params)
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, c.name)
		assert.Equal(t, c.field, errData(t, re)["field"], "%s: %s", c.name, re.Message)
	}
	wts, err := os.ReadDir(filepath.Join(rd.Home, "worktrees"))
	require.NoError(t, err)
	assert.Empty(t, wts, "a refused start leaves no worktree")
	// Another session's worktree is card's, not a checkout to isolate.
	other, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: "worktree"}})
	require.NoError(t, err)
	_, err = rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: other.Worktree.Dir, Isolation: "worktree"}})
	re := rpcCode(t, err)
	assert.Equal(t, "isolation", errData(t, re)["field"], "%s", re.Message)
	_, err = rd.Client.DiscardSession(ctx, other.SessionID)
	require.NoError(t, err)
	assert.Empty(t, daemontest.Git(t, repo, "branch", "--list", "card/*"))

	plain, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo}})
	require.NoError(t, err)
	_, err = rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: plain.SessionID})
	re = rpcCode(t, err)
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, "a session without isolation has nothing to review")
	assert.Equal(t, "session_id", errData(t, re)["field"])
	_, err = rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: "ses_NOSUCH"})
	assert.Equal(t, daemon.CodeSessionNotFound, rpcCode(t, err).Code)

	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: "worktree", Base: "main"}})
	require.NoError(t, err)
	assert.Equal(t, "main", s.Worktree.BaseRef)
	assert.False(t, s.Worktree.Uncommitted.Any)
	_, err = rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, Turn: 1})
	re = rpcCode(t, err)
	assert.Equal(t, "turn", errData(t, re)["field"], "a turn the session never took: %s", re.Message)
	_, err = rd.Client.RewindSession(ctx, s.SessionID, 4)
	assert.Equal(t, "turn", errData(t, rpcCode(t, err))["field"])
	err = rd.Client.Call(ctx, "sessions.rewind", map[string]any{"session_id": s.SessionID}, nil)
	assert.Equal(t, "turn", errData(t, rpcCode(t, err))["field"], "rewind names its turn: 0 is the base, never a default")
	err = rd.Client.Call(ctx, "sessions.diff", map[string]any{"session_id": s.SessionID, "max_bytes": 1 << 30}, nil)
	assert.Equal(t, "max_bytes", errData(t, rpcCode(t, err))["field"])

	// Rewind and discard wait for no turn: they are refused while one runs.
	evs := &sessionEvents{}
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	slow, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "SLEEP a while"})
	require.NoError(t, err)
	for _, call := range []func() error{
		func() error { _, err := rd.Client.RewindSession(ctx, s.SessionID, 0); return err },
		func() error { _, err := rd.Client.DiscardSession(ctx, s.SessionID); return err },
	} {
		re := rpcCode(t, call())
		assert.Equal(t, daemon.CodeSessionBusy, re.Code)
		assert.Equal(t, slow.RunID, errData(t, re)["run_id"])
	}
	_, err = rd.Client.CancelTurn(ctx, api.SessionCancelParams{SessionID: s.SessionID})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 10*time.Second)
	waitSessionIdle(t, rd.Client, s.SessionID)
	_, err = rd.Client.DiscardSession(ctx, s.SessionID)
	require.NoError(t, err)
}

func TestAnIsolatedInvokeIsACommitReviewableByItsSession(t *testing.T) {
	rd := startRunsDaemon(t, "")
	rd.agents["claude-code"].TeachWriting(t)
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "oneshot")
	before := daemontest.Snapshot(t, repo)
	res, err := rd.Client.Invoke(ctx, api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, PermissionMode: "edit", Isolation: api.IsolationWorktree},
		Task:          "WRITE result.txt done",
	})
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, res.Status)
	require.NotEmpty(t, res.CardSessionID)
	require.NotNil(t, res.Worktree)
	assert.Equal(t, before, daemontest.Snapshot(t, repo), "the checkout is untouched")

	var kinds []string
	ended := make(chan struct{})
	_, err = rd.Client.Subscribe(ctx, res.RunID, 0, func(ev api.AgentEvent) {
		kinds = append(kinds, ev.Kind)
		if client.Terminal(ev) {
			close(ended)
		}
	})
	require.NoError(t, err)
	<-ended
	require.GreaterOrEqual(t, len(kinds), 2)
	assert.Equal(t, []string{"changes", "done"}, kinds[len(kinds)-2:], "the run's changes come just before its end")

	d, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: res.CardSessionID})
	require.NoError(t, err)
	assert.Equal(t, []string{"result.txt"}, diffPaths(d))
	one, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: res.CardSessionID, Turn: 1})
	require.NoError(t, err)
	assert.Equal(t, d.Files, one.Files)
	s, err := rd.Client.Session(ctx, res.CardSessionID)
	require.NoError(t, err)
	assert.Equal(t, api.SessionClosed, s.State, "it takes no prompt")
	assert.Equal(t, 1, s.Turns)
	run, err := rd.Client.Run(ctx, res.RunID)
	require.NoError(t, err)
	assert.Equal(t, res.CardSessionID, run.CardSessionID)
	assert.Equal(t, res.Worktree.Dir, run.Cwd, "the run ran in its worktree")
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: res.CardSessionID, Task: "more"})
	assert.Equal(t, daemon.CodeSessionClosed, rpcCode(t, err).Code)

	applied, err := rd.Client.ApplySession(ctx, res.CardSessionID)
	require.NoError(t, err)
	assert.Len(t, applied.Files, 1)
	assert.FileExists(t, filepath.Join(repo, "result.txt"))
	_, err = rd.Client.DiscardSession(ctx, res.CardSessionID)
	require.NoError(t, err)
	assert.Empty(t, daemontest.Git(t, repo, "branch", "--list", "card/*"))

	_, err = rd.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd, Isolation: api.IsolationWorktree}, Task: "x"})
	re := rpcCode(t, err)
	assert.Equal(t, "isolation", errData(t, re)["field"], "outside a repository: %s", re.Message)
}

// Reading a diff is read; apply, rewind and discard change the user's
// files or the session's work: they need write, and only the session's
// owner (or a native client) may do them.
func TestAPageMayDiffItsOwnSessionButApplyRewindAndDiscardNeedWriteAndOwnership(t *testing.T) {
	rd := startRunsDaemon(t, modesConfig)
	rd.agents["claude-code"].TeachWriting(t)
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "pages")
	var asked atomic.Int32
	page := pageClient(t, rd.Daemon, appOrigin, &asked)
	writer := pageClient(t, rd.Daemon, writerOrigin, &asked)

	// The default grants (read, agents) start a read-only isolated session.
	s, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: api.IsolationWorktree}})
	require.NoError(t, err)
	assert.Equal(t, appOrigin, s.Origin)
	d, err := page.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err, "diff is read")
	assert.Empty(t, d.Files)
	for method, call := range map[string]func(c *client.Client) error{
		"sessions.apply":   func(c *client.Client) error { _, err := c.ApplySession(ctx, s.SessionID); return err },
		"sessions.rewind":  func(c *client.Client) error { _, err := c.RewindSession(ctx, s.SessionID, 0); return err },
		"sessions.discard": func(c *client.Client) error { _, err := c.DiscardSession(ctx, s.SessionID); return err },
	} {
		re := rpcCode(t, call(page))
		assert.Equal(t, daemon.CodeAccessDenied, re.Code, "%s by its owner without write: %s", method, re.Message)
		assert.Equal(t, "write", errData(t, re)["access"])
		re = rpcCode(t, call(writer))
		assert.Equal(t, daemon.CodeNotSessionOwner, re.Code, "%s by another origin with write: %s", method, re.Message)
		assert.Equal(t, method, errData(t, re)["method"])
	}

	// An origin granted write reviews its own session whole.
	mine, err := writer.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, PermissionMode: "edit", Isolation: api.IsolationWorktree}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = writer.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: mine.SessionID}, evs.add)
	require.NoError(t, err)
	turn(t, writer, mine, evs, 1, "WRITE page.txt from the page")
	_, err = writer.ApplySession(ctx, mine.SessionID)
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(repo, "page.txt"))
	_, err = writer.RewindSession(ctx, mine.SessionID, 0)
	require.NoError(t, err)
	_, err = writer.DiscardSession(ctx, mine.SessionID)
	require.NoError(t, err)
	// A native client is the user's own program: it may discard any.
	_, err = rd.Client.DiscardSession(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Empty(t, daemontest.Git(t, repo, "branch", "--list", "card/*"))
}

// A turn that filled its run's events still says what it changed: right
// after its terminal event, as an event of the session's own.
func TestATurnThatFilledItsEventsHasItsChangesRightAfterItsEnd(t *testing.T) {
	rd := startRunsDaemon(t, "max_events_per_run = 10\n")
	rd.bigTask(t, 30, 100)
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "full")
	s, evs := startIsolated(t, rd.Client, repo)
	_, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "BIG"})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 15*time.Second)
	require.Eventually(t, func() bool {
		all := evs.all()
		return all[len(all)-1].Event.Kind == api.EventChanges
	}, 5*time.Second, 10*time.Millisecond)
	all := evs.all()
	last := all[len(all)-1]
	assert.True(t, client.Terminal(all[len(all)-2].Event))
	assert.Equal(t, all[len(all)-2].Seq+1, last.Seq, "next in the session's seq (the run's dropped events leave their gap before)")
	assert.Equal(t, "", last.Event.RunID, "the session's own event")
	assert.Equal(t, 1, last.Turn)
	require.NotNil(t, last.Event.Changes)
	assert.Equal(t, 1, last.Event.Changes.Turn)
	assert.Empty(t, last.Event.Changes.Files)
}

// A page with the default grants may start read-only isolated sessions;
// closed ones keep their worktrees until discarded or pruned, so the
// worktrees one origin holds are bounded too, open and closed alike, each
// origin (and the native clients, as one) on its own.
func TestTheWorktreesOneOriginHoldsAreBounded(t *testing.T) {
	rd := startRunsDaemon(t, modesConfig+"\n[sessions]\nmax_worktrees_per_origin = 2\n")
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "bounded")
	var asked atomic.Int32
	page := pageClient(t, rd.Daemon, appOrigin, &asked)
	isolated := api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: api.IsolationWorktree}}

	one, err := page.StartSession(ctx, isolated)
	require.NoError(t, err)
	two, err := page.StartSession(ctx, isolated)
	require.NoError(t, err)
	_, err = page.CloseSession(ctx, two.SessionID)
	require.NoError(t, err, "a closed session keeps its worktree, and it still counts")
	refused := func(err error) {
		t.Helper()
		re := rpcCode(t, err)
		assert.Equal(t, daemon.CodeTooManySessions, re.Code, re.Message)
		assert.Equal(t, "[sessions] max_worktrees_per_origin", errData(t, re)["config_key"])
		assert.EqualValues(t, 2, errData(t, re)["max"])
		assert.Contains(t, re.Message, "sessions.discard")
	}
	_, err = page.StartSession(ctx, isolated)
	refused(err)
	_, err = page.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, Isolation: api.IsolationWorktree}, Task: "x"})
	refused(err)
	entries, err := os.ReadDir(filepath.Join(rd.Home, "worktrees"))
	require.NoError(t, err)
	assert.Len(t, entries, 2, "a refused start makes no worktree")

	// Sessions without a worktree are not bounded by it, and another
	// client has its own count.
	_, err = page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo}})
	require.NoError(t, err)
	mine, err := rd.Client.StartSession(ctx, isolated)
	require.NoError(t, err, "the native clients count on their own")

	// A discarded worktree no longer counts (a native client may discard
	// the page's session).
	_, err = rd.Client.DiscardSession(ctx, one.SessionID)
	require.NoError(t, err)
	three, err := page.StartSession(ctx, isolated)
	require.NoError(t, err)
	for _, id := range []string{two.SessionID, three.SessionID, mine.SessionID} {
		_, err = rd.Client.DiscardSession(ctx, id)
		require.NoError(t, err)
	}
}

// Isolation chosen after sessions.start, as an editor's config option
// chooses it: before the first turn sessions.configure makes the worktree
// (or removes it); after it the session stays where its turns ran.
func TestIsolationSetBeforeTheFirstTurnMakesTheWorktreeAndAfterItIsRefused(t *testing.T) {
	rd := startRunsDaemon(t, "")
	rd.agents["claude-code"].TeachWriting(t)
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "later")
	before := daemontest.Snapshot(t, repo)
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo, PermissionMode: "edit"}})
	require.NoError(t, err)
	require.Nil(t, s.Worktree)
	evs := &sessionEvents{}
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	configure := func(isolation, base string) (api.SessionConfigureResult, error) {
		return rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, Isolation: isolation, Base: base})
	}

	on, err := configure("worktree", "")
	require.NoError(t, err)
	assert.Equal(t, []string{"isolation"}, on.Changed)
	require.NotNil(t, on.Session.Worktree)
	assert.DirExists(t, on.Session.Worktree.Dir)
	assert.Equal(t, "HEAD", on.Session.Worktree.BaseRef)
	require.Eventually(t, func() bool { return len(evs.all()) == 1 }, 5*time.Second, 10*time.Millisecond)
	note := evs.all()[0].Event.Configured
	require.NotNil(t, note, "a session_configured event tells every follower")
	assert.Equal(t, "worktree", note.Isolation)
	assert.Equal(t, on.Session.Worktree, note.Worktree)
	again, err := configure("worktree", "")
	require.NoError(t, err)
	assert.Empty(t, again.Changed, "the same isolation again changes nothing")
	_, err = configure("worktree", "main")
	re := rpcCode(t, err)
	assert.Equal(t, "base", errData(t, re)["field"], "a worktree is made once: %s", re.Message)

	off, err := configure("off", "")
	require.NoError(t, err)
	assert.Equal(t, []string{"isolation"}, off.Changed)
	assert.Nil(t, off.Session.Worktree)
	assert.NoDirExists(t, on.Session.Worktree.Path)
	assert.Empty(t, daemontest.Git(t, repo, "branch", "--list", "card/*"), "its branch went with it")

	from, err := configure("worktree", "main")
	require.NoError(t, err)
	assert.Equal(t, []string{"isolation", "base"}, from.Changed)
	require.NotNil(t, from.Session.Worktree)
	assert.Equal(t, "main", from.Session.Worktree.BaseRef)
	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, from.Session.Worktree, got.Worktree)

	// The turns run in the worktree, as a session started isolated.
	turn(t, rd.Client, s, evs, 1, "WRITE later.txt made in the worktree")
	assert.Equal(t, before, daemontest.Snapshot(t, repo), "the checkout is untouched")
	d, err := rd.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.Equal(t, []string{"later.txt"}, diffPaths(d))

	// After the first turn it stays where the turns ran.
	for _, iso := range []string{"off", "worktree"} {
		base := ""
		if iso == "worktree" {
			base = "HEAD~0"
		}
		_, err = configure(iso, base)
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
		assert.Equal(t, "isolation", errData(t, re)["field"], re.Message)
	}
	assert.DirExists(t, from.Session.Worktree.Dir)
	_, err = rd.Client.DiscardSession(ctx, s.SessionID)
	require.NoError(t, err)
}

func TestAnIsolationChangeThatCannotBeMadeNamesItsFieldAndChangesNothing(t *testing.T) {
	rd := startRunsDaemon(t, modesConfig+"\n[sessions]\nmax_worktrees_per_origin = 1\n")
	ctx := daemontest.Context(t)
	repo := daemontest.GitRepo(t, "changes")
	plain, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo}})
	require.NoError(t, err)
	outside, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	for _, c := range []struct {
		name, field string
		p           api.SessionConfigureParams
	}{
		{"an unknown isolation", "isolation", api.SessionConfigureParams{SessionID: plain.SessionID, Isolation: "container"}},
		{"a base without isolation", "base", api.SessionConfigureParams{SessionID: plain.SessionID, Base: "main"}},
		{"a base with isolation off", "base", api.SessionConfigureParams{SessionID: plain.SessionID, Isolation: "off", Base: "main"}},
		{"a base that is no commit", "base", api.SessionConfigureParams{SessionID: plain.SessionID, Isolation: "worktree", Base: "no-such-branch"}},
		{"a base read as an option", "base", api.SessionConfigureParams{SessionID: plain.SessionID, Isolation: "worktree", Base: "--all"}},
		{"a cwd outside any repository", "isolation", api.SessionConfigureParams{SessionID: outside.SessionID, Isolation: "worktree"}},
	} {
		_, err := rd.Client.ConfigureSession(ctx, c.p)
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, "%s: %s", c.name, re.Message)
		assert.Equal(t, c.field, errData(t, re)["field"], "%s: %s", c.name, re.Message)
	}
	for _, id := range []string{plain.SessionID, outside.SessionID} {
		got, err := rd.Client.Session(ctx, id)
		require.NoError(t, err)
		assert.Nil(t, got.Worktree, "a refused change leaves the session as it was")
	}
	wts, err := os.ReadDir(filepath.Join(rd.Home, "worktrees"))
	require.NoError(t, err)
	assert.Empty(t, wts, "and makes no worktree")

	// A page with the default grants may make its own session's
	// worktree, as it may start an isolated session, but removing one is
	// sessions.discard's act: it needs write. Another origin may do
	// neither, and the bound on worktrees holds.
	var asked atomic.Int32
	page := pageClient(t, rd.Daemon, appOrigin, &asked)
	writer := pageClient(t, rd.Daemon, writerOrigin, &asked)
	ps, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo}})
	require.NoError(t, err)
	_, err = writer.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: ps.SessionID, Isolation: "worktree"})
	assert.Equal(t, daemon.CodeNotSessionOwner, rpcCode(t, err).Code)
	res, err := page.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: ps.SessionID, Isolation: "worktree"})
	require.NoError(t, err)
	require.NotNil(t, res.Session.Worktree)
	_, err = page.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: ps.SessionID, Isolation: "off"})
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeAccessDenied, re.Code, re.Message)
	assert.Equal(t, "write", errData(t, re)["access"])
	second, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: repo}})
	require.NoError(t, err)
	_, err = page.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: second.SessionID, Isolation: "worktree"})
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeTooManySessions, re.Code, re.Message)
	assert.Equal(t, "[sessions] max_worktrees_per_origin", errData(t, re)["config_key"])
	_, err = rd.Client.DiscardSession(ctx, ps.SessionID)
	require.NoError(t, err)
}
