package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// history writes n runs a minute apart, oldest first, each with two events;
// the ones running lists (by index) are left running.
func history(t *testing.T, s *Store, clock *fakeClock, n int, running ...int) []string {
	t.Helper()
	ctx := context.Background()
	isRunning := map[int]bool{}
	for _, i := range running {
		isRunning[i] = true
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = s.NewRunID()
		require.NoError(t, s.Create(ctx, api.Run{RunID: ids[i], Adapter: "claude-code"}))
		require.NoError(t, s.AppendEvents(ctx, ids[i], []NewEvent{{Seq: 1, Kind: "text", Payload: json.RawMessage(`{}`)}, {Seq: 2, Kind: "text", Payload: json.RawMessage(`{}`)}}))
		if !isRunning[i] {
			require.NoError(t, s.Finish(ctx, ids[i], Finish{Status: api.StatusSucceeded}))
		}
		clock.Advance(time.Minute)
	}
	return ids
}

func exists(t *testing.T, s *Store, id string) bool {
	t.Helper()
	_, err := s.Get(context.Background(), id)
	return err == nil
}

// Retention keeps the newest max_runs runs and those younger than max_age,
// deletes the rest with their events, oldest first, and never a running run
// or one the caller keeps; a dry run counts the same and deletes nothing.
func TestPruneDeletesFinishedRunsPastTheRetentionAndNeverARunningOne(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	s, _ := openTest(t, Options{Now: clock.Now})
	ids := history(t, s, clock, 30, 2, 5)
	kept := map[string]bool{ids[3]: true}

	dry, err := s.Prune(ctx, Retention{MaxRuns: 10, Keep: func(id string) bool { return kept[id] }, DryRun: true})
	require.NoError(t, err)
	// 20 runs are past the newest 10; two are running and one is kept.
	assert.Equal(t, api.Pruned{Runs: 17, Events: 34, Kept: 13}, dry)
	for _, id := range ids {
		assert.True(t, exists(t, s, id), "a dry run deleted %s", id)
	}

	got, err := s.Prune(ctx, Retention{MaxRuns: 10, Keep: func(id string) bool { return kept[id] }})
	require.NoError(t, err)
	assert.Equal(t, dry, got)
	for i, id := range ids {
		want := i >= 20 || i == 2 || i == 5 || i == 3
		assert.Equal(t, want, exists(t, s, id), "run %d", i)
	}
	evs, err := s.Events(ctx, ids[2], 0, 0)
	require.NoError(t, err)
	assert.Len(t, evs, 2, "a running run keeps its events")
	var orphans int
	require.NoError(t, s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE run_id NOT IN (SELECT id FROM runs)`).Scan(&orphans))
	assert.Zero(t, orphans, "events outlived their run")

	// By age: the clock is 30 minutes past the first run; keep 5 minutes.
	got, err = s.Prune(ctx, Retention{MaxAge: 5 * time.Minute})
	require.NoError(t, err)
	assert.Equal(t, api.Pruned{Runs: 6, Events: 12, Kept: 7}, got, "runs 20..24 and 3 are older than 5 minutes")
	assert.True(t, exists(t, s, ids[25]))
	assert.True(t, exists(t, s, ids[2]), "a running run is never pruned, however old")

	got, err = s.Prune(ctx, Retention{})
	require.NoError(t, err)
	assert.Equal(t, api.Pruned{Kept: 7}, got, "no bound prunes nothing")
	_, err = s.Prune(ctx, Retention{MaxRuns: -1})
	assert.Error(t, err)
}

// A history larger than one prune transaction is pruned whole, in batches.
func TestPruneWorksThroughAHistoryLargerThanOneBatch(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	s, _ := openTest(t, Options{Now: clock.Now})
	ids := history(t, s, clock, pruneBatch+40)
	got, err := s.Prune(ctx, Retention{MaxRuns: 15})
	require.NoError(t, err)
	assert.Equal(t, api.Pruned{Runs: int64(pruneBatch + 25), Events: int64(2 * (pruneBatch + 25)), Kept: 15}, got)
	assert.False(t, exists(t, s, ids[pruneBatch+24]))
	assert.True(t, exists(t, s, ids[pruneBatch+25]))
}
