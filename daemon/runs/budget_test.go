package runs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

// Runs in flight have no cost yet, so each reserves one: three concurrent
// starts reach a daily budget of three reservations and the fourth is
// refused with what was spent, what is reserved and when the day ends,
// and recorded as refused. Once they end, what they really cost (tiny) is
// what counts, and a start passes again.
func TestADailyBudgetReachedByThreeConcurrentStartsRefusesTheFourth(t *testing.T) {
	bin := fakeClaude(t, 1)
	loc := time.FixedZone("UTC+5", 5*3600)
	m, st := newManager(t, fakeBinaries{bin: bin}, Config{MaxConcurrentRuns: 8,
		Budgets: Budgets{All: Limits{DailyUSD: 3 * reserveFloorUSD}, Loc: loc}})
	ctx := context.Background()
	var started []*Run
	for range 3 {
		r, err := m.Start(ctx, claudeRequest(t, "SLEEP"))
		require.NoError(t, err)
		started = append(started, r)
	}
	_, err := m.Start(ctx, claudeRequest(t, "SLEEP"))
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	var over *BudgetExceededError
	require.ErrorAs(t, err, &over)
	assert.Equal(t, "daily_usd", over.Budget)
	assert.Equal(t, "all", over.Scope)
	assert.Equal(t, "day", over.Period)
	assert.Equal(t, 3*reserveFloorUSD, over.Limit)
	assert.Zero(t, over.Spent)
	assert.InDelta(t, 3*reserveFloorUSD, over.InFlight, 1e-9)
	assert.Equal(t, 3, over.InFlightRuns)
	now := time.Now().In(loc)
	y, mo, d := now.Date()
	assert.Equal(t, time.Date(y, mo, d+1, 0, 0, 0, 0, loc), over.ResetsAt, "the budget resets at the next midnight of the budget's zone")
	assert.Equal(t, "[budget] daily_usd", over.ConfigKey())

	rec, err := st.Get(ctx, refused.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusRefused, rec.Status)
	assert.Contains(t, rec.RefusalReason, "daily_usd")

	for _, r := range started {
		_, err := m.Cancel(ctx, r.ID())
		require.NoError(t, err)
	}
	r, err := m.Start(ctx, claudeRequest(t, "say pong"))
	require.NoError(t, err, "the ended runs no longer reserve anything, and cost nothing")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := r.Wait(wctx)
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, res.Status)
}

// A budget on one adapter bounds only its runs; the overall one bounds all.
func TestAnAdaptersBudgetBoundsOnlyItsOwnRuns(t *testing.T) {
	m, _ := newManager(t, fakeBinaries{bin: fakeClaude(t, 1)}, Config{MaxConcurrentRuns: 8,
		Budgets: Budgets{Adapters: map[string]Limits{"codex": {DailyTokens: reserveFloorToks}}}})
	ctx := context.Background()
	codex := claudeRequest(t, "SLEEP")
	codex.Adapter = "codex"
	r, err := m.Start(ctx, codex)
	require.NoError(t, err)
	defer func() { _, _ = m.Cancel(ctx, r.ID()) }()
	_, err = m.Start(ctx, codex)
	var over *BudgetExceededError
	require.True(t, errors.As(err, &over), "got %v", err)
	assert.Equal(t, "codex", over.Scope)
	assert.Equal(t, "daily_tokens", over.Budget)
	assert.Equal(t, "[budget.adapters.codex] daily_tokens", over.ConfigKey())
	r2, err := m.Start(ctx, claudeRequest(t, "SLEEP"))
	require.NoError(t, err, "claude-code has no budget")
	_, _ = m.Cancel(ctx, r2.ID())
}

// The month's period runs from the first to the first of the next month.
func TestAMonthlyBudgetResetsOnTheFirstOfTheNextMonth(t *testing.T) {
	loc := time.FixedZone("x", -3*3600)
	start, end := period(time.Date(2026, 12, 31, 23, 30, 0, 0, loc), "month")
	assert.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, loc), start)
	assert.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, loc), end)
}

// A cap lowers what a run holds back against the budgets, never raises it:
// a run asking max_cost_usd 10000 (or max_tokens 10^9) reserves what an
// uncapped run of its adapter reserves, so it does not hold a whole day's
// budget for as long as it runs and refuse every other run meanwhile; a
// cap below the estimate reserves the cap.
func TestARunsCapNeverReservesMoreThanTheEstimate(t *testing.T) {
	m, _ := newManager(t, fakeBinaries{bin: fakeClaude(t, 1)}, Config{MaxConcurrentRuns: 8,
		Budgets: Budgets{All: Limits{DailyUSD: 1, DailyTokens: 100_000}}})
	ctx := context.Background()
	big := claudeRequest(t, "SLEEP")
	big.Plan.Caps = &spawn.PlanCaps{MaxCostUSD: 10000, MaxTokens: 1_000_000_000}
	r1, err := m.Start(ctx, big)
	require.NoError(t, err)
	defer func() { _, _ = m.Cancel(ctx, r1.ID()) }()
	r2, err := m.Start(ctx, claudeRequest(t, "SLEEP"))
	require.NoError(t, err, "one capped run held the whole budget back")
	defer func() { _, _ = m.Cancel(ctx, r2.ID()) }()
	small := claudeRequest(t, "SLEEP")
	small.Plan.Caps = &spawn.PlanCaps{MaxCostUSD: reserveFloorUSD / 10, MaxTokens: 10}
	r3, err := m.Start(ctx, small)
	require.NoError(t, err)
	defer func() { _, _ = m.Cancel(ctx, r3.ID()) }()

	status, err := m.BudgetStatus(ctx, "")
	require.NoError(t, err)
	byKey := map[string]float64{}
	for _, b := range status {
		byKey[b.Budget] = b.InFlight
	}
	assert.InDelta(t, 2*reserveFloorUSD+reserveFloorUSD/10, byKey["daily_usd"], 1e-9, "each capped run holds back at most the estimate")
	assert.InDelta(t, 2*reserveFloorToks+10, byKey["daily_tokens"], 1e-9)
}
