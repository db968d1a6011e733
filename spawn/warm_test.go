package spawn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

// warmFakes are the fake agents of each warm protocol card speaks.
var warmFakes = []struct {
	name string
	plan func(dir string) Plan
}{
	{"claude-stream-json", func(dir string) Plan {
		return Plan{Program: os.Args[0], Dir: dir, Env: map[string]string{helperEnv: "claudewarm:x"}, Input: Input{Format: InputClaudeMessage},
			Session: &SessionPlan{Protocol: protocolClaudeStream, Adapter: agent.ClaudeCode}}
	}},
	{"acp", func(dir string) Plan {
		return Plan{Program: os.Args[0], Dir: dir, Env: map[string]string{helperEnv: "acpwarm:x"},
			Session: &SessionPlan{Protocol: ProtocolACP, Adapter: agent.Gemini}}
	}},
	{"codex-app-server", func(dir string) Plan {
		return Plan{Program: os.Args[0], Dir: dir, Env: map[string]string{helperEnv: "codexwarm:x"},
			Session: &SessionPlan{Protocol: ProtocolCodexApp, Adapter: agent.Codex, thread: &codexAppThreadStart{ApprovalPolicy: "never", Sandbox: "read-only"}}}
	}},
	{"pi-rpc", func(dir string) Plan {
		return Plan{Program: os.Args[0], Dir: dir, Env: map[string]string{helperEnv: "piwarm:x"},
			Session: &SessionPlan{Protocol: ProtocolPiRPC, Adapter: agent.Pi}}
	}},
	{"droid-stream-jsonrpc", func(dir string) Plan {
		return Plan{Program: os.Args[0], Dir: dir, Env: map[string]string{helperEnv: "droidwarm:x"},
			Session: &SessionPlan{Protocol: ProtocolDroidRPC, Adapter: agent.Droid}}
	}},
}

type warmExit struct {
	mu   sync.Mutex
	exit *ExitInfo
	n    int
}

func (x *warmExit) on(e ExitInfo) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.exit, x.n = &e, x.n+1
}

func startFake(t *testing.T, plan Plan, lim Limits) (*Warm, *warmExit) {
	t.Helper()
	if lim.KillGrace == 0 {
		lim.KillGrace = 500 * time.Millisecond
	}
	x := &warmExit{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := StartWarm(ctx, WarmSpec{Plan: plan, BaseEnv: []string{"PATH=" + os.Getenv("PATH")}, Limits: lim, OnExit: x.on})
	require.NoError(t, err)
	t.Cleanup(w.Close)
	return w, x
}

func doTurn(t *testing.T, w *Warm, ctx context.Context, prompt string) (api.Result, []Event, error) {
	t.Helper()
	var mu sync.Mutex
	var evs []Event
	res, err := w.Turn(ctx, TurnSpec{Prompt: prompt, OnEvent: func(e Event) {
		mu.Lock()
		evs = append(evs, e)
		mu.Unlock()
	}})
	mu.Lock()
	defer mu.Unlock()
	return res, evs, err
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestAWarmAgentAnswersEachTurnInTheSameProcess(t *testing.T) {
	for _, f := range warmFakes {
		t.Run(f.name, func(t *testing.T) {
			w, _ := startFake(t, f.plan(t.TempDir()), Limits{})
			pid := strconv.Itoa(w.Pid())
			for i, prompt := range []string{"hello", "again", "and once more"} {
				res, evs, err := doTurn(t, w, within(t, 20*time.Second), prompt)
				require.NoError(t, err)
				assert.Equal(t, "You said: "+prompt+" (turn "+strconv.Itoa(i+1)+", pid "+pid+")", res.Answer)
				assert.Contains(t, kinds(evs), api.EventText)
				if res.CostUSD != nil {
					assert.InDelta(t, 0.25, *res.CostUSD, 1e-9, "a turn's cost is its part of the process's")
				}
				if f.name != "pi-rpc" { // the fake Pi plan names no session
					assert.NotEmpty(t, res.SessionID)
				}
				assert.True(t, w.Alive())
			}
			if f.name != "pi-rpc" {
				assert.NotEmpty(t, w.AgentSessionID())
			}
		})
	}
}

func TestACancelledWarmTurnIsStoppedInsideTheProtocolAndTheAgentStaysUp(t *testing.T) {
	for _, f := range warmFakes {
		t.Run(f.name, func(t *testing.T) {
			w, _ := startFake(t, f.plan(t.TempDir()), Limits{KillGrace: 5 * time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			start := time.Now()
			res, _, err := doTurn(t, w, ctx, "wait for me")
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, api.KindCancelled, e.Kind)
			assert.Equal(t, api.KindCancelled, res.Error.Kind)
			assert.Contains(t, e.Message, "stays up")
			assert.Less(t, time.Since(start), 4*time.Second, "the agent's own stop, not the grace")
			require.True(t, w.Alive(), "a turn the protocol stopped leaves the agent warm")
			res, _, err = doTurn(t, w, within(t, 20*time.Second), "next")
			require.NoError(t, err)
			assert.Contains(t, res.Answer, "You said: next (turn 2, pid "+strconv.Itoa(w.Pid())+")")
		})
	}
}

func TestAWarmTurnTheAgentWillNotStopEndsTheAgentAndItsGroup(t *testing.T) {
	for _, f := range warmFakes {
		t.Run(f.name, func(t *testing.T) {
			w, x := startFake(t, f.plan(t.TempDir()), Limits{KillGrace: 300 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			_, _, err := doTurn(t, w, ctx, "deaf to you")
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, api.KindTimeout, e.Kind)
			assert.False(t, w.Alive())
			select {
			case <-w.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("Done was not closed")
			}
			assert.False(t, proc.GroupAlive(w.Pid()))
			x.mu.Lock()
			assert.Equal(t, 1, x.n, "OnExit once")
			x.mu.Unlock()
			_, err = w.Turn(context.Background(), TurnSpec{Prompt: "hello?"})
			assert.ErrorIs(t, err, ErrAgentGone)
		})
	}
}

// MaxOutput bounds each turn: turns that each stay under it run on, and the
// one that floods ends the agent with output_limit.
func TestTheOutputLimitCountsEachWarmTurn(t *testing.T) {
	for _, f := range warmFakes {
		t.Run(f.name, func(t *testing.T) {
			w, _ := startFake(t, f.plan(t.TempDir()), Limits{MaxOutput: 2 << 10})
			for i := 0; i < 8; i++ { // some 400 bytes a turn: far past the limit in all
				_, _, err := doTurn(t, w, within(t, 20*time.Second), "hello "+strconv.Itoa(i))
				require.NoError(t, err, "turn %d", i)
			}
			_, _, err := doTurn(t, w, within(t, 20*time.Second), "flood the pipe")
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, api.KindOutputLimit, e.Kind)
			assert.False(t, w.Alive())
			<-w.Done()
			assert.False(t, proc.GroupAlive(w.Pid()))
		})
	}
}

func TestAWarmAgentThatDiesBetweenTurnsIsNoLongerAlive(t *testing.T) {
	for _, f := range warmFakes {
		t.Run(f.name, func(t *testing.T) {
			w, x := startFake(t, f.plan(t.TempDir()), Limits{})
			_, _, err := doTurn(t, w, within(t, 20*time.Second), "exit after this")
			require.NoError(t, err)
			select {
			case <-w.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("Done was not closed after the agent exited")
			}
			assert.False(t, w.Alive())
			x.mu.Lock()
			require.NotNil(t, x.exit)
			assert.Equal(t, 4, x.exit.Code)
			assert.Contains(t, x.exit.StderrTail, "leaving between turns")
			x.mu.Unlock()
			res, err := w.Turn(context.Background(), TurnSpec{Prompt: "still there?"})
			assert.ErrorIs(t, err, ErrAgentGone)
			assert.Equal(t, api.KindExit, res.Error.Kind)
		})
	}
}

func TestClosingAWarmAgentEndsItsWholeGroupGrandchildrenToo(t *testing.T) {
	for _, f := range warmFakes {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := startFake(t, f.plan(dir), Limits{})
			_, _, err := doTurn(t, w, within(t, 20*time.Second), "grandchild please")
			require.NoError(t, err)
			b, err := os.ReadFile(filepath.Join(dir, "grandchild.pid"))
			require.NoError(t, err)
			gc, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			require.True(t, proc.Alive(gc))
			w.Close()
			w.Close()
			assert.False(t, proc.Alive(gc), "the grandchild outlived Close")
			assert.False(t, proc.GroupAlive(w.Pid()))
			assert.False(t, w.Alive())
		})
	}
}

// Turns run one at a time: a second Turn waits for the first, and one
// whose ctx ends while it waits gives up without touching the agent.
func TestWarmTurnsRunOneAtATime(t *testing.T) {
	w, _ := startFake(t, warmFakes[0].plan(t.TempDir()), Limits{KillGrace: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, _, err := doTurn(t, w, ctx, "wait for me")
		first <- err
	}()
	time.Sleep(200 * time.Millisecond)
	_, err := w.Turn(within(t, 200*time.Millisecond), TurnSpec{Prompt: "me too"})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Message, "waited for the one before it")
	cancel()
	assert.Error(t, <-first)
	assert.True(t, w.Alive())
}

func TestEveryAdapterSaysWhetherItsCLIIsKeptWarm(t *testing.T) {
	for _, id := range IDs() {
		ok, why := CanWarm(id)
		switch id {
		case agent.ClaudeCode, agent.Gemini, agent.Copilot, agent.Codex, agent.Pi, agent.Droid, agent.OpenCode, agent.QwenCode:
			assert.True(t, ok, id)
		default:
			assert.False(t, ok, id)
			assert.NotEmpty(t, why, id)
			_, err := BuildWarm("/bin/"+id, Request{Adapter: id, Cwd: "/tmp"})
			assert.True(t, errors.Is(err, ErrNoWarmChannel), "%s: %v", id, err)
		}
	}
	ok, why := CanWarm("nope")
	assert.False(t, ok)
	assert.Contains(t, why, "unknown adapter")
}

func TestSteeringIsRefusedWhereTheChannelHasNone(t *testing.T) {
	for _, f := range warmFakes {
		if f.name == "codex-app-server" || f.name == "pi-rpc" {
			continue // they steer: TestCodexAndPiSteerTheRunningTurn
		}
		t.Run(f.name, func(t *testing.T) {
			w, _ := startFake(t, f.plan(t.TempDir()), Limits{KillGrace: 5 * time.Second})
			assert.ErrorIs(t, w.Steer(context.Background(), "x"), ErrNoTurn)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _, _ = doTurn(t, w, ctx, "wait for me")
			}()
			require.Eventually(t, func() bool { return w.Steer(context.Background(), "x") != ErrNoTurn }, 5*time.Second, 10*time.Millisecond)
			assert.ErrorIs(t, w.Steer(context.Background(), "x"), ErrNoSteer)
			cancel()
			<-done
		})
	}
}

// A warm plan is the one-shot plan's boundary with the conversation
// channel's argv: every flag of the one-shot plan but its output mode, and
// never the prompt.
func TestAWarmPlanKeepsTheOneShotBoundaryFlags(t *testing.T) {
	for _, c := range []struct {
		id      string
		mode    Mode
		dropped []string
		added   []string
	}{
		{agent.ClaudeCode, ModeReadOnly, nil, []string{"--input-format", "stream-json"}},
		{agent.ClaudeCode, ModeEdit, nil, []string{"--input-format", "stream-json"}},
		{agent.ClaudeCode, ModeAsk, nil, []string{"--input-format", "stream-json"}},
		{agent.Gemini, ModeReadOnly, []string{"--output-format", "stream-json"}, []string{"--acp"}},
		{agent.Gemini, ModeEdit, []string{"--output-format", "stream-json"}, []string{"--acp"}},
		{agent.Copilot, ModeReadOnly, []string{"--output-format", "json"}, []string{"--acp"}},
		{agent.Pi, ModeReadOnly, []string{"-p", "json"}, []string{"rpc"}},
		{agent.Pi, ModeEdit, []string{"-p", "json"}, []string{"rpc"}},
		{agent.Pi, ModeAsk, nil, nil},
		{agent.Codex, ModeAsk, nil, nil},
	} {
		req := Request{Adapter: c.id, Mode: c.mode, Cwd: cwd, ApprovalTimeout: time.Minute}
		one, err := Build("/bin/"+c.id, req)
		require.NoError(t, err)
		warm, err := BuildWarm("/bin/"+c.id, req)
		require.NoError(t, err, "%s/%s", c.id, c.mode)
		want := map[string]int{}
		for _, a := range one.Args {
			want[a]++
		}
		for _, a := range c.dropped {
			want[a]--
		}
		for _, a := range c.added {
			want[a]++
		}
		got := map[string]int{}
		for _, a := range warm.Args {
			got[a]++
		}
		for k, v := range want {
			if v == 0 {
				delete(want, k)
			}
		}
		assert.Equal(t, want, got, "%s/%s", c.id, c.mode)
		require.NotNil(t, warm.Session, "%s/%s", c.id, c.mode)
		assert.Equal(t, one.Ask, warm.Ask)
		assert.Equal(t, one.Env, warm.Env)
	}
	// Codex's warm plan is its app-server, the mode's sandbox on the
	// thread with approval "never", edit's temp dirs taken out as in exec.
	for _, m := range []Mode{ModeReadOnly, ModeEdit, ModeBypass} {
		p, err := BuildWarm("/bin/codex", Request{Adapter: agent.Codex, Mode: m, Cwd: cwd, AllowBypass: true})
		require.NoError(t, err)
		assert.Equal(t, "app-server", p.Args[0])
		assert.Equal(t, &codexAppThreadStart{Cwd: cwd, ApprovalPolicy: "never", Sandbox: codexSandbox(m)}, p.Session.thread)
		assert.Equal(t, m == ModeEdit, strings.Contains(strings.Join(p.Args, " "), strings.Join(codexEditTmp, " ")), m)
		assert.Nil(t, p.Ask)
	}
	for _, m := range []Mode{ModeEdit, ModeBypass} {
		_, err := BuildWarm("/bin/copilot", Request{Adapter: agent.Copilot, Mode: m, Cwd: cwd, AllowBypass: true})
		assert.ErrorIs(t, err, ErrNoWarmChannel, "Copilot's ACP channel lets --allow-tool write leave the cwd")
	}
	_, err := BuildWarm("/bin/claude", Request{Adapter: agent.ClaudeCode, Cwd: cwd, Images: testImages()})
	var fe *api.FieldError
	assert.ErrorAs(t, err, &fe)
}

// In ask mode each warm turn's questions go to that turn's approver, and
// no other: the first turn allows, the second denies.
func TestEachWarmTurnAsksItsOwnApprover(t *testing.T) {
	plan := Plan{Program: os.Args[0], Dir: t.TempDir(), Env: map[string]string{helperEnv: "acp:turn"},
		Ask: &AskPlan{Channel: AskViaSession}, Session: &SessionPlan{Protocol: ProtocolACP, Adapter: agent.Gemini}}
	w, _ := startFake(t, plan, Limits{})
	for _, allow := range []bool{true, false} {
		r := &recorder{answer: func(Question) Decision { return Decision{Allow: allow} }}
		res, err := w.Turn(within(t, 20*time.Second), TurnSpec{Prompt: "Please create the file.", Approver: r})
		require.NoError(t, err)
		require.Len(t, r.asked, 1, "allow=%v", allow)
		want := map[bool]string{true: "DONE after selected proceed_once", false: "DONE after selected cancel"}[allow]
		assert.Equal(t, want, res.Answer)
	}
	// A plan that does not ask never puts a question to a turn's approver.
	plan.Ask = nil
	w2, _ := startFake(t, plan, Limits{})
	r := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
	res, err := w2.Turn(within(t, 20*time.Second), TurnSpec{Prompt: "Please create the file.", Approver: r})
	require.NoError(t, err)
	assert.Empty(t, r.asked)
	assert.Equal(t, "DONE after selected cancel", res.Answer, "denied: only ask mode has anyone to ask")
}

// Codex's turn/steer and Pi's steer join the running turn: the turn ends
// with the steered input's answer, and the agent takes the next turn.
func TestCodexAndPiSteerTheRunningTurn(t *testing.T) {
	for _, f := range warmFakes[2:4] {
		t.Run(f.name, func(t *testing.T) { steerFake(t, f.plan(t.TempDir())) })
	}
}

func steerFake(t *testing.T, plan Plan) {
	w, _ := startFake(t, plan, Limits{KillGrace: 5 * time.Second})
	got := make(chan api.Result, 1)
	go func() {
		res, _, _ := doTurn(t, w, within(t, 20*time.Second), "wait for more")
		got <- res
	}()
	require.Eventually(t, func() bool { return w.Steer(context.Background(), "also this") == nil }, 5*time.Second, 20*time.Millisecond)
	res := <-got
	assert.Equal(t, "steered: also this", res.Answer)
	assert.False(t, res.IsError)
	res, _, err := doTurn(t, w, within(t, 20*time.Second), "next")
	require.NoError(t, err)
	assert.Contains(t, res.Answer, "(turn 2, pid")
	if plan.Session.Protocol == ProtocolCodexApp {
		assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 2}, res.Usage, "a turn's part of the thread's total")
	}
}

// Close ends the agent the way it ends on its own, stdin closed, so it can
// save its session for a cold turn; only one that stays up past the grace
// is killed.
func TestClosingAWarmAgentLetsItExitOnItsOwnFirst(t *testing.T) {
	for _, f := range warmFakes {
		t.Run(f.name, func(t *testing.T) {
			w, x := startFake(t, f.plan(t.TempDir()), Limits{KillGrace: 5 * time.Second})
			_, _, err := doTurn(t, w, within(t, 20*time.Second), "hello")
			require.NoError(t, err)
			start := time.Now()
			w.Close()
			assert.Less(t, time.Since(start), 4*time.Second, "it exited on stdin's end, not at the grace")
			x.mu.Lock()
			defer x.mu.Unlock()
			require.NotNil(t, x.exit)
			assert.Equal(t, 0, x.exit.Code, "exited, not killed")
		})
	}
}

// Each warm turn has a run's watchdog: a turn whose agent goes silent is
// marked stalled, and at stall_kill_secs ended with kind stalled, its
// agent with it; the turn before, with output, was working.
func TestASilentWarmTurnIsStalledAndEndedByItsWatchdog(t *testing.T) {
	for _, f := range warmFakes {
		t.Run(f.name, func(t *testing.T) {
			plan := f.plan(t.TempDir())
			plan.Stall = Watchdog{After: 100 * time.Millisecond, KillAfter: 400 * time.Millisecond}
			w, _ := startFake(t, plan, Limits{KillGrace: 300 * time.Millisecond})
			var mu sync.Mutex
			var states []api.RunState
			onState := func(s api.RunState) {
				mu.Lock()
				states = append(states, s)
				mu.Unlock()
			}
			_, err := w.Turn(within(t, 20*time.Second), TurnSpec{Prompt: "hello", OnState: onState})
			require.NoError(t, err)
			var evs []Event
			_, err = w.Turn(within(t, 20*time.Second), TurnSpec{Prompt: "deaf to you", OnState: onState, OnEvent: func(e Event) {
				mu.Lock()
				evs = append(evs, e)
				mu.Unlock()
			}})
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, api.KindStalled, e.Kind)
			assert.False(t, w.Alive())
			mu.Lock()
			defer mu.Unlock()
			assert.Contains(t, kinds(evs), api.EventStalled)
			assert.Contains(t, states, api.StateWorking)
			assert.Contains(t, states, api.StateStalled)
		})
	}
}

// A warm agent can continue a session the conversation has: ACP's
// session/load (its replayed history reaches no turn), Codex's
// thread/resume and Droid's droid.load_session, the id staying the CLI's
// own.
func TestAWarmAgentContinuesTheSessionItIsGiven(t *testing.T) {
	for _, f := range []int{1, 2, 4} {
		f := warmFakes[f]
		t.Run(f.name, func(t *testing.T) {
			plan := f.plan(t.TempDir())
			plan.Session.resume = "sess-old"
			w, _ := startFake(t, plan, Limits{})
			res, evs, err := doTurn(t, w, within(t, 20*time.Second), "hello")
			require.NoError(t, err)
			assert.Contains(t, res.Answer, "(turn 11, pid")
			for _, e := range evs {
				assert.NotContains(t, e.Text, "replayed", "the loaded history is not the turn's")
			}
			assert.Equal(t, "sess-old", w.AgentSessionID())
		})
	}
}

// A session to continue goes inside the protocol, never on argv.
func TestAWarmPlanCarriesTheSessionToContinueInsideTheProtocol(t *testing.T) {
	for _, id := range []string{agent.Copilot, agent.Codex, agent.Droid} {
		p, err := BuildWarm("/bin/"+id, Request{Adapter: id, Cwd: cwd, Resume: "sess-old"})
		require.NoError(t, err, id)
		assert.Equal(t, "sess-old", p.Session.resume, id)
		assert.NotContains(t, strings.Join(p.Args, " "), "sess-old", id)
	}
	_, err := BuildWarm("/bin/gemini", Request{Adapter: agent.Gemini, Cwd: cwd, Resume: "sess-old"})
	var fe *api.FieldError
	assert.ErrorAs(t, err, &fe, "Gemini's session/load loses the session it loads")
	p, err := BuildWarm("/bin/claude", Request{Adapter: agent.ClaudeCode, Cwd: cwd, Resume: "sess-old"})
	require.NoError(t, err)
	assert.Contains(t, strings.Join(p.Args, " "), "--resume sess-old", "Claude's own flag, as in a one-shot run")
}

// A turn's images reach an agent that takes them, and are refused, naming
// the field, for one that does not (Build's rule for a one-shot run).
func TestAWarmTurnsImagesAreRefusedForAnAgentThatTakesNone(t *testing.T) {
	w, _ := startFake(t, warmFakes[4].plan(t.TempDir()), Limits{})
	require.Equal(t, agent.Droid, w.a.adapter)
	_, err := w.Turn(within(t, 20*time.Second), TurnSpec{Prompt: "look", Images: testImages()})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, api.KindBadInput, e.Kind)
	assert.Contains(t, e.Message, "attachments")
	assert.True(t, w.Alive(), "a refused turn never reached the agent")
	_, _, err = doTurn(t, w, within(t, 20*time.Second), "hello")
	require.NoError(t, err)
}

func TestAWarmTurnSendsTheDeltasItReadTogetherAsOneAndALoneOneAtOnce(t *testing.T) {
	for _, f := range warmFakes[:2] { // Claude Code's stream-json, and ACP
		t.Run(f.name, func(t *testing.T) { warmDeltasMerge(t, f.plan(t.TempDir())) })
	}
}

func warmDeltasMerge(t *testing.T, plan Plan) {
	w, _ := startFake(t, plan, Limits{})

	res, evs, err := doTurn(t, w, within(t, 20*time.Second), "stream 500")
	require.NoError(t, err)
	var texts []Event
	var joined strings.Builder
	for _, e := range evs {
		if e.Kind == api.EventText {
			texts = append(texts, e)
			joined.WriteString(e.Text)
		}
	}
	want := strings.Repeat("d ", 500)
	assert.Equal(t, want, joined.String(), "every delta's text, once, in order")
	assert.Equal(t, want, res.Answer)
	assert.Less(t, len(texts), 500, "500 deltas written at once were merged")

	gate := filepath.Join(t.TempDir(), "seen")
	var mu sync.Mutex
	var got []string
	res, err = w.Turn(within(t, 20*time.Second), TurnSpec{Prompt: "gate " + gate, OnEvent: func(e Event) {
		if e.Kind != api.EventText {
			return
		}
		mu.Lock()
		got = append(got, e.Text)
		mu.Unlock()
		if e.Text == "first " {
			// The agent waits for this before it writes again: a turn
			// that held the delta for more would never end.
			require.NoError(t, os.WriteFile(gate, nil, 0o600))
		}
	}})
	require.NoError(t, err)
	assert.Equal(t, "first second", res.Answer)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"first ", "second"}, got)
}

// sessionCommands are the commands of the session events of evs.
func sessionCommands(evs []Event) [][]api.SlashCommand {
	var out [][]api.SlashCommand
	for _, e := range evs {
		if e.Kind == api.EventSession && e.Commands != nil {
			out = append(out, e.Commands)
		}
	}
	return out
}

// A warm Claude Code answers its initialize request with each command's
// description and argument hint, which the turn's init line leaves out; a
// warm ACP agent lists its commands between turns, and the next turn's
// session event carries them, less those card does not pass on.
func TestAWarmTurnsSessionEventCarriesTheCommandsTheCLIDescribed(t *testing.T) {
	t.Run("claude-stream-json", func(t *testing.T) {
		w, _ := startFake(t, warmFakes[0].plan(t.TempDir()), Limits{})
		_, evs, err := doTurn(t, w, within(t, 20*time.Second), "hello")
		require.NoError(t, err)
		assert.Equal(t, [][]api.SlashCommand{{
			{Name: "compact", Description: "Clear conversation history but keep a summary in context", InputHint: "<optional custom summarization instructions>"},
			{Name: "review", Description: "Review a pull request"},
			{Name: "heapdump"},
		}}, sessionCommands(evs))
	})
	t.Run("acp", func(t *testing.T) {
		w, _ := startFake(t, warmFakes[1].plan(t.TempDir()), Limits{})
		_, _, err := doTurn(t, w, within(t, 20*time.Second), "hello")
		require.NoError(t, err)
		_, evs, err := doTurn(t, w, within(t, 20*time.Second), "again")
		require.NoError(t, err)
		assert.Equal(t, [][]api.SlashCommand{{
			{Name: "memory", Description: "Manage memory."},
			{Name: "init", Description: "Analyzes the project", InputHint: "[focus]"},
		}}, sessionCommands(evs), "Gemini's extensions install is not passed on")
	})
}
