package spawn

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// The CLI session's total before the turn, and the one it reports at the
// turn's end: the turn added 10 in, 5 out and 1 cached.
var (
	sessionBefore = api.Usage{InputTokens: 20, OutputTokens: 10, CachedInputTokens: 2}
	sessionAfter  = api.Usage{InputTokens: 30, OutputTokens: 15, CachedInputTokens: 3}
	turnsOwn      = api.Usage{InputTokens: 10, OutputTokens: 5, CachedInputTokens: 1}
)

// A run resuming a Codex thread in `codex exec resume --json` is charged
// only what it added to the thread's total.
func TestACodexExecRunResumingAThreadIsChargedOnlyItsPart(t *testing.T) {
	for _, base := range []api.Usage{sessionBefore, {}} {
		p := newCodexParser()
		p.setUsageBase(base)
		evs := p.Feed([]byte(`{"type":"turn.completed","usage":{"input_tokens":30,"cached_input_tokens":3,"output_tokens":15}}`))
		res := p.Finish(ExitInfo{})
		want := sessionAfter
		if base != (api.Usage{}) {
			want = turnsOwn
		}
		require.Len(t, evs, 1)
		assert.Equal(t, want, *evs[0].Usage)
		assert.Equal(t, want, res.Usage)
		require.NotNil(t, res.SessionUsage)
		assert.Equal(t, sessionAfter, *res.SessionUsage)
	}
}

// A conversation that reports its session's running total is charged, on
// a run resuming the session, only what the run added to the base the
// request gave, and keeps the total for the next turn; a new session's run
// ignores any base (its total starts at zero).
func TestARunResumingASessionThatReportsItsRunningTotalIsChargedOnlyItsPart(t *testing.T) {
	protocols := []struct {
		name    string
		adapter string
		proto   Protocol
		// report feeds the protocol the CLI's report of sessionAfter.
		report func(t *testing.T, c protocol, tu *turn)
	}{
		{"codex's app-server, thread/resume", "codex", ProtocolCodexApp, func(t *testing.T, c protocol, tu *turn) {
			cc := c.(*codexApp)
			raw := json.RawMessage(`{"threadId":"th-1","tokenUsage":{"total":{"inputTokens":30,"cachedInputTokens":3,"outputTokens":15}}}`)
			cc.notification(tu, cc.turnOf(tu), "thread/tokenUsage/updated", raw)
			cc.endTurn(tu, cc.turnOf(tu), codexAppTurn{ID: "tu-1", Status: "completed"})
		}},
		{"droid's stream-jsonrpc, droid.load_session, no per-turn figure", "droid", ProtocolDroidRPC, func(t *testing.T, c protocol, tu *turn) {
			raw := `{"type":"agent_turn_completed","reason":"completed","cumulativeTokenUsage":{"inputTokens":30,"outputTokens":15,"cacheReadTokens":3}}`
			var n droidNotification
			require.NoError(t, json.Unmarshal([]byte(raw), &n))
			c.(*droidClient).notification(tu, n, json.RawMessage(raw))
		}},
	}
	for _, p := range protocols {
		for _, resume := range []string{"sess-1", ""} {
			name := p.name + ", resuming"
			if resume == "" {
				name = p.name + ", a new session"
			}
			t.Run(name, func(t *testing.T) {
				c, err := protocolOf(Plan{Session: &SessionPlan{Protocol: p.proto, Adapter: p.adapter, resume: resume}, UsageBase: sessionBefore})
				require.NoError(t, err)
				var evs []Event
				tu := readingTurn(func(e ...Event) { evs = append(evs, e...) }, nil)
				p.report(t, c, tu)
				res := c.finish(tu, &ExitInfo{})
				want := turnsOwn
				if resume == "" {
					want = sessionAfter
				}
				assert.Equal(t, want, res.Usage, "the run's usage")
				require.NotNil(t, res.SessionUsage)
				assert.Equal(t, sessionAfter, *res.SessionUsage, "the session's total, the next turn's base")
				var last *api.Usage
				for _, e := range evs {
					if e.Kind == api.EventUsage {
						last = e.Usage
					}
				}
				require.NotNil(t, last, "no usage event")
				assert.Equal(t, want, *last, "the usage event says the run's part too")
			})
		}
	}
}

// Copilot's total over ACP is its process's, a loaded session's earlier
// turns left out (seen with 1.0.102: 1000/500 for a turn of 1000/500
// after turns of 10/5 and 100/50, whether the agent before had idled out
// or was killed), and Gemini reports a turn's own tokens: a run resuming
// either is charged what the agent reports, whatever the base.
func TestAnACPRunResumingASessionIsChargedWhatTheAgentReports(t *testing.T) {
	for _, adapter := range []string{"copilot", "gemini"} {
		c, err := protocolOf(Plan{Session: &SessionPlan{Protocol: ProtocolACP, Adapter: adapter, resume: "s"}, UsageBase: sessionBefore})
		require.NoError(t, err)
		tu := readingTurn(func(...Event) {}, nil)
		c.(*acpClient).endTurn(tu, acp.PromptResponse{StopReason: acp.StopEndTurn, Usage: &acp.PromptUsage{InputTokens: 10, OutputTokens: 5},
			Meta: acp.Meta(`{"quota":{"token_count":{"input_tokens":10,"output_tokens":5}}}`)})
		res := c.finish(tu, &ExitInfo{})
		assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 5}, res.Usage, adapter)
		assert.Nil(t, res.SessionUsage, adapter)
	}
}

// The request's base reaches the plan, one-shot and warm, when it resumes
// a session, and a warm agent resuming one starts counting from it, while
// one starting a new session starts from zero.
func TestTheUsageBaseReachesThePlansAndAWarmAgentResumingTheSession(t *testing.T) {
	for _, adapter := range []string{"codex", "droid"} {
		for _, resume := range []string{"11111111-2222-3333-4444-555555555555", ""} {
			req := Request{Adapter: adapter, Mode: ModeAsk, Cwd: t.TempDir(), Resume: resume, UsageBase: sessionBefore}
			want := sessionBefore
			if resume == "" {
				want = api.Usage{} // a new session has no total from before
			}
			one, err := Build("/bin/"+adapter, req)
			require.NoError(t, err, adapter)
			assert.Equal(t, want, one.UsageBase, adapter)
			plan, err := BuildWarm("/bin/"+adapter, req)
			require.NoError(t, err, adapter)
			assert.Equal(t, want, plan.UsageBase, adapter)
			var used api.Usage
			switch a := lookupWarm(t, adapter, plan).(type) {
			case *codexApp:
				used = a.used
			case *droidClient:
				used = a.used
			default:
				t.Fatalf("%s: unexpected warm protocol %T", adapter, a)
			}
			assert.Equal(t, want, used, "%s resuming %q", adapter, resume)
		}
	}
}

func lookupWarm(t *testing.T, adapter string, plan Plan) protocol {
	t.Helper()
	a, ok := Lookup(adapter)
	require.True(t, ok)
	require.NotNil(t, a.Warm.Build)
	proto, err := protocolOf(plan)
	require.NoError(t, err)
	return proto
}

// A resumed Copilot run's result reports the session's duration, earlier
// runs included: the run's own is measured by the runner instead.
func TestACopilotRunResumingASessionDoesNotTakeTheSessionsDuration(t *testing.T) {
	for _, start := range []string{"session.start", "session.resume"} {
		p := newCopilotParser()
		p.Feed([]byte(`{"type":"` + start + `","data":{"sessionId":"s1"}}`))
		p.Feed([]byte(`{"type":"result","sessionId":"s1","exitCode":0,"usage":{"sessionDurationMs":1238}}`))
		want := int64(1238)
		if start == "session.resume" {
			want = 0
		}
		assert.Equal(t, want, p.Finish(ExitInfo{}).DurationMs, start)
	}
}
