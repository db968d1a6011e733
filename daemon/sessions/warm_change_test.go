package sessions

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

func TestConfiguringAnIdleSessionEndsItsWarmAgentAndTheNextTurnResumesWithTheNewSettings(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	turn(t, m, id, "one")
	res, err := m.Configure(context.Background(), id, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Model: "opus"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"model"}, res.Changed)
	assert.Equal(t, "ended", res.WarmAgent)
	assert.Equal(t, 2, res.AppliesFromTurn)
	assert.False(t, fw.agent(0).Alive(), "the agent started with the old model still runs")
	assert.False(t, res.Session.Warm)
	assert.Equal(t, "opus", res.Session.Model)
	turn(t, m, id, "two")
	starts := fw.started()
	require.Len(t, starts, 2)
	assert.Equal(t, "opus", starts[1].Request.Model)
	assert.Equal(t, "cli-session-1", starts[1].Request.Resume, "the new agent goes on with the conversation")
	row, err := m.st.GetSession(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, "opus", row.Model, "the change is recorded with the session")
	assert.Contains(t, string(row.Params), `"model":"opus"`)
}

func TestConfiguringDuringATurnLetsItFinishOnItsAgentAndTheNextTurnGetsANewOne(t *testing.T) {
	fw := &fakeWarmer{hold: make(chan struct{})}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	res, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: id, Task: "one"}, Sender{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fw.inTurn.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	queued, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: id, Task: "two"}, Sender{})
	require.NoError(t, err)
	require.True(t, queued.Queued)

	cr, err := m.Configure(context.Background(), id, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Model: "opus"}})
	require.NoError(t, err)
	assert.Equal(t, "ends_after_turn", cr.WarmAgent)
	assert.Equal(t, 1, cr.RunningTurn)
	assert.Equal(t, 2, cr.AppliesFromTurn, "the queued prompt is the first turn with the change")
	assert.True(t, fw.agent(0).Alive(), "the running turn's agent was ended under it")
	fw.hold <- struct{}{}
	fw.hold <- struct{}{}
	waitIdle(t, m, id)
	one, err := m.st.Get(context.Background(), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, one.Status, "the running turn finished on its own agent")
	assert.False(t, fw.agent(0).Alive())
	starts := fw.started()
	require.Len(t, starts, 2)
	assert.Empty(t, starts[0].Request.Model)
	assert.Equal(t, "opus", starts[1].Request.Model)
	assert.Equal(t, "cli-session-1", starts[1].Request.Resume)
}

// A conversation the CLI cannot resume in a new process (Gemini's in ask
// mode) goes on over the warm agent that holds it; once that agent has
// ended, the next prompt is refused naming resume, and no process is
// started that would begin a new conversation in its place.
func TestAConversationOnlyItsWarmAgentHoldsGoesOnOverItAndIsRefusedOnceItEnds(t *testing.T) {
	fw := &fakeWarmer{noColdResume: true}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	one := turn(t, m, id, "one")
	two := turn(t, m, id, "two")
	assert.Equal(t, api.StatusSucceeded, one.Status)
	assert.Equal(t, api.StatusSucceeded, two.Status, two.RefusalReason)
	require.Len(t, fw.started(), 1, "both turns over the one agent")
	assert.EqualValues(t, 2, fw.agent(0).turns.Load())

	fw.agent(0).die()
	require.Eventually(t, func() bool { s, _ := m.Get(context.Background(), id); return !s.Warm }, 5*time.Second, 5*time.Millisecond)
	_, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: id, Task: "three"}, Sender{})
	var fe *api.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "resume", fe.Field)
	assert.Len(t, fw.started(), 1, "no new agent, which would be a new conversation")
}

// A CLI that reports its session's running total has each turn charged
// only what the turn added: over the same warm agent, over a new agent
// resuming the session after the first idled out, and after a restart,
// when the base is read back from the turns' runs in the store.
func TestATurnOfACLIReportingItsSessionsRunningTotalIsChargedOnlyItsOwnPart(t *testing.T) {
	fw := &fakeWarmer{sessionTotal: true}
	m := newWarmManager(t, fw, Config{IdleTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	id := startFor(t, m)
	one := turn(t, m, id, "one")
	two := turn(t, m, id, "two")
	require.Len(t, fw.started(), 1, "turn two went over the same agent")
	require.Eventually(t, func() bool { return !fw.agent(0).Alive() }, 5*time.Second, 5*time.Millisecond, "the idle agent was not ended")
	three := turn(t, m, id, "three")

	// A restart: the session is read back from the store.
	require.Eventually(t, func() bool { return !fw.agent(1).Alive() }, 5*time.Second, 5*time.Millisecond, "the idle agent was not ended")
	m.mu.Lock()
	delete(m.live, id)
	m.mu.Unlock()
	require.NoError(t, m.Recover(ctx))
	four := turn(t, m, id, "four")

	starts := fw.started()
	require.Len(t, starts, 3)
	assert.Equal(t, api.Usage{}, starts[0].Request.UsageBase, "a new session starts from nothing")
	assert.Equal(t, api.Usage{InputTokens: 20, OutputTokens: 10}, starts[1].Request.UsageBase, "the agent resuming the session starts from its total")
	assert.Equal(t, api.Usage{InputTokens: 30, OutputTokens: 15}, starts[2].Request.UsageBase, "after a restart the base is the stored total")
	for i, r := range []api.Run{one, two, three, four} {
		run, err := m.st.Get(ctx, r.RunID)
		require.NoError(t, err)
		require.NotNil(t, run.Usage)
		assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 5}, *run.Usage, "turn %d", i+1)
		require.NotNil(t, run.SessionUsage, "turn %d's total is kept for the next", i+1)
		assert.Equal(t, api.Usage{InputTokens: int64(10 * (i + 1)), OutputTokens: int64(5 * (i + 1))}, *run.SessionUsage)
	}
	s, err := m.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, api.Usage{InputTokens: 40, OutputTokens: 20}, s.Usage, "the session's usage is its turns' sum")
}

// sessions.release ends an idle session's warm agent at once and keeps the
// session: it is not closed, and its next turn starts a new agent that
// resumes the CLI's session.
func TestReleasingASessionEndsItsIdleWarmAgentAndItsNextTurnResumesTheConversation(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{IdleTimeout: time.Hour})
	id := startFor(t, m)
	turn(t, m, id, "one")
	res, err := m.Release(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, "ended", res.WarmAgent)
	assert.False(t, fw.agent(0).Alive(), "the warm agent outlived its release")
	assert.False(t, res.Session.Warm)
	assert.Equal(t, api.SessionIdle, res.Session.State, "a released session stays open")
	assert.Zero(t, m.warm.count())
	again, err := m.Release(context.Background(), id)
	require.NoError(t, err)
	assert.Empty(t, again.WarmAgent, "no agent to end")
	two := turn(t, m, id, "two")
	assert.Equal(t, api.StatusSucceeded, two.Status)
	starts := fw.started()
	require.Len(t, starts, 2)
	assert.Equal(t, "cli-session-1", starts[1].Request.Resume, "the next turn goes on with the conversation")
}

// Released during a turn, the agent finishes the turn and then ends.
func TestReleasingASessionDuringATurnEndsItsAgentOnceTheTurnIsOver(t *testing.T) {
	fw := &fakeWarmer{hold: make(chan struct{})}
	m := newWarmManager(t, fw, Config{IdleTimeout: time.Hour})
	id := startFor(t, m)
	res, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: id, Task: "one"}, Sender{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return fw.inTurn.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	rel, err := m.Release(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, "ends_after_turn", rel.WarmAgent)
	assert.True(t, fw.agent(0).Alive(), "the running turn's agent was ended under it")
	fw.hold <- struct{}{}
	waitIdle(t, m, id)
	run, err := m.st.Get(context.Background(), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, run.Status)
	require.Eventually(t, func() bool { return !fw.agent(0).Alive() }, 5*time.Second, 5*time.Millisecond)
}

// A conversation only its warm agent holds would end with it: a release
// keeps that agent (to end at idle_secs as before) and says so.
func TestReleasingAConversationOnlyItsWarmAgentHoldsKeepsTheAgent(t *testing.T) {
	fw := &fakeWarmer{noColdResume: true}
	m := newWarmManager(t, fw, Config{IdleTimeout: time.Hour})
	id := startFor(t, m)
	turn(t, m, id, "one")
	res, err := m.Release(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, "kept", res.WarmAgent)
	assert.True(t, fw.agent(0).Alive())
	assert.Equal(t, api.StatusSucceeded, turn(t, m, id, "two").Status, "the conversation goes on over its agent")
}
