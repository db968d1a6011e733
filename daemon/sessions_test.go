package daemon_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
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
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{ID: "claude-code", Cwd: rd.cwd})
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
