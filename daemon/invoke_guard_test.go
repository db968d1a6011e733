package daemon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
)

// The ancestry guard through the daemon: its base is read at startup, seeded
// per call with invoked_by, enforced before the spawn, stamped on the child
// and recorded on every run.
func TestADaemonStartedInsideClaudeRefusesToInvokeClaude(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_INVOKED_BY=claude-code")
	_, err := rd.Client.Invoke(daemontest.Context(t), rd.params("claude-code", "x"))
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeGuardRefused, re.Code)
	assert.Contains(t, re.Message, "already in this invocation chain")
	assert.Contains(t, re.Message, "CAR_INVOKED_BY")
	data := errData(t, re)
	assert.Equal(t, "claude-code", data["adapter"])
	assert.Equal(t, []any{"claude-code"}, data["ancestry"])
	assert.Equal(t, float64(3), data["max_chain"])
	assert.Equal(t, "cycle", data["reason"])
}

func TestAnAllowedSpawnStampsTheChildWithTheSeededChainPlusItself(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_INVOKED_BY=claude-code")
	ctx := daemontest.Context(t)
	p := rd.params("codex", "say pong")
	p.InvokedBy = "gemini"
	res := rd.finished(t, p)
	assert.Equal(t, store.StatusSucceeded, res.Status)
	assert.Equal(t, []string{"claude-code", "gemini"}, res.Ancestry)
	env := rd.agents["codex"].ChildEnv(t, res.RunID)
	assert.Equal(t, "claude-code,gemini,codex", env["CAR_INVOKED_BY"])

	// The refused call and the allowed one are both in the history.
	p.ID = "claude-code"
	_, err := rd.Client.Invoke(ctx, p)
	require.Error(t, err)
	runs, err := rd.Client.Runs(ctx, daemon.ListParams{})
	require.NoError(t, err)
	require.Len(t, runs, 2)
	refused, allowed := runs[0], runs[1]
	assert.Equal(t, store.StatusRefused, refused.Status)
	assert.Equal(t, "claude-code", refused.Adapter)
	assert.Equal(t, []string{"claude-code", "gemini"}, refused.Ancestry)
	assert.Equal(t, "gemini", refused.InvokedBy)
	assert.Contains(t, refused.RefusalReason, "already in this invocation chain")
	assert.Equal(t, store.StatusSucceeded, allowed.Status)
	assert.Equal(t, []string{"claude-code", "gemini"}, allowed.Ancestry)
	assert.Equal(t, "gemini", allowed.InvokedBy)
}

func TestAShorterMaxChainRefusesTheSameCallForDepth(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_INVOKED_BY=claude-code", "CAR_AGENT_MAX_CHAIN=2")
	p := rd.params("codex", "say pong")
	p.InvokedBy = "gemini"
	_, err := rd.Client.Invoke(daemontest.Context(t), p)
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeGuardRefused, re.Code)
	data := errData(t, re)
	assert.Equal(t, "depth", data["reason"])
	assert.Equal(t, float64(2), data["max_chain"])
	assert.Contains(t, re.Message, "CAR_AGENT_MAX_CHAIN")
	id, _ := data["run_id"].(string)
	run := waitRun(t, rd.Client, id, time.Second)
	assert.Equal(t, store.StatusRefused, run.Status)
	assert.Equal(t, []string{"claude-code", "gemini"}, run.Ancestry)
}
