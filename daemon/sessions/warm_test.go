package sessions

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

func TestASecondTurnGoesOverTheSameWarmAgent(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	one := turn(t, m, id, "one")
	two := turn(t, m, id, "two")
	assert.Equal(t, api.StatusSucceeded, one.Status)
	assert.Equal(t, api.StatusSucceeded, two.Status)
	require.Len(t, fw.started(), 1, "one agent for both turns")
	assert.EqualValues(t, 2, fw.agent(0).turns.Load())
	s, err := m.Get(context.Background(), id)
	require.NoError(t, err)
	assert.True(t, s.Warm)
	assert.Equal(t, 1001, s.Pid)
	row, err := m.st.GetSession(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, 1001, row.WarmPgid, "the warm agent's group is recorded for a restart after a crash")
	assert.Contains(t, fw.started()[0].Spec.BaseEnv, SessionIDEnv+"="+id, "the agent carries its session's tag")
	run, err := m.st.Get(context.Background(), two.RunID)
	require.NoError(t, err)
	assert.Equal(t, 1001, run.Pgid)
}

func TestAWarmAgentIdleForItsTimeoutEndsAndTheNextTurnResumesTheSession(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{IdleTimeout: 50 * time.Millisecond})
	id := startFor(t, m)
	turn(t, m, id, "one")
	require.Eventually(t, func() bool { return !fw.agent(0).Alive() }, 5*time.Second, 5*time.Millisecond, "the idle agent was not ended")
	s, err := m.Get(context.Background(), id)
	require.NoError(t, err)
	assert.False(t, s.Warm)
	turn(t, m, id, "two")
	starts := fw.started()
	require.Len(t, starts, 2)
	assert.Empty(t, starts[0].Request.Resume)
	assert.Equal(t, "cli-session-1", starts[1].Request.Resume, "the new agent resumes the CLI's session")
}

// Pi keeps its conversation in a file card names: the session's id is
// card's from sessions.start, every agent (the first included) resumes
// it, and a turn that failed before the CLI said anything does not let it
// go, since the file is card's to name.
func TestASessionWhoseIDCardNamesHasItFromTheStartAndEveryAgentResumesIt(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{IdleTimeout: 50 * time.Millisecond})
	s, err := m.Start(context.Background(), api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "pi"}}, []string{}, "")
	require.NoError(t, err)
	id := s.AgentSessionID
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, id)
	turn(t, m, s.SessionID, "one")
	require.Eventually(t, func() bool { return !fw.agent(0).Alive() }, 5*time.Second, 5*time.Millisecond)
	fw.hold = make(chan struct{})
	res, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: s.SessionID, Task: "two"}, Sender{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(fw.started()) == 2 && fw.inTurn.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	fw.agent(1).die()
	waitIdle(t, m, s.SessionID)
	failed, err := m.st.Get(context.Background(), res.RunID)
	require.NoError(t, err)
	require.NotEqual(t, api.StatusSucceeded, failed.Status)
	fw.hold = nil
	turn(t, m, s.SessionID, "three")
	starts := fw.started()
	require.Len(t, starts, 3)
	for i, st := range starts {
		assert.Equal(t, id, st.Request.Resume, "agent %d resumes the session card named", i)
	}
	got, err := m.Get(context.Background(), s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, id, got.AgentSessionID)

	other, err := m.Start(context.Background(), api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code"}}, []string{}, "")
	require.NoError(t, err)
	assert.Empty(t, other.AgentSessionID, "the other CLIs name their own")
}

func TestPastMaxWarmTheLeastRecentlyUsedAgentEndsFirst(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{MaxWarm: 2})
	a, b, c := startFor(t, m), startFor(t, m), startFor(t, m)
	turn(t, m, a, "a1")
	turn(t, m, b, "b1")
	turn(t, m, a, "a2") // a is now the most recently used
	turn(t, m, c, "c1")
	assert.True(t, fw.agent(0).Alive(), "a's agent was used last but one")
	assert.False(t, fw.agent(1).Alive(), "b's agent was the least recently used")
	assert.True(t, fw.agent(2).Alive())
	assert.EqualValues(t, 2, fw.alive.Load())
	turn(t, m, b, "b2")
	assert.False(t, fw.agent(0).Alive(), "then a's")
	assert.EqualValues(t, 2, fw.alive.Load(), "never more than max_warm")
	assert.Equal(t, "cli-session-1", fw.started()[3].Request.Resume)
}

func TestAnAgentThatDiedIsReplacedByOneThatResumesTheSession(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	turn(t, m, id, "one")
	fw.agent(0).die()
	require.Eventually(t, func() bool { s, _ := m.Get(context.Background(), id); return !s.Warm }, 5*time.Second, 5*time.Millisecond)
	two := turn(t, m, id, "two")
	assert.Equal(t, api.StatusSucceeded, two.Status)
	require.Len(t, fw.started(), 2)
	assert.Equal(t, "cli-session-1", fw.started()[1].Request.Resume)
}

func TestOneSessionNeverHasTwoAgentsNorTwoTurnsAtOnce(t *testing.T) {
	fw := &fakeWarmer{hold: make(chan struct{})}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: id, Task: fmt.Sprint("p", i)}, Sender{})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	for i := 0; i < 5; i++ {
		fw.hold <- struct{}{}
	}
	require.Eventually(t, func() bool {
		s, _ := m.Get(context.Background(), id)
		return s.State == api.SessionIdle && s.Turns == 5 && len(s.Queue) == 0
	}, 5*time.Second, 5*time.Millisecond)
	assert.Len(t, fw.started(), 1)
	assert.EqualValues(t, 1, fw.maxInTurn.Load(), "two turns ran at once")
	assert.EqualValues(t, 5, fw.agent(0).turns.Load())
}

func TestSteerReachesARunningTurnOverAnAgentThatTakesIt(t *testing.T) {
	fw := &fakeWarmer{hold: make(chan struct{}), steerable: true}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	res, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: id, Task: "long"}, Sender{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fw.inTurn.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	st, err := m.Steer(context.Background(), api.SessionSteerParams{SessionID: id, Task: "also this"})
	require.NoError(t, err)
	assert.True(t, st.Steered)
	assert.Equal(t, res.RunID, st.RunID)
	assert.Equal(t, "also this", <-fw.agent(0).steer)
	fw.hold <- struct{}{}
	waitIdle(t, m, id)

	plain := &fakeWarmer{hold: make(chan struct{})}
	m2 := newWarmManager(t, plain, Config{})
	id2 := startFor(t, m2)
	_, err = m2.Prompt(context.Background(), api.SessionPromptParams{SessionID: id2, Task: "long"}, Sender{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return plain.inTurn.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	_, err = m2.Steer(context.Background(), api.SessionSteerParams{SessionID: id2, Task: "x"})
	var su *SteerUnsupportedError
	require.ErrorAs(t, err, &su)
	assert.Contains(t, su.Reason, "no channel")
	plain.hold <- struct{}{}
	waitIdle(t, m2, id2)
}

func TestClosingASessionEndsItsWarmAgent(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	turn(t, m, id, "one")
	_, err := m.Close(context.Background(), id, "")
	require.NoError(t, err)
	assert.False(t, fw.agent(0).Alive())
	assert.Zero(t, m.warm.count())
}

func TestAWarmStartStartsTheAgentBeforeTheFirstPromptAndTheFirstTurnWaitsForIt(t *testing.T) {
	fw := &fakeWarmer{startHold: make(chan struct{})}
	m := newWarmManager(t, fw, Config{})
	s, err := m.Start(context.Background(), api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code"}, Warm: true}, []string{}, "")
	require.NoError(t, err)
	// The first prompt arrives while the agent is still starting.
	res, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: s.SessionID, Task: "one"}, Sender{})
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	fw.startHold <- struct{}{}
	waitIdle(t, m, s.SessionID)
	run, err := m.st.Get(context.Background(), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, run.Status)
	require.Len(t, fw.started(), 1, "the turn waited for the warm start instead of starting a second agent")
	assert.EqualValues(t, 1, fw.agent(0).turns.Load())
	assert.Contains(t, fw.started()[0].Spec.BaseEnv, SessionIDEnv+"="+s.SessionID)
	assert.Equal(t, "/bin/false", fw.started()[0].Spec.Plan.Program, "the binary detection resolved")
}

func TestCancellingATurnOverAWarmAgentEndsTheTurnAndTheNextOneStillRuns(t *testing.T) {
	fw := &fakeWarmer{hold: make(chan struct{})}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	res, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: id, Task: "long"}, Sender{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fw.inTurn.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	c, err := m.Cancel(context.Background(), api.SessionCancelParams{SessionID: id})
	require.NoError(t, err)
	assert.True(t, c.Cancelled)
	waitIdle(t, m, id)
	run, err := m.st.Get(context.Background(), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusCancelled, run.Status)
	fw.hold = nil
	two := turn(t, m, id, "two")
	assert.Equal(t, api.StatusSucceeded, two.Status)
	assert.Len(t, fw.started(), 1, "the agent the cancelled turn left alive takes the next turn")
}
