package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
)

func TestAFinishedRunAnswersWithTheAgentsParsedResult(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	res := rd.finished(t, c, map[string]any{"id": "claude-code", "task": "say pong"})

	assert.Equal(t, store.StatusSucceeded, res.Status)
	assert.Equal(t, "claude-code", res.Adapter)
	assert.Equal(t, "PONG from fake anthropic", res.Answer)
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", res.SessionID)
	assert.Equal(t, 1, res.Turns)
	require.NotNil(t, res.CostUSD)
	assert.InDelta(t, 0.000175, *res.CostUSD, 1e-9)
	assert.Equal(t, int64(10), res.Usage.InputTokens)
	assert.Equal(t, int64(5), res.Usage.OutputTokens)
	assert.False(t, res.IsError)
	assert.NotEmpty(t, res.RunID)

	var run store.Run
	require.NoError(t, call(t, c, "runs.get", map[string]any{"run_id": res.RunID}, &run))
	assert.Equal(t, store.StatusSucceeded, run.Status)
	assert.Equal(t, res.Answer, run.Answer)
	assert.Equal(t, res.SessionID, run.SessionID)
	assert.Equal(t, len("say pong"), run.TaskLen)
	assert.Equal(t, "read_only", run.PermissionMode)
	assert.Equal(t, rd.cwd, run.Cwd)
	require.NotNil(t, run.ExitCode)
	assert.Equal(t, 0, *run.ExitCode)
	assert.NotZero(t, run.Pgid, "the group is recorded so a restarted daemon can end it")

	env := rd.agents.childEnvOf(t, "claude-code", res.RunID)
	assert.Equal(t, res.RunID, env[daemon.RunIDEnv])
	assert.Equal(t, "claude-code", env["CAR_INVOKED_BY"])
	assert.NotContains(t, env, "NOTIFY_SOCKET")
}

func TestEachAdaptersReplayedStreamEndsInTheRightResult(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	for id, answer := range map[string]string{"codex": "PONG from fake openai", "gemini": "PONG from fake gemini"} {
		var res daemon.InvokeResult
		require.NoError(t, rd.invoke(t, c, map[string]any{"id": id, "task": "say pong"}, &res), id)
		assert.Equal(t, store.StatusSucceeded, res.Status, id)
		assert.Equal(t, answer, res.Answer, id)
		assert.Equal(t, int64(10), res.Usage.InputTokens, id)
	}
}

func TestAFailingAgentIsAFailedRunNotAnRPCError(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	res := rd.finished(t, c, map[string]any{"id": "claude-code", "task": "FAIL"})
	assert.Equal(t, store.StatusFailed, res.Status)
	require.NotNil(t, res.Error)
	assert.Contains(t, res.Error.StderrExcerpt, "boom")
	run := waitRun(t, c, res.RunID, time.Second)
	require.NotNil(t, run.Error)
	require.NotNil(t, run.ExitCode)
	assert.Equal(t, 3, *run.ExitCode)
}

func TestStreamedEventsArriveInSeqOrderAndEndWithOneDone(t *testing.T) {
	rd := startRunsDaemon(t, "")
	_, evs, acc := rd.stream(t, map[string]any{"id": "codex", "task": "say pong"})
	assert.True(t, acc.Accepted)
	got := evs.waitFor(t, acc.RunID, 10*time.Second, terminal)
	time.Sleep(100 * time.Millisecond) // nothing may follow the terminal event
	got = evs.of(acc.RunID)

	var text string
	terminals := 0
	for i, ev := range got {
		assert.Equal(t, int64(i+1), ev.Seq, "seq rises by one from 1: %s", kinds(got))
		if ev.Kind == "text" {
			text += ev.Text
		}
		if ev.Kind == daemon.EventDone || ev.Kind == daemon.EventRunError {
			terminals++
		}
		if i < len(got)-1 {
			assert.NotContains(t, []string{daemon.EventDone, daemon.EventRunError}, ev.Kind, "only the last event ends the stream")
		}
	}
	assert.Equal(t, 1, terminals)
	last := got[len(got)-1]
	assert.Equal(t, daemon.EventDone, last.Kind)
	assert.Equal(t, store.StatusSucceeded, last.Status)
	require.NotNil(t, last.Result)
	assert.Equal(t, "PONG from fake openai", last.Result.Answer)
	assert.Equal(t, acc.RunID, last.Result.RunID)
	assert.Equal(t, "PONG from fake openai", text, "the answer also arrives as streamed text")
	assert.Contains(t, kinds(got), ":agent_error", "codex's mid-run error item is not a terminal error")
}

func TestCancelEndsANonStreamingRunAndItsGroupWithinTwoSeconds(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	type answer struct {
		res daemon.InvokeResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.err = rd.invoke(t, c, map[string]any{"id": "claude-code", "task": "SLEEP"}, &a.res)
		done <- a
	}()
	id := waitForRunning(t, c)
	waitForProcesses(t, id)

	start := time.Now()
	var cr daemon.CancelResult
	require.NoError(t, call(t, c, "agents.cancel", map[string]any{"run_id": id}, &cr))
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.True(t, cr.Cancelled)
	assert.Equal(t, store.StatusCancelled, cr.Status)
	assert.Empty(t, processesOfRun(id), "the whole group is gone, the sleeping grandchild too")

	a := <-done
	require.NoError(t, a.err)
	assert.Equal(t, store.StatusCancelled, a.res.Status)
	assert.Equal(t, store.StatusCancelled, waitRun(t, c, id, time.Second).Status)

	// Cancelling it again is a clear no-op; an unknown id is an error.
	require.NoError(t, call(t, c, "agents.cancel", map[string]any{"run_id": id}, &cr))
	assert.False(t, cr.Cancelled)
	assert.Contains(t, cr.Reason, "already ended")
	err := call(t, c, "agents.cancel", map[string]any{"run_id": "nope"}, &cr)
	assert.Equal(t, daemon.CodeRunNotFound, rpcCode(t, err).Code)
}

func waitForRunning(t *testing.T, c *rpc.Client) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var runs []store.Run
		require.NoError(t, call(t, c, "runs.list", map[string]any{"status": "running"}, &runs))
		if len(runs) > 0 {
			return runs[0].RunID
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no run started")
	return ""
}

// waitForProcesses waits until the fake agent's sleeping grandchild runs
// (the shell's `$(cat)` subshell would otherwise pass for it).
func waitForProcesses(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, pid := range processesOfRun(id) {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "sleep" {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the fake agent of run %s never started its sleeper", id)
}

func TestADeadlineEndsTheRunAsTimedOut(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	start := time.Now()
	res := rd.finished(t, c, map[string]any{"id": "claude-code", "task": "SLEEP", "timeout_secs": 1})
	assert.Equal(t, store.StatusTimedOut, res.Status)
	assert.Less(t, time.Since(start), 4*time.Second)
	require.NotNil(t, res.Error)
	assert.Equal(t, "timeout", res.Error.Kind)
	assert.Empty(t, processesOfRun(res.RunID))
}

func TestARunOutlivesTheClientThatStartedIt(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c, _, acc := rd.stream(t, map[string]any{"id": "claude-code", "task": "DRIP"})
	require.NoError(t, c.Close())

	c2 := rd.client(t, rpc.ClientOptions{})
	run := waitRun(t, c2, acc.RunID, 10*time.Second)
	assert.Equal(t, store.StatusSucceeded, run.Status)
	var runs []store.Run
	require.NoError(t, call(t, c2, "runs.list", map[string]any{}, &runs))
	require.NotEmpty(t, runs)
	assert.Equal(t, acc.RunID, runs[0].RunID)
}

func TestCancelOnDisconnectEndsTheClientsRuns(t *testing.T) {
	rd := startRunsDaemon(t, "cancel_on_disconnect = true\n")
	c, _, acc := rd.stream(t, map[string]any{"id": "claude-code", "task": "SLEEP"})
	waitForProcesses(t, acc.RunID)
	require.NoError(t, c.Close())
	c2 := rd.client(t, rpc.ClientOptions{})
	assert.Equal(t, store.StatusCancelled, waitRun(t, c2, acc.RunID, 5*time.Second).Status)
	waitNoProcesses(t, acc.RunID, time.Second)
}

func TestSubscribeAfterAReconnectGetsEveryEventExactlyOnce(t *testing.T) {
	rd := startRunsDaemon(t, "")
	first := newEvents()
	c := rd.client(t, first.opts())
	var acc daemon.InvokeAccepted
	require.NoError(t, rd.invoke(t, c, map[string]any{"id": "claude-code", "task": "DRIP", "stream": true}, &acc))
	first.waitFor(t, acc.RunID, 10*time.Second, func(e []daemon.AgentEvent) bool { return len(e) >= 3 })
	require.NoError(t, c.Close())
	seen := first.of(acc.RunID)
	require.False(t, terminal(seen), "the drip must still be going when the client drops")
	lastSeq := seen[len(seen)-1].Seq

	second := newEvents()
	c2 := rd.client(t, second.opts())
	var sub daemon.SubscribeResult
	require.NoError(t, call(t, c2, "runs.subscribe", map[string]any{"run_id": acc.RunID, "after_seq": lastSeq}, &sub))
	rest := second.waitFor(t, acc.RunID, 10*time.Second, terminal)
	all := append(append([]daemon.AgentEvent{}, seen...), rest...)
	for i, ev := range all {
		require.Equal(t, int64(i+1), ev.Seq, "every event exactly once, in order: %s | %s", kinds(seen), kinds(rest))
	}
	assert.Equal(t, daemon.EventDone, all[len(all)-1].Kind)

	// After the run, the same replay comes from the store, byte for byte.
	waitRun(t, c2, acc.RunID, 5*time.Second)
	third := newEvents()
	c3 := rd.client(t, third.opts())
	require.NoError(t, call(t, c3, "runs.subscribe", map[string]any{"run_id": acc.RunID}, &sub))
	assert.False(t, sub.Live)
	assert.Equal(t, store.StatusSucceeded, sub.Status)
	replayed := third.waitFor(t, acc.RunID, 5*time.Second, terminal)
	assert.Equal(t, all, replayed)

	err := call(t, c3, "runs.subscribe", map[string]any{"run_id": "nope"}, &sub)
	assert.Equal(t, daemon.CodeRunNotFound, rpcCode(t, err).Code)
}

func TestTheNinthConcurrentRunIsRefusedNotQueued(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	var ids []string
	for i := 0; i < 8; i++ {
		var acc daemon.InvokeAccepted
		require.NoError(t, rd.invoke(t, c, map[string]any{"id": "claude-code", "task": "SLEEP", "stream": true}, &acc))
		ids = append(ids, acc.RunID)
	}
	err := rd.invoke(t, c, map[string]any{"id": "claude-code", "task": "SLEEP", "stream": true}, nil)
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeTooManyRuns, re.Code)
	assert.Contains(t, re.Message, "max_concurrent_runs")
	refusedID, _ := errData(t, re)["run_id"].(string)
	require.NotEmpty(t, refusedID)
	assert.Equal(t, store.StatusRefused, waitRun(t, c, refusedID, time.Second).Status)

	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			var cr daemon.CancelResult
			assert.NoError(t, call(t, c, "agents.cancel", map[string]any{"run_id": id}, &cr))
			assert.True(t, cr.Cancelled)
		}(id)
	}
	wg.Wait()
	// A slot is free again.
	res := rd.finished(t, c, map[string]any{"id": "claude-code", "task": "say pong"})
	assert.Equal(t, store.StatusSucceeded, res.Status)
}

func TestBadParamsAreRefusedNamingTheFieldAndAreNotRecorded(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	cases := []struct {
		name   string
		params map[string]any
		field  string
	}{
		{"no task", map[string]any{"id": "claude-code", "task": " "}, "task"},
		{"no id", map[string]any{"task": "x"}, "id"},
		{"unknown adapter", map[string]any{"id": "clippy", "task": "x"}, "id"},
		{"relative cwd", map[string]any{"id": "claude-code", "task": "x", "cwd": "rel/dir"}, "cwd"},
		{"missing cwd", map[string]any{"id": "claude-code", "task": "x", "cwd": "/nonexistent/dir"}, "cwd"},
		{"edit without cwd", map[string]any{"id": "claude-code", "task": "x", "cwd": "", "permission_mode": "edit"}, "cwd"},
		{"unknown mode", map[string]any{"id": "claude-code", "task": "x", "permission_mode": "yolo"}, "permission_mode"},
		{"unknown effort", map[string]any{"id": "claude-code", "task": "x", "effort": "extreme"}, "effort"},
		{"negative turns", map[string]any{"id": "claude-code", "task": "x", "max_turns": -1}, "max_turns"},
		{"unknown field", map[string]any{"id": "claude-code", "task": "x", "prompt": "x"}, "prompt"},
		{"bad session id", map[string]any{"id": "claude-code", "task": "x", "session_id": "--yolo"}, "session_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.params["cwd"] == "" {
				delete(tc.params, "cwd")
				tc.params["cwd"] = nil
			}
			err := rd.invoke(t, c, tc.params, nil)
			re := rpcCode(t, err)
			assert.Equal(t, rpc.CodeInvalidParams, re.Code, re.Message)
			assert.Equal(t, tc.field, errData(t, re)["field"], re.Message)
		})
	}
	var runs []store.Run
	require.NoError(t, call(t, c, "runs.list", map[string]any{}, &runs))
	assert.Empty(t, runs, "a request that never passed validation is not a run")
}

func TestUnknownAdapterNamesTheKnownOnes(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	re := rpcCode(t, rd.invoke(t, c, map[string]any{"id": "clippy", "task": "x"}, nil))
	assert.Contains(t, re.Message, "claude-code")
	assert.Contains(t, fmt.Sprint(errData(t, re)["known"]), "codex")
}

func TestBypassIsRefusedUnlessTheOperatorAllowedIt(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.client(t, rpc.ClientOptions{})
	re := rpcCode(t, rd.invoke(t, c, map[string]any{"id": "claude-code", "task": "x", "permission_mode": "bypass"}, nil))
	assert.Equal(t, daemon.CodeBypassNotAllowed, re.Code)
	assert.Contains(t, re.Message, "allow_bypass")
	id, _ := errData(t, re)["run_id"].(string)
	run := waitRun(t, c, id, time.Second)
	assert.Equal(t, store.StatusRefused, run.Status)
	assert.Contains(t, run.RefusalReason, "allow_bypass")
	assert.Equal(t, "bypass", run.PermissionMode)
}

func TestAnAgentThatCannotRunIsRefusedWithDetectionsReason(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_GEMINI_BIN=/nonexistent/gemini")
	c := rd.client(t, rpc.ClientOptions{})
	re := rpcCode(t, rd.invoke(t, c, map[string]any{"id": "gemini", "task": "x"}, nil))
	assert.Contains(t, []int64{daemon.CodeAgentUnusable, daemon.CodeAgentNotInstalled}, re.Code)
	assert.Contains(t, re.Message, "CAR_GEMINI_BIN")
}

func TestTaskTextIsKeptOnlyWhenTheOperatorAllows(t *testing.T) {
	// record_tasks = true is spelled out: config.DefaultConfig shares one
	// *bool between record_tasks and login_shell_path, so the
	// login_shell_path = false every test daemon sets would turn it off.
	rd := startRunsDaemon(t, "record_tasks = true\n")
	c := rd.client(t, rpc.ClientOptions{})
	res := rd.finished(t, c, map[string]any{"id": "claude-code", "task": "say pong"})
	assert.Equal(t, "say pong", waitRun(t, c, res.RunID, time.Second).Task)
}

func TestTaskTextIsNotKeptWhenTheOperatorSaysSo(t *testing.T) {
	rd := startRunsDaemon(t, "record_tasks = false\n")
	c := rd.client(t, rpc.ClientOptions{})
	res := rd.finished(t, c, map[string]any{"id": "claude-code", "task": "secret task"})
	run := waitRun(t, c, res.RunID, time.Second)
	assert.Empty(t, run.Task)
	assert.Equal(t, len("secret task"), run.TaskLen)
	assert.Len(t, run.TaskSHA256, 64)
}

func TestShutdownRecordsRunningRunsInterruptedAndLeavesNoChild(t *testing.T) {
	rd := startRunsDaemon(t, "")
	_, _, acc := rd.stream(t, map[string]any{"id": "claude-code", "task": "SLEEP"})
	waitForProcesses(t, acc.RunID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, rd.Shutdown(ctx))
	assert.Empty(t, processesOfRun(acc.RunID))

	st, err := store.Open(ctx, rd.home+"/"+daemon.RunsDBName, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	run, err := st.Get(ctx, acc.RunID)
	require.NoError(t, err)
	assert.Equal(t, store.StatusInterrupted, run.Status)
	require.NotNil(t, run.Error)
	assert.Equal(t, "interrupted", run.Error.Kind)
}

// frame is one message the daemon sent on a raw connection.
type frame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *rpc.Error      `json:"error"`
	Params json.RawMessage `json:"params"`
}

func readFrame(t *testing.T, ws *websocket.Conn) frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, b, err := ws.Read(ctx)
	require.NoError(t, err)
	var f frame
	require.NoError(t, json.Unmarshal(b, &f), "%s", b)
	return f
}

func writeFrame(t *testing.T, ws *websocket.Conn, f string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(f)))
}

// readRun reads one request's answer and every agents.event of the run it
// names, failing if an event comes before the answer or after the terminal
// event is missing.
func readRun(t *testing.T, ws *websocket.Conn, id string) (json.RawMessage, []daemon.AgentEvent) {
	t.Helper()
	first := readFrame(t, ws)
	require.Empty(t, first.Method, "an agents.event arrived before the answer: %s", first.Params)
	require.JSONEq(t, id, string(first.ID))
	require.Nil(t, first.Error)
	var evs []daemon.AgentEvent
	for {
		f := readFrame(t, ws)
		require.Equal(t, "agents.event", f.Method)
		var ev daemon.AgentEvent
		require.NoError(t, json.Unmarshal(f.Params, &ev))
		evs = append(evs, ev)
		if terminal(evs) {
			return first.Result, evs
		}
	}
}

// The answer to a streaming agents.invoke, and to runs.subscribe, is on the
// wire before the first agents.event of the run it names, every time: a
// client can learn the run_id before it has to file events under it.
func TestTheAnswerThatNamesARunAlwaysPrecedesItsEvents(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ws := rd.rawConn(t)
	ws.SetReadLimit(16 << 20)
	var last string
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf(`"invoke-%d"`, i)
		writeFrame(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"agents.invoke","params":{"id":"codex","task":"say pong","stream":true,"cwd":%q}}`, id, rd.cwd))
		res, evs := readRun(t, ws, id)
		var acc daemon.InvokeAccepted
		require.NoError(t, json.Unmarshal(res, &acc))
		assert.Equal(t, acc.RunID, evs[0].RunID)
		assert.Equal(t, int64(1), evs[0].Seq)
		last = acc.RunID
	}
	c := rd.client(t, rpc.ClientOptions{})
	require.Equal(t, store.StatusSucceeded, waitRun(t, c, last, 10*time.Second).Status)
	writeFrame(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":"sub","method":"runs.subscribe","params":{"run_id":%q,"after_seq":1}}`, last))
	res, evs := readRun(t, ws, `"sub"`)
	var sub daemon.SubscribeResult
	require.NoError(t, json.Unmarshal(res, &sub))
	assert.False(t, sub.Live)
	assert.Equal(t, int64(2), evs[0].Seq, "the replay starts after after_seq")
}

// A client that withdraws a waiting agents.invoke with $/cancelRequest gets
// -32800 with the run's id at once; the run is the daemon's and goes on.
func TestWithdrawingAWaitingInvokeAnswersRequestCancelledAndTheRunGoesOn(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ws := rd.rawConn(t)
	writeFrame(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":-3,"method":"agents.invoke","params":{"id":"claude-code","task":"DRIP","cwd":%q}}`, rd.cwd))
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	writeFrame(t, ws, `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":-3}}`)
	f := readFrame(t, ws)
	assert.Less(t, time.Since(start), time.Second, "the wait ends at once, not with the run")
	assert.JSONEq(t, `-3`, string(f.ID))
	require.NotNil(t, f.Error)
	assert.Equal(t, rpc.CodeRequestCancelled, f.Error.Code)
	runID, _ := errData(t, f.Error)["run_id"].(string)
	require.NotEmpty(t, runID)
	c := rd.client(t, rpc.ClientOptions{})
	assert.Equal(t, store.StatusSucceeded, waitRun(t, c, runID, 10*time.Second).Status)
}

// A run keeps its first max_events_per_run events and its terminal one; the
// ones in between still take a seq (a client sees the gap), are neither sent
// nor stored, and the run's record counts them.
func TestEventsPastTheBoundAreCountedOnTheRunAndTheTerminalIsKept(t *testing.T) {
	rd := startRunsDaemon(t, "max_events_per_run = 10\n")
	c, evs, acc := rd.stream(t, map[string]any{"id": "claude-code", "task": "DRIP"})
	got := evs.waitFor(t, acc.RunID, 10*time.Second, terminal)
	require.Len(t, got, 11, "ten kept events and the terminal one: %s", kinds(got))
	last := got[len(got)-1]
	assert.Equal(t, daemon.EventDone, last.Kind)
	require.Greater(t, last.Seq, int64(11), "the dropped events took seqs")
	run := waitRun(t, c, acc.RunID, 5*time.Second)
	assert.Equal(t, last.Seq-11, run.EventsDropped)

	replay := newEvents()
	c2 := rd.client(t, replay.opts())
	var sub daemon.SubscribeResult
	require.NoError(t, call(t, c2, "runs.subscribe", map[string]any{"run_id": acc.RunID}, &sub))
	assert.Equal(t, got, replay.waitFor(t, acc.RunID, 5*time.Second, terminal), "the store kept exactly what was sent")
}
