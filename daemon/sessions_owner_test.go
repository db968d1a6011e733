package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/spawn"
)

// A session belongs to the client that started it. Another web origin,
// whatever it is granted, may not prompt, steer, configure, cancel,
// release or close it, and does not see it in its list; it may follow it
// (read). A native client, the user's own program, may do all of it.
func TestASessionBelongsToTheClientThatStartedIt(t *testing.T) {
	rd := startRunsDaemon(t, modesConfig)
	ctx := daemontest.Context(t)
	var asked atomic.Int32
	page := pageClient(t, rd.Daemon, appOrigin, &asked)
	other := pageClient(t, rd.Daemon, writerOrigin, &asked)
	mine, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
	require.NoError(t, err)
	assert.Equal(t, appOrigin, mine.Origin, "the session names the origin that started it")
	theirs, err := other.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
	require.NoError(t, err)
	native, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
	require.NoError(t, err)
	assert.Empty(t, native.Origin)

	for _, target := range []string{theirs.SessionID, native.SessionID} {
		refusals := map[string]error{}
		_, refusals["sessions.prompt"] = page.PromptSession(ctx, api.SessionPromptParams{SessionID: target, Task: "hi"})
		_, refusals["sessions.steer"] = page.SteerSession(ctx, api.SessionSteerParams{SessionID: target, Task: "hi"})
		_, refusals["sessions.configure"] = page.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: target, Model: "opus"})
		_, refusals["sessions.cancel"] = page.CancelTurn(ctx, api.SessionCancelParams{SessionID: target, ClearQueue: true})
		var rel api.SessionReleaseResult
		refusals["sessions.release"] = page.Call(ctx, "sessions.release", api.SessionIDParams{SessionID: target}, &rel)
		_, refusals["sessions.close"] = page.CloseSession(ctx, target)
		for method, err := range refusals {
			re := rpcCode(t, err)
			assert.Equal(t, daemon.CodeNotSessionOwner, re.Code, "%s of %s", method, target)
			assert.Equal(t, target, errData(t, re)["session_id"], method)
			assert.Equal(t, method, errData(t, re)["method"])
		}
		// Following is reading: allowed where the grants allow read.
		got, err := page.Session(ctx, target)
		require.NoError(t, err)
		assert.Equal(t, api.SessionIdle, got.State, "nothing the page sent changed it")
		assert.Equal(t, 0, got.Turns)
	}

	ids := func(l api.SessionList) []string {
		var out []string
		for _, s := range l.Sessions {
			out = append(out, s.SessionID)
		}
		return out
	}
	l, err := page.Sessions(ctx, api.SessionListParams{})
	require.NoError(t, err)
	assert.Equal(t, []string{mine.SessionID}, ids(l), "a page's list shows its own sessions")
	l, err = rd.Client.Sessions(ctx, api.SessionListParams{})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{mine.SessionID, theirs.SessionID, native.SessionID}, ids(l), "a native client's shows every one")

	// The owner and native clients may act on the page's session.
	_, err = page.PromptSession(ctx, api.SessionPromptParams{SessionID: mine.SessionID, Task: "from its owner"})
	require.NoError(t, err)
	waitSessionIdle(t, page, mine.SessionID)
	_, err = rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: mine.SessionID, Task: "from the user's own program"})
	require.NoError(t, err)
	waitSessionIdle(t, page, mine.SessionID)
	closed, err := rd.Client.CloseSession(ctx, theirs.SessionID)
	require.NoError(t, err)
	assert.Equal(t, api.SessionClosed, closed.State)
}

// A prompt queued while a session was read_only is judged again when its
// turn comes: its sender, a page that may not run edit turns, does not get
// a turn of the session the user has since made edit. The turn is
// recorded refused, saying why, and its prompt never reaches the agent.
func TestAQueuedPromptIsJudgedAgainstItsSendersGrantsWhenItsTurnComes(t *testing.T) {
	rd := startRunsDaemon(t, modesConfig)
	ctx := daemontest.Context(t)
	var asked atomic.Int32
	page := pageClient(t, rd.Daemon, appOrigin, &asked)
	s, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	_, err = page.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "DRIP under read_only"})
	require.NoError(t, err)
	queued, err := page.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "write a file, now that you can"})
	require.NoError(t, err)
	require.True(t, queued.Queued)
	_, err = rd.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: s.SessionID, PermissionMode: "edit"})
	require.NoError(t, err)
	all := evs.waitEnds(t, 2, 20*time.Second)
	var turnTwo *api.SessionEvent
	for i := range all {
		if all[i].Turn == 2 && all[i].Event.Result != nil {
			turnTwo = &all[i]
		}
	}
	require.NotNil(t, turnTwo)
	assert.Equal(t, api.StatusRefused, turnTwo.Event.Status)
	assert.Contains(t, turnTwo.Event.Error, "when its turn came")
	assert.Contains(t, turnTwo.Event.Error, `"write"`)
	run, err := rd.Client.Run(ctx, turnTwo.Event.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusRefused, run.Status)
	_, err = os.Stat(filepath.Join(rd.agents["claude-code"].Dir, "stdin-"+run.RunID))
	assert.True(t, os.IsNotExist(err), "the agent never got the refused turn's prompt")
}

// allow_always answered by the user stands for the turns of connections
// that may answer questions, not for a turn a page that may not approve
// prompted: that turn's tool calls are asked again.
func TestStandingAnswersApplyOnlyToTurnsOfAConnectionThatMayApprove(t *testing.T) {
	ad := startAskDaemon(t, modesConfig)
	ctx := daemontest.Context(t)
	var pageAsked atomic.Int32
	page := pageClient(t, ad.Daemon, onlyWriteOrg, &pageAsked)
	user := newAsker(answer("allow_always", ""))
	follower := ad.Dial(t, user.options())
	s, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "ask"}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = follower.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	_, err = page.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: bashWrites("one.txt")})
	require.NoError(t, err)
	user.next(t)
	evs.waitEnds(t, 1, 20*time.Second)
	assert.FileExists(t, filepath.Join(ad.cwd, "one.txt"), "the user allowed it always")
	waitSessionIdle(t, page, s.SessionID)

	_, err = page.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: bashWrites("two.txt")})
	require.NoError(t, err)
	q := user.next(t)
	assert.Equal(t, "Bash", q.Tool.Name, "the page's second turn is asked again, not run by the standing answer")
	evs.waitEnds(t, 2, 20*time.Second)
	assert.Zero(t, pageAsked.Load(), "the page may not approve, so it is never asked")
}

// Sessions are bounded: open ones overall and per origin, and the size of
// a system prompt; a long one is read from the store for each turn rather
// than held between turns, and every turn still gets it whole.
func TestSessionsAreBoundedInNumberAndInTheirSystemPrompt(t *testing.T) {
	rd := startRunsDaemon(t, modesConfig+"\n[sessions]\nmax_open = 3\nmax_open_per_origin = 2\nmax_warm = 0\n")
	ctx := daemontest.Context(t)
	var asked atomic.Int32
	page := pageClient(t, rd.Daemon, appOrigin, &asked)
	other := pageClient(t, rd.Daemon, writerOrigin, &asked)
	var pageIDs []string
	for range 2 {
		s, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
		require.NoError(t, err)
		pageIDs = append(pageIDs, s.SessionID)
	}
	_, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeTooManySessions, re.Code)
	assert.Equal(t, "[sessions] max_open_per_origin", errData(t, re)["config_key"])
	_, err = other.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
	require.NoError(t, err, "another origin has its own share")
	_, err = rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
	assert.Equal(t, "[sessions] max_open", errData(t, rpcCode(t, err))["config_key"])
	_, err = page.CloseSession(ctx, pageIDs[0])
	require.NoError(t, err)
	_, err = page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd}})
	require.NoError(t, err, "a closed session frees its place")

	huge := strings.Repeat("x", spawn.MaxSystemPromptBytes+1)
	_, err = rd.Client.CloseSession(ctx, pageIDs[1])
	require.NoError(t, err)
	_, err = rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd, SystemPrompt: huge}})
	re = rpcCode(t, err)
	assert.Equal(t, int64(-32602), re.Code)
	assert.Equal(t, "system_prompt", errData(t, re)["field"])
	_, err = rd.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd, SystemPrompt: huge}, Task: "hi"})
	assert.Equal(t, "system_prompt", errData(t, rpcCode(t, err))["field"])

	long := strings.Repeat("Be brief. ", 20<<10) // 200 KiB: kept in the store, not in memory
	s, err := rd.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: rd.cwd, SystemPrompt: long}})
	require.NoError(t, err)
	evs := &sessionEvents{}
	_, err = rd.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
	require.NoError(t, err)
	for i := range 2 {
		res, err := rd.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: "hi"})
		require.NoError(t, err)
		evs.waitEnds(t, i+1, 20*time.Second)
		assert.Equal(t, long, string(rd.agents["claude-code"].PrivateFile(t, res.RunID, "system-prompt.txt")), "turn %d got the whole prompt", i+1)
	}
}
