package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
)

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
	evs := newEvents()
	c := rd.client(t, evs.opts())
	var acc daemon.InvokeAccepted
	require.NoError(t, rd.invoke(t, c, map[string]any{"id": "claude-code", "task": "DRIP", "stream": true}, &acc))
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
