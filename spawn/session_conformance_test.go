package spawn

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// The conformance suite every session protocol runs: whatever the agent
// speaks, the runner's guarantees hold the same. Each protocol gives a fake
// agent (the test binary re-executed in the role its helperEnv names) that
// knows the scripts
//
//	turn    asks about one call that writes made.txt if allowed, answers,
//	        ends the turn.
//	noise   prints an over-long line and a line that is no message, then
//	        as turn.
//	die     exits 3 with a line on stderr, mid-turn.
//	silent  starts a grandchild (pid in grandchild.pid), answers nothing.
//
// Cases that only one protocol has (its dialect, its images, its error
// responses) stay in that protocol's test file.

// sessionProtocol is one protocol's entry in the suite.
type sessionProtocol struct {
	name string
	// plan is the ask plan that runs the fake agent with script.
	plan func(script string) Plan
	// answer is the turn's answer when its question is allowed.
	answer string
	// dieStep is what the failure says the agent did not get through, and
	// dieStderr the fake's last words on stderr.
	dieStep, dieStderr string
	// sessionID is the id the fake gave before it died ("" for none).
	sessionID string
}

var (
	acpProtocol = sessionProtocol{name: "acp",
		plan: func(script string) Plan {
			return Plan{Env: map[string]string{helperEnv: "acp:" + script}, Session: &SessionPlan{Protocol: ProtocolACP, Adapter: agent.Gemini}}
		},
		answer:  "DONE after selected proceed_once",
		dieStep: "exited with status 3 before it answered session/prompt", dieStderr: "fatal: the fake agent fell over", sessionID: "sess-fake"}
	codexProtocol = sessionProtocol{name: "codex-app-server",
		plan: func(script string) Plan {
			return Plan{Env: map[string]string{helperEnv: "codex:" + script}, Session: &SessionPlan{Protocol: ProtocolCodexApp, Adapter: agent.Codex}}
		},
		answer:  "DONE after accept | text:Please create the file.",
		dieStep: "codex exited with status 3 before it finished turn/start", dieStderr: "fatal: the fake server fell over", sessionID: "th-1"}
	droidProtocol = sessionProtocol{name: "droid-stream-jsonrpc",
		plan: func(script string) Plan {
			return Plan{Env: map[string]string{helperEnv: "droid:" + script}, MaxAPIRetries: DefaultMaxAPIRetries,
				Session: &SessionPlan{Protocol: ProtocolDroidRPC, Adapter: agent.Droid, Model: "custom:x-0"}}
		},
		answer:  "DONE after proceed_once | Please create the file.",
		dieStep: "droid exited with status 3 before it finished the turn (agent_turn_completed)", dieStderr: "fatal: the fake droid fell over", sessionID: "s-1"}
	piProtocol = sessionProtocol{name: "pi-rpc",
		plan: func(script string) Plan {
			return Plan{Env: map[string]string{helperEnv: "pi:" + script}, Session: &SessionPlan{Protocol: ProtocolPiRPC, Adapter: agent.Pi}}
		},
		answer:  "DONE | (no output) | Please create the file.",
		dieStep: "pi exited with status 3 before it finished the turn (agent_end)", dieStderr: "fatal: the fake pi fell over"}
)

// sessionProtocols are every session protocol card speaks; the test below
// keeps the list whole.
var sessionProtocols = []sessionProtocol{acpProtocol, codexProtocol, droidProtocol, piProtocol}

func TestEverySessionProtocolRunsTheConformanceSuite(t *testing.T) {
	var names []string
	for _, p := range sessionProtocols {
		names = append(names, string(p.plan("turn").Session.Protocol))
	}
	var want []string
	for _, id := range IDs() {
		a, _ := Lookup(id)
		for p := range a.Protocols {
			// Claude Code's stream-json is only its warm agents': the warm
			// suite (warm_test.go) runs it.
			if p != protocolClaudeStream && !slices.Contains(want, string(p)) {
				want = append(want, string(p))
			}
		}
	}
	assert.ElementsMatch(t, want, names, "a protocol an adapter's driver speaks without an entry here is untested")
}

// sessionRun runs plan's fake session agent through the real runner as an
// ask plan, and gives the run's result, its events in order and its
// working dir.
func sessionRun(t *testing.T, ctx context.Context, plan Plan, approver Approver, lim Limits) (api.Result, []Event, string, error) {
	t.Helper()
	o := runSession(t, ctx, plan, approver, lim)
	return o.res, o.evs, o.work, o.err
}

// sessionOutcome is what one run of a fake session agent came to.
type sessionOutcome struct {
	res  api.Result
	evs  []Event
	work string
	pgid int
	err  error
}

func runSession(t *testing.T, ctx context.Context, plan Plan, approver Approver, lim Limits) sessionOutcome {
	t.Helper()
	plan.Program, plan.Dir = os.Args[0], t.TempDir()
	plan.Ask = &AskPlan{Channel: AskViaSession}
	var mu sync.Mutex
	o := sessionOutcome{work: plan.Dir}
	o.res, o.err = Run(ctx, RunSpec{Plan: plan, Prompt: "Please create the file.", Approver: approver, Limits: lim,
		BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
		OnStart: func(pid, g int) { o.pgid = g },
		OnEvent: func(e Event) { mu.Lock(); o.evs = append(o.evs, e); mu.Unlock() }})
	return o
}

// assertGroupGone checks that no process of the run's group is left.
func assertGroupGone(t *testing.T, o sessionOutcome) {
	t.Helper()
	require.NotZero(t, o.pgid, "the child was started")
	assert.False(t, proc.GroupAlive(o.pgid), "the agent's group outlived the run")
}

// Framing: a line over the line limit is skipped and said so, a line that
// is no message is kept as an "other" event, and the conversation carries
// on to its answer.
func TestASessionAgentsNoiseDoesNotEndTheConversation(t *testing.T) {
	for _, p := range sessionProtocols {
		t.Run(p.name, func(t *testing.T) {
			r := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			o := runSession(t, ctx, p.plan("noise"), r, Limits{MaxLine: 1 << 10, KillGrace: 300 * time.Millisecond})
			require.NoError(t, o.err)
			assert.Equal(t, p.answer, o.res.Answer)
			require.GreaterOrEqual(t, len(o.evs), 2)
			assert.Equal(t, Event{Kind: api.EventOther, Text: "a stdout line of more than 1024 bytes was skipped (line limit)"}, o.evs[0])
			assert.Equal(t, Event{Kind: api.EventOther, Text: "Ripgrep is not available. Falling back to GrepTool."}, o.evs[1])
			assert.FileExists(t, filepath.Join(o.work, "made.txt"))
			assertGroupGone(t, o)
		})
	}
}

func TestASessionAgentThatDiesMidTurnIsAnExitFailureNamingTheStep(t *testing.T) {
	for _, p := range sessionProtocols {
		t.Run(p.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			o := runSession(t, ctx, p.plan("die"), &recorder{}, Limits{})
			e := runErr(t, o.err)
			assert.Equal(t, api.KindExit, e.Kind)
			assert.Equal(t, 3, e.ExitCode)
			assert.Contains(t, e.Message, p.dieStep)
			assert.Contains(t, e.Message, p.dieStderr)
			if p.sessionID != "" {
				assert.Equal(t, p.sessionID, o.res.SessionID, "what the turn got before the agent died is kept")
			}
			require.NotNil(t, o.res.Error)
			assert.Equal(t, api.KindExit, o.res.Error.Kind)
			require.NotNil(t, o.res.Error.ExitCode)
			assert.Equal(t, 3, *o.res.Error.ExitCode)
			assertGroupGone(t, o)
		})
	}
}

func TestASessionAgentThatNeverAnswersIsEndedAtTheDeadlineWithItsGroup(t *testing.T) {
	for _, p := range sessionProtocols {
		t.Run(p.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			start := time.Now()
			o := runSession(t, ctx, p.plan("silent"), &recorder{}, Limits{KillGrace: 300 * time.Millisecond})
			assert.Equal(t, api.KindTimeout, runErr(t, o.err).Kind)
			assert.Less(t, time.Since(start), 10*time.Second)
			b, rerr := os.ReadFile(filepath.Join(o.work, "grandchild.pid"))
			require.NoError(t, rerr)
			gc, _ := strconv.Atoi(string(b))
			assert.False(t, proc.Alive(gc), "grandchild %d outlived the run", gc)
			assertGroupGone(t, o)
		})
	}
}

// A question still waiting when the run is cancelled ends with the run,
// and the call it asked about does not run.
func TestCancellingASessionRunEndsTheQuestionItIsWaitingOn(t *testing.T) {
	for _, p := range sessionProtocols {
		t.Run(p.name, func(t *testing.T) {
			approver, asked, ended := waitingApprover()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				<-asked
				cancel()
			}()
			o := runSession(t, ctx, p.plan("turn"), approver, Limits{KillGrace: 300 * time.Millisecond})
			assert.Equal(t, api.KindCancelled, runErr(t, o.err).Kind)
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the question outlived the run")
			}
			assert.NoFileExists(t, filepath.Join(o.work, "made.txt"))
			assertGroupGone(t, o)
		})
	}
}

// readingTurn is a turn for driving a protocol's reading directly: its
// events go to emit as the protocol gives them, through no guard.
func readingTurn(emit func(...Event), approver Approver) *turn {
	t := newTurn(context.Background(), TurnSpec{}, approver)
	t.ev = &emitter{onEvent: func(e Event) { emit(e) }}
	return t
}

// fakeSilent is the "silent" script of every fake session agent: it starts
// a grandchild (its pid in grandchild.pid) and answers nothing, ever.
func fakeSilent() int {
	gc := exec.Command("sleep", "300")
	if gc.Start() == nil {
		_ = os.WriteFile("grandchild.pid", []byte(strconv.Itoa(gc.Process.Pid)), 0o600)
	}
	select {}
}

// fakeNoise is the start of every fake's "noise" script: an over-long line
// first (the runner skips it before it hands on the next line, so the
// order of the two events is fixed), then a log line that is no message.
func fakeNoise() {
	fmt.Println(strings.Repeat("x", 100<<10))
	fmt.Println("Ripgrep is not available. Falling back to GrepTool.")
}
