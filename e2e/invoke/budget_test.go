package invoke_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/rpc/rpcclient"
)

// Four concurrent starts of the real Claude Code under [budget] daily_usd =
// 0.03, against a stand-in that answers slowly enough for the runs to
// overlap: each run in flight reserves $0.01 (the floor, on an empty
// history), so exactly three start and the fourth is refused with -32050
// naming the budget. Once the three have finished, usage.summary's figures
// are the sums of the runs the history holds, read back with runs.list and
// runs.get.
func TestADailyBudgetReachedByThreeConcurrentRealRunsRefusesTheFourthAndUsageIsTheSumOfTheRuns(t *testing.T) {
	tc := claudeCase(t)
	bin := standin.CLI(t, tc.bin)
	s := tc.newServer(t, bin, standin.Script{Answer: "one two three four", DeltaDelay: 700 * time.Millisecond, InputTokens: 120, OutputTokens: 30}, false)
	s.config = map[string]any{"budget": map[string]any{"daily_usd": 0.03}}
	sess := startDaemon(t, s)
	ctx := daemontest.Context(t)

	var mu sync.Mutex
	var accepted []string
	var refused []*rpcclient.Error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			acc, err := sess.c.Stream(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: tc.adapter, Cwd: sess.cwd, TimeoutSecs: 120}, Task: "count to four"}, nil)
			mu.Lock()
			defer mu.Unlock()
			var re *rpcclient.Error
			switch {
			case err == nil:
				accepted = append(accepted, acc.RunID)
			case assert.ErrorAs(t, err, &re):
				refused = append(refused, re)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Len(t, accepted, 3, "three starts fit the budget's headroom")
	require.Len(t, refused, 1, "the fourth is refused")
	assert.Equal(t, daemon.CodeBudgetExceeded, refused[0].Code, refused[0].Message)
	assert.Contains(t, refused[0].Message, "daily_usd")
	for _, id := range accepted {
		evs := sess.events.WaitEnd(t, id, 150*time.Second)
		last := evs[len(evs)-1]
		require.Equal(t, api.EventDone, last.Kind, "%s: %+v", daemontest.Kinds(evs), last.Result.Error)
	}

	sum, err := sess.c.UsageSummary(ctx, api.UsageParams{})
	require.NoError(t, err)
	list, err := sess.c.Runs(ctx, api.ListParams{Adapter: tc.adapter})
	require.NoError(t, err)
	var want api.UsageRow
	var cost float64
	for _, r := range list {
		switch r.Status {
		case api.StatusRefused:
			want.Refused++
			continue
		case api.StatusSucceeded:
		default:
			t.Fatalf("run %s ended %s", r.RunID, r.Status)
		}
		rec, err := sess.c.Run(ctx, r.RunID)
		require.NoError(t, err)
		require.NotNil(t, rec.Usage)
		require.NotNil(t, rec.TotalCostUSD)
		want.Runs++
		want.Turns += int64(rec.Turns)
		want.InputTokens += rec.Usage.InputTokens
		want.OutputTokens += rec.Usage.OutputTokens
		want.CachedTokens += rec.Usage.CachedInputTokens
		cost += *rec.TotalCostUSD
	}
	assert.EqualValues(t, 3, want.Runs)
	assert.EqualValues(t, 1, want.Refused)
	require.Len(t, sum.Rows, 1)
	row := sum.Rows[0]
	require.NotNil(t, row.CostUSD)
	assert.InDelta(t, cost, *row.CostUSD, 1e-9)
	row.Date, row.Adapter, row.CostUSD = "", "", nil
	assert.Equal(t, want, row, "usage.summary's row is the sum of the stored runs")
	require.NotNil(t, sum.Totals.CostUSD)
	assert.InDelta(t, cost, *sum.Totals.CostUSD, 1e-9)
	require.Len(t, sum.Budgets, 1)
	b := sum.Budgets[0]
	assert.Equal(t, "daily_usd", b.Budget)
	assert.InDelta(t, cost, b.Spent, 1e-9, "the budget's spent is the runs' cost")
	assert.Zero(t, b.InFlight, "nothing in flight once the runs have ended")
	t.Logf("3 runs cost $%.6f (%d in, %d out tokens); the fourth refused: %s", cost, want.InputTokens, want.OutputTokens, refused[0].Message)
}
