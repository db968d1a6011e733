package sessions

import (
	"context"
	"errors"
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
	m := newWarmManager(t, &fakeWarmer{}, Config{CloseIdle: 300 * time.Millisecond, PruneClosed: 1500 * time.Millisecond, SweepEvery: 20 * time.Millisecond, MaxWarm: -1})
	ctx := context.Background()
	idle := startFor(t, m)
	busy := startFor(t, m)
	m.StartSweeping()
	deadline := time.Now().Add(900 * time.Millisecond)
	for time.Now().Before(deadline) {
		turn(t, m, busy, "keep me busy")
		got, err := m.Get(ctx, busy)
		require.NoError(t, err)
		require.NotEqual(t, api.SessionClosed, got.State, "a session in use is not idle")
		time.Sleep(30 * time.Millisecond)
	}
	got, err := m.st.GetSession(ctx, idle)
	require.NoError(t, err, "closed about 600 ms ago: not pruned yet")
	assert.Equal(t, string(api.SessionClosed), got.State)
	assert.Contains(t, got.CloseReason, "close_idle_hours")
	require.Eventually(t, func() bool {
		_, err := m.Get(ctx, idle)
		var nf *NotFoundError
		return errors.As(err, &nf)
	}, 5*time.Second, 20*time.Millisecond, "the idle session was closed, and once closed long enough ago, deleted")
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
