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

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

// sendFrames writes frames to ws back to back and reads one answer per
// request, by id.
func sendFrames(t *testing.T, ws *websocket.Conn, frames []string) map[int]json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, f := range frames {
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(f)))
	}
	answers := map[int]json.RawMessage{}
	for len(answers) < len(frames) {
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var a struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		require.NoError(t, json.Unmarshal(b, &a))
		if a.ID == 0 {
			continue // a notification
		}
		require.Nil(t, a.Error, "request %d was refused: %s", a.ID, a.Error)
		answers[a.ID] = a.Result
	}
	return answers
}

// Three prompts a client sends a session back to back on one connection,
// behind a running turn, take turns in the order they were sent and each
// turn runs its own prompt. Requests on a connection are handled
// concurrently, so without the session's lane the queue saw them in
// whichever order their goroutines reached it ("four, five, three").
// Repeated, because that race lost only some of the time.
func TestPromptsSentBackToBackOnOneConnectionRunInTheOrderSent(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	ws := rd.Raw(t)
	const rounds = 12
	for round := range rounds {
		s, evs := startSession(t, rd, rd.Client, "claude-code")
		first, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "DRIP first"})
		require.NoError(t, err)
		require.NotEmpty(t, first.RunID)
		var frames []string
		for i := range 3 {
			frames = append(frames, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sessions.prompt","params":{"session_id":%q,"task":"queued %d"}}`,
				i+1, s.SessionID, i))
		}
		answers := sendFrames(t, ws, frames)
		for i := range 3 {
			var a api.SessionPromptResult
			require.NoError(t, json.Unmarshal(answers[i+1], &a))
			assert.Equal(t, i+2, a.Turn, "round %d: prompt %d is turn %d", round, i, i+2)
			assert.Equal(t, i+1, a.Position, "round %d: prompt %d waits at position %d", round, i, i+1)
		}
		evs.waitEnds(t, 4, 30*time.Second)
		runs, err := rd.Client.Runs(ctx, api.ListParams{Limit: 10})
		require.NoError(t, err)
		for _, r := range runs {
			if r.CardSessionID != s.SessionID || r.SessionTurn < 2 {
				continue
			}
			_, stdin := rd.agents["claude-code"].Received(t, r.RunID)
			assert.Equal(t, fmt.Sprintf("queued %d", r.SessionTurn-2), stdin, "round %d: turn %d ran its own prompt", round, r.SessionTurn)
		}
	}
}

// A cancel sent right after a prompt, on the same connection, ends the
// turn that prompt started, even when it arrives while the turn is still
// being set up; and a prompt sent right after the cancel is the next turn,
// not cancelled with it.
func TestACancelSentRightAfterAPromptEndsThatPromptsTurn(t *testing.T) {
	rd := startRunsDaemon(t, "")
	ws := rd.Raw(t)
	for round := range 8 {
		s, evs := startSession(t, rd, rd.Client, "claude-code")
		answers := sendFrames(t, ws, []string{
			fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"sessions.prompt","params":{"session_id":%q,"task":"SLEEP"}}`, s.SessionID),
			fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"sessions.cancel","params":{"session_id":%q}}`, s.SessionID),
			fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"sessions.prompt","params":{"session_id":%q,"task":"after the cancel"}}`, s.SessionID),
		})
		var cancelled api.SessionCancelResult
		require.NoError(t, json.Unmarshal(answers[2], &cancelled))
		assert.True(t, cancelled.Cancelled, "round %d: the cancel found the turn the prompt before it started: %+v", round, cancelled)
		var next api.SessionPromptResult
		require.NoError(t, json.Unmarshal(answers[3], &next))
		assert.Equal(t, 2, next.Turn, "round %d", round)
		all := evs.waitEnds(t, 2, 30*time.Second)
		statuses := map[int]api.Status{}
		for _, ev := range all {
			if ev.Event.Result != nil {
				statuses[ev.Turn] = ev.Event.Result.Status
			}
		}
		assert.Equal(t, map[int]api.Status{1: api.StatusCancelled, 2: api.StatusSucceeded}, statuses, "round %d", round)
	}
}

// A graceful stop (SIGTERM, Shutdown) ends a running turn over a warm
// agent as it ends a plain run: interrupted, not failed with the exit
// status of the agent the stop ended. The warm agents were ended first,
// so the turn saw its agent die (exit 143) before the run was told why.
func TestAGracefulStopRecordsARunningWarmTurnInterrupted(t *testing.T) {
	fake := daemontest.WarmClaude(t)
	home, cwd := t.TempDir(), t.TempDir()
	opts := daemontest.Options{Home: home, Warm: true, Config: "login_shell_path = false\n", Agents: map[string]string{"claude-code": fake}}
	first := daemontest.Start(t, opts)
	ctx := daemontest.Context(t)
	s, err := first.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd}, Warm: true})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = first.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	_, err = first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "one"})
	require.NoError(t, err)
	evs.waitEnds(t, 1, 20*time.Second)
	two, err := first.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "two SLEEP60"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(daemontest.PromptsRead(t, fake)) == 2 }, 20*time.Second, 10*time.Millisecond,
		"the warm agent took the second turn")
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, first.Shutdown(sctx))

	second := daemontest.Start(t, opts)
	run, err := second.Client.Run(ctx, two.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusInterrupted, run.Status, "the turn the stop cut short: %+v", run.Error)
	if run.Error != nil {
		assert.Equal(t, "interrupted", run.Error.Kind)
	}
}

// A cancel that comes while a run is still being set up still ends it: an
// agents.cancel right after agents.invoke's answer, and a sessions.cancel
// right after the prompt of a warm session whose agent is still starting.
// Each must end cancelled, never run on to its end.
func TestACancelDuringSetUpEndsTheRun(t *testing.T) {
	t.Run("agents.cancel right after agents.invoke", func(t *testing.T) {
		rd := startRunsDaemon(t, "")
		ctx := daemontest.Context(t)
		for round := range 10 {
			acc, err := rd.Client.Stream(ctx, rd.params("claude-code", "SLEEP"), nil)
			require.NoError(t, err)
			res, err := rd.Client.Cancel(ctx, acc.RunID)
			require.NoError(t, err)
			assert.True(t, res.Cancelled, "round %d: %+v", round, res)
			run, err := rd.Client.Run(ctx, acc.RunID)
			require.NoError(t, err)
			assert.Equal(t, api.StatusCancelled, run.Status, "round %d", round)
		}
	})
	t.Run("sessions.cancel while the warm agent starts", func(t *testing.T) {
		fake := daemontest.WarmClaude(t)
		d := daemontest.Start(t, daemontest.Options{Warm: true, Config: "login_shell_path = false\n", Agents: map[string]string{"claude-code": fake}})
		ws := d.Raw(t)
		cwd := t.TempDir()
		ctx := daemontest.Context(t)
		for round := range 6 {
			s, err := d.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd}})
			require.NoError(t, err)
			evs := &sessionEvents{}
			_, err = d.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
			require.NoError(t, err)
			answers := sendFrames(t, ws, []string{
				fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"sessions.prompt","params":{"session_id":%q,"task":"slow SLEEP30"}}`, s.SessionID),
				fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"sessions.cancel","params":{"session_id":%q}}`, s.SessionID),
			})
			var c api.SessionCancelResult
			require.NoError(t, json.Unmarshal(answers[2], &c))
			assert.True(t, c.Cancelled, "round %d: %+v", round, c)
			all := evs.waitEnds(t, 1, 20*time.Second)
			last := all[len(all)-1]
			require.NotNil(t, last.Event.Result)
			assert.Equal(t, api.StatusCancelled, last.Event.Result.Status, "round %d", round)
			_, err = d.Client.CloseSession(ctx, s.SessionID)
			require.NoError(t, err)
		}
	})
}

// A first prompt sent the moment a warm session starts waits for the warm
// agent the start is bringing up and takes its turn over it, never a cold
// process beside it: two processes would be two conversations. The agent
// here speaks only the warm channel, so a cold turn fails.
func TestAFirstPromptRightAfterAWarmStartTakesItsTurnOverTheWarmAgent(t *testing.T) {
	fake := daemontest.WarmClaude(t)
	d := daemontest.Start(t, daemontest.Options{Warm: true, Config: "login_shell_path = false\n", Agents: map[string]string{"claude-code": fake}})
	ctx := daemontest.Context(t)
	cwd := t.TempDir()
	for round := range 12 {
		s, err := d.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd}, Warm: true})
		require.NoError(t, err)
		evs := &sessionEvents{}
		_, err = d.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
		require.NoError(t, err)
		_, err = d.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: fmt.Sprintf("first %d", round)})
		require.NoError(t, err)
		all := evs.waitEnds(t, 1, 20*time.Second)
		last := all[len(all)-1]
		require.NotNil(t, last.Event.Result)
		assert.Equal(t, api.StatusSucceeded, last.Event.Result.Status, "round %d: %+v", round, last.Event.Result.Error)
		_, err = d.Client.CloseSession(ctx, s.SessionID)
		require.NoError(t, err)
	}
}
