package daemon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
)

// The ancestry guard through the daemon: its base is read at startup, seeded
// per call with invoked_by, enforced before the spawn, stamped on the child
// and recorded on every run.
func TestADaemonStartedInsideClaudeRefusesToInvokeClaude(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_INVOKED_BY=claude-code")
	c := rd.client(t, rpc.ClientOptions{})
	re := rpcCode(t, rd.invoke(t, c, map[string]any{"id": "claude-code", "task": "x"}, nil))
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
	c := rd.client(t, rpc.ClientOptions{})
	res := rd.finished(t, c, map[string]any{"id": "codex", "task": "say pong", "invoked_by": "gemini"})
	assert.Equal(t, store.StatusSucceeded, res.Status)
	assert.Equal(t, []string{"claude-code", "gemini"}, res.Ancestry)
	env := rd.agents.childEnvOf(t, "codex", res.RunID)
	assert.Equal(t, "claude-code,gemini,codex", env["CAR_INVOKED_BY"])

	// The refused call and the allowed one are both in the history.
	_ = rd.invoke(t, c, map[string]any{"id": "claude-code", "task": "x", "invoked_by": "gemini"}, nil)
	var runs []store.Run
	require.NoError(t, call(t, c, "runs.list", map[string]any{}, &runs))
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
	c := rd.client(t, rpc.ClientOptions{})
	re := rpcCode(t, rd.invoke(t, c, map[string]any{"id": "codex", "task": "say pong", "invoked_by": "gemini"}, nil))
	assert.Equal(t, daemon.CodeGuardRefused, re.Code)
	data := errData(t, re)
	assert.Equal(t, "depth", data["reason"])
	assert.Equal(t, float64(2), data["max_chain"])
	assert.Contains(t, re.Message, "CAR_AGENT_MAX_CHAIN")
	id, _ := data["run_id"].(string)
	run := waitRun(t, c, id, time.Second)
	assert.Equal(t, store.StatusRefused, run.Status)
	assert.Equal(t, []string{"claude-code", "gemini"}, run.Ancestry)
}
