package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// Usage sums each adapter's runs of the span and nothing outside it: a
// refused run counts as refused (its turns and tokens never), a run that
// reported no cost leaves the cost null, and the span is half open.
func TestUsageSumsEachAdaptersRunsInTheSpanAndNothingElse(t *testing.T) {
	s, _ := openTest(t, Options{})
	ctx := context.Background()
	day := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	add := func(adapter string, at time.Time, status api.Status, u *api.Usage, cost *float64, turns int) {
		t.Helper()
		id := s.NewRunID()
		require.NoError(t, s.Create(ctx, api.Run{RunID: id, Adapter: adapter, CreatedAt: at}))
		if status == api.StatusRefused {
			require.NoError(t, s.Finish(ctx, id, Finish{Status: api.StatusRefused, RefusalReason: "budget"}))
			return
		}
		require.NoError(t, s.Finish(ctx, id, Finish{Status: status, Usage: u, TotalCostUSD: cost, Turns: turns}))
	}
	add("claude-code", day.Add(time.Hour), api.StatusSucceeded, &api.Usage{InputTokens: 100, OutputTokens: 10, CachedInputTokens: 50}, ptr(0.25), 2)
	add("claude-code", day.Add(23*time.Hour), api.StatusFailed, &api.Usage{InputTokens: 1, OutputTokens: 2, CachedInputTokens: 3}, ptr(0.5), 1)
	add("claude-code", day.Add(2*time.Hour), api.StatusRefused, nil, nil, 0)
	add("codex", day.Add(3*time.Hour), api.StatusSucceeded, &api.Usage{InputTokens: 7, OutputTokens: 8}, nil, 1)
	add("codex", day.Add(24*time.Hour), api.StatusSucceeded, &api.Usage{InputTokens: 1000}, nil, 1) // the next day
	add("codex", day.Add(-time.Millisecond), api.StatusSucceeded, &api.Usage{InputTokens: 1000}, nil, 1)

	rows, err := s.Usage(ctx, day, day.AddDate(0, 0, 1), "")
	require.NoError(t, err)
	assert.Equal(t, []api.UsageRow{
		{Adapter: "claude-code", Runs: 2, Turns: 3, Refused: 1, InputTokens: 101, OutputTokens: 12, CachedTokens: 53, CostUSD: ptr(0.75)},
		{Adapter: "codex", Runs: 1, Turns: 1, InputTokens: 7, OutputTokens: 8},
	}, rows)

	only, err := s.Usage(ctx, day, day.AddDate(0, 0, 1), "codex")
	require.NoError(t, err)
	assert.Equal(t, rows[1:], only)

	usd, toks, err := s.RecentAverage(ctx, "claude-code", 20)
	require.NoError(t, err)
	assert.InDelta(t, 0.375, usd, 1e-12, "the refused run is not in the mean")
	assert.InDelta(t, 56.5, toks, 1e-12)
}
