package daemon_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/testskip"
)

// TestSessionTurnOverheadAgainstTheSameRunThroughInvoke measures, side by
// side in one run, a turn through a session (sessions.prompt, its terminal
// sessions.event) against the same run through agents.invoke with stream
// (its terminal agents.event), on the fake agent that replays a real
// stream and exits at once. Both start a new process of the agent; the
// session's turn also resumes the CLI's session, queues behind nothing and
// records the session. Goal: ≤ +5 ms at the median.
//
//	CARD_BENCH=1 go test -run TestSessionTurnOverheadAgainstTheSameRunThroughInvoke -v ./daemon/
func TestSessionTurnOverheadAgainstTheSameRunThroughInvoke(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Bench, "benchmark of a session turn's overhead (figures go to docs/performance.md)")
	}
	rd := startRunsDaemon(t, "")
	ctx := daemontest.Context(t)
	ended := make(chan struct{}, 1)
	c := rd.Dial(t, client.Options{})
	s, err := c.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: rd.cwd}})
	require.NoError(t, err)
	_, err = c.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, func(ev api.SessionEvent) {
		if client.Terminal(ev.Event) {
			ended <- struct{}{}
		}
	})
	require.NoError(t, err)
	viaSession := func() time.Duration {
		start := time.Now()
		_, err := c.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "say pong"})
		require.NoError(t, err)
		<-ended
		took := time.Since(start)
		// The turn's waiter records it on the session right after its
		// terminal event; the next prompt must find the session idle.
		require.Eventually(t, func() bool { g, _ := c.Session(ctx, s.SessionID); return g.State == api.SessionIdle }, 5*time.Second, time.Millisecond)
		return took
	}
	viaInvoke := func() time.Duration {
		start := time.Now()
		_, err := c.Stream(ctx, rd.params("claude-code", "say pong"), func(ev api.AgentEvent) {
			if client.Terminal(ev) {
				ended <- struct{}{}
			}
		})
		require.NoError(t, err)
		<-ended
		return time.Since(start)
	}
	for i := 0; i < 3; i++ {
		viaInvoke()
		viaSession()
	}
	const n = 40
	var inv, ses []time.Duration
	for i := 0; i < n; i++ {
		inv = append(inv, viaInvoke())
		ses = append(ses, viaSession())
	}
	mi, msn := median(inv), median(ses)
	t.Logf("agents.invoke (stream) median %6.2f ms | session turn median %6.2f ms | %+.2f ms, %.2fx (n=%d each, interleaved)",
		ms(mi), ms(msn), ms(msn-mi), float64(msn)/float64(mi), n)
}
