package copilotdroidpi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/rpc/rpcclient"
)

// The real Pi reports each model call's usage as it ends (message_end),
// so card holds max_tokens while the run goes on: against a stand-in whose
// model asks for three file reads at 700 tokens a call, a cap of 1000 is
// passed by the second call, and card ends the agent there, long before
// its answer, with kind budget and the usage recorded.
func TestARealPiRunIsStoppedMidRunByItsTokenCap(t *testing.T) {
	tokenCapRun(t, agent.Pi, "read", int64(1000))
}

// Copilot refuses max_tokens because the real Copilot CLI reports no token
// counts: the same run without a cap, which makes four model calls of 700
// tokens each, comes back with no usage at all. When a Copilot release
// starts reporting them, this fails, and the cap can be held.
func TestTheRealCopilotReportsNoTokensSoItsTokenCapIsRefused(t *testing.T) {
	tokenCapRun(t, agent.Copilot, "view", 0)
}

func tokenCapRun(t *testing.T, id, readTool string, limit int64) {
	_, pathValue := binDir(t)
	userHome := t.TempDir()
	project := filepath.Join(userHome, "project")
	require.NoError(t, os.MkdirAll(project, 0o755))
	for _, f := range []string{"a.txt", "b.txt", "c.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(project, f), []byte("hello\n"), 0o644))
	}
	read := func(f string) standin.ToolCall {
		return standin.ToolCall{Name: readTool, Input: map[string]any{"path": filepath.Join(project, f)}}
	}
	srv := standin.NewAnthropic(t, standin.Script{Answer: "DONE", InputTokens: 600, OutputTokens: 100,
		ToolCalls: []standin.ToolCall{read("a.txt"), read("b.txt"), read("c.txt")}})
	env, args, err := srv.PiSetup(userHome, pathValue)
	require.NoError(t, err)
	adapters := map[string]any{"pi": map[string]any{"args": args, "env": standin.AdapterEnv(env)},
		"copilot": map[string]any{"env": standin.AdapterEnv(srv.CopilotEnv(userHome, pathValue))}}
	c := startDaemon(t, userHome, pathValue, map[string]any{"login_shell_path": false, "probe_timeout_secs": 90, "adapters": adapters})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: id, Cwd: project, TimeoutSecs: 240, AcknowledgeUnenforcedReadOnly: id == agent.Pi},
		Task:          "read a.txt, b.txt and c.txt, then say DONE",
	}
	if limit == 0 {
		one := int64(1000)
		p.MaxTokens = &one
		_, err := c.Invoke(ctx, p)
		var re *rpcclient.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
		assert.Contains(t, re.Message, "max_tokens")
		p.MaxTokens = nil
		res, err := c.Invoke(ctx, p)
		require.NoError(t, err)
		t.Logf("%s without a cap: status %s, %d model calls, usage %+v", id, res.Status, len(srv.ModelCalls()), res.Usage)
		assert.Greater(t, len(srv.ModelCalls()), 1)
		assert.Equal(t, api.Usage{}, res.Usage, "the CLI reported no tokens, so card cannot count them")
		return
	}
	p.MaxTokens = &limit
	start := time.Now()
	res, err := c.Invoke(ctx, p)
	require.NoError(t, err)
	t.Logf("%s: status %s in %v, %d model calls, error %+v, usage %+v", id, res.Status, time.Since(start).Round(time.Millisecond), len(srv.ModelCalls()), res.Error, res.Usage)
	require.NotNil(t, res.Error)
	assert.Equal(t, api.KindBudget, res.Error.Kind)
	assert.Equal(t, "max_tokens 1000 passed: the agent reported 1,400 tokens (input 1,200, output 200)", res.Error.Message)
	// Pi runs the next tool and starts its next call within milliseconds
	// of printing a message's usage, so that call may already be under way
	// when card ends the group (on a loaded machine it may even finish, and
	// its usage is then part of what the run used); no call follows it.
	assert.Less(t, len(srv.ModelCalls()), 4, "the run was stopped before the script's last call")
	assert.NotContains(t, res.Answer, "DONE")
	assert.GreaterOrEqual(t, res.Usage.InputTokens, int64(1200))

	run, err := c.Run(ctx, res.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusFailed, run.Status)
	require.NotNil(t, run.Error)
	assert.Equal(t, api.KindBudget, run.Error.Kind)
	require.NotNil(t, run.Usage)
	assert.Equal(t, res.Usage, *run.Usage, "the record keeps the usage the run ended with")
	assert.GreaterOrEqual(t, run.Usage.OutputTokens, int64(200))
}

// The real Droid reports its tokens only in its completion line, at the
// end of the turn: a token cap passed there ends the run budget with the
// answer kept.
func TestARealDroidRunPastItsTokenCapEndsBudgetAtTheEndOfTheTurnWithItsAnswer(t *testing.T) {
	_, pathValue := binDir(t)
	userHome := t.TempDir()
	project := filepath.Join(userHome, "project")
	require.NoError(t, os.MkdirAll(project, 0o755))
	const answer = "PONG past the cap from droid"
	srv := standin.NewAnthropic(t, standin.Script{Answer: answer, InputTokens: 800, OutputTokens: 300})
	env, args, err := srv.DroidSetup(userHome, pathValue)
	require.NoError(t, err)
	c := startDaemon(t, userHome, pathValue, map[string]any{"login_shell_path": false, "probe_timeout_secs": 90,
		"adapters": map[string]any{"droid": map[string]any{"args": args, "env": standin.AdapterEnv(env)}}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	limit := int64(1000)
	res, err := c.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.Droid, Cwd: project, TimeoutSecs: 240, MaxTokens: &limit}, Task: "say pong"})
	require.NoError(t, err)
	t.Logf("droid: status %s, %d model calls, error %+v, usage %+v", res.Status, len(srv.ModelCalls()), res.Error, res.Usage)
	require.NotNil(t, res.Error)
	assert.Equal(t, api.KindBudget, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "max_tokens 1000 passed: the agent reported ")
	assert.Equal(t, answer, res.Answer, "the answer is kept")
	assert.Greater(t, res.Usage.InputTokens+res.Usage.OutputTokens, limit)
}
