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

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/spawn"
)

type fakeBinaries struct{}

func (fakeBinaries) Binary(_ context.Context, id string) (string, api.ExternalAgentSpec, error) {
	return "/bin/false", api.ExternalAgentSpec{ID: id, BinaryPath: "/bin/false", ReadOnlyEnforcement: api.ReadOnlyEnforcement("allowlist")}, nil
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

func (a *fakeAgent) Turn(ctx context.Context, t spawn.TurnSpec) (api.Result, error) {
	if n := a.w.inTurn.Add(1); n > a.w.maxInTurn.Load() {
		a.w.maxInTurn.Store(n)
	}
	defer a.w.inTurn.Add(-1)
	n := a.turns.Add(1)
	if hold := a.w.hold; hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return api.Result{}, &spawn.Error{Kind: api.KindCancelled, Message: "cancelled"}
		case <-a.done:
			return api.Result{}, errors.New("the agent died")
		}
	}
	t.OnEvent(spawn.Event{Kind: api.EventText, Text: fmt.Sprintf("pid %d turn %d: %s", a.pid, n, t.Prompt)})
	res := api.Result{Answer: t.Prompt, SessionID: a.sid}
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

func (a *fakeAgent) Pid() int { return a.pid }

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
			return plan.Turn{}, &api.FieldError{Field: "session_id", Message: "not supported"}
		}
		if fw.noColdResume && c.Resume != "" {
			return plan.Turn{}, &api.FieldError{Field: "resume", Message: "this CLI cannot resume the conversation in a new process"}
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
	s, err := m.Start(context.Background(), api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code"}}, []string{}, "")
	require.NoError(t, err)
	return s.SessionID
}

// turn prompts id and waits for the turn's outcome.
func turn(t *testing.T, m *Manager, id, task string) api.Run {
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

// fakePlanner plans a turn with a function, and checks by planning one.
type fakePlanner func(p api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Turn, error)

func (f fakePlanner) SessionTurn(p api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Turn, error) {
	return f(p, task, atts, c)
}

func (f fakePlanner) Check(p api.SessionStartParams, task string, atts []api.Attachment, c plan.Continue) (plan.Checked, error) {
	t, err := f(p, task, atts, c)
	return plan.Checked{Cwd: t.Run.Cwd, Mode: t.Run.Mode}, err
}
