package sessions

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// A session left open with no turn for CloseIdle is closed by the sweeper,
// saying why, and one closed longer ago than PruneClosed is deleted. A
// session in use is neither.
func TestTheSweeperClosesIdleSessionsAndPrunesOldClosedOnes(t *testing.T) {
	m := newWarmManager(t, &fakeWarmer{}, Config{CloseIdle: 150 * time.Millisecond, PruneClosed: 400 * time.Millisecond, SweepEvery: 20 * time.Millisecond, MaxWarm: -1})
	ctx := context.Background()
	idle := startFor(t, m)
	busy := startFor(t, m)
	m.StartSweeping()
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		turn(t, m, busy, "keep me busy")
		time.Sleep(30 * time.Millisecond)
	}
	got, err := m.Get(ctx, idle)
	require.NoError(t, err)
	assert.Equal(t, api.SessionClosed, got.State)
	assert.Contains(t, got.CloseReason, "close_idle_hours")
	got, err = m.Get(ctx, busy)
	require.NoError(t, err)
	assert.NotEqual(t, api.SessionClosed, got.State, "a session in use is not idle")
	require.Eventually(t, func() bool {
		_, err := m.Get(ctx, idle)
		var nf *NotFoundError
		return err != nil && assert.ErrorAs(t, err, &nf)
	}, 5*time.Second, 20*time.Millisecond, "a session closed long enough ago is deleted")
}

// A restart keeps none of the open sessions in memory: each is put right
// in the store and loaded when a client next asks for it, and goes on from
// where it was.
func TestRecoveredSessionsAreLoadedWhenFirstAskedFor(t *testing.T) {
	m := newWarmManager(t, &fakeWarmer{}, Config{MaxWarm: -1})
	ids := []string{startFor(t, m), startFor(t, m), startFor(t, m)}
	for _, id := range ids {
		turn(t, m, id, "one")
	}
	m2 := New(m.deps, m.cfg)
	require.NoError(t, m2.Recover(context.Background()))
	m2.mu.Lock()
	assert.Empty(t, m2.live, "nothing is loaded at start")
	m2.mu.Unlock()
	got, err := m2.Get(context.Background(), ids[1])
	require.NoError(t, err)
	assert.Equal(t, 1, got.Turns)
	run := turn(t, m2, ids[1], "two")
	assert.Equal(t, 2, run.SessionTurn)
	m2.mu.Lock()
	assert.Len(t, m2.live, 1, "only the session in use is in memory")
	m2.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m2.Shutdown(ctx)
	m2.Wait(ctx)
}
