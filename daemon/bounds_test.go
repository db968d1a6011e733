package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	"github.com/card-dev/card/rpc/rpcclient"
)

// A task is sent to the agent whole, but the history keeps at most
// max_task_record_bytes of it, refused run or not, with its whole length
// and digest: large tasks cannot grow the history by their size.
func TestTheHistoryKeepsABoundedPrefixOfTheTask(t *testing.T) {
	rd := startRunsDaemon(t, "max_task_record_bytes = 1024\n")
	ctx := daemontest.Context(t)
	task := strings.Repeat("é", 50<<10) // 100 KiB, two bytes a character
	p := rd.params("claude-code", task)
	p.InvokedBy = "claude-code" // a cycle: refused, and recorded
	_, err := rd.Client.Invoke(ctx, p)
	runID := errData(t, rpcCode(t, err))["run_id"].(string)
	run, err := rd.Client.Run(ctx, runID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusRefused, run.Status)
	assert.Equal(t, strings.Repeat("é", 512), run.Task, "1024 bytes, cut between characters")
	assert.True(t, run.TaskTruncated)
	assert.Equal(t, 100<<10, run.TaskLen)
	n, sum := store.TaskDigest(task)
	assert.Equal(t, n, run.TaskLen)
	assert.Equal(t, sum, run.TaskSHA256)

	res := rd.finished(t, rd.params("claude-code", "say pong"))
	run, err = rd.Client.Run(ctx, res.RunID)
	require.NoError(t, err)
	assert.Equal(t, "say pong", run.Task)
	assert.False(t, run.TaskTruncated)
}

// The history is pruned to max_runs by itself after a burst, and
// runs.prune applies other bounds on demand, counting first with dry_run.
func TestTheHistoryStaysWithinItsRetention(t *testing.T) {
	rd := startRunsDaemon(t, "max_runs = 10\n")
	ctx := daemontest.Context(t)
	p := rd.params("claude-code", "x")
	p.InvokedBy = "claude-code"
	for i := 0; i < 45; i++ {
		_, err := rd.Client.Invoke(ctx, p)
		require.Error(t, err)
	}
	require.Eventually(t, func() bool {
		runs, err := rd.Client.Runs(ctx, api.ListParams{Limit: 500})
		return err == nil && len(runs) <= 20 // max_runs and at most one burst the pruner has not caught up with
	}, 10*time.Second, 20*time.Millisecond)

	three := 3
	dry, err := rd.Client.Prune(ctx, api.PruneParams{DryRun: true, MaxRuns: &three})
	require.NoError(t, err)
	assert.True(t, dry.DryRun)
	assert.Equal(t, 3, dry.MaxRuns)
	assert.Equal(t, int64(3), dry.Kept)
	res, err := rd.Client.Prune(ctx, api.PruneParams{MaxRuns: &three})
	require.NoError(t, err)
	assert.Equal(t, dry.Runs, res.Runs)
	runs, err := rd.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	assert.Len(t, runs, 3)
}

// A max_age_days whose days overflow a time.Duration used to wrap to a
// tiny age and prune every finished run; it is refused naming the range,
// and nothing is deleted.
func TestAPruneAgeThatOverflowsIsRefusedAndPrunesNothing(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	rd.finished(t, rd.params("claude-code", "say pong"))
	for _, days := range []int{106752, 213504, api.MaxAgeDaysLimit + 1, -1} {
		_, err := rd.Client.Prune(ctx, api.PruneParams{MaxAgeDays: &days})
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, "%d", days)
		assert.Equal(t, "max_age_days", errData(t, re)["field"], "%d", days)
		assert.Contains(t, re.Message, "must be 0 to 36500 days", "%d", days)
	}
	runs, err := rd.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	assert.Len(t, runs, 1, "nothing was pruned")
	most := api.MaxAgeDaysLimit
	res, err := rd.Client.Prune(ctx, api.PruneParams{MaxAgeDays: &most})
	require.NoError(t, err)
	assert.Equal(t, int64(0), res.Runs)
	assert.Equal(t, api.MaxAgeDaysLimit, res.MaxAgeDays)
}

// A connection follows at most max_subscriptions_per_connection runs at
// once; past it runs.subscribe is refused with its own code, another
// connection is not affected, and the slots free as the runs end.
func TestAConnectionFollowsAtMostItsShareOfRuns(t *testing.T) {
	rd := startRunsDaemon(t, "max_subscriptions_per_connection = 2\n")
	ctx := daemontest.Context(t)
	acc, err := rd.Client.Stream(ctx, rd.params("claude-code", "SLEEP"), nil)
	require.NoError(t, err)
	c := rd.Dial(t, client.Options{})
	for i := 0; i < 2; i++ {
		_, err := c.Subscribe(ctx, acc.RunID, 0, nil)
		require.NoError(t, err)
	}
	_, err = c.Subscribe(ctx, acc.RunID, 0, nil)
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeTooManySubs, re.Code)
	assert.Equal(t, "max_subscriptions_per_connection", errData(t, re)["config_key"])
	_, err = rd.Client.Subscribe(ctx, acc.RunID, 0, nil)
	require.NoError(t, err, "another connection has its own share")

	_, err = rd.Client.Cancel(ctx, acc.RunID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := c.Subscribe(ctx, acc.RunID, 0, nil)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the slots free once the run's events are all sent")
}

// A subscriber that falls more than max_subscriber_queue_bytes behind its
// run is cut off with runs.subscription_ended naming where to come back
// from; the run is not affected, nor is a subscriber that reads (the Go
// client's, which takes a cut-off subscription up again by itself should a
// busy machine slow it past the limit too), and one that subscribes again
// from where it was cut off gets the rest.
func TestASubscriberTooFarBehindIsCutOffWithANotificationAndTheRunGoesOn(t *testing.T) {
	rd := startRunsDaemon(t, "max_subscriber_queue_bytes = 65536\n")
	rd.bigTask(t, 400, 16000) // 6.4 MB, 32 KB every 20 ms
	ctx := daemontest.Context(t)
	var reader []api.AgentEvent
	readerDone := make(chan struct{})
	acc, err := rd.Client.Stream(ctx, rd.params("claude-code", "TRICKLE"), func(ev api.AgentEvent) {
		reader = append(reader, ev)
		if client.Terminal(ev) {
			close(readerDone)
		}
	})
	require.NoError(t, err)

	// A client that reads nothing until the run has printed everything,
	// with a socket that buffers little, so the daemon's sends to it wait
	// (a few MB in) while the run goes on.
	slow := dialWithTinyReceiveBuffer(t, rd.Daemon)
	frame := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"runs.subscribe","params":{"run_id":%q}}`, acc.RunID)
	require.NoError(t, slow.Write(ctx, websocket.MessageText, []byte(frame)))
	select {
	case <-readerDone:
	case <-ctx.Done():
		t.Fatal("the reading client never got the run's end")
	}
	all := int64(len(reader))
	for i, ev := range reader {
		require.Equal(t, int64(i+1), ev.Seq, "the reading client got every event once, in order")
	}
	ended, seqs := readUntilCutOff(t, slow, "agents.event")
	assert.Equal(t, acc.RunID, ended.RunID)
	assert.Equal(t, "behind", ended.Reason)
	assert.Equal(t, int64(65536), ended.Limit)
	assert.Greater(t, ended.BehindBytes, int64(65536))
	assert.Equal(t, "max_subscriber_queue_bytes", ended.ConfigKey)
	require.NotEmpty(t, seqs)
	assert.Equal(t, seqs[len(seqs)-1]+1, ended.NextSeq, "next_seq is the first event it was not sent")
	assert.Less(t, int64(len(seqs)), all, "the slow one was cut off before the end")
	assert.Equal(t, api.StatusSucceeded, waitRun(t, rd.Client, acc.RunID, 10*time.Second).Status)

	// Back from where it stopped: the history is replayed, not counted.
	rest := followToEnd(t, rd.Dial(t, client.Options{}), acc.RunID, ended.NextSeq-1, 0)
	assert.Equal(t, all-ended.NextSeq+1, int64(len(rest)))
}

// readUntilCutOff reads ws, a subscriber that was not reading, until its
// runs.subscription_ended, and returns it with the seqs of the method
// notifications (agents.event or sessions.event) that came before it.
func readUntilCutOff(t *testing.T, ws *websocket.Conn, method string) (api.SubscriptionEnded, []int64) {
	t.Helper()
	ctx := daemontest.Context(t)
	var ended api.SubscriptionEnded
	var seqs []int64
	for ended.RunID == "" {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, frame, err := ws.Read(rctx)
		cancel()
		require.NoError(t, err, "after %d events (last %v)", len(seqs), seqs[max(0, len(seqs)-1):])
		var msg struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		require.NoError(t, json.Unmarshal(frame, &msg))
		switch msg.Method {
		case method:
			var ev struct {
				Seq int64 `json:"seq"`
			}
			require.NoError(t, json.Unmarshal(msg.Params, &ev))
			seqs = append(seqs, ev.Seq)
		case api.SubscriptionEndedMethod:
			require.NoError(t, json.Unmarshal(msg.Params, &ended))
		}
	}
	return ended, seqs
}

// followToEnd subscribes c to a run after afterSeq and returns the events
// its handler got, once the terminal one came; the handler takes pause for
// each, as a client slower than the run would.
func followToEnd(t *testing.T, c *client.Client, runID string, afterSeq int64, pause time.Duration) []api.AgentEvent {
	t.Helper()
	ctx := daemontest.Context(t)
	var got []api.AgentEvent
	done := make(chan struct{})
	_, err := c.Subscribe(ctx, runID, afterSeq, func(ev api.AgentEvent) {
		got = append(got, ev)
		time.Sleep(pause)
		if client.Terminal(ev) {
			close(done)
		}
	})
	require.NoError(t, err)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("run %s: the terminal event never came (%d events)", runID, len(got))
	}
	return got
}

// The typed client takes a cut-off subscription up again by itself: a
// handler slower than the run still gets every event once, in order.
func TestTheGoClientResubscribesWhenCutOff(t *testing.T) {
	rd := startRunsDaemon(t, "max_subscriber_queue_bytes = 65536\n")
	rd.bigTask(t, 300, 16000)
	ctx := daemontest.Context(t)
	acc, err := rd.Client.Stream(ctx, rd.params("claude-code", "BIG"), nil)
	require.NoError(t, err)
	evs := followToEnd(t, rd.Dial(t, client.Options{}), acc.RunID, 0, 5*time.Millisecond)
	require.Greater(t, len(evs), 300)
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Seq, "every event once, in order")
	}
}

// A timeout_secs or a list's limit outside the range the docs give is
// refused with -32602 naming the field, where it used to be clamped
// without a word: agents.invoke and sessions.start take 1 to 3600 seconds
// (0 or absent: the default), runs.list and sessions.list at most 500
// rows. Nothing is recorded for a refusal. CAR's agents.invoke_external
// keeps CAR's documented clamp: its run starts, with the hour's deadline.
func TestATimeoutOrAListLimitOutsideItsDocumentedRangeIsRefusedNamingTheField(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	for _, secs := range []int{-1, 3601, 1_000_000_000_000} {
		p := rd.params("claude-code", "say pong")
		p.TimeoutSecs = secs
		_, err := rd.Client.Invoke(ctx, p)
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, "agents.invoke timeout_secs %d: %s", secs, re.Message)
		assert.Equal(t, "timeout_secs", errData(t, re)["field"])
		assert.Contains(t, re.Message, fmt.Sprintf("must be between 1 and 3600 seconds (or absent for the default of 300), not %d", secs))

		_, err = rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd, TimeoutSecs: secs}})
		re = rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, "sessions.start timeout_secs %d: %s", secs, re.Message)
		assert.Equal(t, "timeout_secs", errData(t, re)["field"])
	}
	runs, err := rd.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	assert.Empty(t, runs, "a refused timeout is not a run")

	for _, call := range []func() error{
		func() error { _, err := rd.Client.Runs(ctx, api.ListParams{Limit: 501}); return err },
		func() error { _, err := rd.Client.Sessions(ctx, api.SessionListParams{Limit: 501}); return err },
	} {
		re := rpcCode(t, call())
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
		assert.Equal(t, "limit", errData(t, re)["field"])
		assert.Contains(t, re.Message, "must be between 1 and 500 (default 50), not 501")
	}
	_, err = rd.Client.Runs(ctx, api.ListParams{Limit: 500})
	require.NoError(t, err)

	ext, err := rd.Client.InvokeExternal(ctx, api.ExternalInvokeParams{ID: "claude-code", Task: "say pong", Cwd: rd.cwd, TimeoutSecs: 1_000_000_000_000})
	require.NoError(t, err, "CAR's timeout_secs is clamped, as CAR documents")
	run, err := rd.Client.Run(ctx, ext.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusSucceeded, run.Status)
}
