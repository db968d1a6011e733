package spawn

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

func pct(v float64) *float64 { return &v }

func at(secs int64) *time.Time { t := time.Unix(secs, 0).UTC(); return &t }

// The real Claude Code 2.1.197 on a claude.ai sign-in (an OAuth token)
// against a stand-in sending anthropic-ratelimit-unified-* headers writes
// these lines; each becomes a rate_limit event naming its window.
func TestClaudesRateLimitEventsBecomeRateLimitWindows(t *testing.T) {
	cases := []struct {
		name, line string
		want       api.RateLimitWindow
	}{
		{"a window well within its limit",
			`{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1796169430,"rateLimitType":"five_hour","isUsingOverage":false},"uuid":"4c636851-5d21-4e97-92e4-f8a6c4f3e0c6","session_id":"bb1da411-e37f-4332-96ab-6edaaf97ac4f"}`,
			api.RateLimitWindow{Window: "five_hour", Status: "allowed", WindowMinutes: 300, ResetsAt: at(1796169430)}},
		{"a window past a warning threshold",
			`{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1796169794,"rateLimitType":"five_hour","utilization":0.8,"isUsingOverage":false,"surpassedThreshold":0.75},"uuid":"094d0cf3-a698-4844-9837-0749a2dea18c","session_id":"5b374a6e-729d-422b-8757-aa65c40a3c9b"}`,
			api.RateLimitWindow{Window: "five_hour", Status: "allowed_warning", UsedPercent: pct(80), WindowMinutes: 300, ResetsAt: at(1796169794)}},
		{"a weekly window over its limit",
			`{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1778565600,"rateLimitType":"seven_day","overageStatus":"rejected","isUsingOverage":false}}`,
			api.RateLimitWindow{Window: "seven_day", Status: "rejected", WindowMinutes: 10080, ResetsAt: at(1778565600)}},
		{"a bare status, no window named",
			`{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","isUsingOverage":false}}`,
			api.RateLimitWindow{Window: "unified", Status: "allowed"}},
		{"a reset time that cannot be one",
			`{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":-5,"rateLimitType":"five_hour","utilization":1e300}}`,
			api.RateLimitWindow{Window: "five_hour", Status: "allowed", WindowMinutes: 300}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := newClaudeParser().Feed([]byte(c.line))
			require.Len(t, evs, 1)
			assert.Equal(t, api.EventRateLimit, evs[0].Kind)
			assert.Equal(t, []api.RateLimitWindow{c.want}, evs[0].RateLimits)
		})
	}
	evs := newClaudeParser().Feed([]byte(`{"type":"rate_limit_event"}`))
	require.Len(t, evs, 1)
	assert.Equal(t, api.EventOther, evs[0].Kind, "a report that names nothing stays other")
}

// The real Codex 0.171.0's app-server, against a stand-in sending
// x-codex-primary-* and x-codex-secondary-* headers, sends this
// notification; it becomes one rate_limit event with both windows.
func TestCodexsRateLimitNotificationBecomesItsTwoWindows(t *testing.T) {
	raw := json.RawMessage(`{"rateLimits":{"credits":null,"individualLimit":null,"limitId":"codex","limitName":null,"normalModelSlug":null,"planType":null,"primary":{"resetsAt":1796169475,"usedPercent":42,"windowDurationMins":300},"rateLimitReachedType":null,"secondary":{"resetsAt":1796425075,"usedPercent":30,"windowDurationMins":10080},"spendControlReached":null}}`)
	ev, ok := codexRateLimitEvent(raw)
	require.True(t, ok)
	assert.Equal(t, api.EventRateLimit, ev.Kind)
	assert.Equal(t, []api.RateLimitWindow{
		{Window: "primary", UsedPercent: pct(42), WindowMinutes: 300, ResetsAt: at(1796169475)},
		{Window: "secondary", UsedPercent: pct(30), WindowMinutes: 10080, ResetsAt: at(1796425075)},
	}, ev.RateLimits)

	other, ok := codexRateLimitEvent(json.RawMessage(`{"rateLimits":{"limitId":"codex_other","primary":{"usedPercent":5}}}`))
	require.True(t, ok)
	assert.Equal(t, "codex_other/primary", other.RateLimits[0].Window, "a second limit's windows keep their own names")

	_, ok = codexRateLimitEvent(json.RawMessage(`{"rateLimits":{"limitId":"codex","primary":null,"secondary":null}}`))
	assert.False(t, ok, "no window, no event")
}
