package daemon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// liveClaude is a daemon whose Claude Code replays capture (a task naming
// LINGER then keeps it alive, like the real CLI still retrying).
func liveClaude(t *testing.T, capture, toml string) (*daemontest.Daemon, *daemontest.Events, daemontest.Replay) {
	t.Helper()
	fake := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", daemontest.RepoFile(t, capture))
	evs := daemontest.NewEvents()
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n" + toml,
		Agents: map[string]string{agent.ClaudeCode: fake.Path},
		Client: client.Options{OnEvent: evs.Add},
	})
	return d, evs, fake
}

func TestARefusedKeyEndsTheRunWithKindAuthWithinFiveSeconds(t *testing.T) {
	d, evs, _ := liveClaude(t, "spawn/testdata/claude-stream-401-retrying.jsonl", "")
	start := time.Now()
	acc, err := d.Client.Stream(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: t.TempDir()}, Task: "LINGER"}, nil)
	require.NoError(t, err)
	got := evs.WaitEnd(t, acc.RunID, 10*time.Second)
	took := time.Since(start)
	last := got[len(got)-1]
	require.Equal(t, api.EventRunError, last.Kind, daemontest.Kinds(got))
	assert.Equal(t, api.StatusFailed, last.Status)
	require.NotNil(t, last.Result.Error)
	assert.Equal(t, api.KindAuth, last.Result.Error.Kind)
	assert.Contains(t, last.Result.Error.Message, "authentication_failed (HTTP 401)")
	assert.Less(t, took, 5*time.Second, "the second 401 ends the run, not Claude's tenth retry")
	var retry *api.AgentEvent
	for i := range got {
		if got[i].Kind == api.EventRetry {
			retry = &got[i]
			break
		}
	}
	require.NotNil(t, retry, daemontest.Kinds(got))
	assert.Equal(t, 1, retry.Attempt)
	assert.Equal(t, 1, retry.MaxAttempts, "a refused key's own bound of one retry")
	var retries int
	for _, e := range got {
		if e.Kind == api.EventRetry {
			retries++
		}
	}
	assert.Equal(t, 1, retries, "the refusal that ends the run is not sent as a retry")
	assert.EqualValues(t, 508, retry.DelayMs)
	waitNoProcesses(t, acc.RunID, 5*time.Second)
}

// The captured partial-message stream through the daemon: every text event
// a piece, and the pieces joined are the answer, once.
func TestClaudesTextReachesTheClientAsPiecesThatJoinToTheAnswer(t *testing.T) {
	d, evs, _ := liveClaude(t, "spawn/testdata/claude-stream-partial-thinking-tool.jsonl", "")
	acc, err := d.Client.Stream(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: t.TempDir()}, Task: "say hello"}, nil)
	require.NoError(t, err)
	got := evs.WaitEnd(t, acc.RunID, 10*time.Second)
	last := got[len(got)-1]
	require.Equal(t, api.EventDone, last.Kind, daemontest.Kinds(got))
	var text, thinking strings.Builder
	for _, ev := range got {
		switch ev.Kind {
		case api.EventText:
			assert.True(t, ev.Delta, "seq %d", ev.Seq)
			text.WriteString(ev.Text)
		case api.EventThinking:
			thinking.WriteString(ev.Text)
		}
	}
	assert.Equal(t, last.Result.Answer, text.String())
	assert.Equal(t, "The README says hello.", text.String())
	assert.NotEmpty(t, thinking.String())
}

func TestTheRetryBoundReachesTheAgentFromTheRequestOrCardToml(t *testing.T) {
	d, _, fake := liveClaude(t, "spawn/testdata/claude-stream-success.jsonl", "max_api_retries = 5\n")
	cwd := t.TempDir()
	one := 1
	for _, c := range []struct {
		retries *int
		want    string
	}{{nil, "5"}, {&one, "1"}} {
		res, err := d.Client.Invoke(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: cwd, MaxAPIRetries: c.retries}, Task: "say pong"})
		require.NoError(t, err)
		require.Equal(t, api.StatusSucceeded, res.Status)
		assert.Equal(t, c.want, fake.ChildEnv(t, res.RunID)["CLAUDE_CODE_MAX_RETRIES"])
	}

	for _, n := range []int{-1, 11} {
		_, err := d.Client.Invoke(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: cwd, MaxAPIRetries: &n}, Task: "say pong"})
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
		assert.Equal(t, "max_api_retries", errData(t, re)["field"])
		assert.Contains(t, re.Message, "between 0 and 10")
	}
}

// An agent that goes silent (here: it printed its init and then sleeps, as
// Claude Code does waiting on an API that never answers) is shown stalled by
// runs.get, gets one stalled event, and is ended with kind stalled, its
// processes gone, under the request's watchdog; card.toml's keys apply when
// the request names none.
func TestASilentAgentIsStalledThenEndedWithKindStalled(t *testing.T) {
	d, evs, _ := liveClaude(t, "spawn/testdata/claude-stream-partial.jsonl", "stall_secs = 1\nstall_kill_secs = 3\n")
	acc, err := d.Client.Stream(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: t.TempDir()}, Task: "LINGER"}, nil)
	require.NoError(t, err)
	var seen []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		rec, err := d.Client.Run(daemontest.Context(t), acc.RunID)
		require.NoError(t, err)
		if rec.Status != api.StatusRunning {
			assert.Empty(t, rec.State, "an ended run has no state")
			break
		}
		if s := string(rec.State); len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.Contains(t, seen, "stalled", "runs.get showed %v", seen)
	got := evs.WaitEnd(t, acc.RunID, 10*time.Second)
	last := got[len(got)-1]
	require.Equal(t, api.EventRunError, last.Kind, daemontest.Kinds(got))
	require.NotNil(t, last.Result.Error)
	assert.Equal(t, api.KindStalled, last.Result.Error.Kind)
	assert.Contains(t, last.Result.Error.Message, "stall_kill_secs = 3")
	var stalled []api.AgentEvent
	for _, ev := range got {
		if ev.Kind == api.EventStalled {
			stalled = append(stalled, ev)
		}
	}
	require.Len(t, stalled, 1, daemontest.Kinds(got))
	assert.EqualValues(t, 3000, stalled[0].KillAfterMs)
	assert.GreaterOrEqual(t, stalled[0].QuietMs, int64(1000))
	waitNoProcesses(t, acc.RunID, 5*time.Second)
}

func TestWatchdogRequestFieldsThatMeanNothingAreRefusedNamingTheField(t *testing.T) {
	d, _, _ := liveClaude(t, "spawn/testdata/claude-stream-success.jsonl", "stall_kill_secs = 600\n")
	n := func(v int) *int { return &v }
	for _, c := range []struct {
		stall, kill *int
		field       string
	}{
		{n(0), nil, "stall_secs"}, {n(-1), nil, "stall_secs"}, {n(3601), nil, "stall_secs"},
		{nil, n(-3), "stall_kill_secs"}, {n(10), n(10), "stall_kill_secs"}, {n(10), n(99999), "stall_kill_secs"},
		// card.toml's kill of 600 s is not more than this request's warning.
		{n(900), nil, "stall_kill_secs"},
	} {
		_, err := d.Client.Invoke(daemontest.Context(t), api.InvokeParams{
			AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: t.TempDir(), StallSecs: c.stall, StallKillSecs: c.kill},
			Task:          "say pong",
		})
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
		assert.Equal(t, c.field, errData(t, re)["field"])
	}
	// CAR's invoke checks them the same.
	_, err := d.Client.InvokeExternal(daemontest.Context(t), api.ExternalInvokeParams{ID: agent.ClaudeCode, Task: "say pong",
		Cwd: t.TempDir(), StallSecs: n(5), StallKillSecs: n(5)})
	re := rpcCode(t, err)
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
	assert.Equal(t, "stall_kill_secs", errData(t, re)["field"])
	res, err := d.Client.Invoke(daemontest.Context(t), api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: t.TempDir(), StallSecs: n(900), StallKillSecs: n(0)},
		Task:          "say pong",
	})
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, res.Status)
}
