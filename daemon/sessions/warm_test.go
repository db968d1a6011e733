package sessions

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/spawn"
)

type fakeBinaries struct{}

func (fakeBinaries) Binary(_ context.Context, id string) (string, detect.ExternalAgentSpec, error) {
	return "/bin/false", detect.ExternalAgentSpec{ID: id, BinaryPath: "/bin/false", ReadOnlyEnforcement: detect.ReadOnlyEnforcement("allowlist")}, nil
}

// fakeAgent is a warm agent that answers each turn with the number of the
// turn it is in its own life, after hold (when set) lets it.
type fakeAgent struct {
	w     *fakeWarmer
	pid   int
	done  chan struct{}
	once  sync.Once
	turns atomic.Int32
	steer chan string
	// sid is the session id its turns report: the one card named for an
	// adapter whose sessions card names, as the real agent does.
	sid string
	// used is the CLI session's total its last turn left: at first the
	// base it was started with.
	used api.Usage
}

func (a *fakeAgent) Turn(ctx context.Context, t spawn.TurnSpec) (spawn.Result, error) {
	if n := a.w.inTurn.Add(1); n > a.w.maxInTurn.Load() {
		a.w.maxInTurn.Store(n)
	}
	defer a.w.inTurn.Add(-1)
	n := a.turns.Add(1)
	if hold := a.w.hold; hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return spawn.Result{}, &spawn.Error{Kind: spawn.KindCancelled, Message: "cancelled"}
		case <-a.done:
			return spawn.Result{}, errors.New("the agent died")
		}
	}
	t.OnEvent(spawn.Event{Kind: spawn.EventText, Text: fmt.Sprintf("pid %d turn %d: %s", a.pid, n, t.Prompt)})
	res := spawn.Result{Answer: t.Prompt, SessionID: a.sid}
	if a.w.sessionTotal {
		// As a CLI reporting its session's running total, which a new
		// process resuming the session carries on: the turn's part is
		// what it added to the base the agent started from.
		a.w.mu.Lock()
		a.w.total.InputTokens += 10
		a.w.total.OutputTokens += 5
		total := a.w.total
		a.w.mu.Unlock()
		res.Usage = api.Usage{InputTokens: total.InputTokens - a.used.InputTokens, OutputTokens: total.OutputTokens - a.used.OutputTokens}
		a.used = total
		res.SessionUsage = &total
	}
	return res, nil
}
func (a *fakeAgent) Pid() int              { return a.pid }
func (a *fakeAgent) Done() <-chan struct{} { return a.done }
func (a *fakeAgent) Alive() bool {
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}
func (a *fakeAgent) Close() { a.die() }
func (a *fakeAgent) die() {
	a.once.Do(func() { a.w.alive.Add(-1); close(a.done) })
}

// steeringAgent is a fakeAgent whose CLI takes input during a turn.
type steeringAgent struct{ *fakeAgent }

func (a steeringAgent) Steer(_ context.Context, text string) error { a.steer <- text; return nil }

type fakeWarmer struct {
	mu        sync.Mutex
	starts    []WarmStart
	agents    []*fakeAgent
	steerable bool
	hold      chan struct{}
	// startHold, when set, holds each Start until it is sent to.
	startHold chan struct{}
	// noColdResume makes the plan of a turn that resumes the CLI session
	// fail, as Gemini's ask channel does: only the warm agent holds it.
	noColdResume bool
	// sessionTotal makes the agents report the CLI session's running
	// total (total), as Copilot does, each turn adding 10 in and 5 out.
	sessionTotal bool
	total        api.Usage
	alive        atomic.Int32
	inTurn       atomic.Int32
	maxInTurn    atomic.Int32
}

func (w *fakeWarmer) CanWarm(string) (bool, string) { return true, "" }
func (w *fakeWarmer) Start(ctx context.Context, ws WarmStart) (Agent, error) {
	if w.startHold != nil {
		<-w.startHold
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.starts = append(w.starts, ws)
	a := &fakeAgent{w: w, pid: 1000 + len(w.starts), done: make(chan struct{}), steer: make(chan string, 4), sid: "cli-session-1",
		used: ws.Request.UsageBase}
	if spawn.CardNamesSession(ws.Request.Adapter) {
		a.sid = ws.Request.Resume
	}
	w.agents = append(w.agents, a)
	w.alive.Add(1)
	if w.steerable {
		return steeringAgent{a}, nil
	}
	return a, nil
}

func (w *fakeWarmer) started() []WarmStart {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WarmStart(nil), w.starts...)
}

func (w *fakeWarmer) agent(i int) *fakeAgent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.agents[i]
}

// newWarmManager is a session manager over a real run subsystem and store
// whose turns go over fw's agents.
func newWarmManager(t *testing.T, fw *fakeWarmer, cfg Config) *Manager {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "runs.db"), store.Options{})
	require.NoError(t, err)
	rm := runs.New(runs.Deps{Store: st, Binaries: fakeBinaries{}, Guard: guard.Snapshot{MaxChain: 3},
		Env: map[string]string{"HOME": t.TempDir()}, PATH: func() string { return "/usr/bin:/bin" }, Log: zaptest.NewLogger(t)},
		runs.Config{MaxConcurrentRuns: 8, MaxEventsPerRun: 100, MaxOutputBytes: 1 << 20})
	cwd, sessionDir := t.TempDir(), t.TempDir()
	prepare := fakePlanner(func(p api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Turn, error) {
		if c.SessionID != "" {
			// As Codex and Droid: the CLI picks its own session id.
			return plan.Turn{}, &spawn.FieldError{Field: "session_id", Message: "not supported"}
		}
		if fw.noColdResume && c.Resume != "" {
			return plan.Turn{}, &spawn.FieldError{Field: "resume", Message: "this CLI cannot resume the conversation in a new process"}
		}
		sreq := spawn.Request{Adapter: p.ID, Mode: spawn.ModeReadOnly, Cwd: cwd, Resume: c.Resume, Model: p.Model, AgentSessionDir: sessionDir,
			UsageBase: c.UsageBase}
		built, err := spawn.Build("", sreq)
		if err != nil {
			return plan.Turn{}, err
		}
		return plan.Turn{Run: runs.Request{Adapter: p.ID, Task: task, Mode: spawn.ModeReadOnly, Plan: built, Cwd: cwd, Timeout: 30 * time.Second}, Spawn: sreq}, nil
	})
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = time.Minute
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 8
	}
	if cfg.MaxWarm == 0 {
		cfg.MaxWarm = 4
	}
	m := New(Deps{Store: st, Runs: rm, Planner: prepare, Warmer: fw, Log: zaptest.NewLogger(t)}, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		rm.Shutdown(ctx)
		m.Wait(ctx)
		_ = st.Close()
	})
	return m
}

func startFor(t *testing.T, m *Manager) string {
	t.Helper()
	s, err := m.Start(context.Background(), api.SessionStartParams{ID: "claude-code"}, []string{}, "")
	require.NoError(t, err)
	return s.SessionID
}

// turn prompts id and waits for the turn's outcome.
func turn(t *testing.T, m *Manager, id, task string) store.Run {
	t.Helper()
	res, err := m.Prompt(context.Background(), api.SessionPromptParams{SessionID: id, Task: task}, Sender{})
	require.NoError(t, err)
	require.False(t, res.Queued)
	waitIdle(t, m, id)
	run, err := m.st.Get(context.Background(), res.RunID)
	require.NoError(t, err)
	return run
}

func waitIdle(t *testing.T, m *Manager, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, err := m.Get(context.Background(), id)
		return err == nil && s.State == api.SessionIdle
	}, 5*time.Second, 5*time.Millisecond)
}

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
	s, err := m.Start(context.Background(), api.SessionStartParams{ID: "pi"}, []string{}, "")
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

	other, err := m.Start(context.Background(), api.SessionStartParams{ID: "claude-code"}, []string{}, "")
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
	s, err := m.Start(context.Background(), api.SessionStartParams{ID: "claude-code", Warm: true}, []string{}, "")
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

func TestConfiguringAnIdleSessionEndsItsWarmAgentAndTheNextTurnResumesWithTheNewSettings(t *testing.T) {
	fw := &fakeWarmer{}
	m := newWarmManager(t, fw, Config{})
	id := startFor(t, m)
	turn(t, m, id, "one")
	res, err := m.Configure(context.Background(), id, api.SessionStartParams{ID: "claude-code", Model: "opus"})
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

	cr, err := m.Configure(context.Background(), id, api.SessionStartParams{ID: "claude-code", Model: "opus"})
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
	var fe *spawn.FieldError
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
	for i, r := range []store.Run{one, two, three, four} {
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

// fakePlanner plans a turn with a function, and checks by planning one.
type fakePlanner func(p api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Turn, error)

func (f fakePlanner) SessionTurn(p api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Turn, error) {
	return f(p, task, atts, c)
}

func (f fakePlanner) Check(p api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Checked, error) {
	t, err := f(p, task, atts, c)
	return plan.Checked{Cwd: t.Run.Cwd, Mode: t.Run.Mode}, err
}
