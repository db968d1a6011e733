package invoke_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

// The real Claude Code, given max_cost_usd as its own --max-budget-usd,
// against a stand-in whose every model call reports a million input
// tokens (dollars at any model's price): Claude stops before its next
// model call, and the run ends budget with what Claude reported spent,
// recorded.
func TestARealClaudeRunIsStoppedByItsCostCap(t *testing.T) {
	bin := standin.CLI(t, "claude")
	script := standin.Script{Answer: "DONE", InputTokens: 1_000_000, OutputTokens: 1000,
		ToolCalls: []standin.ToolCall{{Name: "Read", Input: map[string]any{"file_path": "/etc/hostname"}}, {Name: "Read", Input: map[string]any{"file_path": "/etc/hosts"}}}}
	tc := cases()[0]
	require.Equal(t, "claude-code", tc.adapter)
	s := tc.newServer(t, bin, script, false)
	sess := startDaemon(t, s)
	limit := 0.01
	evs := sess.failsAs(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", MaxCostUSD: &limit}, Task: "read two files, then say DONE"}, api.KindBudget)
	last := evs[len(evs)-1]
	assert.Contains(t, last.Result.Error.Message, "max_cost_usd 0.01 passed: claude-code reported $")
	assert.Len(t, s.server.ModelCalls(), 1, "Claude made no model call after the one that passed the cap")
	assert.Empty(t, s.server.ToolResults(), "nor ran the tool that call asked for")
	require.NotNil(t, last.Result.CostUSD)
	assert.Greater(t, *last.Result.CostUSD, limit)

	run, err := sess.c.Run(daemontest.Context(t), last.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusFailed, run.Status)
	require.NotNil(t, run.Error)
	assert.Equal(t, api.KindBudget, run.Error.Kind)
	require.NotNil(t, run.Usage)
	assert.GreaterOrEqual(t, run.Usage.InputTokens, int64(1_000_000), "the record keeps the usage that passed the cap")
}

// The real Codex and Gemini CLI report their tokens only when the turn
// completes, so a token cap can only be judged there: the run ends budget
// with the answer that came with the usage kept in the result and the
// record.
func TestARealRunPastItsTokenCapAtTheEndOfTheTurnEndsBudgetWithItsAnswer(t *testing.T) {
	for _, tc := range cases()[1:] {
		t.Run(tc.adapter, func(t *testing.T) {
			bin := standin.CLI(t, tc.bin)
			t.Parallel()
			answer := "PONG past the cap from " + tc.adapter
			s := tc.newServer(t, bin, standin.Script{Answer: answer, InputTokens: 800, OutputTokens: 300}, false)
			sess := startDaemon(t, s)
			limit := int64(1000)
			evs := sess.failsAs(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: tc.adapter, MaxTokens: &limit}, Task: "say pong"}, api.KindBudget)
			last := evs[len(evs)-1]
			assert.Equal(t, "max_tokens 1000 passed: the agent reported 1,100 tokens (input 800, output 300)", last.Result.Error.Message)
			assert.Equal(t, answer, strings.TrimSpace(last.Result.Answer), "the answer is kept")

			run, err := sess.c.Run(daemontest.Context(t), last.RunID)
			require.NoError(t, err)
			assert.Equal(t, api.StatusFailed, run.Status)
			assert.Equal(t, answer, strings.TrimSpace(run.Answer))
			require.NotNil(t, run.Usage)
			assert.Equal(t, int64(300), run.Usage.OutputTokens)
		})
	}
}
