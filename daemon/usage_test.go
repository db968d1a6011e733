package daemon_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// usage.summary's figures are the sums of the stored runs, adapter by
// adapter: every run of the fakes (whose streams report tokens, and cost
// only for Claude Code) is summed from runs.get's records and compared.
func TestUsageSummaryIsTheSumOfTheStoredRuns(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	var ids []string
	for _, id := range []string{"claude-code", "claude-code", "codex", "gemini"} {
		res, err := rd.Client.Invoke(ctx, rd.params(id, "say pong"))
		require.NoError(t, err)
		ids = append(ids, res.RunID)
	}
	bypass := rd.params("codex", "x")
	bypass.PermissionMode = "bypass"
	_, err := rd.Client.Invoke(ctx, bypass)
	require.Error(t, err, "refused: bypass is not allowed")

	want := map[string]*api.UsageRow{}
	for _, id := range ids {
		r, err := rd.Client.Run(ctx, id)
		require.NoError(t, err)
		row := want[r.Adapter]
		if row == nil {
			row = &api.UsageRow{Adapter: r.Adapter}
			want[r.Adapter] = row
		}
		row.Runs++
		row.Turns += int64(r.Turns)
		require.NotNil(t, r.Usage)
		row.InputTokens += r.Usage.InputTokens
		row.OutputTokens += r.Usage.OutputTokens
		row.CachedTokens += r.Usage.CachedInputTokens
		if r.TotalCostUSD != nil {
			c := *r.TotalCostUSD
			if row.CostUSD != nil {
				c += *row.CostUSD
			}
			row.CostUSD = &c
		}
	}
	want["codex"].Refused = 1
	require.NotNil(t, want["claude-code"].CostUSD, "the fake Claude Code reports a cost")
	require.Nil(t, want["codex"].CostUSD, "Codex reports none")

	sum, err := rd.Client.UsageSummary(ctx, api.UsageParams{})
	require.NoError(t, err)
	today := time.Now().Format(api.UsageDateLayout)
	assert.Equal(t, today, sum.From)
	assert.Equal(t, today, sum.To)
	assert.Equal(t, time.Now().Format("MST-07:00"), sum.Timezone)
	require.Len(t, sum.Rows, 3)
	var total api.UsageRow
	for _, got := range sum.Rows {
		w := want[got.Adapter]
		require.NotNil(t, w, got.Adapter)
		w.Date = today
		if w.CostUSD != nil {
			require.NotNil(t, got.CostUSD, got.Adapter)
			assert.InDelta(t, *w.CostUSD, *got.CostUSD, 1e-12)
			got.CostUSD, w.CostUSD = nil, nil
		}
		assert.Equal(t, *w, got, got.Adapter)
		total.Runs += got.Runs
		total.Refused += got.Refused
		total.InputTokens += got.InputTokens
	}
	assert.Equal(t, int64(4), sum.Totals.Runs)
	assert.Equal(t, int64(1), sum.Totals.Refused)
	assert.Equal(t, total.InputTokens, sum.Totals.InputTokens)
	assert.NotZero(t, sum.Totals.InputTokens)
	assert.Empty(t, sum.Budgets, "no budget configured")

	one, err := rd.Client.UsageSummary(ctx, api.UsageParams{Adapter: "codex", From: time.Now().AddDate(0, 0, -3).Format(api.UsageDateLayout)})
	require.NoError(t, err)
	require.Len(t, one.Rows, 1)
	assert.Equal(t, "codex", one.Rows[0].Adapter)
	b, _ := json.Marshal(one.Rows[0])
	assert.Contains(t, string(b), `"cost_usd":null`, "no cost reported is null, not zero")
}

func TestUsageSummaryRefusesBadParamsNamingTheField(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	for _, c := range []struct {
		p     api.UsageParams
		field string
	}{
		{api.UsageParams{From: "yesterday"}, "from"},
		{api.UsageParams{To: "2026-13-01"}, "to"},
		{api.UsageParams{From: "2026-02-02", To: "2026-02-01"}, "from"},
		{api.UsageParams{From: "2020-01-01", To: "2026-01-01"}, "from"},
		{api.UsageParams{Adapter: "clippy"}, "adapter"},
	} {
		_, err := rd.Client.UsageSummary(ctx, c.p)
		var re *rpcclient.Error
		require.ErrorAs(t, err, &re, "%+v", c.p)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
		assert.Equal(t, c.field, errData(t, re)["field"], "%+v", c.p)
	}
}

// Over the wire: three streamed runs in flight reach a daily budget with
// their reservations, the fourth start is -32050 with the budget's data,
// and usage.summary counts it refused and shows the budget's standing.
func TestAFourthConcurrentStartOverADailyBudgetIsRefusedWithItsCode(t *testing.T) {
	rd := startRunsDaemon(t, "[budget]\ndaily_usd = 0.03\n")
	ctx := daemontest.Context(t)
	var runs []string
	for range 3 {
		acc, err := rd.Client.Stream(ctx, rd.params("claude-code", "LINGER"), nil)
		require.NoError(t, err)
		runs = append(runs, acc.RunID)
	}
	defer func() {
		for _, id := range runs {
			_, _ = rd.Client.Cancel(ctx, id)
		}
	}()
	_, err := rd.Client.Stream(ctx, rd.params("claude-code", "LINGER"), nil)
	var re *rpcclient.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, daemon.CodeBudgetExceeded, re.Code)
	data := errData(t, re)
	assert.Equal(t, "daily_usd", data["budget"])
	assert.Equal(t, "all", data["scope"])
	assert.Equal(t, "day", data["period"])
	assert.Equal(t, 0.03, data["limit"])
	assert.InDelta(t, 0.03, data["in_flight"], 1e-9)
	assert.EqualValues(t, 3, data["in_flight_runs"])
	assert.Equal(t, "[budget] daily_usd", data["config_key"])
	assert.NotEmpty(t, data["run_id"])
	resets, err := time.Parse(time.RFC3339, data["resets_at"].(string))
	require.NoError(t, err)
	y, m, d := time.Now().Date()
	assert.True(t, resets.Equal(time.Date(y, m, d+1, 0, 0, 0, 0, time.Local)), "resets at the next local midnight, not %s", resets)

	sum, err := rd.Client.UsageSummary(ctx, api.UsageParams{})
	require.NoError(t, err)
	require.Len(t, sum.Rows, 1)
	assert.Equal(t, int64(3), sum.Rows[0].Runs)
	assert.Equal(t, int64(1), sum.Rows[0].Refused)
	require.Len(t, sum.Budgets, 1)
	b := sum.Budgets[0]
	assert.Equal(t, api.BudgetStatus{Budget: "daily_usd", Scope: "all", Period: "day", Limit: 0.03, Spent: b.Spent, InFlight: 0.03, Left: 0, ResetsAt: b.ResetsAt}, b)
	assert.True(t, b.ResetsAt.Equal(resets))
}

// A run whose agent reported a rate-limit window (the real Claude Code's
// stream on a claude.ai sign-in, replayed) leaves the window in
// usage.summary and in agents.health_external for its adapter, with the
// run and when card saw it; the other adapters' answers have none.
func TestARateLimitWindowAnAgentReportedShowsInUsageAndHealth(t *testing.T) {
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-rate-limit.jsonl"))
	d := daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Agents: map[string]string{"claude-code": claude.Path}})
	ctx := daemontest.Context(t)
	h, err := d.Client.Health(ctx, "claude-code", false)
	require.NoError(t, err)
	assert.Empty(t, h.RateLimits, "none before a run reports one")

	before := time.Now().Add(-time.Second)
	res, err := d.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: t.TempDir()}, Task: "say pong"})
	require.NoError(t, err)
	sum, err := d.Client.UsageSummary(ctx, api.UsageParams{})
	require.NoError(t, err)
	require.Len(t, sum.RateLimits, 1)
	w := sum.RateLimits[0]
	assert.Equal(t, "claude-code", w.Adapter)
	assert.Equal(t, res.RunID, w.RunID)
	assert.Equal(t, "five_hour", w.Window)
	assert.Equal(t, "allowed_warning", w.Status)
	require.NotNil(t, w.UsedPercent)
	assert.InDelta(t, 80, *w.UsedPercent, 1e-9)
	assert.Equal(t, 300, w.WindowMinutes)
	require.NotNil(t, w.ResetsAt)
	assert.WithinRange(t, w.SeenAt, before, time.Now())

	h, err = d.Client.Health(ctx, "claude-code", false)
	require.NoError(t, err)
	assert.Equal(t, sum.RateLimits, h.RateLimits, "the cached health answer carries the latest windows")
	all, err := d.Client.HealthAll(ctx, false)
	require.NoError(t, err)
	for _, h := range all {
		if h.ID == "claude-code" {
			assert.Equal(t, sum.RateLimits, h.RateLimits)
		} else {
			assert.Empty(t, h.RateLimits, h.ID)
		}
	}
	specs, err := d.Client.Detect(ctx, api.DetectParams{IncludeHealth: true})
	require.NoError(t, err)
	require.NotEmpty(t, specs)
	for _, s := range specs {
		require.NotNil(t, s.Health, s.ID)
		if s.ID == "claude-code" {
			assert.Equal(t, sum.RateLimits, s.Health.RateLimits, "agents.detect's health too")
		}
	}
	other, err := d.Client.UsageSummary(ctx, api.UsageParams{Adapter: "codex"})
	require.NoError(t, err)
	assert.Equal(t, []api.RateLimitSeen{}, other.RateLimits)
}
