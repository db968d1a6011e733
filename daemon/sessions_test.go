package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// sessionEvents collects one subscription's session events.
type sessionEvents struct {
	mu  sync.Mutex
	evs []api.SessionEvent
}

func (s *sessionEvents) add(ev api.SessionEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, ev)
}

func (s *sessionEvents) all() []api.SessionEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.evs)
}

// ends counts the turns whose terminal event arrived.
func (s *sessionEvents) ends() int {
	n := 0
	for _, ev := range s.all() {
		if client.Terminal(ev.Event) {
			n++
		}
	}
	return n
}

func (s *sessionEvents) waitEnds(t testing.TB, n int, d time.Duration) []api.SessionEvent {
	t.Helper()
	require.Eventually(t, func() bool { return s.ends() >= n }, d, 10*time.Millisecond, "fewer than %d turns ended: %v", n, s.all())
	return s.all()
}

// gapFree checks the session seqs run 1, 2, … with no gap nor repeat.
func gapFree(t testing.TB, evs []api.SessionEvent, from int64) {
	t.Helper()
	for i, ev := range evs {
		require.Equal(t, from+int64(i)+1, ev.Seq, "event %d of %v", i, evs)
	}
}

func TestASecondTurnResumesTheCLISessionTheFirstReported(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	assert.Equal(t, api.SessionIdle, s.State)
	assert.Equal(t, "read_only", s.PermissionMode)
	evs := &sessionEvents{}
	sub, err := rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	assert.True(t, sub.Live)

	one, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn one"})
	require.NoError(t, err)
	assert.Equal(t, 1, one.Turn)
	assert.False(t, one.Queued)
	evs.waitEnds(t, 1, 10*time.Second)
	waitSessionIdle(t, rd.Client, s.SessionID)
	two, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn two"})
	require.NoError(t, err)
	assert.Equal(t, 2, two.Turn)
	all := evs.waitEnds(t, 2, 10*time.Second)
	gapFree(t, all, 0)

	args, stdin := rd.agents["claude-code"].Received(t, two.RunID)
	assert.Equal(t, "turn two", stdin)
	i := slices.Index(args, "--resume")
	require.GreaterOrEqual(t, i, 0, "turn two does not resume: %v", args)
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", args[i+1])
	args1, _ := rd.agents["claude-code"].Received(t, one.RunID)
	assert.NotContains(t, args1, "--resume")

	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, 2, got.Turns)
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", got.AgentSessionID)
	assert.Equal(t, all[len(all)-1].Seq+1, got.NextSeq)
	run, err := rd.Client.Run(ctx, two.RunID)
	require.NoError(t, err)
	assert.Equal(t, s.SessionID, run.CardSessionID)
	assert.Equal(t, 2, run.SessionTurn)

	closed, err := rd.Client.CloseSession(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, api.SessionClosed, closed.State)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn three"})
	assert.Equal(t, daemon.CodeSessionClosed, rpcCode(t, err).Code)
}

// startSession starts a session of adapter in the daemon's cwd and
// subscribes c to it.
func startSession(t *testing.T, rd *runsDaemon, c *client.Client, adapter string) (api.Session, *sessionEvents) {
	t.Helper()
	ctx := daemontest.Context(t)
	s, err := c.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: adapter, Cwd: rd.cwd}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	return s, evs
}

// turnsInOrder is the turn of each terminal event, in stream order.
func turnsInOrder(evs []api.SessionEvent) []int {
	var out []int
	for _, ev := range evs {
		if client.Terminal(ev.Event) {
			out = append(out, ev.Turn)
		}
	}
	return out
}

func TestThreePromptsSentAtOnceBehindARunningTurnRunInTheOrderTheyWereSent(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	first, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "DRIP one"})
	require.NoError(t, err)
	require.NotEmpty(t, first.RunID)
	var wg sync.WaitGroup
	answers := make([]api.SessionPromptResult, 3)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			answers[i], err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: fmt.Sprintf("queued %d", i)})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	positions := map[int]int{}
	for _, a := range answers {
		assert.True(t, a.Queued)
		positions[a.Position] = a.Turn
	}
	assert.Equal(t, map[int]int{1: 2, 2: 3, 3: 4}, positions, "positions 1..3 are turns 2..4")
	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	require.Len(t, got.Queue, 3)
	assert.Equal(t, api.SessionRunning, got.State)
	all := evs.waitEnds(t, 4, 20*time.Second)
	gapFree(t, all, 0)
	assert.Equal(t, []int{1, 2, 3, 4}, turnsInOrder(all))
	queuedEvents := 0
	for _, ev := range all {
		if ev.Event.Kind == api.EventPromptQueued {
			queuedEvents++
			assert.Equal(t, 1, ev.Turn, "the queue shows on the running turn's stream")
		}
	}
	assert.Equal(t, 3, queuedEvents)
	// Each queued turn ran the prompt its answer named.
	runs, err := rd.Client.Runs(ctx, api.ListParams{Limit: 10})
	require.NoError(t, err)
	byTurn := map[int]string{}
	for _, r := range runs {
		if r.CardSessionID == s.SessionID {
			byTurn[r.SessionTurn] = r.RunID
		}
	}
	for i, a := range answers {
		_, stdin := rd.agents["claude-code"].Received(t, byTurn[a.Turn])
		assert.Equal(t, fmt.Sprintf("queued %d", i), stdin)
	}
}

func TestCancellingARunningTurnRunsThePromptQueuedBehindIt(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	one, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "SLEEP"})
	require.NoError(t, err)
	two, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "after the sleep"})
	require.NoError(t, err)
	require.True(t, two.Queued)
	start := time.Now()
	res, err := rd.Client.CancelTurn(ctx, api.SessionCancelParams{SessionID: s.SessionID})
	require.NoError(t, err)
	assert.True(t, res.Cancelled)
	assert.Equal(t, one.RunID, res.RunID)
	assert.Zero(t, res.Cleared)
	assert.Less(t, time.Since(start), 5*time.Second)
	all := evs.waitEnds(t, 2, 10*time.Second)
	gapFree(t, all, 0)
	var statuses []api.Status
	for _, ev := range all {
		if client.Terminal(ev.Event) {
			statuses = append(statuses, ev.Event.Status)
		}
	}
	assert.Equal(t, []api.Status{api.StatusCancelled, api.StatusSucceeded}, statuses)
	waitNoProcesses(t, one.RunID, 5*time.Second)
}

func TestCancelWithClearQueueDropsTheQueueAndRecordsEachDroppedPrompt(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	_, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "SLEEP"})
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "never runs"})
		require.NoError(t, err)
	}
	res, err := rd.Client.CancelTurn(ctx, api.SessionCancelParams{SessionID: s.SessionID, ClearQueue: true})
	require.NoError(t, err)
	assert.True(t, res.Cancelled)
	assert.Equal(t, 2, res.Cleared)
	all := evs.waitEnds(t, 3, 10*time.Second)
	gapFree(t, all, 0)
	assert.Equal(t, []int{1, 2, 3}, turnsInOrder(all))
	for _, ev := range all[len(all)-2:] {
		assert.Equal(t, api.StatusRefused, ev.Event.Status)
		assert.Contains(t, ev.Event.Error, "clear_queue")
	}
	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Empty(t, got.Queue)
	assert.Equal(t, api.SessionIdle, got.State)
	assert.Equal(t, 3, got.Turns)
}

func TestASubscriberThatReconnectsFromAnySeqMissesNothingAndSeesNothingTwice(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	for i := 1; i <= 3; i++ {
		_, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: fmt.Sprintf("turn %d", i)})
		require.NoError(t, err)
		evs.waitEnds(t, i, 10*time.Second)
	}
	all := evs.all()
	gapFree(t, all, 0)
	for after := int64(0); after <= int64(len(all)); after++ {
		c := rd.Dial(t, client.Options{})
		again := &sessionEvents{}
		res, err := c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID, AfterSeq: after}, again.add)
		require.NoError(t, err)
		assert.Equal(t, int64(len(all))+1, res.NextSeq)
		want := len(all) - int(after)
		require.Eventually(t, func() bool { return len(again.all()) >= want }, 5*time.Second, 5*time.Millisecond, "after %d", after)
		got := again.all()
		gapFree(t, got, after)
		for i, ev := range got {
			assert.Equal(t, all[int(after)+i].Event.RunID, ev.Event.RunID)
			assert.Equal(t, all[int(after)+i].Event.Kind, ev.Event.Kind)
		}
		require.NoError(t, c.Close())
	}
	// A subscriber that joined between turns follows the next one live.
	late := &sessionEvents{}
	_, err := rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID, AfterSeq: int64(len(all))}, late.add)
	require.NoError(t, err)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn 4"})
	require.NoError(t, err)
	gapFree(t, late.waitEnds(t, 1, 10*time.Second), int64(len(all)))
}

func TestTwoSessionsOfOneAdapterStayApart(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	a, aEvs := startSession(t, rd, rd.Client, "claude-code")
	b, bEvs := startSession(t, rd, rd.Client, "claude-code")
	_, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: a.SessionID, Task: "DRIP a"})
	require.NoError(t, err)
	rb, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: b.SessionID, Task: "b one"})
	require.NoError(t, err)
	assert.False(t, rb.Queued, "b's turn does not wait for a's")
	aAll, bAll := aEvs.waitEnds(t, 1, 10*time.Second), bEvs.waitEnds(t, 1, 10*time.Second)
	gapFree(t, aAll, 0)
	gapFree(t, bAll, 0)
	for _, ev := range aAll {
		assert.Equal(t, a.SessionID, ev.SessionID)
	}
	for _, ev := range bAll {
		assert.Equal(t, b.SessionID, ev.SessionID)
		assert.NotEqual(t, aAll[0].Event.RunID, ev.Event.RunID)
	}
	list, err := rd.Client.Sessions(ctx, api.SessionListParams{Adapter: "claude-code"})
	require.NoError(t, err)
	assert.Len(t, list.Sessions, 2)
	_, err = rd.Client.CloseSession(ctx, a.SessionID)
	require.NoError(t, err)
	list, err = rd.Client.Sessions(ctx, api.SessionListParams{})
	require.NoError(t, err)
	require.Len(t, list.Sessions, 1, "closed sessions are left out by default")
	assert.Equal(t, b.SessionID, list.Sessions[0].SessionID)
	list, err = rd.Client.Sessions(ctx, api.SessionListParams{IncludeClosed: true})
	require.NoError(t, err)
	assert.Len(t, list.Sessions, 2)
}

func TestEverySessionErrorNamesWhatWasRefused(t *testing.T) {
	rd := startRunsDaemon(t, "[sessions]\nmax_queue = 1\nmax_warm = 0\n")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")

	_, err := rd.Client.Session(ctx, "ses_nope")
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeSessionNotFound, re.Code)
	assert.Equal(t, "session_id", errData(t, re)["field"])
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: "ses_nope", Task: "x"})
	assert.Equal(t, daemon.CodeSessionNotFound, rpcCode(t, err).Code)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID})
	re = rpcCode(t, err)
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
	assert.Equal(t, "task", errData(t, re)["field"])
	_, err = rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", PermissionMode: "edit"}})
	re = rpcCode(t, err)
	assert.Equal(t, "cwd", errData(t, re)["field"])
	_, err = rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", PermissionMode: "bypass", Cwd: rd.cwd}})
	assert.Equal(t, daemon.CodeBypassNotAllowed, rpcCode(t, err).Code)
	_, err = rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", InvokedBy: "claude-code", Cwd: rd.cwd}})
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeGuardRefused, re.Code, "the guard judges the session once, at its start")
	_, err = rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "droid", Cwd: rd.cwd}})
	assert.Equal(t, daemon.CodeAgentNotInstalled, rpcCode(t, err).Code)
	seeded, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "codex", InvokedBy: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	assert.Equal(t, []string{"claude-code"}, seeded.Ancestry, "every turn carries the chain seeded at the start")
	turn, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: seeded.SessionID, Task: "x"})
	require.NoError(t, err)
	run := waitRun(t, rd.Client, turn.RunID, 10*time.Second)
	assert.Equal(t, []string{"claude-code"}, run.Ancestry)
	assert.Equal(t, "claude-code,codex", rd.agents["codex"].ChildEnv(t, turn.RunID)["CAR_INVOKED_BY"])

	_, err = rd.Client.SteerSession(ctx, api.SessionSteerParams{SessionID: s.SessionID, Task: "x"})
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeSteerUnsupported, re.Code)
	assert.Equal(t, "no turn is running", errData(t, re)["reason"])

	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "SLEEP"})
	require.NoError(t, err)
	_, err = rd.Client.SteerSession(ctx, api.SessionSteerParams{SessionID: s.SessionID, Task: "x"})
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeSteerUnsupported, re.Code)
	assert.Contains(t, errData(t, re)["reason"], "cold")
	q, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "queued"})
	require.NoError(t, err)
	assert.Equal(t, 1, q.Position)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "one too many"})
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeSessionQueueFull, re.Code)
	assert.EqualValues(t, 1, errData(t, re)["max_queue"])

	closed, err := rd.Client.CloseSession(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, api.SessionClosed, closed.State)
	assert.Equal(t, 2, closed.Turns)
	all := evs.waitEnds(t, 2, 10*time.Second)
	assert.Equal(t, api.StatusCancelled, all[len(all)-2].Event.Status)
	assert.Equal(t, api.StatusRefused, all[len(all)-1].Event.Status, "the queued prompt is recorded refused")
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "x"})
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeSessionClosed, re.Code)
	assert.Equal(t, "closed by sessions.close", errData(t, re)["close_reason"])
	_, err = rd.Client.CancelTurn(ctx, api.SessionCancelParams{SessionID: s.SessionID})
	assert.Equal(t, daemon.CodeSessionClosed, rpcCode(t, err).Code)
	again, err := rd.Client.CloseSession(ctx, s.SessionID)
	require.NoError(t, err, "closing a closed session answers it")
	assert.Equal(t, api.SessionClosed, again.State)

	// The adapter's CLI goes away between turns.
	g, _ := startSession(t, rd, rd.Client, "codex")
	require.NoError(t, os.Remove(rd.agents["codex"].Path))
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: g.SessionID, Task: "x"})
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeAdapterGone, re.Code)
	assert.Equal(t, "codex", errData(t, re)["adapter"])
}

func TestASessionCapRefusesTheNextPromptOnceSpent(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	limit := 0.00001
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd, MaxCostUSD: &limit}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "one"})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 10*time.Second)
	waitSessionIdle(t, rd.Client, s.SessionID)
	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	require.Greater(t, got.TotalCostUSD, limit, "the fixture's turn costs more than the cap")
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "two"})
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeBudgetExceeded, re.Code)
	data := errData(t, re)
	assert.Equal(t, "max_cost_usd", data["cap"])
	assert.Equal(t, "budget", data["kind"])
	assert.InDelta(t, got.TotalCostUSD, data["spent"], 1e-12)
}

func TestAKilledDaemonLosesNoTurnAndTheNextPromptContinuesTheConversation(t *testing.T) {
	bin := daemontest.Build(t)
	agents, pins := replayAgents(t)
	cwd := t.TempDir()
	opts := daemontest.Options{Config: "login_shell_path = false\n", Agents: pins}
	first := daemontest.Serve(t, bin, opts)
	ctx := daemontest.Context(t)
	s, err := first.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = first.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	one, err := first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn one"})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 10*time.Second)
	two, err := first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "SLEEP through the kill"})
	require.NoError(t, err)
	three, err := first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "queued at the kill"})
	require.NoError(t, err)
	require.True(t, three.Queued)
	require.Eventually(t, func() bool { return len(processesOfRun(two.RunID)) > 0 }, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	first.Wait(t, 10*time.Second)
	opts.Home = first.Home
	second := daemontest.Serve(t, bin, opts)
	waitNoProcesses(t, two.RunID, 5*time.Second)

	got, err := second.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, api.SessionIdle, got.State)
	assert.Equal(t, 3, got.Turns)
	assert.Empty(t, got.Queue)
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", got.AgentSessionID)
	run, err := second.Client.Run(ctx, two.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusInterrupted, run.Status)

	again := &sessionEvents{}
	_, err = second.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, again.add)
	require.NoError(t, err)
	four, err := second.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn four"})
	require.NoError(t, err)
	assert.Equal(t, 4, four.Turn)
	all := again.waitEnds(t, 4, 10*time.Second)
	gapFree(t, all, 0)
	assert.Equal(t, []int{1, 2, 3, 4}, turnsInOrder(all))
	var statuses []api.Status
	for _, ev := range all {
		if client.Terminal(ev.Event) {
			statuses = append(statuses, ev.Event.Status)
			if ev.Event.Status != api.StatusSucceeded {
				assert.NotEmpty(t, ev.Event.Error, "turn %d's error event says why it ended", ev.Turn)
			}
		}
	}
	assert.Equal(t, []api.Status{api.StatusSucceeded, api.StatusInterrupted, api.StatusRefused, api.StatusSucceeded}, statuses,
		"the interrupted turn's stream ends, and the queued prompt is recorded refused, not lost")
	args, _ := agents["claude-code"].Received(t, four.RunID)
	i := slices.Index(args, "--resume")
	require.GreaterOrEqual(t, i, 0, "turn four does not resume: %v", args)
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", args[i+1])
	_ = one
}

func TestBadSessionParamsAreRefusedNamingTheField(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	for _, tc := range []struct {
		method, field string
		params        any
	}{
		{"sessions.prompt", "session_id", map[string]any{"task": "x"}},
		{"sessions.prompt", "task", map[string]any{"session_id": "ses_x", "task": "  "}},
		{"sessions.steer", "task", map[string]any{"session_id": "ses_x"}},
		{"sessions.cancel", "session_id", map[string]any{}},
		{"sessions.get", "session_id", map[string]any{}},
		{"sessions.close", "session_id", map[string]any{}},
		{"sessions.subscribe", "after_seq", map[string]any{"session_id": "ses_x", "after_seq": -1}},
		{"sessions.list", "state", map[string]any{"state": "sleeping"}},
		{"sessions.list", "limit", map[string]any{"limit": -1}},
		{"sessions.start", "id", map[string]any{}},
		{"sessions.start", "permission_mode", map[string]any{"id": "claude-code", "permission_mode": "god"}},
	} {
		err := rd.Client.Call(ctx, tc.method, tc.params, nil)
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, "%s %v", tc.method, tc.params)
		assert.Equal(t, tc.field, errData(t, re)["field"], "%s %v", tc.method, tc.params)
	}
}

func TestAGracefulRestartKeepsTheSessionAndRecordsWhatWasQueued(t *testing.T) {
	agents, pins := replayAgents(t)
	home := t.TempDir()
	cwd := t.TempDir()
	opts := daemontest.Options{Home: home, Config: "login_shell_path = false\n", Agents: pins}
	first := daemontest.Start(t, opts)
	ctx := daemontest.Context(t)
	s, err := first.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = first.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	_, err = first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn one"})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 10*time.Second)
	_, err = first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "SLEEP through the restart"})
	require.NoError(t, err)
	q, err := first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "queued at the restart"})
	require.NoError(t, err)
	require.True(t, q.Queued)
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, first.Shutdown(sctx))

	second := daemontest.Start(t, opts)
	got, err := second.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, api.SessionIdle, got.State)
	assert.Equal(t, 3, got.Turns)
	assert.Empty(t, got.Queue)
	again := &sessionEvents{}
	_, err = second.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, again.add)
	require.NoError(t, err)
	four, err := second.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn four"})
	require.NoError(t, err)
	all := again.waitEnds(t, 4, 10*time.Second)
	gapFree(t, all, 0)
	var statuses []api.Status
	for _, ev := range all {
		if client.Terminal(ev.Event) {
			statuses = append(statuses, ev.Event.Status)
		}
	}
	assert.Equal(t, []api.Status{api.StatusSucceeded, api.StatusInterrupted, api.StatusRefused, api.StatusSucceeded}, statuses)
	args, _ := agents["claude-code"].Received(t, four.RunID)
	assert.Contains(t, args, "--resume")
}

func TestAFirstTurnThatFailedBeforeTheCLISaidAnythingLeavesNoSessionToResume(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	one, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "FAIL at once"})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 10*time.Second)
	args, _ := rd.agents["claude-code"].Received(t, one.RunID)
	require.Contains(t, args, "--session-id", "a first turn runs under an id card chose")
	waitSessionIdle(t, rd.Client, s.SessionID)
	got, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Empty(t, got.AgentSessionID, "the chosen id is let go: the CLI never began that session")
	two, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "again"})
	require.NoError(t, err)
	evs.waitEnds(t, 2, 10*time.Second)
	args, _ = rd.agents["claude-code"].Received(t, two.RunID)
	assert.NotContains(t, args, "--resume")
	assert.Contains(t, args, "--session-id")
}

func TestASessionWhoseEarlyTurnsWerePrunedStillReplaysTheRest(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, evs := startSession(t, rd, rd.Client, "claude-code")
	for i := 1; i <= 3; i++ {
		_, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: fmt.Sprint("turn ", i)})
		require.NoError(t, err)
		evs.waitEnds(t, i, 10*time.Second)
	}
	all := evs.all()
	one := 0
	for _, ev := range all {
		if ev.Turn == 1 {
			one++
		}
	}
	require.Eventually(t, func() bool {
		runs, err := rd.Client.Runs(ctx, api.ListParams{Status: "running"})
		return err == nil && len(runs) == 0
	}, 5*time.Second, 10*time.Millisecond)
	keep := 2
	_, err := rd.Client.Prune(ctx, api.PruneParams{MaxRuns: &keep})
	require.NoError(t, err)
	again := &sessionEvents{}
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, again.add)
	require.NoError(t, err)
	got := again.waitEnds(t, 2, 5*time.Second)
	require.Len(t, got, len(all)-one)
	assert.Equal(t, all[one].Seq, got[0].Seq, "the seq goes on at turn two's base")
	gapFree(t, got, int64(one))
}

// waitSessionIdle waits until no turn of the session is running: a turn's
// terminal event is sent before the session lets the turn go, so a client
// that saw it and asks at once may still find the turn running.
func waitSessionIdle(t *testing.T, c *client.Client, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		g, err := c.Session(context.Background(), id)
		return err == nil && g.State == api.SessionIdle
	}, 5*time.Second, time.Millisecond)
}

// heldTurns starts a session on a daemon whose runs each stay a moment
// between their terminal event and their recorded outcome, where a client
// reading the event may act, and follows it: ended gets each turn's
// terminal event.
func heldTurns(t *testing.T) (rd *runsDaemon, s api.Session, ended chan api.SessionEvent) {
	t.Helper()
	rd = startRunsDaemon(t, "")
	daemon.HoldRunsAfterTheirLastEvent(t, rd.Daemon.Daemon, 300*time.Millisecond)
	ctx := daemontest.Context(t)
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	ended = make(chan api.SessionEvent, 16)
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, func(ev api.SessionEvent) {
		if client.Terminal(ev.Event) {
			ended <- ev
		}
	})
	require.NoError(t, err)
	return rd, s, ended
}

// A client that reads a turn's terminal event and at once asks for the
// session finds the turn counted: its cost and tokens in the session's
// totals, and the session no longer running it.
func TestASessionReadRightAfterATurnsLastEventCountsTheTurn(t *testing.T) {
	rd, s, ended := heldTurns(t)
	ctx := daemontest.Context(t)
	var cost float64
	var tokens int64
	for turn := 1; turn <= 3; turn++ {
		_, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn " + strconv.Itoa(turn)})
		require.NoError(t, err)
		var end api.SessionEvent
		select {
		case end = <-ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("turn %d never ended", turn)
		}
		got, err := rd.Client.Session(ctx, s.SessionID)
		require.NoError(t, err)
		require.NotNil(t, end.Event.Result)
		require.NotNil(t, end.Event.Result.CostUSD, "the fixture's turn reports a cost")
		cost += *end.Event.Result.CostUSD
		tokens += end.Event.Result.Usage.InputTokens + end.Event.Result.Usage.OutputTokens
		require.Positive(t, tokens, "the fixture's turn reports tokens")
		assert.InDelta(t, cost, got.TotalCostUSD, 1e-12, "turn %d: the session's cost", turn)
		assert.Equal(t, tokens, got.Usage.InputTokens+got.Usage.OutputTokens, "turn %d: the session's tokens", turn)
		assert.Equal(t, api.SessionIdle, got.State, "turn %d: the session still runs the ended turn", turn)
		assert.Empty(t, got.CurrentRunID, "turn %d", turn)
	}
}

// A prompt sent the moment the last turn's terminal event arrives starts
// its turn at once: the session is not still running the turn that ended,
// so the prompt is not queued behind it.
func TestAPromptSentRightAfterATurnsLastEventStartsAtOnce(t *testing.T) {
	rd, s, ended := heldTurns(t)
	ctx := daemontest.Context(t)
	for turn := 1; turn <= 3; turn++ {
		res, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "turn " + strconv.Itoa(turn)})
		require.NoError(t, err)
		assert.False(t, res.Queued, "turn %d was queued behind a turn that had ended", turn)
		assert.NotEmpty(t, res.RunID, "turn %d", turn)
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("turn %d never ended", turn)
		}
	}
}

// Every text event the daemon writes on a session's stream is of the one
// form a text follower (the ACP front door) reads without decoding its
// text: were the daemon to write another member or order, the front door
// would quietly go back to decoding and quoting every chunk.
func TestEveryTextEventOfASessionTakesTheTextFollowersFastPath(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	type got struct {
		kind, text string
		json       bool
	}
	evs := make(chan got, 64)
	_, err = rd.Client.SubscribeSessionText(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, func(ev api.SessionEvent, text json.RawMessage) {
		evs <- got{kind: ev.Event.Kind, text: ev.Event.Text + string(text), json: text != nil}
	})
	require.NoError(t, err)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "Reply with PONG."})
	require.NoError(t, err)
	var texts []got
	for {
		select {
		case g := <-evs:
			if g.kind == api.EventText || g.kind == api.EventThinking {
				texts = append(texts, g)
			}
			if g.kind != api.EventDone && g.kind != api.EventRunError {
				continue
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the turn never ended")
		}
		break
	}
	require.NotEmpty(t, texts, "the fixture's turn has text")
	for _, g := range texts {
		assert.True(t, g.json, "a %s event came decoded: %q", g.kind, g.text)
		assert.Equal(t, `"PONG from fake anthropic"`, g.text)
	}
}
