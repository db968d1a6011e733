package daemon_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// flagValue is the argument after flag in args, "" when flag is absent.
func flagValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func TestAConfiguredModeModelAndEffortHoldFromTheNextTurnAndTheConversationGoesOn(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	one, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn one"})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 10*time.Second)
	waitSessionIdle(t, rd.Client, s.SessionID)

	res, err := rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "edit", Model: "opus", Effort: "high"})
	require.NoError(t, err)
	assert.Equal(t, []string{"permission_mode", "model", "effort"}, res.Changed)
	assert.Equal(t, 2, res.AppliesFromTurn)
	assert.Zero(t, res.RunningTurn)
	assert.Equal(t, "edit", res.Session.PermissionMode)
	assert.Equal(t, "opus", res.Session.Model)
	assert.Equal(t, "high", res.Session.Effort)

	two, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn two"})
	require.NoError(t, err)
	evs.waitEnds(t, 2, 10*time.Second)
	args1, _ := rd.agents["claude-code"].Received(t, one.RunID)
	args2, _ := rd.agents["claude-code"].Received(t, two.RunID)
	assert.Equal(t, "dontAsk", flagValue(args1, "--permission-mode"))
	assert.Empty(t, flagValue(args1, "--model"))
	assert.Equal(t, "acceptEdits", flagValue(args2, "--permission-mode"))
	assert.Equal(t, "opus", flagValue(args2, "--model"))
	assert.Equal(t, "high", flagValue(args2, "--effort"))
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", flagValue(args2, "--resume"), "the conversation did not go on: %v", args2)
	run, err := rd.Client.Run(ctx, two.RunID)
	require.NoError(t, err)
	assert.Equal(t, "edit", run.PermissionMode)

	// "default" hands the model back to the CLI; the mode stays.
	res, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, Model: "default"})
	require.NoError(t, err)
	assert.Equal(t, []string{"model"}, res.Changed)
	three, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn three"})
	require.NoError(t, err)
	evs.waitEnds(t, 3, 10*time.Second)
	args3, _ := rd.agents["claude-code"].Received(t, three.RunID)
	assert.NotContains(t, args3, "--model")
	assert.Equal(t, "acceptEdits", flagValue(args3, "--permission-mode"))

	// The same values again change nothing.
	res, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "edit"})
	require.NoError(t, err)
	assert.Empty(t, res.Changed)
	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, "edit", got.PermissionMode)
	assert.Empty(t, got.Model)
	assert.Equal(t, "high", got.Effort)
}

func TestAConfigureTheSessionCouldNotHaveStartedWithIsRefusedNamingWhy(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	root, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: "/"}})
	require.NoError(t, err, "read_only may run at the root")
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	closed, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	_, err = rd.Client.CloseSession(ctx, closed.SessionID)
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		p     map[string]any
		code  int64
		field string
	}{
		{"nothing to change", map[string]any{"session_id": s.SessionID}, rpcclient.CodeInvalidParams, "permission_mode"},
		{"an unknown mode", map[string]any{"session_id": s.SessionID, "permission_mode": "god"}, rpcclient.CodeInvalidParams, "permission_mode"},
		{"a model that reads as a flag", map[string]any{"session_id": s.SessionID, "model": "--dangerously"}, rpcclient.CodeInvalidParams, "model"},
		{"an effort the CLI does not take", map[string]any{"session_id": s.SessionID, "effort": "huge"}, rpcclient.CodeInvalidParams, "effort"},
		{"no session id", map[string]any{"model": "opus"}, rpcclient.CodeInvalidParams, "session_id"},
		{"edit at the root", map[string]any{"session_id": root.SessionID, "permission_mode": "edit"}, rpcclient.CodeInvalidParams, "cwd"},
		{"bypass without allow_bypass", map[string]any{"session_id": s.SessionID, "permission_mode": "bypass"}, daemon.CodeBypassNotAllowed, ""},
		{"an unknown session", map[string]any{"session_id": "ses_nope", "model": "opus"}, daemon.CodeSessionNotFound, ""},
		{"a closed session", map[string]any{"session_id": closed.SessionID, "model": "opus"}, daemon.CodeSessionClosed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rd.Client.Call(ctx, "sessions.configure", tc.p, nil)
			re := rpcCode(t, err)
			require.Equal(t, tc.code, re.Code, re.Message)
			if tc.field != "" {
				assert.Equal(t, tc.field, errData(t, re)["field"], re.Message)
			}
		})
	}
	// Nothing refused was recorded.
	for _, id := range []string{root.SessionID, s.SessionID} {
		got, err := rd.Client.Session(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "read_only", got.PermissionMode)
		assert.Empty(t, got.Model)
		assert.Empty(t, got.Effort)
	}
}

// A connection that could not start an edit or bypass session cannot turn
// a read-only one into it either.
func TestAConfigureNeedsTheAccessClassStartingInTheNewModeNeeds(t *testing.T) {
	ad := startAskDaemon(t, modesConfig)
	ctx := daemontest.Context(t)
	var asked atomic.Int32
	page := pageClient(t, ad.Daemon, appOrigin, &asked)
	writer := pageClient(t, ad.Daemon, writerOrigin, &asked)
	s, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: ad.cwd}})
	require.NoError(t, err)
	for _, tc := range []struct {
		mode, need string
	}{{"edit", "write"}, {"ask", "write"}, {"bypass", "host"}} {
		_, err := page.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: tc.mode})
		re := rpcCode(t, err)
		require.Equal(t, daemon.CodeAccessDenied, re.Code, tc.mode)
		assert.Equal(t, tc.need, errData(t, re)["access"], tc.mode)
		assert.Equal(t, "permission_mode", errData(t, re)["param"], tc.mode)
	}
	// Another origin may not change the page's session at all, whatever
	// it is granted: the session is the page's.
	_, err = writer.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "edit"})
	assert.Equal(t, daemon.CodeNotSessionOwner, rpcCode(t, err).Code)
	// On a session of its own, write does not reach bypass, and reaches
	// edit.
	own, err := writer.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: ad.cwd}})
	require.NoError(t, err)
	_, err = writer.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: own.SessionID, PermissionMode: "bypass"})
	assert.Equal(t, "host", errData(t, rpcCode(t, err))["access"], "write does not reach bypass")
	res, err := writer.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: own.SessionID, PermissionMode: "edit"})
	require.NoError(t, err)
	assert.Equal(t, "edit", res.Session.PermissionMode)
	// A native client, the user's own program, may change any session: it
	// makes the page's edit.
	res, err = ad.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "edit"})
	require.NoError(t, err)
	assert.Equal(t, "edit", res.Session.PermissionMode)
	// Now the session's turns need write, so the page's prompt is refused.
	_, err = page.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "hi"})
	assert.Equal(t, daemon.CodeAccessDenied, rpcCode(t, err).Code)
	res, err = page.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, Model: "opus"})
	if assert.Error(t, err, "a model change keeps the session edit, which the page may not run") {
		assert.Equal(t, "write", errData(t, rpcCode(t, err))["access"])
	}
	_ = res
}

// The change is recorded with the session: a daemon restarted after it
// runs the next turn with it.
func TestAConfiguredSessionKeepsItsSettingsAcrossARestart(t *testing.T) {
	bin := daemontest.Build(t)
	agents, pins := replayAgents(t)
	opts := daemontest.Options{Config: "login_shell_path = false\n", Agents: pins}
	first := daemontest.Serve(t, bin, opts)
	ctx := daemontest.Context(t)
	s, err := first.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: t.TempDir()}})
	require.NoError(t, err)
	_, err = first.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "edit", Model: "opus"})
	require.NoError(t, err)
	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	first.Wait(t, 10*time.Second)
	opts.Home = first.Home
	second := daemontest.Serve(t, bin, opts)

	got, err := second.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, "edit", got.PermissionMode)
	assert.Equal(t, "opus", got.Model)
	evs := &sessionEvents{}
	_, err = second.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	one, err := second.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn one"})
	require.NoError(t, err)
	all := evs.waitEnds(t, 1, 10*time.Second)
	gapFree(t, all, 0)
	changes, _ := configuredEvents(all)
	assert.Equal(t, []string{`turn 0, no run: [permission_mode model] → mode edit model "opus" effort "" from turn 1`}, changes,
		"the change before the restart is the stream's first event, and the turn follows it")
	args, _ := agents["claude-code"].Received(t, one.RunID)
	assert.Equal(t, "acceptEdits", flagValue(args, "--permission-mode"))
	assert.Equal(t, "opus", flagValue(args, "--model"))
}

// Gemini's ask channel is an ACP session card cannot load in a new process:
// a change into ask once a Gemini conversation is under way would strand it,
// so it is refused at once, and the conversation goes on as it was.
func TestAChangeAfterWhichTheConversationCouldNotGoOnIsRefused(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "gemini", Cwd: rd.cwd, PermissionMode: "edit"}})
	require.NoError(t, err)
	// Before any turn there is no conversation to strand.
	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "ask"})
	require.NoError(t, err)
	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "edit"})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn one"})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 10*time.Second)
	waitSessionIdle(t, rd.Client, s.SessionID)
	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	require.NotEmpty(t, got.AgentSessionID, "the fake Gemini reported its session")

	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "ask"})
	re := rpcCode(t, err)
	require.Equal(t, rpcclient.CodeInvalidParams, re.Code)
	assert.Equal(t, "permission_mode", errData(t, re)["field"])
	assert.Contains(t, re.Message, "could not go on")
	t.Logf("gemini edit → ask after a turn: %s", re.Message)
	got, err = rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, "edit", got.PermissionMode)
}

// configuredEvents are the session_configured events of evs, as
// "seq turn run? changed…" lines, and every event's seq in order.
func configuredEvents(evs []api.SessionEvent) (lines []string, seqs []int64) {
	for _, ev := range evs {
		seqs = append(seqs, ev.Seq)
		if ev.Event.Kind != api.EventSessionConfigured || ev.Event.Configured == nil {
			continue
		}
		c := ev.Event.Configured
		run := "no run"
		if ev.Event.RunID != "" {
			run = "on the turn's run"
		}
		lines = append(lines, fmt.Sprintf("turn %d, %s: %v → mode %s model %q effort %q from turn %d", ev.Turn, run, c.Changed,
			c.PermissionMode, c.Model, c.Effort, c.AppliesFromTurn))
	}
	return lines, seqs
}

// Every client following a session hears its settings change, in the
// session's seq: between turns as an event of no run, during a turn on
// that turn's stream; a later subscriber, and one of the closed session,
// get the same history.
func TestEveryChangeOfASessionsSettingsIsAnEventOfItsStreamInSeqOrder(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	_, err := rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "edit"})
	require.NoError(t, err)
	one, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "SLEEP"})
	require.NoError(t, err)
	require.NotEmpty(t, one.RunID, "the turn runs (its fake agent sleeps)")
	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, Model: "opus"})
	require.NoError(t, err)
	_, err = rd.Client.CancelTurn(ctx, api.SessionCancelParams{SessionID: s.SessionID})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 10*time.Second)
	require.Eventually(t, func() bool {
		g, err := rd.Client.Session(ctx, s.SessionID)
		return err == nil && g.State == api.SessionIdle
	}, 5*time.Second, time.Millisecond)
	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, Effort: "high"})
	require.NoError(t, err)
	// The same value again is no change, and no event.
	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, Effort: "high"})
	require.NoError(t, err)

	want := []string{
		`turn 0, no run: [permission_mode] → mode edit model "" effort "" from turn 1`,
		`turn 1, on the turn's run: [model] → mode edit model "opus" effort "" from turn 2`,
		`turn 1, no run: [effort] → mode edit model "opus" effort "high" from turn 2`,
	}
	require.Eventually(t, func() bool { got, _ := configuredEvents(evs.all()); return len(got) == 3 }, 5*time.Second, 5*time.Millisecond)
	live, liveSeqs := configuredEvents(evs.all())
	assert.Equal(t, want, live)
	gapFree(t, evs.all(), 0)
	g, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, int64(len(liveSeqs)+1), g.NextSeq)

	replay := func() ([]string, []int64) {
		later := &sessionEvents{}
		_, err := rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, later.add)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(later.all()) == len(liveSeqs) }, 5*time.Second, 5*time.Millisecond)
		return configuredEvents(later.all())
	}
	got, seqs := replay()
	assert.Equal(t, want, got, "a later subscriber")
	assert.Equal(t, liveSeqs, seqs)
	_, err = rd.Client.CloseSession(ctx, s.SessionID)
	require.NoError(t, err)
	got, seqs = replay()
	assert.Equal(t, want, got, "the closed session's history, from the store")
	assert.Equal(t, liveSeqs, seqs)
}

// A session's adapter may change before its first turn, and only then:
// the new CLI starts the conversation, and once a turn has run another CLI
// could not carry it. The change is heard by every subscriber.
func TestASessionsAdapterChangesBeforeItsFirstTurnAndNotAfter(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	res, err := rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, ID: "codex"})
	require.NoError(t, err)
	assert.Equal(t, []string{"id"}, res.Changed)
	assert.Equal(t, "codex", res.Session.Adapter)
	one, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "first"})
	require.NoError(t, err)
	all := evs.waitEnds(t, 1, 20*time.Second)
	rd.agents["codex"].Received(t, one.RunID) // the turn ran codex
	var heard *api.SessionConfigured
	for _, ev := range all {
		if ev.Event.Configured != nil {
			heard = ev.Event.Configured
		}
	}
	require.NotNil(t, heard)
	assert.Equal(t, "codex", heard.Adapter)

	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, ID: "claude-code"})
	re := rpcCode(t, err)
	assert.Equal(t, int64(-32602), re.Code)
	assert.Equal(t, "id", errData(t, re)["field"])
	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, "codex", got.Adapter)
	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, ID: "no-such-agent"})
	assert.Error(t, err)
}
