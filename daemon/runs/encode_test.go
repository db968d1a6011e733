package runs

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// The events encoded by hand must be the bytes encoding/json writes for
// them, since clients and the store saw those before: every field, every
// escape encoding/json makes, and the events that fall back to it.
func TestEventsEncodeToTheBytesEncodingJSONWrites(t *testing.T) {
	texts := []string{"", "plain", `quote " and \ backslash`, "<b>&amp;</b>", "tab\tnew\nline\rcr\bbs\fff",
		"\x00\x01\x1f\x7f", "bad utf-8 \xff\xfe end", "\xe2\x80\xa8 and \xe2\x80\xa9", "héllo wörld ✓ 🎉", "trailing \xe2\x80"}
	cost := 0.25
	var events []AgentEvent
	for _, s := range texts {
		events = append(events,
			AgentEvent{RunID: "run_01", Seq: 7, Event: api.Event{Kind: "text", Text: s, Delta: true, SessionID: "sess-" + s}},
			AgentEvent{RunID: s, Seq: 1 << 40, Event: api.Event{Kind: s, Model: s, Output: s, IsError: true, Error: s, Type: s}},
		)
	}
	events = append(events,
		AgentEvent{RunID: "r", Seq: 3, Event: api.Event{Kind: "retry", Attempt: 2, MaxAttempts: 5, DelayMs: 1500, Error: "overloaded"}},
		AgentEvent{RunID: "r", Seq: 4, Event: api.Event{Kind: "stalled", QuietMs: 30000, KillAfterMs: -1}},
		AgentEvent{RunID: "r", Seq: 5, Event: api.Event{Kind: "done"}, Status: "succeeded"},
		AgentEvent{RunID: "r", Seq: 6, Event: api.Event{Kind: "tool_use", Tool: &api.Tool{Name: "Bash", ID: "t1", Input: json.RawMessage(`{"command":"ls"}`)}}},
		AgentEvent{RunID: "r", Seq: 7, Event: api.Event{Kind: "usage", Usage: &api.Usage{InputTokens: 3}}},
		AgentEvent{RunID: "r", Seq: 8, Event: api.Event{Kind: "other", Raw: json.RawMessage(`{"x":1}`)}},
		AgentEvent{RunID: "r", Seq: 9, Event: api.Event{Kind: "done"}, Status: "failed", Result: &InvokeResult{RunID: "r", Result: api.Result{Answer: "<a>", CostUSD: &cost}}},
		AgentEvent{RunID: "r", Seq: 10, Event: api.Event{Kind: EventApprovalRequested}, Approval: &api.Approval{RequestID: "q1"}},
	)
	for _, ev := range events {
		want, err := json.Marshal(ev)
		require.NoError(t, err)
		got, err := encodeEvent(&ev)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%#v", ev)
	}
}

func BenchmarkEncodeTextDelta(b *testing.B) {
	ev := AgentEvent{RunID: "run_01KBQ3Z5Y9T8W0X1V2N3M4P5Q6", Seq: 1234, Event: api.Event{Kind: "text", Text: "PONG from fake anthropic", Delta: true}}
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			_, _ = encodeEvent(&ev)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(ev)
		}
	})
}
