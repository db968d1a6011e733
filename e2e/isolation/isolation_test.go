// Package isolation_test runs isolated sessions through the real daemon with
// the real Claude Code, Codex and Gemini CLIs, each pointed at a vendor-API
// stand-in whose model writes a file with the CLI's own tool in each turn:
// the user's checkout must stay byte for byte as it was, each turn must be
// a commit to review, and the review methods must do what they say on the
// repository.
//
// Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1); see standin.CLI.
package isolation_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// cli is one real CLI, how to point it at a stand-in, and the tool call its
// model makes to write a file in edit mode.
type cli struct {
	id, bin string
	setup   func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any)
	write   func(path, text string) standin.ToolCall
}

var clis = []cli{
	{"claude-code", "claude", func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
		s := standin.NewAnthropic(t, standin.Script{Answer: "DONE"})
		return s, s.ClaudeEnv(home, path), nil
	}, func(p, text string) standin.ToolCall {
		return standin.ToolCall{Name: "Write", Input: map[string]any{"file_path": p, "content": text}}
	}},
	{"codex", "codex", func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
		s := standin.NewOpenAI(t, standin.Script{Answer: "DONE"})
		args, env := s.CodexExtras()
		return s, []string{"NO_COLOR=1"}, map[string]any{"args": args, "env": env}
	}, func(p, text string) standin.ToolCall {
		// Codex's model edits through its shell, in its sandbox.
		return standin.ToolCall{Name: "exec_command", Input: map[string]any{"cmd": "printf '" + text + "' > " + p}}
	}},
	{"gemini", "gemini", func(t *testing.T, home, path string) (*standin.Server, []string, map[string]any) {
		s := standin.NewGemini(t, standin.Script{Answer: "DONE"})
		env, err := s.GeminiSetup(home, path)
		require.NoError(t, err)
		return s, env, map[string]any{"args": []string{"--skip-trust"}}
	}, func(p, text string) standin.ToolCall {
		return standin.ToolCall{Name: "write_file", Input: map[string]any{"file_path": p, "content": text}}
	}},
}

var (
	buildMu sync.Mutex
	cardBin string
)

// card builds ./cmd/card once for the test and its subtests.
func card(t *testing.T) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if _, err := os.Stat(cardBin); cardBin == "" || err != nil {
		cardBin = daemontest.Build(t)
	}
	return cardBin
}

// world is one CLI's daemon (a `card serve` process), its stand-in, and
// the user's repository.
type world struct {
	c      cli
	server *standin.Server
	proc   *daemontest.Process
	opts   daemontest.Options
	repo   string
	events *collected
}

type collected struct {
	mu  sync.Mutex
	evs []api.SessionEvent
}

func (c *collected) add(ev api.SessionEvent) { c.mu.Lock(); c.evs = append(c.evs, ev); c.mu.Unlock() }
func (c *collected) all() []api.SessionEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.evs)
}

func newWorld(t *testing.T, c cli) *world {
	t.Helper()
	bin := standin.CLI(t, c.bin)
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node must be on PATH to run the npm-installed CLIs")
	path := strings.Join([]string{filepath.Dir(bin), filepath.Dir(node), "/usr/local/bin", "/usr/bin", "/bin"}, ":")
	home := t.TempDir()
	server, environ, adapterCfg := c.setup(t, home, path)
	cfg := map[string]any{"login_shell_path": false, "probe_timeout_secs": 90}
	if adapterCfg != nil {
		cfg["adapters"] = map[string]any{c.id: adapterCfg}
	}
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	// The user's project: a repository with a commit, a subdirectory the
	// session starts in, and a change of the user's own not committed.
	repo := filepath.Join(home, "src", "project")
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "app"), 0o755))
	daemontest.Git(t, repo, "init", "--quiet")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("# project\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "app", "main.go"), []byte("package main\n"), 0o644))
	daemontest.Git(t, repo, "add", ".")
	daemontest.Git(t, repo, "commit", "--quiet", "-m", "first")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "app", "scratch.txt"), []byte("the user's own, uncommitted\n"), 0o644))
	w := &world{c: c, server: server, repo: repo, events: &collected{}}
	w.opts = daemontest.Options{Warm: true, Config: buf.String(), Agents: map[string]string{c.id: bin},
		Environ: append([]string{"HOME=" + home, "PATH=" + path, "LANG=C.UTF-8"}, environ...)}
	w.proc = daemontest.Serve(t, card(t), w.opts)
	return w
}

// kill SIGKILLs the daemon and starts a new one on the same home.
func (w *world) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, w.proc.Cmd.Process.Signal(syscall.SIGKILL))
	w.proc.Wait(t, 10*time.Second)
	w.opts.Home = w.proc.Home
	w.proc = daemontest.Serve(t, card(t), w.opts)
}

// turn prompts the session and waits for the turn's terminal event.
func (w *world) turn(t *testing.T, id, task string) []api.SessionEvent {
	t.Helper()
	res, err := w.proc.Client.PromptSession(daemontest.Context(t), api.SessionPromptParams{SessionID: id, Task: task})
	require.NoError(t, err)
	var evs []api.SessionEvent
	require.Eventually(t, func() bool {
		evs = nil
		done := false
		for _, ev := range w.events.all() {
			if ev.SessionID == id && ev.Turn == res.Turn {
				evs = append(evs, ev)
				done = done || client.Terminal(ev.Event)
			}
		}
		return done
	}, 3*time.Minute, 50*time.Millisecond, "turn %d of %s never ended", res.Turn, w.c.id)
	end := evs[len(evs)-1]
	if end.Event.Status != api.StatusSucceeded {
		for _, ev := range evs {
			t.Logf("turn %d event: %s %s %s %s", ev.Turn, ev.Event.Kind, ev.Event.Text, ev.Event.Error, ev.Event.Raw)
		}
	}
	require.Equal(t, api.StatusSucceeded, end.Event.Status, "%s turn %d: %+v", w.c.id, res.Turn, end.Event.Result)
	return evs
}

func paths(files []api.FileChange) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return out
}

// changesOf is the turn's changes event, which must come just before its
// terminal event.
func changesOf(t *testing.T, evs []api.SessionEvent) api.TurnChanges {
	t.Helper()
	require.GreaterOrEqual(t, len(evs), 2)
	ch := evs[len(evs)-2]
	require.Equal(t, api.EventChanges, ch.Event.Kind, "the turn's last event before its end is its changes")
	require.NotNil(t, ch.Event.Changes)
	return *ch.Event.Changes
}

// With each real CLI's own write tool: two turns of an edit session in a
// worktree leave the user's checkout byte for byte as it was; the diff
// shows both files and each turn's one; apply brings them into the
// checkout uncommitted; rewind to turn 1 removes turn 2's file from the
// worktree; discard leaves no worktree and no branch.
func TestEachRealCLIWorksInItsWorktreeAndItsTurnsAreReviewed(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			w := newWorld(t, c)
			ctx := daemontest.Context(t)
			before, status := daemontest.Snapshot(t, w.repo), daemontest.Git(t, w.repo, "status", "--porcelain")
			s, err := w.proc.Client.StartSession(ctx, api.SessionStartParams{
				AgentSettings: api.AgentSettings{ID: c.id, Cwd: filepath.Join(w.repo, "app"), PermissionMode: "edit", Isolation: api.IsolationWorktree, TimeoutSecs: 180},
			})
			require.NoError(t, err)
			wt := s.Worktree
			require.NotNil(t, wt)
			assert.True(t, wt.Uncommitted.Any, "the answer says the checkout had changes")
			assert.Equal(t, []string{"app/scratch.txt"}, wt.Uncommitted.Paths)
			assert.Equal(t, filepath.Join(wt.Path, "app"), wt.Dir)
			_, err = w.proc.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, w.events.add)
			require.NoError(t, err)

			one, two := filepath.Join(wt.Dir, "one.txt"), filepath.Join(wt.Dir, "two.txt")
			w.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.write(one, "turn one\n")}})
			ch1 := changesOf(t, w.turn(t, s.SessionID, "Please write one.txt."))
			// Turn two's conversation holds turn one's tool result: its
			// model makes the second call.
			w.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.write(one, "turn one\n"), c.write(two, "turn two\n")}})
			ch2 := changesOf(t, w.turn(t, s.SessionID, "Now write two.txt."))
			assert.Equal(t, []string{"app/one.txt"}, paths(ch1.Files))
			assert.Equal(t, []string{"app/two.txt"}, paths(ch2.Files))
			assert.NotEmpty(t, ch1.Commit)
			assert.NotEmpty(t, ch2.Commit)

			after := daemontest.Snapshot(t, w.repo)
			assert.Equal(t, before, after, "the user's checkout is byte for byte as it was")
			assert.Equal(t, status, daemontest.Git(t, w.repo, "status", "--porcelain"))
			t.Logf("%s: checkout unchanged after two turns (%d files hashed, .git/index included); status %q", c.id, len(after), status)

			whole, err := w.proc.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
			require.NoError(t, err)
			assert.Equal(t, []string{"app/one.txt", "app/two.txt"}, paths(whole.Files))
			d1, err := w.proc.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, Turn: 1})
			require.NoError(t, err)
			d2, err := w.proc.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID, Turn: 2})
			require.NoError(t, err)
			assert.Equal(t, []string{"app/one.txt"}, paths(d1.Files))
			assert.Equal(t, []string{"app/two.txt"}, paths(d2.Files))
			assert.Contains(t, d2.Patch, "+++ b/app/two.txt\n@@ -0,0 +1 @@\n+turn two\n")
			t.Logf("%s: diff %v; turn 1 %v (commit %s); turn 2 %v (commit %s)", c.id, paths(whole.Files), paths(d1.Files), ch1.Commit[:12],
				paths(d2.Files), ch2.Commit[:12])

			applied, err := w.proc.Client.ApplySession(ctx, s.SessionID)
			require.NoError(t, err)
			assert.Len(t, applied.Files, 2)
			b, err := os.ReadFile(filepath.Join(w.repo, "app", "two.txt"))
			require.NoError(t, err)
			assert.Equal(t, "turn two\n", string(b))
			st := daemontest.Git(t, w.repo, "status", "--porcelain", "--untracked-files=all")
			assert.Equal(t, "?? app/one.txt\n?? app/scratch.txt\n?? app/two.txt\n", st, "in the checkout, uncommitted")
			t.Logf("%s: after apply, git status --porcelain -uall: %q", c.id, st)

			rw, err := w.proc.Client.RewindSession(ctx, s.SessionID, 1)
			require.NoError(t, err)
			assert.Equal(t, []int{2}, rw.DroppedTurns)
			assert.NoFileExists(t, two, "turn 2's file is gone from the worktree")
			assert.FileExists(t, one)

			gone, err := w.proc.Client.DiscardSession(ctx, s.SessionID)
			require.NoError(t, err)
			assert.True(t, gone.Closed)
			assert.NoDirExists(t, wt.Path)
			list := daemontest.Git(t, w.repo, "worktree", "list")
			branches := daemontest.Git(t, w.repo, "branch", "--list", "--all")
			assert.NotContains(t, list, wt.Path)
			assert.Equal(t, 1, strings.Count(list, "\n"), "only the checkout: %s", list)
			assert.NotContains(t, branches, "card/")
			t.Logf("%s: after discard, git worktree list: %q; git branch: %q", c.id, list, branches)
		})
	}
}

// Two isolated sessions of the real Claude Code open on one repository at
// once, each taking a turn: each worktree and each diff holds only its own
// session's file, and the checkout neither.
func TestTwoRealSessionsOnOneRepositoryEachSeeOnlyTheirOwnChanges(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	w := newWorld(t, clis[0])
	ctx := daemontest.Context(t)
	var ss []api.Session
	for range 2 {
		s, err := w.proc.Client.StartSession(ctx, api.SessionStartParams{
			AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: w.repo, PermissionMode: "edit", Isolation: api.IsolationWorktree, TimeoutSecs: 180},
		})
		require.NoError(t, err)
		_, err = w.proc.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, w.events.add)
		require.NoError(t, err)
		ss = append(ss, s)
	}
	// Both open at once; each turn's model writes its session's file (the
	// path naming its worktree) with Claude's Write tool.
	a, b := filepath.Join(ss[0].Worktree.Dir, "a.txt"), filepath.Join(ss[1].Worktree.Dir, "b.txt")
	for i, p := range []string{a, b} {
		w.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{clis[0].write(p, "mine\n")}})
		w.turn(t, ss[i].SessionID, "Write your file.")
	}
	for i, s := range ss {
		d, err := w.proc.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
		require.NoError(t, err)
		mine := []string{"a.txt", "b.txt"}[i]
		assert.Equal(t, []string{mine}, paths(d.Files), "session %d sees only its own change", i+1)
		t.Logf("session %d (%s): diff %v", i+1, s.SessionID, paths(d.Files))
	}
	assert.NoFileExists(t, filepath.Join(w.repo, "a.txt"))
	assert.NoFileExists(t, filepath.Join(w.repo, "b.txt"))
	assert.NoFileExists(t, filepath.Join(ss[0].Worktree.Dir, "b.txt"))
	assert.NoFileExists(t, filepath.Join(ss[1].Worktree.Dir, "a.txt"))
}

// A SIGKILL of the daemon between two turns of the real Claude Code: the
// worktree, its turn and the diff are all there after the restart, and the
// next turn goes on in the same worktree.
func TestARealSessionsWorktreeSurvivesASIGKILLBetweenTurns(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	w := newWorld(t, clis[0])
	ctx := daemontest.Context(t)
	s, err := w.proc.Client.StartSession(ctx, api.SessionStartParams{
		AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: w.repo, PermissionMode: "edit", Isolation: api.IsolationWorktree, TimeoutSecs: 180},
	})
	require.NoError(t, err)
	_, err = w.proc.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, w.events.add)
	require.NoError(t, err)
	one, two := filepath.Join(s.Worktree.Dir, "one.txt"), filepath.Join(s.Worktree.Dir, "two.txt")
	w.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{clis[0].write(one, "one\n")}})
	w.turn(t, s.SessionID, "Write one.txt.")
	before, err := w.proc.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)

	w.kill(t)
	after, err := w.proc.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.Equal(t, before, after, "the worktree, its turn and the diff are there after the restart")
	got, err := w.proc.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, s.Worktree.Path, got.Worktree.Path)

	w.events = &collected{}
	_, err = w.proc.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID, AfterSeq: got.NextSeq - 1}, w.events.add)
	require.NoError(t, err)
	w.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{clis[0].write(one, "one\n"), clis[0].write(two, "two\n")}})
	w.turn(t, s.SessionID, "Now write two.txt.")
	whole, err := w.proc.Client.SessionDiff(ctx, api.SessionDiffParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.Equal(t, []string{"one.txt", "two.txt"}, paths(whole.Files))
	require.Len(t, whole.Turns, 2)
	t.Logf("after the SIGKILL: diff %v, turns %d and %d (commits %s, %s)", paths(whole.Files), whole.Turns[0].Turn, whole.Turns[1].Turn,
		whole.Turns[0].Commit[:12], whole.Turns[1].Commit[:12])
}
