package daemon_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
)

// A session's subscriber that falls more than max_subscriber_queue_bytes
// behind a turn is cut off with runs.subscription_ended naming the session
// and where it stopped in the session's seq, beside the turn's run and its
// own seq; the turn goes on, and subscribing to the session again from
// there gets the rest, each event once.
func TestASessionSubscriberTooFarBehindIsCutOffNamingTheSessionAndWhereToGoOn(t *testing.T) {
	rd := startRunsDaemon(t, "max_subscriber_queue_bytes = 65536\n")
	rd.bigTask(t, 400, 16000) // 6.4 MB, 32 KB every 20 ms
	ctx := daemontest.Context(t)
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	// A first turn, so the session's seq and the big turn's run seq differ.
	first, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "hello"})
	require.NoError(t, err)
	waitRun(t, rd.Client, first.RunID, 10*time.Second)
	base, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	require.Greater(t, base.NextSeq, int64(1))

	// A client that reads nothing until the turn has printed everything,
	// with a socket that buffers little.
	slow := dialWithTinyReceiveBuffer(t, rd.Daemon)
	frame := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"sessions.subscribe","params":{"session_id":%q,"after_seq":%d}}`, s.SessionID, base.NextSeq-1)
	require.NoError(t, slow.Write(ctx, websocket.MessageText, []byte(frame)))
	turn, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "TRICKLE"})
	require.NoError(t, err)
	waitRun(t, rd.Client, turn.RunID, 30*time.Second)

	ended, seqs := readUntilCutOff(t, slow, "sessions.event")
	require.NotEmpty(t, seqs)
	assert.Equal(t, turn.RunID, ended.RunID)
	assert.Equal(t, s.SessionID, ended.SessionID)
	assert.Equal(t, "behind", ended.Reason)
	assert.Equal(t, seqs[len(seqs)-1]+1, ended.SessionNextSeq, "session_next_seq is the first session event it was not sent")
	assert.Equal(t, ended.SessionNextSeq-(base.NextSeq-1), ended.NextSeq, "next_seq is the same event in the turn's run")
	assert.Contains(t, ended.Message, fmt.Sprintf("after_seq = %d", ended.SessionNextSeq-1))

	// Back from where it stopped.
	done, err := rd.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	rest := followSessionToEnd(t, rd.Dial(t, client.Options{}), s.SessionID, ended.SessionNextSeq-1, 0)
	require.NotEmpty(t, rest)
	assert.Equal(t, ended.SessionNextSeq, rest[0].Seq)
	assert.Equal(t, done.NextSeq-1, rest[len(rest)-1].Seq)
}

// The typed client takes a cut-off session subscription up again by
// itself: a handler slower than the turn still gets every event of the
// session once, in order.
func TestTheGoClientTakesUpACutOffSessionSubscriptionAgain(t *testing.T) {
	rd := startRunsDaemon(t, "max_subscriber_queue_bytes = 65536\n")
	rd.bigTask(t, 300, 16000)
	ctx := daemontest.Context(t)
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	c := rd.Dial(t, client.Options{})
	turn, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "BIG"})
	require.NoError(t, err)
	evs := followSessionToEnd(t, c, s.SessionID, 0, 5*time.Millisecond)
	require.Greater(t, len(evs), 300)
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Seq, "every event once, in order")
		require.Equal(t, turn.RunID, ev.Event.RunID)
	}
}

// followSessionToEnd subscribes c to a session after afterSeq and returns
// the events its handler got once a turn's terminal one came; the handler
// takes pause for each.
func followSessionToEnd(t *testing.T, c *client.Client, sessionID string, afterSeq int64, pause time.Duration) []api.SessionEvent {
	t.Helper()
	ctx := daemontest.Context(t)
	var got []api.SessionEvent
	done := make(chan struct{})
	_, err := c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: sessionID, AfterSeq: afterSeq}, func(ev api.SessionEvent) {
		got = append(got, ev)
		time.Sleep(pause)
		if client.Terminal(ev.Event) {
			close(done)
		}
	})
	require.NoError(t, err)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("session %s: the terminal event never came (%d events)", sessionID, len(got))
	}
	return got
}
