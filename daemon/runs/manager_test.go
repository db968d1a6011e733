package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/spawn"
)

// fakeBinaries resolves every adapter to one binary, or to err.
type fakeBinaries struct {
	bin      string
	readOnly api.ReadOnlyEnforcement
	err      error
}

func (f fakeBinaries) Binary(_ context.Context, id string) (string, api.ExternalAgentSpec, error) {
	if f.err != nil {
		return "", api.ExternalAgentSpec{}, f.err
	}
	return f.bin, api.ExternalAgentSpec{ID: id, BinaryPath: f.bin, ReadOnlyEnforcement: f.readOnly}, nil
}

// fakeClaude writes a stand-in Claude Code that reads the task from stdin
// and replays the real captured stream with its assistant line repeated n
// times; a task containing SLEEP makes it wait a minute first.
func fakeClaude(t *testing.T, n int) string {
	t.Helper()
	fx, err := filepath.Abs(filepath.Join("..", "..", "spawn", "testdata", "claude-stream-success.jsonl"))
	require.NoError(t, err)
	script := fmt.Sprintf(`#!/bin/sh
task=$(cat)
case "$task" in *SLEEP*) sleep 60 & wait;; esac
head -n 1 %[1]q
i=0; while [ $i -lt %[2]d ]; do sed -n 2p %[1]q; i=$((i+1)); done
tail -n 1 %[1]q
`, fx, n)
	path := filepath.Join(t.TempDir(), "claude")
	require.NoError(t, proc.WriteExecutable(path, []byte(script)))
	return path
}

// newManager is a run subsystem over a fresh store, with no daemon: the
// dependencies are the fakes a test hands it.
func newManager(t *testing.T, bins Binaries, cfg Config) (*Manager, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "runs.db"), store.Options{})
	require.NoError(t, err)
	if cfg.MaxConcurrentRuns == 0 {
		cfg.MaxConcurrentRuns = 4
	}
	if cfg.MaxEventsPerRun == 0 {
		cfg.MaxEventsPerRun = 100
	}
	m := New(Deps{Store: st, Binaries: bins, Guard: guard.Snapshot{MaxChain: 3},
		Env: map[string]string{"HOME": t.TempDir()}, PATH: func() string { return "/usr/bin:/bin" }, Log: zaptest.NewLogger(t)}, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		_ = st.Close()
	})
	return m, st
}

// sleeping starts a run whose agent sleeps a minute, and returns a context
// for waiting on it.
func sleeping(t *testing.T, cfg Config) (*Manager, *Run, context.Context) {
	t.Helper()
	m, _ := newManager(t, fakeBinaries{bin: fakeClaude(t, 1)}, cfg)
	run, err := m.Start(context.Background(), claudeRequest(t, "SLEEP"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return m, run, ctx
}

func claudeRequest(t *testing.T, task string) Request {
	t.Helper()
	dir := t.TempDir()
	plan, err := spawn.Build("", spawn.Request{Adapter: "claude-code", Cwd: dir})
	require.NoError(t, err)
	return Request{Adapter: "claude-code", Task: task, Mode: spawn.ModeReadOnly, Plan: plan, Cwd: dir, Timeout: time.Minute}
}

// A run's kept events are what subscribers get, live or replayed from the
// store afterwards, and the run's record counts what the bound left out.
func TestARunsEventsAreSentStoredAndReplayedAlikeAndItsDropsAreRecorded(t *testing.T) {
	m, st := newManager(t, fakeBinaries{bin: fakeClaude(t, 20)}, Config{MaxEventsPerRun: 5})
	run, err := m.Start(context.Background(), claudeRequest(t, "say pong"))
	require.NoError(t, err)
	live := &collector{}
	followed := make(chan struct{})
	go func() { _ = run.Follow(context.Background(), live.send, 0); close(followed) }()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := run.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, res.Status)
	<-followed
	got := live.got()
	require.Len(t, got, 6, "five kept events and the terminal one")
	assert.Equal(t, []int64{1, 2, 3, 4, 5}, got[:5])

	rec, err := m.Get(ctx, run.ID())
	require.NoError(t, err)
	assert.Equal(t, got[5]-6, rec.EventsDropped, "every seq not kept is counted")

	require.Eventually(t, func() bool { return m.lookup(run.ID()) == nil }, 10*time.Second, 10*time.Millisecond,
		"the run leaves the live set once the store has its events")
	stored, err := st.Events(ctx, run.ID(), 0, 0)
	require.NoError(t, err)
	require.Len(t, stored, 6)
	sub, events, err := m.Subscribe(ctx, run.ID(), 2)
	require.NoError(t, err)
	assert.False(t, sub.Live)
	replayed := &collector{}
	require.NoError(t, events(ctx, replayed.send))
	assert.Equal(t, got[2:], replayed.got(), "the replay from the store is the live stream after after_seq")
}

func TestARefusedRunIsRecordedAndTheRefusalNamesTheRecord(t *testing.T) {
	missing := &detect.NotInstalledError{ID: "claude-code", Binary: "claude"}
	m, _ := newManager(t, fakeBinaries{err: missing}, Config{})
	_, err := m.Start(context.Background(), claudeRequest(t, "say pong"))
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	assert.ErrorIs(t, err, missing)
	rec, err := m.Get(context.Background(), refused.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusRefused, rec.Status)
	assert.Equal(t, missing.Error(), rec.RefusalReason)

	_, err = m.Get(context.Background(), "run_nope")
	var nf *NotFoundError
	assert.ErrorAs(t, err, &nf)
}

func TestCancelEndsALiveRunAndSaysSoOnceItHasEnded(t *testing.T) {
	m, run, ctx := sleeping(t, Config{})
	res, err := m.Cancel(ctx, run.ID())
	require.NoError(t, err)
	assert.True(t, res.Cancelled)
	assert.Equal(t, api.StatusCancelled, res.Status)
	again, err := m.Cancel(ctx, run.ID())
	require.NoError(t, err)
	assert.False(t, again.Cancelled)
	assert.NotEmpty(t, again.Reason)
}

// With cancel_on_disconnect the run ends with the connection that asked for
// it; without, it outlives it.
func TestARunEndsWithItsConnectionOnlyWhenTheOperatorSaysSo(t *testing.T) {
	for _, tie := range []bool{true, false} {
		t.Run(fmt.Sprint("cancel_on_disconnect=", tie), func(t *testing.T) {
			m, _ := newManager(t, fakeBinaries{bin: fakeClaude(t, 1)}, Config{CancelOnDisconnect: tie})
			conn, hangUp := context.WithCancel(context.Background())
			req := claudeRequest(t, "SLEEP")
			req.Conn = conn
			run, err := m.Start(context.Background(), req)
			require.NoError(t, err)
			hangUp()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			res, err := run.Wait(ctx)
			if !tie {
				var ended *WaitEndedError
				require.ErrorAs(t, err, &ended, "the run goes on")
				assert.Equal(t, run.ID(), ended.RunID)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, api.StatusCancelled, res.Status)
		})
	}
}

// Shutdown ends live runs as interrupted and refuses new ones.
func TestShutdownInterruptsLiveRunsAndRefusesNewOnes(t *testing.T) {
	m, run, ctx := sleeping(t, Config{})
	m.Shutdown(ctx)
	res, err := run.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, api.StatusInterrupted, res.Status)
	_, err = m.Start(ctx, claudeRequest(t, "say pong"))
	assert.ErrorIs(t, err, ErrShuttingDown)
}

// The history is pruned to its retention in the background: at start, and
// as soon as a burst of runs was recorded, without waiting for the ticker.
// A run still going is never pruned.
func TestTheHistoryIsPrunedToItsRetentionAfterABurst(t *testing.T) {
	missing := &detect.NotInstalledError{ID: "claude-code", Binary: "claude"}
	m, st := newManager(t, fakeBinaries{err: missing}, Config{Retention: store.Retention{MaxRuns: 20}, PruneEvery: time.Hour})
	ctx := context.Background()
	// The oldest runs: one refused, one ended whose events the manager is
	// still storing (it holds it live).
	require.NoError(t, st.Create(ctx, api.Run{RunID: "run_000", Adapter: "claude-code", Status: api.StatusRefused}))
	require.NoError(t, st.Create(ctx, api.Run{RunID: "run_00live", Adapter: "claude-code", Status: api.StatusSucceeded}))
	m.mu.Lock()
	m.live["run_00live"] = &Run{id: "run_00live", cancel: func(error) {}}
	m.mu.Unlock()
	m.StartPruning()
	for i := 0; i < 60; i++ {
		_, err := m.Start(ctx, claudeRequest(t, "x"))
		require.Error(t, err)
	}
	// At most one burst's worth (pruneAfter) past the retention, plus the
	// held run, once the pruner caught up.
	require.Eventually(t, func() bool {
		n, err := m.List(ctx, store.ListQuery{Limit: api.MaxListLimit})
		return err == nil && int64(len(n)) <= 20+m.pruneAfter+1
	}, 10*time.Second, 20*time.Millisecond, "the burst was not pruned")
	_, err := m.Get(ctx, "run_000")
	assert.Error(t, err, "the oldest run was pruned")
	_, err = m.Get(ctx, "run_00live")
	assert.NoError(t, err, "a run the manager still holds is kept")

	_, err = m.Prune(ctx, store.Retention{MaxRuns: 20})
	require.NoError(t, err)
	res, err := m.Prune(ctx, store.Retention{MaxRuns: 1, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, api.Pruned{Runs: 19, Kept: 2}, res, "all but the newest and the held one")
	m.mu.Lock()
	delete(m.live, "run_00live")
	m.mu.Unlock()
}

// A run's result and its record say one duration, card's own: an agent's
// own figure (Claude Code's duration_ms leaves out its start-up) is not
// what a person waited, and `card invoke` and `card runs` printed both.
func TestARunsResultTakesTheDurationItsRecordHas(t *testing.T) {
	m, _ := newManager(t, fakeBinaries{bin: "/bin/true"}, Config{})
	req := claudeRequest(t, "say pong")
	req.Exec = func(ctx context.Context, spec spawn.RunSpec) (api.Result, error) {
		time.Sleep(300 * time.Millisecond)
		return api.Result{Answer: "pong", DurationMs: 7}, nil
	}
	run, err := m.Start(context.Background(), req)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := run.Wait(ctx)
	require.NoError(t, err)
	rec, err := m.Get(ctx, run.ID())
	require.NoError(t, err)
	require.NotNil(t, rec.DurationMs)
	assert.Equal(t, *rec.DurationMs, res.DurationMs)
	assert.GreaterOrEqual(t, res.DurationMs, int64(300), "the run took the 300 ms it slept, whatever the agent said")
}

// A run that did not succeed ends with an error event whose own error
// field says why, as its doc says: the result's error message, or the
// status in words when there is none.
func TestTheTerminalErrorEventSaysWhyInItsErrorField(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  api.Result
		want string
	}{
		{"the agent's error", api.Result{Error: &api.RunError{Kind: "exit", Message: "claude exited 1: boom"}}, "claude exited 1: boom"},
		{"no message", api.Result{}, "the run failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, st := newManager(t, fakeBinaries{bin: "/bin/true"}, Config{})
			req := claudeRequest(t, "say pong")
			req.Exec = func(ctx context.Context, spec spawn.RunSpec) (api.Result, error) {
				return tc.res, &spawn.Error{Kind: api.KindExit, Message: "boom", ExitCode: 1}
			}
			run, err := m.Start(context.Background(), req)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = run.Wait(ctx)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return m.lookup(run.ID()) == nil }, 10*time.Second, 10*time.Millisecond)
			stored, err := st.Events(ctx, run.ID(), 0, 0)
			require.NoError(t, err)
			require.NotEmpty(t, stored)
			var last api.AgentEvent
			require.NoError(t, json.Unmarshal(stored[len(stored)-1].Payload, &last))
			assert.Equal(t, api.EventRunError, last.Kind)
			assert.Equal(t, api.StatusFailed, last.Status)
			assert.Equal(t, tc.want, last.Error)
		})
	}
}
