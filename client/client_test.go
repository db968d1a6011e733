package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	homedir "github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/rpc/rpcclient"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// startDaemon is a daemon whose Claude Code replays a real captured stream.
func startDaemon(t *testing.T, opts daemontest.Options) *daemontest.Daemon {
	t.Helper()
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", daemontest.RepoFile(t, "spawn/testdata/claude-stream-success.jsonl"))
	opts.Config = "login_shell_path = false\n"
	opts.Agents = map[string]string{agent.ClaudeCode: claude.Path}
	return daemontest.Start(t, opts)
}

// A method the daemon registers and the typed client lacks would send Go
// programs back to strings and maps; every one must have its typed call,
// and each must reach the daemon and decode its answer.
func TestEveryMethodTheDaemonRegistersHasATypedCallThatWorks(t *testing.T) {
	d := startDaemon(t, daemontest.Options{})
	c := d.Client
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	file := filepath.Join(dir, "note.txt")
	var runID, sessionID string
	turnEnded := make(chan struct{}, 1)
	calls := []struct {
		method string
		call   func() error
	}{
		{"daemon.info", func() error { i, err := c.Info(ctx); assert.Equal(t, d.Home, i.Home); return err }},
		{"rpc.discover", func() error { doc, err := c.Discover(ctx); assert.NotEmpty(t, doc.Methods); return err }},
		{"agents.detect", func() error {
			s, err := c.Detect(ctx, api.DetectParams{Refresh: true})
			assert.NotEmpty(t, s)
			return err
		}},
		{"agents.list_external", func() error { _, err := c.ListExternal(ctx, api.DetectParams{}); return err }},
		{"agents.detect_external", func() error { _, err := c.DetectExternal(ctx, api.DetectParams{}); return err }},
		{"agents.health_external", func() error {
			h, err := c.Health(ctx, agent.ClaudeCode, false)
			assert.Equal(t, agent.ClaudeCode, h.ID)
			all, aerr := c.HealthAll(ctx, false)
			specs, derr := c.Detect(ctx, api.DetectParams{})
			assert.Len(t, all, len(specs), "one answer per detected adapter")
			aerr = errors.Join(aerr, derr)
			return errors.Join(err, aerr)
		}},
		{"agents.invoke", func() error {
			res, err := c.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: dir}, Task: "say pong"})
			assert.Equal(t, api.StatusSucceeded, res.Status)
			runID = res.RunID
			return err
		}},
		{"agents.invoke_external", func() error {
			res, err := c.InvokeExternal(ctx, api.ExternalInvokeParams{ID: agent.ClaudeCode, Task: "say pong", Cwd: dir, SessionID: "chat-abc123"})
			assert.Equal(t, "chat-abc123", res.SessionID)
			return err
		}},
		{"agents.chat.cancel", func() error {
			r, err := c.ChatCancel(ctx, "chat-abc123")
			assert.False(t, r.Cancelled, "its run has ended")
			return err
		}},
		{"session.auth", func() error { r, err := c.SessionAuth(ctx, d.Token); assert.True(t, r.OK); return err }},
		{"server.handshake", func() error {
			r, err := c.Handshake(ctx, api.HandshakeParams{})
			assert.Equal(t, daemon.ProtocolVersion, r.ProtocolVersion)
			return err
		}},
		{"agents.cancel", func() error { r, err := c.Cancel(ctx, runID); assert.False(t, r.Cancelled); return err }},
		{"agents.approval_decide", func() error {
			// The run did not ask: the daemon answers, with its code for that.
			_, err := c.ApprovalDecide(ctx, api.DecideParams{RunID: runID, RequestID: "apr_1", Decision: "allow"})
			var re *rpcclient.Error
			if assert.ErrorAs(t, err, &re) {
				assert.Equal(t, daemon.CodeApprovalNotFound, re.Code)
			}
			return nil
		}},
		{"runs.list", func() error {
			r, err := c.Runs(ctx, api.ListParams{})
			assert.Len(t, r, 2, "invoke and invoke_external")
			return err
		}},
		{"usage.summary", func() error {
			r, err := c.UsageSummary(ctx, api.UsageParams{})
			assert.Equal(t, int64(2), r.Totals.Runs, "invoke and invoke_external, both today")
			return err
		}},
		{"runs.get", func() error { r, err := c.Run(ctx, runID); assert.Equal(t, runID, r.RunID); return err }},
		{"runs.subscribe", func() error {
			ended := make(chan struct{})
			_, err := c.Subscribe(ctx, runID, 0, func(ev api.AgentEvent) {
				if client.Terminal(ev) {
					close(ended)
				}
			})
			if err == nil {
				<-ended
			}
			return err
		}},
		{"runs.prune", func() error {
			two := 2
			r, err := c.Prune(ctx, api.PruneParams{DryRun: true, MaxRuns: &two})
			assert.Equal(t, api.PruneResult{Pruned: api.Pruned{Kept: 2}, DryRun: true, MaxRuns: 2, MaxAgeDays: 30}, r)
			return err
		}},
		{"substrate.info", func() error { i, err := c.SubstrateInfo(ctx); assert.True(t, i.Local); return err }},
		{"substrate.write_text", func() error {
			_, err := c.SubstrateWriteText(ctx, api.WriteTextParams{Path: file, Content: "hi"})
			return err
		}},
		{"substrate.read_text", func() error { s, err := c.SubstrateReadText(ctx, file); assert.Equal(t, "hi", s); return err }},
		{"substrate.write_bytes", func() error { _, err := c.SubstrateWriteBytes(ctx, file, []byte{0, 1, 2}); return err }},
		{"substrate.read_bytes", func() error {
			b, err := c.SubstrateReadBytes(ctx, api.ReadBytesParams{Path: file, Offset: 1})
			assert.Equal(t, []byte{1, 2}, b)
			return err
		}},
		{"substrate.path_state", func() error { _, err := c.SubstratePathState(ctx, file); return err }},
		{"substrate.run_command", func() error {
			r, err := c.SubstrateRunCommand(ctx, "echo hello", 5*time.Second)
			assert.Equal(t, "hello\n", r.Stdout)
			return err
		}},
		{"substrate.pty_start", nil}, {"substrate.pty_input", nil}, {"substrate.pty_read", nil}, {"substrate.pty_resize", nil},
		{"substrate.pty_kill", func() error {
			pid, err := c.SubstratePTYStart(ctx, "cat")
			if err != nil {
				return err
			}
			require.NoError(t, c.SubstratePTYInput(ctx, pid, "hi\n"))
			require.NoError(t, c.SubstratePTYResize(ctx, pid, 40, 120))
			_, err = c.SubstratePTYRead(ctx, pid)
			return errors.Join(err, c.SubstratePTYKill(ctx, pid))
		}},
		{"sessions.start", func() error {
			s, err := c.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: dir}})
			sessionID = s.SessionID
			return err
		}},
		{"sessions.subscribe", func() error {
			_, err := c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: sessionID}, func(ev api.SessionEvent) {
				if client.Terminal(ev.Event) {
					select {
					case turnEnded <- struct{}{}:
					default:
					}
				}
			})
			return err
		}},
		{"sessions.prompt", func() error {
			r, err := c.PromptSession(ctx, api.SessionPromptParams{SessionID: sessionID, Task: "say pong"})
			assert.Equal(t, 1, r.Turn)
			if err == nil {
				<-turnEnded
			}
			return err
		}},
		{"sessions.configure", func() error {
			res, err := c.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: sessionID, Model: "claude-opus-4-8"})
			if err == nil {
				assert.Equal(t, "claude-opus-4-8", res.Session.Model)
				assert.Equal(t, []string{"model"}, res.Changed)
			}
			return err
		}},
		{"sessions.steer", func() error {
			_, err := c.SteerSession(ctx, api.SessionSteerParams{SessionID: sessionID, Task: "more"})
			var re *rpcclient.Error
			if assert.ErrorAs(t, err, &re) {
				assert.Equal(t, daemon.CodeSteerUnsupported, re.Code)
			}
			return nil
		}},
		{"sessions.cancel", func() error {
			r, err := c.CancelTurn(ctx, api.SessionCancelParams{SessionID: sessionID})
			assert.False(t, r.Cancelled, "no turn runs")
			return err
		}},
		{"sessions.get", func() error { s, err := c.Session(ctx, sessionID); assert.Equal(t, 1, s.Turns); return err }},
		{"sessions.list", func() error {
			l, err := c.Sessions(ctx, api.SessionListParams{})
			assert.Len(t, l.Sessions, 1)
			return err
		}},
		{"sessions.release", func() error {
			r, err := c.ReleaseSession(ctx, sessionID)
			assert.Equal(t, sessionID, r.Session.SessionID)
			assert.NotEqual(t, api.SessionClosed, r.Session.State, "a released session stays open")
			return err
		}},
		{"sessions.close", func() error {
			s, err := c.CloseSession(ctx, sessionID)
			assert.Equal(t, api.SessionClosed, s.State)
			return err
		}},
		{"sessions.diff", func() error {
			repo := daemontest.GitRepo(t, "typed")
			s, err := c.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: repo, Isolation: api.IsolationWorktree}})
			if err != nil {
				return err
			}
			sessionID = s.SessionID
			d, err := c.SessionDiff(ctx, api.SessionDiffParams{SessionID: sessionID})
			assert.Empty(t, d.Files, "no turn yet")
			return err
		}},
		{"sessions.apply", func() error { a, err := c.ApplySession(ctx, sessionID); assert.Empty(t, a.Files); return err }},
		{"sessions.rewind", func() error {
			r, err := c.RewindSession(ctx, sessionID, 0)
			assert.Empty(t, r.DroppedTurns)
			return err
		}},
		{"sessions.discard", func() error {
			r, err := c.DiscardSession(ctx, sessionID)
			assert.True(t, r.Closed)
			return err
		}},
	}
	var covered []string
	for _, tc := range calls {
		covered = append(covered, tc.method)
		if tc.call != nil {
			require.NoError(t, tc.call(), tc.method)
		}
	}
	var registered []string
	for _, m := range d.Registry().Methods() {
		if m.AliasOf == "" {
			registered = append(registered, m.Name)
		}
	}
	sort.Strings(covered)
	sort.Strings(registered)
	assert.Equal(t, registered, covered, "the daemon's methods and the typed client's")
}

// The daemon sends a streamed run's events right behind the answer that
// names the run: Stream must hand every one of them to its handler, in
// order, however fast they come. Repeated, because the race it guards
// against is lost only sometimes.
func TestStreamDeliversEveryEventOfItsRunInOrder(t *testing.T) {
	all := daemontest.NewEvents()
	d := startDaemon(t, daemontest.Options{Client: client.Options{OnEvent: all.Add}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 10; i++ {
		got := make(chan api.AgentEvent, 64)
		acc, err := d.Client.Stream(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: t.TempDir()}, Task: "say pong"}, func(ev api.AgentEvent) { got <- ev })
		require.NoError(t, err)
		want := all.WaitEnd(t, acc.RunID, 30*time.Second)
		for j, w := range want {
			select {
			case ev := <-got:
				assert.Equal(t, int64(j+1), ev.Seq)
				assert.Equal(t, w.Kind, ev.Kind)
			case <-time.After(5 * time.Second):
				t.Fatalf("run %d: the handler got %d of %d events", i, j, len(want))
			}
		}
		assert.Empty(t, got, "nothing after the terminal event")
	}
}

func TestSubscribeReplaysOnlyTheEventsAfterTheSeqItIsGiven(t *testing.T) {
	d := startDaemon(t, daemontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: t.TempDir()}, Task: "say pong"})
	require.NoError(t, err)
	got := daemontest.NewEvents()
	sub, err := d.Dial(t, client.Options{}).Subscribe(ctx, res.RunID, 2, got.Add)
	require.NoError(t, err)
	assert.False(t, sub.Live)
	evs := got.WaitEnd(t, res.RunID, 10*time.Second)
	require.NotEmpty(t, evs)
	assert.Equal(t, int64(3), evs[0].Seq, "replay starts after seq 2")
}

func TestDialFindsTheDaemonThroughItsHome(t *testing.T) {
	d := startDaemon(t, daemontest.Options{NoClient: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Home: d.Home})
	require.NoError(t, err)
	defer c.Close()
	info, err := c.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, d.URL, info.URL)
}

func TestDialSaysWhenNoDaemonRunsForTheHome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	home := t.TempDir()
	_, err := client.Dial(ctx, client.Options{Home: home})
	var nd *client.NoDaemonError
	require.ErrorAs(t, err, &nd)
	assert.Zero(t, nd.PID)
	assert.Contains(t, err.Error(), "start it with `card serve --home "+home+"`", "the home in use, which is not the default")

	// A daemon.json left by a daemon that is gone names its pid.
	require.NoError(t, os.WriteFile(filepath.Join(home, homedir.DiscoveryFileName),
		[]byte(`{"url":"ws://127.0.0.1:1/rpc","pid":4242}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(home, homedir.TokenFileName), []byte(strings.Repeat("0", 64)+"\n"), 0o600))
	_, err = client.Dial(ctx, client.Options{Home: home})
	require.ErrorAs(t, err, &nd)
	assert.Equal(t, 4242, nd.PID)
	assert.Equal(t, home, nd.Home)
}

// OnApprove answers the questions of the connection's ask-mode runs, and
// Run reads their decisions back.
func TestOnApproveAnswersTheQuestionsOfAnAskModeRun(t *testing.T) {
	var mu sync.Mutex
	var asked []api.ApproveParams
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
		Client: client.Options{OnApprove: func(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
			mu.Lock()
			asked = append(asked, q)
			mu.Unlock()
			return api.ApproveAnswer{Decision: "deny", Message: "not now"}, nil
		}},
	})
	dir := t.TempDir()
	res, err := d.Client.Invoke(daemontest.Context(t), api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: dir, PermissionMode: "ask"},
		Task:          `TOOL Bash {"command":"echo hi > f.txt"}`,
	})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, asked, 1)
	assert.Equal(t, "Bash", asked[0].Tool.Name)
	assert.Contains(t, res.Answer, "not now")
	assert.NoFileExists(t, filepath.Join(dir, "f.txt"))
	rec, err := d.Client.Run(daemontest.Context(t), res.RunID)
	require.NoError(t, err)
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "deny", rec.Approvals[0].Decision)
}

func TestTheStartCommandNamesTheHomeOnlyWhenItIsNotTheDefault(t *testing.T) {
	t.Setenv("CARD_HOME", "/srv/card")
	assert.Equal(t, "card serve", client.ServeCommand("/srv/card"))
	assert.Equal(t, "card serve --home /tmp/other", client.ServeCommand("/tmp/other"))
	assert.Equal(t, "card serve --home '/tmp/my card'", client.ServeCommand("/tmp/my card"))
}
