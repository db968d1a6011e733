package invoke_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/proc"
)

// claudeCase is the Claude Code case of cases().
func claudeCase(t *testing.T) cliCase {
	t.Helper()
	for _, c := range cases() {
		if c.adapter == "claude-code" {
			return c
		}
	}
	t.Fatal("no claude-code case")
	return cliCase{}
}

// The real Claude Code against an API that takes the request and never
// answers (the stream opened, then nothing): the run is stalled after
// stall_secs of silence, then ended with kind stalled after
// stall_kill_secs, every process of its group gone. A start-up slower than
// stall_secs (a loaded CI machine) is a silence of its own, with its own
// stalled event, so the test counts on the last one.
func TestASilentAPIStallsTheRealClaudeThenEndsItWithItsGroup(t *testing.T) {
	tc := claudeCase(t)
	bin := standin.CLI(t, tc.bin)
	sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Stall: true}, false))
	stall, kill := 4, 8
	acc, err := sess.c.Stream(daemontest.Context(t), api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: tc.adapter, Cwd: sess.cwd, TimeoutSecs: 120, StallSecs: &stall, StallKillSecs: &kill},
		Task:          "say pong",
	}, nil)
	require.NoError(t, err)

	// While it is stalled: its state says so, and its group is alive.
	var pgid int
	var members []int
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		rec, err := sess.c.Run(daemontest.Context(t), acc.RunID)
		require.NoError(t, err)
		if rec.Status != api.StatusRunning {
			break
		}
		if rec.State == api.StateStalled && rec.Pgid != 0 {
			pgid = rec.Pgid
			members, _ = proc.GroupMembers(pgid)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NotZero(t, pgid, "runs.get never showed the run stalled")
	require.NotEmpty(t, members, "the stalled run's group %d had no live process", pgid)

	evs := sess.events.WaitEnd(t, acc.RunID, 60*time.Second)
	last := evs[len(evs)-1]
	require.Equal(t, api.EventRunError, last.Kind, daemontest.Kinds(evs))
	require.NotNil(t, last.Result.Error)
	assert.Equal(t, api.KindStalled, last.Result.Error.Kind, last.Result.Error.Message)
	assert.Contains(t, last.Result.Error.Message, "stall_kill_secs = 8")
	stalled := ofKind(evs, api.EventStalled)
	require.NotEmpty(t, stalled, daemontest.Kinds(evs))
	assert.LessOrEqual(t, len(stalled), 2, "one stalled event per silence: %s", daemontest.Kinds(evs))
	assert.EqualValues(t, 8000, stalled[len(stalled)-1].KillAfterMs)
	assert.GreaterOrEqual(t, stalled[len(stalled)-1].QuietMs, int64(4000))
	quietFor := sess.arrived.of(last).Sub(sess.arrived.of(evs[len(evs)-2]))
	t.Logf("claude-code: stalled after %d ms of silence; ended %v after the event before it; group %d had %d processes",
		stalled[len(stalled)-1].QuietMs, quietFor.Round(time.Millisecond), pgid, len(members))
	left, _ := proc.GroupMembers(pgid)
	assert.Empty(t, left, "process group %d outlived the run", pgid)
	for _, pid := range members {
		assert.False(t, proc.Alive(pid), "process %d of the group outlived the run", pid)
	}
}

// The real Claude Code against an API that answers slowly but steadily (a
// word every 1.5 s): with stall_secs 4 and stall_kill_secs 8 the run is
// never stalled and succeeds with the whole answer, though it lasts longer
// than stall_kill_secs in all, so a watchdog that counted the run's age
// instead of its silence would end it. The silence clock also covers the
// CLI's start-up, before it prints anything: Node's start of Claude Code
// has taken over 2 s on a loaded CI machine, so stall_secs leaves it 4.
func TestASlowButSteadyAPINeverStallsTheRealClaude(t *testing.T) {
	tc := claudeCase(t)
	bin := standin.CLI(t, tc.bin)
	const answer = "one two three four five six seven"
	sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Answer: answer, DeltaDelay: 1500 * time.Millisecond}, false))
	stall, kill := 4, 8
	began := time.Now()
	evs, _ := sess.invoke(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: tc.adapter, StallSecs: &stall, StallKillSecs: &kill}, Task: "count slowly"})
	took := time.Since(began)
	last := evs[len(evs)-1]
	require.Equal(t, api.EventDone, last.Kind, "%s: %+v", daemontest.Kinds(evs), last.Result.Error)
	assert.Equal(t, answer, last.Result.Answer)
	assert.Empty(t, ofKind(evs, api.EventStalled), daemontest.Kinds(evs))
	assert.Greater(t, took, time.Duration(kill)*time.Second, "the run must outlast stall_kill_secs for the test to mean anything")
}
