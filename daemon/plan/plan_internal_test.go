package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

func TestEveryArgvShapingParamReachesTheSpawnRequest(t *testing.T) {
	p := api.InvokeParams{
		AgentSettings:  api.AgentSettings{ID: "claude-code", PermissionMode: "edit", AllowedTools: []string{"Read"}, Model: "m", Effort: "high", SystemPrompt: "sp", SystemPromptAppend: true, Cwd: "/x"},
		Task:           "t",
		MaxTurns:       2,
		DiscardSession: true,
	}
	req := spawnRequestOf(&p)
	assert.Equal(t, spawn.Request{Adapter: "claude-code", Mode: spawn.ModeEdit, AllowedTools: []string{"Read"},
		Model: "m", MaxTurns: 2, Effort: "high", SystemPrompt: "sp", SystemPromptAppend: true, NoSession: true, Cwd: "/x"}, req)

	plan, err := spawn.Build("/bin/claude", spawn.Request{Adapter: "claude-code", Cwd: "/", SystemPrompt: "sp", SystemPromptAppend: true, NoSession: true})
	require.NoError(t, err)
	assert.Contains(t, plan.Args, "--append-system-prompt-file")
}

// The planner decides every bad-params answer itself and builds the plan
// once, with no binary in it: the gate supplies the one detection resolved.
func TestThePlannerBuildsThePlanOnceWithoutABinary(t *testing.T) {
	p := New(Config{Env: map[string]string{"HOME": t.TempDir()}, MaxAPIRetries: 3, StallSecs: 300, ApprovalTimeoutSecs: 120}, CwdPolicy{}, nil)
	turn, err := p.Invoke(api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Model: "m"}, Task: "t", MaxTurns: 2})
	require.NoError(t, err)
	req := turn.Run
	assert.Empty(t, req.Plan.Program)
	assert.Equal(t, p.cfg.Env["HOME"], req.Plan.Dir, "read_only without cwd runs in the home")
	assert.Contains(t, req.Plan.Args, "--max-turns")
	assert.Equal(t, spawn.ModeReadOnly, req.Mode)

	_, err = p.Invoke(api.InvokeParams{AgentSettings: api.AgentSettings{ID: "droid", PermissionMode: "edit", Cwd: t.TempDir()}, Task: "t"})
	var fe *api.FieldError
	require.ErrorAs(t, err, &fe, "an adapter's own refusal is a field error before any record")
	_, err = p.Invoke(api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", PermissionMode: "bypass", Cwd: t.TempDir()}, Task: "t"})
	assert.NoError(t, err, "bypass is the gate's to refuse, after the guard")
}
