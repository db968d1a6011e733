package invoke_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

// The windows the stand-ins report: one five-hour window at 80 % (past
// Claude Code's 75 % warning threshold) resetting in an hour, and Codex's
// two windows.
var (
	fiveHourReset = time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	weekReset     = time.Now().Add(72 * time.Hour).Truncate(time.Second).UTC()
)

// rateLimitHeaders are the vendors' rate-limit response headers as the
// CLIs read them: Anthropic's unified (subscription) limit and Codex's.
func rateLimitHeaders() http.Header {
	h := http.Header{}
	h.Set("anthropic-ratelimit-unified-status", "allowed")
	h.Set("anthropic-ratelimit-unified-reset", strconv.FormatInt(fiveHourReset.Unix(), 10))
	h.Set("anthropic-ratelimit-unified-representative-claim", "five_hour")
	h.Set("anthropic-ratelimit-unified-5h-utilization", "0.8")
	h.Set("anthropic-ratelimit-unified-5h-reset", strconv.FormatInt(fiveHourReset.Unix(), 10))
	h.Set("anthropic-ratelimit-unified-5h-surpassed-threshold", "0.75")
	h.Set("anthropic-ratelimit-unified-7d-utilization", "0.3")
	h.Set("anthropic-ratelimit-unified-7d-reset", strconv.FormatInt(weekReset.Unix(), 10))
	h.Set("x-codex-primary-used-percent", "42")
	h.Set("x-codex-primary-window-minutes", "300")
	h.Set("x-codex-primary-reset-at", strconv.FormatInt(fiveHourReset.Unix(), 10))
	h.Set("x-codex-secondary-used-percent", "30")
	h.Set("x-codex-secondary-window-minutes", "10080")
	h.Set("x-codex-secondary-reset-at", strconv.FormatInt(weekReset.Unix(), 10))
	return h
}

// onSubscription is Claude Code's setup signed in as a claude.ai
// subscriber (an OAuth token) instead of with an API key: Claude Code
// reads the unified rate-limit headers only then.
func onSubscription(s setup) setup {
	var env []string
	for _, kv := range s.environ {
		if !strings.HasPrefix(kv, "ANTHROPIC_API_KEY=") {
			env = append(env, kv)
		}
	}
	s.environ = append(env, "CLAUDE_CODE_OAUTH_TOKEN=sk-ant-oat01-card-standin-not-a-secret")
	return s
}

func TestRealAgentsThatReportRateLimitWindowsShowThemInUsageAndHealth(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		adapter, bin, mode string
		setup              func(t *testing.T, bin string) setup
		want               []api.RateLimitWindow
	}{
		{adapter: "claude-code", bin: "claude", mode: "read_only",
			setup: func(t *testing.T, bin string) setup {
				return onSubscription(claudeCase(t).newServer(t, bin, standin.Script{Headers: rateLimitHeaders()}, false))
			},
			want: []api.RateLimitWindow{{Window: "five_hour", Status: "allowed_warning", UsedPercent: f(80), WindowMinutes: 300, ResetsAt: &fiveHourReset}}},
		// Codex reports its windows on its app-server (ask mode); its
		// `exec --json` prints nothing of them.
		{adapter: "codex", bin: "codex", mode: "ask",
			setup: func(t *testing.T, bin string) setup {
				return caseOf(t, "codex").newServer(t, bin, standin.Script{Headers: rateLimitHeaders()}, false)
			},
			want: []api.RateLimitWindow{
				{Window: "primary", UsedPercent: f(42), WindowMinutes: 300, ResetsAt: &fiveHourReset},
				{Window: "secondary", UsedPercent: f(30), WindowMinutes: 10080, ResetsAt: &weekReset}}},
	}
	for _, c := range cases {
		t.Run(c.adapter, func(t *testing.T) {
			bin := standin.CLI(t, c.bin)
			sess := startDaemon(t, c.setup(t, bin))
			before := time.Now().Add(-time.Second)
			evs, _ := sess.invoke(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: c.adapter, PermissionMode: c.mode}, Task: "say pong"})
			last := evs[len(evs)-1]
			require.Equal(t, api.EventDone, last.Kind, "%s: %+v", daemontest.Kinds(evs), last.Result)
			reports := ofKind(evs, api.EventRateLimit)
			require.NotEmpty(t, reports, daemontest.Kinds(evs))
			assert.Equal(t, c.want, reports[len(reports)-1].RateLimits)

			ctx := daemontest.Context(t)
			params := api.UsageParams{Adapter: c.adapter}
			sum, err := sess.c.UsageSummary(ctx, params)
			require.NoError(t, err)
			require.Len(t, sum.RateLimits, len(c.want))
			for i, w := range c.want {
				got := sum.RateLimits[i]
				assert.Equal(t, c.adapter, got.Adapter)
				assert.Equal(t, last.RunID, got.RunID)
				assert.Equal(t, w, got.RateLimitWindow)
				assert.WithinRange(t, got.SeenAt, before, time.Now())
			}
			h, err := sess.c.Health(ctx, c.adapter, false)
			require.NoError(t, err)
			assert.Equal(t, sum.RateLimits, h.RateLimits, "health shows the same windows")
			other, err := sess.c.UsageSummary(ctx, api.UsageParams{Adapter: "gemini"})
			require.NoError(t, err)
			assert.Empty(t, other.RateLimits, "another adapter's summary has none of them")
			captureCall(t, "usage.summary", params, sum)
			captureCall(t, "agents.health_external", map[string]string{"id": c.adapter}, h)
		})
	}
}

// caseOf is the case of cases() for adapter.
func caseOf(t *testing.T, adapter string) cliCase {
	t.Helper()
	for _, c := range cases() {
		if c.adapter == adapter {
			return c
		}
	}
	t.Fatalf("no %s case", adapter)
	return cliCase{}
}

// captureCall writes a request and its answer, as docs/protocol shows them,
// to $CARD_E2E_CAPTURE (appending).
func captureCall(t *testing.T, method string, params, result any) {
	out := os.Getenv("CARD_E2E_CAPTURE")
	if out == "" {
		return
	}
	req, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	require.NoError(t, err)
	res, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "result": result})
	require.NoError(t, err)
	var rb, sb bytes.Buffer
	require.NoError(t, json.Indent(&rb, req, "", "  "))
	require.NoError(t, json.Indent(&sb, res, "", "  "))
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s\n<!-- example: %s request -->\n```json\n%s\n```\n\n<!-- example: %s response -->\n```json\n%s\n```\n\n",
		t.Name(), method, rb.String(), method, sb.String())
	require.NoError(t, err)
}

// A subscriber over their five-hour limit: the API answers 429 with the
// unified status rejected; the real Claude Code says when the window
// resets, the run ends rate_limit in its words, and usage.summary shows the
// window rejected with its reset, so a client can tell the person when to
// come back instead of trying again.
func TestARealClaudeOverItsSubscriptionLimitShowsTheWindowRejectedWithItsReset(t *testing.T) {
	bin := standin.CLI(t, "claude")
	h := http.Header{}
	h.Set("anthropic-ratelimit-unified-status", "rejected")
	h.Set("anthropic-ratelimit-unified-reset", strconv.FormatInt(fiveHourReset.Unix(), 10))
	h.Set("anthropic-ratelimit-unified-representative-claim", "five_hour")
	h.Set("anthropic-ratelimit-unified-5h-utilization", "1.0")
	h.Set("anthropic-ratelimit-unified-5h-reset", strconv.FormatInt(fiveHourReset.Unix(), 10))
	sess := startDaemon(t, onSubscription(claudeCase(t).newServer(t, bin, standin.Script{Status: http.StatusTooManyRequests, Headers: h}, false)))
	evs := sess.failsAs(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code"}, Task: "say pong"}, api.KindRateLimit)
	assert.Empty(t, ofKind(evs, api.EventRetry), "Claude does not retry a limit the API says is reached")
	last := evs[len(evs)-1]
	assert.Contains(t, last.Result.Error.Message, "limit", "Claude's own words")
	sum, err := sess.c.UsageSummary(daemontest.Context(t), api.UsageParams{})
	require.NoError(t, err)
	require.Len(t, sum.RateLimits, 1)
	got := sum.RateLimits[0]
	assert.Equal(t, api.RateLimitWindow{Window: "five_hour", Status: "rejected", WindowMinutes: 300, ResetsAt: &fiveHourReset}, got.RateLimitWindow)
	assert.Equal(t, last.RunID, got.RunID, "a failed run's report counts too")
	t.Logf("claude-code: %s", last.Result.Error.Message)
}
