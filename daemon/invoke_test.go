package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/rpc/rpcclient"
)

func TestAFinishedRunAnswersWithTheAgentsParsedResult(t *testing.T) {
	rd := startRunsDaemon(t, "")
	res := rd.finished(t, rd.params("claude-code", "say pong"))

	assert.Equal(t, api.StatusSucceeded, res.Status)
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

	run, err := rd.Client.Run(daemontest.Context(t), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, run.Status)
	assert.Equal(t, res.Answer, run.Answer)
	assert.Equal(t, res.SessionID, run.SessionID)
	assert.Equal(t, len("say pong"), run.TaskLen)
	assert.Equal(t, "read_only", run.PermissionMode)
	assert.Equal(t, rd.cwd, run.Cwd)
	require.NotNil(t, run.ExitCode)
	assert.Equal(t, 0, *run.ExitCode)
	assert.NotZero(t, run.Pgid, "the group is recorded so a restarted daemon can end it")

	env := rd.agents["claude-code"].ChildEnv(t, res.RunID)
	assert.Equal(t, res.RunID, env[proc.RunIDEnv])
	assert.Equal(t, "claude-code", env["CAR_INVOKED_BY"])
	assert.NotContains(t, env, "NOTIFY_SOCKET")
}

func TestEachAdaptersReplayedStreamEndsInTheRightResult(t *testing.T) {
	rd := startRunsDaemon(t, "")
	for id, answer := range map[string]string{"codex": "PONG from fake openai", "gemini": "PONG from fake gemini"} {
		res := rd.finished(t, rd.params(id, "say pong"))
		assert.Equal(t, api.StatusSucceeded, res.Status, id)
		assert.Equal(t, answer, res.Answer, id)
		assert.Equal(t, int64(10), res.Usage.InputTokens, id)
	}
}

func TestAFailingAgentIsAFailedRunNotAnRPCError(t *testing.T) {
	rd := startRunsDaemon(t, "")
	res := rd.finished(t, rd.params("claude-code", "FAIL"))
	assert.Equal(t, api.StatusFailed, res.Status)
	require.NotNil(t, res.Error)
	assert.Contains(t, res.Error.StderrExcerpt, "boom")
	run := waitRun(t, rd.Client, res.RunID, time.Second)
	require.NotNil(t, run.Error)
	require.NotNil(t, run.ExitCode)
	assert.Equal(t, 3, *run.ExitCode)
}

func TestStreamedEventsArriveInSeqOrderAndEndWithOneDone(t *testing.T) {
	rd := startRunsDaemon(t, "")
	_, evs, acc := rd.stream(t, rd.params("codex", "say pong"))
	assert.True(t, acc.Accepted)
	evs.WaitEnd(t, acc.RunID, 10*time.Second)
	time.Sleep(100 * time.Millisecond) // nothing may follow the terminal event
	got := evs.Of(acc.RunID)

	var text string
	terminals := 0
	for i, ev := range got {
		assert.Equal(t, int64(i+1), ev.Seq, "seq rises by one from 1: %s", daemontest.Kinds(got))
		if ev.Kind == "text" {
			text += ev.Text
		}
		if ev.Kind == api.EventDone || ev.Kind == api.EventRunError {
			terminals++
		}
		if i < len(got)-1 {
			assert.NotContains(t, []string{api.EventDone, api.EventRunError}, ev.Kind, "only the last event ends the stream")
		}
	}
	assert.Equal(t, 1, terminals)
	last := got[len(got)-1]
	assert.Equal(t, api.EventDone, last.Kind)
	assert.Equal(t, api.StatusSucceeded, last.Status)
	require.NotNil(t, last.Result)
	assert.Equal(t, "PONG from fake openai", last.Result.Answer)
	assert.Equal(t, acc.RunID, last.Result.RunID)
	assert.Equal(t, "PONG from fake openai", text, "the answer also arrives as streamed text")
	assert.Contains(t, daemontest.Kinds(got), ":warning", "codex's mid-run error item is a warning, not an error")
	assert.NotContains(t, daemontest.Kinds(got), ":agent_error", "a run that succeeds shows no error")
}

func TestCancelEndsANonStreamingRunAndItsGroupWithinTwoSeconds(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.Client
	ctx := daemontest.Context(t)
	type answer struct {
		res api.InvokeResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.res, a.err = c.Invoke(ctx, rd.params("claude-code", "SLEEP"))
		done <- a
	}()
	id := waitForRunning(t, c)
	waitForProcesses(t, id)

	start := time.Now()
	cr, err := c.Cancel(ctx, id)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.True(t, cr.Cancelled)
	assert.Equal(t, api.StatusCancelled, cr.Status)
	assert.Empty(t, processesOfRun(id), "the whole group is gone, the sleeping grandchild too")

	a := <-done
	require.NoError(t, a.err)
	assert.Equal(t, api.StatusCancelled, a.res.Status)
	assert.Equal(t, api.StatusCancelled, waitRun(t, c, id, time.Second).Status)

	// Cancelling it again is a clear no-op; an unknown id is an error.
	cr, err = c.Cancel(ctx, id)
	require.NoError(t, err)
	assert.False(t, cr.Cancelled)
	assert.Contains(t, cr.Reason, "already ended")
	_, err = c.Cancel(ctx, "nope")
	assert.Equal(t, daemon.CodeRunNotFound, rpcCode(t, err).Code)
}

func waitForRunning(t *testing.T, c *client.Client) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		runs, err := c.Runs(daemontest.Context(t), api.ListParams{Status: "running"})
		require.NoError(t, err)
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
	start := time.Now()
	p := rd.params("claude-code", "SLEEP")
	p.TimeoutSecs = 1
	res := rd.finished(t, p)
	assert.Equal(t, api.StatusTimedOut, res.Status)
	assert.Less(t, time.Since(start), 4*time.Second)
	require.NotNil(t, res.Error)
	assert.Equal(t, "timeout", res.Error.Kind)
	assert.Empty(t, processesOfRun(res.RunID))
}

func TestARunOutlivesTheClientThatStartedIt(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c, _, acc := rd.stream(t, rd.params("claude-code", "DRIP"))
	require.NoError(t, c.Close())

	run := waitRun(t, rd.Client, acc.RunID, 10*time.Second)
	assert.Equal(t, api.StatusSucceeded, run.Status)
	runs, err := rd.Client.Runs(daemontest.Context(t), api.ListParams{})
	require.NoError(t, err)
	require.NotEmpty(t, runs)
	assert.Equal(t, acc.RunID, runs[0].RunID)
}

func TestCancelOnDisconnectEndsTheClientsRuns(t *testing.T) {
	rd := startRunsDaemon(t, "cancel_on_disconnect = true\n")
	c, _, acc := rd.stream(t, rd.params("claude-code", "SLEEP"))
	waitForProcesses(t, acc.RunID)
	require.NoError(t, c.Close())
	assert.Equal(t, api.StatusCancelled, waitRun(t, rd.Client, acc.RunID, 5*time.Second).Status)
	waitNoProcesses(t, acc.RunID, time.Second)
}

func TestSubscribeAfterAReconnectGetsEveryEventExactlyOnce(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	c, first, acc := rd.stream(t, rd.params("claude-code", "DRIP"))
	first.WaitFor(t, acc.RunID, 10*time.Second, func(e []api.AgentEvent) bool { return len(e) >= 3 })
	require.NoError(t, c.Close())
	seen := first.Of(acc.RunID)
	require.False(t, daemontest.Ended(seen), "the drip must still be going when the client drops")
	lastSeq := seen[len(seen)-1].Seq

	second := daemontest.NewEvents()
	c2 := rd.Dial(t, client.Options{})
	_, err := c2.Subscribe(ctx, acc.RunID, lastSeq, second.Add)
	require.NoError(t, err)
	rest := second.WaitEnd(t, acc.RunID, 10*time.Second)
	all := append(append([]api.AgentEvent{}, seen...), rest...)
	for i, ev := range all {
		require.Equal(t, int64(i+1), ev.Seq, "every event exactly once, in order: %s | %s", daemontest.Kinds(seen), daemontest.Kinds(rest))
	}
	assert.Equal(t, api.EventDone, all[len(all)-1].Kind)

	// After the run, the same replay comes from the store, byte for byte.
	waitRun(t, c2, acc.RunID, 5*time.Second)
	third := daemontest.NewEvents()
	c3 := rd.Dial(t, client.Options{OnEvent: third.Add})
	sub, err := c3.Subscribe(ctx, acc.RunID, 0, nil)
	require.NoError(t, err)
	assert.False(t, sub.Live)
	assert.Equal(t, api.StatusSucceeded, sub.Status)
	replayed := third.WaitEnd(t, acc.RunID, 5*time.Second)
	assert.Equal(t, all, replayed)

	_, err = c3.Subscribe(ctx, "nope", 0, nil)
	assert.Equal(t, daemon.CodeRunNotFound, rpcCode(t, err).Code)
}

func TestTheNinthConcurrentRunIsRefusedNotQueued(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.Client
	ctx := daemontest.Context(t)
	var ids []string
	for i := 0; i < 8; i++ {
		acc, err := c.Stream(ctx, rd.params("claude-code", "SLEEP"), nil)
		require.NoError(t, err)
		ids = append(ids, acc.RunID)
	}
	_, err := c.Stream(ctx, rd.params("claude-code", "SLEEP"), nil)
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeTooManyRuns, re.Code)
	assert.Contains(t, re.Message, "max_concurrent_runs")
	refusedID, _ := errData(t, re)["run_id"].(string)
	require.NotEmpty(t, refusedID)
	assert.Equal(t, api.StatusRefused, waitRun(t, c, refusedID, time.Second).Status)

	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			cr, err := c.Cancel(ctx, id)
			assert.NoError(t, err)
			assert.True(t, cr.Cancelled)
		}(id)
	}
	wg.Wait()
	// A slot is free again.
	res := rd.finished(t, rd.params("claude-code", "say pong"))
	assert.Equal(t, api.StatusSucceeded, res.Status)
}

func TestBadParamsAreRefusedNamingTheFieldAndAreNotRecorded(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.Client
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
		{"edit without cwd", map[string]any{"id": "claude-code", "task": "x", "cwd": nil, "permission_mode": "edit"}, "cwd"},
		{"unknown mode", map[string]any{"id": "claude-code", "task": "x", "permission_mode": "yolo"}, "permission_mode"},
		{"unknown effort", map[string]any{"id": "claude-code", "task": "x", "effort": "extreme"}, "effort"},
		{"negative turns", map[string]any{"id": "claude-code", "task": "x", "max_turns": -1}, "max_turns"},
		{"a negative cost cap", map[string]any{"id": "claude-code", "task": "x", "max_cost_usd": -1}, "max_cost_usd"},
		{"a zero cost cap", map[string]any{"id": "claude-code", "task": "x", "max_cost_usd": 0}, "max_cost_usd"},
		{"an absurd cost cap", map[string]any{"id": "claude-code", "task": "x", "max_cost_usd": 1e300}, "max_cost_usd"},
		{"a cost cap as text", map[string]any{"id": "claude-code", "task": "x", "max_cost_usd": "NaN"}, "max_cost_usd"},
		{"a cost cap on an adapter that reports no cost", map[string]any{"id": "codex", "task": "x", "max_cost_usd": 1}, "max_cost_usd"},
		{"a negative token cap", map[string]any{"id": "claude-code", "task": "x", "max_tokens": -1}, "max_tokens"},
		{"a zero token cap", map[string]any{"id": "claude-code", "task": "x", "max_tokens": 0}, "max_tokens"},
		{"an absurd token cap", map[string]any{"id": "claude-code", "task": "x", "max_tokens": 1e12}, "max_tokens"},
		{"a fractional token cap", map[string]any{"id": "claude-code", "task": "x", "max_tokens": 1.5}, "max_tokens"},
		{"a token cap on an adapter that reports no tokens", map[string]any{"id": "copilot", "task": "x", "max_tokens": 1000}, "max_tokens"},
		{"a zero stall limit", map[string]any{"id": "claude-code", "task": "x", "stall_secs": 0}, "stall_secs"},
		{"a negative stall limit", map[string]any{"id": "claude-code", "task": "x", "stall_secs": -30}, "stall_secs"},
		{"an absurd stall limit", map[string]any{"id": "claude-code", "task": "x", "stall_secs": 1e9}, "stall_secs"},
		{"a stall limit as text", map[string]any{"id": "claude-code", "task": "x", "stall_secs": "NaN"}, "stall_secs"},
		{"a negative stall kill limit", map[string]any{"id": "claude-code", "task": "x", "stall_kill_secs": -1}, "stall_kill_secs"},
		{"a stall kill limit before the stall", map[string]any{"id": "claude-code", "task": "x", "stall_secs": 60, "stall_kill_secs": 30}, "stall_kill_secs"},
		{"unknown field", map[string]any{"id": "claude-code", "task": "x", "prompt": "x"}, "prompt"},
		{"bad session id", map[string]any{"id": "claude-code", "task": "x", "session_id": "--yolo"}, "session_id"},
		{"a name in another case", map[string]any{"id": "claude-code", "task": "x", "PERMISSION_MODE": "edit"}, "PERMISSION_MODE"},
		{"the id in another case", map[string]any{"ID": "codex", "task": "x"}, "ID"},
		{"placeholder in the model", map[string]any{"id": "claude-code", "task": "x", "model": "{{card-file:../../etc/passwd}}"}, "model"},
		{"placeholder in the model beside a system prompt", map[string]any{"id": "claude-code", "task": "x", "system_prompt": "be terse", "model": "{{card-file:../../etc/passwd}}"}, "model"},
		{"placeholder in invoked_by", map[string]any{"id": "claude-code", "task": "x", "invoked_by": "{{card-file:x}}"}, "invoked_by"},
		{"placeholder in a tool", map[string]any{"id": "claude-code", "task": "x", "allowed_tools": []string{"Read", "Read({{card-file:x}})"}}, "allowed_tools[1]"},
		{"a tool entry that is two", map[string]any{"id": "claude-code", "task": "x", "allowed_tools": []string{"Read(/) Bash"}}, "allowed_tools"},
		// An allow rule for a file tool would let edit mode write outside
		// its cwd; the index says which entry.
		{"an allow rule for Write in edit mode", map[string]any{"id": "claude-code", "task": "x", "permission_mode": "edit", "allowed_tools": []string{"Read", "Write"}}, "allowed_tools[1]"},
		{"an allow rule for Edit of the home in edit mode", map[string]any{"id": "claude-code", "task": "x", "permission_mode": "edit", "allowed_tools": []string{"Edit(~/.bashrc)"}}, "allowed_tools[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Params no typed call would send, as they are.
			if _, ok := tc.params["cwd"]; !ok {
				tc.params["cwd"] = rd.cwd
			}
			err := c.Call(daemontest.Context(t), "agents.invoke", tc.params, nil)
			re := rpcCode(t, err)
			assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
			assert.Equal(t, tc.field, errData(t, re)["field"], re.Message)
		})
	}
	// A name given twice, which no map can send: the daemon must not pick
	// one of the two.
	ws := rd.Raw(t)
	ctx := daemontest.Context(t)
	frame := `{"jsonrpc":"2.0","id":1,"method":"agents.invoke","params":{"id":"claude-code","id":"codex","task":"x","cwd":` + strconv.Quote(rd.cwd) + `}}`
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(frame)))
	_, answer, err := ws.Read(ctx)
	require.NoError(t, err)
	assert.Contains(t, string(answer), `"code":-32602`)
	assert.Contains(t, string(answer), `"data":{"field":"id"}`)
	assert.Contains(t, string(answer), "given more than once")

	runs, err := c.Runs(daemontest.Context(t), api.ListParams{})
	require.NoError(t, err)
	assert.Empty(t, runs, "a request that never passed validation is not a run")
	for id, a := range rd.agents {
		started, _ := filepath.Glob(filepath.Join(a.Dir, "env-*"))
		assert.Empty(t, started, "bad params started %s", id)
	}
}

// A task is text for the agent, on stdin: it may quote card's own
// placeholder syntax, and reaches the agent exactly as written.
func TestATaskMayQuoteThePlaceholderSyntax(t *testing.T) {
	rd := startRunsDaemon(t, "")
	res := rd.finished(t, rd.params("claude-code", "what does {{card-file:x}} mean in card?"))
	assert.Equal(t, api.StatusSucceeded, res.Status)
}

func TestUnknownAdapterNamesTheKnownOnes(t *testing.T) {
	rd := startRunsDaemon(t, "")
	_, err := rd.Client.Invoke(daemontest.Context(t), rd.params("clippy", "x"))
	re := rpcCode(t, err)
	assert.Contains(t, re.Message, "claude-code")
	assert.Contains(t, fmt.Sprint(errData(t, re)["known"]), "codex")
}

func TestBypassIsRefusedUnlessTheOperatorAllowedIt(t *testing.T) {
	rd := startRunsDaemon(t, "")
	p := rd.params("claude-code", "x")
	p.PermissionMode = "bypass"
	_, err := rd.Client.Invoke(daemontest.Context(t), p)
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeBypassNotAllowed, re.Code)
	assert.Contains(t, re.Message, "allow_bypass")
	id, _ := errData(t, re)["run_id"].(string)
	run := waitRun(t, rd.Client, id, time.Second)
	assert.Equal(t, api.StatusRefused, run.Status)
	assert.Contains(t, run.RefusalReason, "allow_bypass")
	assert.Equal(t, "bypass", run.PermissionMode)
}

func TestAnAgentThatCannotRunIsRefusedWithDetectionsReason(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_GEMINI_BIN=/nonexistent/gemini")
	_, err := rd.Client.Invoke(daemontest.Context(t), rd.params("gemini", "x"))
	re := rpcCode(t, err)
	assert.Contains(t, []int64{daemon.CodeAgentUnusable, daemon.CodeAgentNotInstalled}, re.Code)
	assert.Contains(t, re.Message, "CAR_GEMINI_BIN")
}

func TestTaskTextIsKeptOnlyWhenTheOperatorAllows(t *testing.T) {
	rd := startRunsDaemon(t, "record_tasks = true\n")
	res := rd.finished(t, rd.params("claude-code", "say pong"))
	assert.Equal(t, "say pong", waitRun(t, rd.Client, res.RunID, time.Second).Task)
}

func TestTaskTextIsNotKeptWhenTheOperatorSaysSo(t *testing.T) {
	rd := startRunsDaemon(t, "record_tasks = false\n")
	res := rd.finished(t, rd.params("claude-code", "secret task"))
	run := waitRun(t, rd.Client, res.RunID, time.Second)
	assert.Empty(t, run.Task)
	assert.Equal(t, len("secret task"), run.TaskLen)
	assert.Len(t, run.TaskSHA256, 64)
}

func TestShutdownRecordsRunningRunsInterruptedAndLeavesNoChild(t *testing.T) {
	rd := startRunsDaemon(t, "")
	_, _, acc := rd.stream(t, rd.params("claude-code", "SLEEP"))
	waitForProcesses(t, acc.RunID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, rd.Shutdown(ctx))
	assert.Empty(t, processesOfRun(acc.RunID))

	st, err := store.Open(ctx, rd.Home+"/"+home.RunsDBName, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	run, err := st.Get(ctx, acc.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusInterrupted, run.Status)
	require.NotNil(t, run.Error)
	assert.Equal(t, "interrupted", run.Error.Kind)
}

// frame is one message the daemon sent on a raw connection.
type frame struct {
	ID     json.RawMessage  `json:"id"`
	Method string           `json:"method"`
	Result json.RawMessage  `json:"result"`
	Error  *rpcclient.Error `json:"error"`
	Params json.RawMessage  `json:"params"`
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
func readRun(t *testing.T, ws *websocket.Conn, id string) (json.RawMessage, []api.AgentEvent) {
	t.Helper()
	first := readFrame(t, ws)
	require.Empty(t, first.Method, "an agents.event arrived before the answer: %s", first.Params)
	require.JSONEq(t, id, string(first.ID))
	require.Nil(t, first.Error)
	var evs []api.AgentEvent
	for {
		f := readFrame(t, ws)
		require.Equal(t, "agents.event", f.Method)
		var ev api.AgentEvent
		require.NoError(t, json.Unmarshal(f.Params, &ev))
		evs = append(evs, ev)
		if daemontest.Ended(evs) {
			return first.Result, evs
		}
	}
}

// The answer to a streaming agents.invoke, and to runs.subscribe, is on the
// wire before the first agents.event of the run it names, every time: a
// client can learn the run_id before it has to file events under it.
func TestTheAnswerThatNamesARunAlwaysPrecedesItsEvents(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ws := rd.Raw(t)
	ws.SetReadLimit(16 << 20)
	var last string
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf(`"invoke-%d"`, i)
		writeFrame(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"agents.invoke","params":{"id":"codex","task":"say pong","stream":true,"cwd":%q}}`, id, rd.cwd))
		res, evs := readRun(t, ws, id)
		var acc api.InvokeAccepted
		require.NoError(t, json.Unmarshal(res, &acc))
		assert.Equal(t, acc.RunID, evs[0].RunID)
		assert.Equal(t, int64(1), evs[0].Seq)
		last = acc.RunID
	}
	require.Equal(t, api.StatusSucceeded, waitRun(t, rd.Client, last, 10*time.Second).Status)
	writeFrame(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":"sub","method":"runs.subscribe","params":{"run_id":%q,"after_seq":1}}`, last))
	res, evs := readRun(t, ws, `"sub"`)
	var sub api.SubscribeResult
	require.NoError(t, json.Unmarshal(res, &sub))
	assert.False(t, sub.Live)
	assert.Equal(t, int64(2), evs[0].Seq, "the replay starts after after_seq")
}

// A client that withdraws a waiting agents.invoke with $/cancelRequest gets
// -32800 with the run's id at once; the run is the daemon's and goes on.
func TestWithdrawingAWaitingInvokeAnswersRequestCancelledAndTheRunGoesOn(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ws := rd.Raw(t)
	writeFrame(t, ws, fmt.Sprintf(`{"jsonrpc":"2.0","id":-3,"method":"agents.invoke","params":{"id":"claude-code","task":"DRIP","cwd":%q}}`, rd.cwd))
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	writeFrame(t, ws, `{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":-3}}`)
	f := readFrame(t, ws)
	assert.Less(t, time.Since(start), time.Second, "the wait ends at once, not with the run")
	assert.JSONEq(t, `-3`, string(f.ID))
	require.NotNil(t, f.Error)
	assert.Equal(t, rpcclient.CodeRequestCancelled, f.Error.Code)
	runID, _ := errData(t, f.Error)["run_id"].(string)
	require.NotEmpty(t, runID)
	assert.Equal(t, api.StatusSucceeded, waitRun(t, rd.Client, runID, 10*time.Second).Status)
}

// A run keeps its first max_events_per_run events and its terminal one; the
// ones in between still take a seq (a client sees the gap), are neither sent
// nor stored, and the run's record counts them.
func TestEventsPastTheBoundAreCountedOnTheRunAndTheTerminalIsKept(t *testing.T) {
	rd := startRunsDaemon(t, "max_events_per_run = 10\n")
	c, evs, acc := rd.stream(t, rd.params("claude-code", "DRIP"))
	got := evs.WaitEnd(t, acc.RunID, 10*time.Second)
	require.Len(t, got, 11, "ten kept events and the terminal one: %s", daemontest.Kinds(got))
	last := got[len(got)-1]
	assert.Equal(t, api.EventDone, last.Kind)
	require.Greater(t, last.Seq, int64(11), "the dropped events took seqs")
	run := waitRun(t, c, acc.RunID, 5*time.Second)
	assert.Equal(t, last.Seq-11, run.EventsDropped)

	replay := daemontest.NewEvents()
	_, err := rd.Dial(t, client.Options{}).Subscribe(daemontest.Context(t), acc.RunID, 0, replay.Add)
	require.NoError(t, err)
	assert.Equal(t, got, replay.WaitEnd(t, acc.RunID, 5*time.Second), "the store kept exactly what was sent")
}

// The ancestry guard through the daemon: its base is read at startup, seeded
// per call with invoked_by, enforced before the spawn, stamped on the child
// and recorded on every run.
func TestADaemonStartedInsideClaudeRefusesToInvokeClaude(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_INVOKED_BY=claude-code")
	_, err := rd.Client.Invoke(daemontest.Context(t), rd.params("claude-code", "x"))
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeGuardRefused, re.Code)
	assert.Contains(t, re.Message, "already in this invocation chain")
	assert.Contains(t, re.Message, "CAR_INVOKED_BY")
	data := errData(t, re)
	assert.Equal(t, "claude-code", data["adapter"])
	assert.Equal(t, []any{"claude-code"}, data["ancestry"])
	assert.Equal(t, float64(3), data["max_chain"])
	assert.Equal(t, "cycle", data["reason"])
}

func TestAnAllowedSpawnStampsTheChildWithTheSeededChainPlusItself(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_INVOKED_BY=claude-code")
	ctx := daemontest.Context(t)
	p := rd.params("codex", "say pong")
	p.InvokedBy = "gemini"
	res := rd.finished(t, p)
	assert.Equal(t, api.StatusSucceeded, res.Status)
	assert.Equal(t, []string{"claude-code", "gemini"}, res.Ancestry)
	env := rd.agents["codex"].ChildEnv(t, res.RunID)
	assert.Equal(t, "claude-code,gemini,codex", env["CAR_INVOKED_BY"])

	// The refused call and the allowed one are both in the history.
	p.ID = "claude-code"
	_, err := rd.Client.Invoke(ctx, p)
	require.Error(t, err)
	runs, err := rd.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	require.Len(t, runs, 2)
	refused, allowed := runs[0], runs[1]
	assert.Equal(t, api.StatusRefused, refused.Status)
	assert.Equal(t, "claude-code", refused.Adapter)
	assert.Equal(t, []string{"claude-code", "gemini"}, refused.Ancestry)
	assert.Equal(t, "gemini", refused.InvokedBy)
	assert.Contains(t, refused.RefusalReason, "already in this invocation chain")
	assert.Equal(t, api.StatusSucceeded, allowed.Status)
	assert.Equal(t, []string{"claude-code", "gemini"}, allowed.Ancestry)
	assert.Equal(t, "gemini", allowed.InvokedBy)
}

func TestAShorterMaxChainRefusesTheSameCallForDepth(t *testing.T) {
	rd := startRunsDaemon(t, "", "CAR_INVOKED_BY=claude-code", "CAR_AGENT_MAX_CHAIN=2")
	p := rd.params("codex", "say pong")
	p.InvokedBy = "gemini"
	_, err := rd.Client.Invoke(daemontest.Context(t), p)
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeGuardRefused, re.Code)
	data := errData(t, re)
	assert.Equal(t, "depth", data["reason"])
	assert.Equal(t, float64(2), data["max_chain"])
	assert.Contains(t, re.Message, "CAR_AGENT_MAX_CHAIN")
	id, _ := data["run_id"].(string)
	run := waitRun(t, rd.Client, id, time.Second)
	assert.Equal(t, api.StatusRefused, run.Status)
	assert.Equal(t, []string{"claude-code", "gemini"}, run.Ancestry)
}
