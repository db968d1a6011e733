package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

// card usage prints the day's figures, which are the sums of the runs card
// runs lists, and the budget with what is left.
func TestUsagePrintsTheSumsOfTheStoredRunsAndTheBudgetLeft(t *testing.T) {
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-success.jsonl"))
	home := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n[budget]\ndaily_usd = 5\n", Agents: map[string]string{agent.ClaudeCode: claude.Path},
		Logger: zap.NewNop(), NoClient: true,
	}).Home
	for range 2 {
		code, _, errOut := runCLI("invoke", "claude-code", "say pong", "--home", home, "--cwd", t.TempDir())
		require.Equal(t, exitOK, code, errOut)
	}
	code, out, _ := runCLI("runs", "--home", home, "--json")
	require.Equal(t, exitOK, code)
	var runs []api.Run
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 2)
	var in, outToks int64
	var cost float64
	for _, r := range runs {
		require.NotNil(t, r.Usage)
		require.NotNil(t, r.TotalCostUSD)
		in, outToks, cost = in+r.Usage.InputTokens, outToks+r.Usage.OutputTokens, cost+*r.TotalCostUSD
	}

	code, out, errOut := runCLI("usage", "--home", home, "--json")
	require.Equal(t, exitOK, code, errOut)
	var sum api.UsageSummary
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.Len(t, sum.Rows, 1)
	assert.Equal(t, int64(2), sum.Totals.Runs)
	assert.Equal(t, in, sum.Totals.InputTokens)
	assert.Equal(t, outToks, sum.Totals.OutputTokens)
	require.NotNil(t, sum.Totals.CostUSD)
	assert.InDelta(t, cost, *sum.Totals.CostUSD, 1e-12)

	code, out, errOut = runCLI("usage", "--home", home)
	require.Equal(t, exitOK, code, errOut)
	today := time.Now().Format(api.UsageDateLayout)
	assert.Contains(t, out, "Usage "+today+" to "+today)
	// The model's round trips are not prompts, and the header says so.
	assert.Regexp(t, `DATE\s+AGENT\s+RUNS\s+MODEL CALLS\s+REFUSED`, out)
	assert.NotContains(t, out, "TURNS")
	assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(`%s\s+claude-code\s+2\s+\d+\s+0\s+%d\s+%d\s+\d+\s+%.6f`, today, in, outToks, cost)), out)
	assert.Regexp(t, `daily_usd\s+all\s+5\s+[0-9.]+\s+0\s+4\.99`, out)

	code, _, errOut = runCLI("usage", "--from", "nope", "--home", home)
	assert.Equal(t, exitRefused, code)
	assert.Contains(t, errOut, "from")
	code, _, errOut = runCLI("usage", "extra", "--home", home)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "card usage [--from DATE]")
}

// After a run whose agent reported a rate-limit window (the real Claude
// Code's stream on a claude.ai sign-in, replayed), card usage prints the
// window with how much is used and when it resets, and --json carries it.
func TestUsagePrintsTheRateLimitWindowsTheAgentsReported(t *testing.T) {
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-rate-limit.jsonl"))
	home := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n", Agents: map[string]string{agent.ClaudeCode: claude.Path},
		Logger: zap.NewNop(), NoClient: true,
	}).Home
	code, out, errOut := runCLI("usage", "--home", home)
	require.Equal(t, exitOK, code, errOut)
	assert.NotContains(t, out, "RATE LIMIT", "no window before an agent reports one")

	code, _, errOut = runCLI("invoke", "claude-code", "say pong", "--home", home, "--cwd", t.TempDir())
	require.Equal(t, exitOK, code, errOut)
	code, out, errOut = runCLI("usage", "--home", home, "--json")
	require.Equal(t, exitOK, code, errOut)
	var sum api.UsageSummary
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.Len(t, sum.RateLimits, 1)
	w := sum.RateLimits[0]
	assert.Equal(t, "five_hour", w.Window)
	assert.Equal(t, "allowed_warning", w.Status)
	require.NotNil(t, w.UsedPercent)
	assert.InDelta(t, 80, *w.UsedPercent, 1e-9)
	require.NotNil(t, w.ResetsAt)

	code, out, errOut = runCLI("usage", "--home", home)
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `RATE LIMIT\s+AGENT\s+STATUS\s+USED\s+RESETS\s+SEEN`, out)
	assert.Regexp(t, `five_hour\s+claude-code\s+allowed_warning\s+80%\s+`+regexp.QuoteMeta(w.ResetsAt.Local().Format(time.DateTime)), out)
}
