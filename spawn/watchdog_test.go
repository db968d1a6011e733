package spawn

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/fakeclaude"
	"github.com/card-dev/card/internal/proc"
)

// watched records a run's events and states.
type watched struct {
	mu     sync.Mutex
	events []Event
	states []api.RunState
}

func (w *watched) onEvent(ev Event) { w.mu.Lock(); w.events = append(w.events, ev); w.mu.Unlock() }
func (w *watched) onState(s api.RunState) {
	w.mu.Lock()
	w.states = append(w.states, s)
	w.mu.Unlock()
}

func (w *watched) kinds(kind string) []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Event
	for _, ev := range w.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// An agent that prints one line and then never another (an API that took
// the request and never answers) is marked stalled, then ended with kind
// stalled, its whole process group gone, long before its deadline.
func TestASilentAgentIsStalledThenEndedWithItsGroup(t *testing.T) {
	var w watched
	var pgid int
	plan := shPlan(t, "sleep 600 & echo $!; sleep 600")
	plan.Stall = Watchdog{After: 300 * time.Millisecond, KillAfter: 900 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, RunSpec{Plan: plan, OnEvent: w.onEvent, OnState: w.onState, OnStart: func(_, g int) { pgid = g },
		Limits: Limits{KillGrace: 500 * time.Millisecond}})
	e := runErr(t, err)
	assert.Equal(t, api.KindStalled, e.Kind)
	assert.Contains(t, e.Message, "stall_kill_secs")
	assert.Less(t, time.Since(start), 10*time.Second)
	stalled := w.kinds(api.EventStalled)
	require.Len(t, stalled, 1, "one stalled event before the end")
	assert.GreaterOrEqual(t, stalled[0].QuietMs, int64(300))
	assert.Equal(t, int64(900), stalled[0].KillAfterMs)
	assert.Equal(t, []api.RunState{api.StateStarting, api.StateWorking, api.StateStalled}, w.states)
	others := w.kinds(api.EventOther)
	require.NotEmpty(t, others)
	pid, perr := strconv.Atoi(strings.TrimSpace(others[0].Text))
	require.NoError(t, perr)
	assert.False(t, proc.Alive(pid), "grandchild %d survived the watchdog", pid)
	members, _ := proc.GroupMembers(pgid)
	assert.Empty(t, members, "process group %d survived", pgid)
}

// A run that only warns is marked stalled and goes back to working when
// the agent prints again; it then succeeds.
func TestAStalledRunThatPrintsAgainIsWorkingAndSucceeds(t *testing.T) {
	var w watched
	plan := shPlan(t, "echo one; sleep 0.6; echo two")
	plan.Stall = Watchdog{After: 200 * time.Millisecond}
	_, err := Run(context.Background(), RunSpec{Plan: plan, OnEvent: w.onEvent, OnState: w.onState})
	require.NoError(t, err)
	assert.Len(t, w.kinds(api.EventStalled), 1)
	assert.Equal(t, []api.RunState{api.StateStarting, api.StateWorking, api.StateStalled, api.StateWorking}, w.states)
}

// An agent that answers slowly but steadily (a line every 300 ms for three
// seconds) is never stalled under a one-second watchdog.
func TestASlowButSteadyAgentIsNeverStalled(t *testing.T) {
	var w watched
	plan := shPlan(t, "i=0; while [ $i -lt 10 ]; do echo tick $i; sleep 0.3; i=$((i+1)); done")
	plan.Stall = Watchdog{After: time.Second, KillAfter: 2 * time.Second}
	_, err := Run(context.Background(), RunSpec{Plan: plan, OnEvent: w.onEvent, OnState: w.onState})
	require.NoError(t, err)
	assert.Empty(t, w.kinds(api.EventStalled))
	assert.Len(t, w.kinds(api.EventOther), 10)
	assert.NotContains(t, w.states, api.StateStalled)
}

// Output on stderr counts: an agent that only logs progress there is not
// silent.
func TestStderrOutputKeepsARunFromStalling(t *testing.T) {
	var w watched
	plan := shPlan(t, "echo start; i=0; while [ $i -lt 6 ]; do echo working >&2; sleep 0.2; i=$((i+1)); done; echo done")
	plan.Stall = Watchdog{After: 500 * time.Millisecond, KillAfter: time.Second}
	_, err := Run(context.Background(), RunSpec{Plan: plan, OnEvent: w.onEvent})
	require.NoError(t, err)
	assert.Empty(t, w.kinds(api.EventStalled))
}

// A question waiting for its answer longer than the watchdog's limits is
// not silence: the clock pauses, the state says waiting_approval, and the
// run succeeds once answered.
func TestAQuestionWaitingLongerThanTheLimitsIsNotAStall(t *testing.T) {
	var w watched
	bin := fakeclaude.Install(t, t.TempDir())
	plan, err := Build(bin, Request{Adapter: "claude-code", Mode: ModeAsk, Cwd: t.TempDir(), ApprovalTimeout: time.Minute})
	require.NoError(t, err)
	plan.Stall = Watchdog{After: 300 * time.Millisecond, KillAfter: 600 * time.Millisecond}
	approver := approverFunc(func(ctx context.Context, q Question) Decision {
		time.Sleep(1500 * time.Millisecond)
		return Decision{Allow: true}
	})
	a, _ := Lookup("claude-code")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Run(ctx, RunSpec{Plan: plan, Prompt: `TOOL Bash {"command":"true"}`, Parser: a.NewParser(), Approver: approver,
		OnEvent: w.onEvent, OnState: w.onState, BaseEnv: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}})
	require.NoError(t, err)
	assert.Empty(t, w.kinds(api.EventStalled))
	assert.Contains(t, w.states, api.StateWaitingApproval)
}

// A retry the agent announced with a delay pauses the clock for the delay:
// the agent said it is waiting, and for how long.
func TestAnAnnouncedRetryDelayIsNotAStall(t *testing.T) {
	var w watched
	plan := shPlan(t, "echo retry; sleep 1.2; echo answer")
	plan.Stall = Watchdog{After: 300 * time.Millisecond, KillAfter: 600 * time.Millisecond}
	plan.MaxAPIRetries = 3
	_, err := Run(context.Background(), RunSpec{Plan: plan, Parser: retryLineParser{}, OnEvent: w.onEvent, OnState: w.onState})
	require.NoError(t, err)
	assert.Empty(t, w.kinds(api.EventStalled))
	assert.Contains(t, w.states, api.StateWaitingAPI)
}

// retryLineParser reads "retry" as a retry with a 1.5 s delay and any other
// line as text.
type retryLineParser struct{}

func (retryLineParser) Feed(line []byte) []Event {
	if string(line) == "retry" {
		return []Event{{Kind: api.EventRetry, DelayMs: 1500, Error: "overloaded"}}
	}
	return []Event{{Kind: api.EventText, Text: string(line)}}
}
func (retryLineParser) Finish(ExitInfo) api.Result { return api.Result{Answer: "answer"} }

func TestWatchdogLimitsThatMeanNothingAreRefusedNamingTheField(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, c := range []struct {
		name        string
		stall, kill *int
		field       string
	}{
		{"zero stall", n(0), nil, "stall_secs"},
		{"negative stall", n(-5), nil, "stall_secs"},
		{"absurd stall", n(api.MaxInvokeTimeoutSecs + 1), nil, "stall_secs"},
		{"negative kill", nil, n(-1), "stall_kill_secs"},
		{"absurd kill", n(10), n(api.MaxInvokeTimeoutSecs + 1), "stall_kill_secs"},
		{"kill equal to stall", n(30), n(30), "stall_kill_secs"},
		{"kill under the default stall", nil, n(DefaultStallSecs - 1), "stall_kill_secs"},
	} {
		err := Request{Adapter: "claude-code", Cwd: "/", StallSecs: c.stall, StallKillSecs: c.kill}.Validate()
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe, c.name)
		assert.Equal(t, c.field, fe.Field, c.name)
	}
	for _, ok := range []struct{ stall, kill *int }{{nil, nil}, {n(1), n(2)}, {n(60), n(0)}, {nil, n(api.MaxInvokeTimeoutSecs)}} {
		assert.NoError(t, Request{Adapter: "claude-code", Cwd: "/", StallSecs: ok.stall, StallKillSecs: ok.kill}.Validate())
	}
	w := Request{StallSecs: n(2), StallKillSecs: n(5)}.Watchdog()
	assert.Equal(t, Watchdog{After: 2 * time.Second, KillAfter: 5 * time.Second}, w)
	assert.Equal(t, Watchdog{After: DefaultStallSecs * time.Second}, Request{}.Watchdog())
}

// A retry announced without a delay (Codex's "Reconnecting... 1/5",
// Copilot's turn_retry) is waiting for the API until the agent shows
// progress; then it is working again, and the run is never stalled by it
// when the agent answers in time.
func TestARetryWithoutADelayIsWaitingForTheAPIUntilProgress(t *testing.T) {
	var w watched
	plan := shPlan(t, "echo again; sleep 0.5; echo answer")
	plan.MaxAPIRetries = 3
	_, err := Run(context.Background(), RunSpec{Plan: plan, Parser: undelayedRetryParser{}, OnEvent: w.onEvent, OnState: w.onState})
	require.NoError(t, err)
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Contains(t, w.states, api.StateWaitingAPI)
	var after []api.RunState
	for i, s := range w.states {
		if s == api.StateWaitingAPI {
			after = w.states[i+1:]
			break
		}
	}
	assert.Equal(t, []api.RunState{api.StateWorking}, after, "progress after the retry puts the run back to working: %v", w.states)
}

// undelayedRetryParser reads "again" as a retry that names no delay and any
// other line as text.
type undelayedRetryParser struct{}

func (undelayedRetryParser) Feed(line []byte) []Event {
	if string(line) == "again" {
		return []Event{{Kind: api.EventRetry, Attempt: 1, MaxAttempts: 5, Error: "429 Too Many Requests"}}
	}
	return []Event{{Kind: api.EventText, Text: string(line)}}
}
func (undelayedRetryParser) Finish(ExitInfo) api.Result { return api.Result{Answer: "answer"} }
