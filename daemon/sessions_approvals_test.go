package daemon_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

func TestASessionsQuestionsGoToEverySubscriberAndAllowAlwaysHoldsAcrossTurns(t *testing.T) {
	ad := startAskDaemon(t, "")
	ctx := daemontest.Context(t)
	quiet := newAsker(nil) // the prompting connection never answers
	watcher := newAsker(answer("allow_always", ""))
	prompter := ad.Dial(t, quiet.options())
	follower := ad.Dial(t, watcher.options())
	s, err := prompter.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "ask"}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = follower.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)

	one, err := prompter.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: bashWrites("one.txt")})
	require.NoError(t, err)
	q := watcher.next(t)
	assert.Equal(t, one.RunID, q.RunID)
	quiet.next(t) // asked too, at once: the first answer wins
	evs.waitEnds(t, 1, 20*time.Second)
	assert.FileExists(t, filepath.Join(ad.cwd, "one.txt"))
	waitSessionIdle(t, prompter, s.SessionID)

	two, err := prompter.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: bashWrites("two.txt")})
	require.NoError(t, err)
	all := evs.waitEnds(t, 2, 20*time.Second)
	assert.FileExists(t, filepath.Join(ad.cwd, "two.txt"))
	assert.Len(t, watcher.seen(), 1, "turn two's call was allowed by turn one's allow_always")
	assert.Len(t, quiet.seen(), 1)
	var byRule bool
	for _, ev := range all {
		if ev.Event.RunID == two.RunID && ev.Event.Kind == api.EventApprovalDecided {
			byRule = ev.Event.Approval.By == api.ByRule && ev.Event.Approval.Decision == api.DecisionAllow
		}
	}
	assert.True(t, byRule, "turn two's decision is recorded, by rule")
	gapFree(t, all, 0)
	got, err := prompter.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.Equal(t, api.SessionIdle, got.State)
}
