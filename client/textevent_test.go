package client

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// daemonForm writes a session event as the daemon does: the run event as
// encoding/json writes it, inside the session's envelope.
func daemonForm(t testing.TB, sessionID string, seq int64, turn int, ev api.AgentEvent) []byte {
	t.Helper()
	raw, err := json.Marshal(ev)
	require.NoError(t, err)
	b := []byte(`{"session_id":`)
	b = strconv.AppendQuote(b, sessionID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"turn":`...)
	b = strconv.AppendInt(b, int64(turn), 10)
	b = append(b, `,"event":`...)
	b = append(b, raw...)
	return append(b, '}')
}

// sameAsDecoded fails unless the split event, its text unquoted into it, is
// the event the decoder reads from p.
func sameAsDecoded(t *testing.T, p []byte, ev api.SessionEvent, text []byte) {
	t.Helper()
	var want api.SessionEvent
	require.NoError(t, decodeEvent(p, &want), "%s", p)
	assert.Empty(t, ev.Event.Text, "the split event leaves its text to the JSON")
	var s string
	require.NoError(t, decodeEvent(text, &s), "the text is one JSON string: %s", text)
	ev.Event.Text = s
	assert.Equal(t, want, ev)
}

// Every text and thinking event the daemon writes is read without its
// text, and says with it what the decoder says, whatever the text holds.
func TestATextEventOfTheDaemonsFormIsReadAsTheDecoderReadsIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   api.AgentEvent
	}{
		{"a delta", api.AgentEvent{RunID: "run_06H4JMB4KN1GVEGZAWNZT3GMCC", Seq: 7, Event: api.Event{Kind: api.EventText, Text: "PONG from fake anthropic", Delta: true}}},
		{"a whole text", api.AgentEvent{RunID: "run_1", Seq: 2, Event: api.Event{Kind: api.EventText, Text: "done."}}},
		{"thinking", api.AgentEvent{RunID: "run_1", Seq: 3, Event: api.Event{Kind: api.EventThinking, Text: "hmm", Delta: true}}},
		{"HTML, quotes, backslashes, separators, controls and emoji", api.AgentEvent{RunID: "run_1", Seq: 4, Event: api.Event{Kind: api.EventText,
			Text: "<b>a & b</b> \"q\" \\ / \u2028 \u2029 \x01\x1f\t\r\n é 😀", Delta: true}}},
		{"invalid UTF-8, as encoding/json writes it", api.AgentEvent{RunID: "run_1", Seq: 5, Event: api.Event{Kind: api.EventText, Text: "a\xffb\xed\xa0\x80c"}}},
		{"a long text", api.AgentEvent{RunID: "run_1", Seq: 1 << 40, Event: api.Event{Kind: api.EventText, Text: string(make([]byte, 70000)), Delta: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := daemonForm(t, "ses_06H4JMB4KN1GVEGZAWNZT3GMCC", 9, 3, tc.ev)
			ev, text, ok := splitTextEvent(p)
			require.True(t, ok, "%s", p)
			sameAsDecoded(t, p, ev, text)
		})
	}
}

// Anything but the one shape is left to the decoder: the split never
// guesses.
func TestAnEventOfAnyOtherFormIsLeftToTheDecoder(t *testing.T) {
	good := `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi","delta":true}}`
	_, _, ok := splitTextEvent([]byte(good))
	require.True(t, ok, "the form itself is read")
	pair := `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"\ud83d\ude00 \\\"\\"}}`
	ev, text, ok := splitTextEvent([]byte(pair))
	require.True(t, ok, "escapes, a surrogate pair and backslashes before a quote are read: %s", pair)
	sameAsDecoded(t, []byte(pair), ev, text)
	for name, p := range map[string]string{
		"another kind":              `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"warning","text":"hi"}}`,
		"a member after the text":   `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi","delta":true,"x":1}}`,
		"a member after the event":  `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi"},"x":1}`,
		"delta false written":       `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi","delta":false}}`,
		"a space":                   `{"session_id": "ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi"}}`,
		"members in another order":  `{"seq":9,"session_id":"ses_1","turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi"}}`,
		"an escape in an id":        `{"session_id":"ses_\u0031","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi"}}`,
		"a leading zero":            `{"session_id":"ses_1","seq":09,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi"}}`,
		"a fraction":                `{"session_id":"ses_1","seq":9.0,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi"}}`,
		"a seq past int64":          `{"session_id":"ses_1","seq":9223372036854775808,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi"}}`,
		"a raw control character":   "{\"session_id\":\"ses_1\",\"seq\":9,\"turn\":3,\"event\":{\"run_id\":\"run_1\",\"seq\":7,\"kind\":\"text\",\"text\":\"h\ni\"}}",
		"invalid UTF-8 in the text": "{\"session_id\":\"ses_1\",\"seq\":9,\"turn\":3,\"event\":{\"run_id\":\"run_1\",\"seq\":7,\"kind\":\"text\",\"text\":\"h\xffi\"}}",
		"an unknown escape":         `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"h\qi"}}`,
		"a short \\u escape":        `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"h\u12"}}`,
		"a lone surrogate escape":   `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"x\ud800y"}}`,
		"an unterminated text":      `{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi}}`,
		"bytes after the end":       good + ` `,
		"cut short":                 good[:len(good)-1],
	} {
		t.Run(name, func(t *testing.T) {
			ev, text, ok := splitTextEvent([]byte(p))
			assert.False(t, ok)
			assert.Nil(t, text)
			assert.Zero(t, ev)
		})
	}
}

// A follower of the text form and a follower of decoded events on one
// client each get every event once, each in its own form.
func TestTextAndDecodedFollowersOfOneSessionEachGetTheirForm(t *testing.T) {
	r := newRouter()
	var texts []string
	var decoded []api.SessionEvent
	r.sessions.addRoute("ses_1", &sessionRoute{text: func(ev api.SessionEvent, text json.RawMessage) {
		if text != nil {
			texts = append(texts, string(text))
		} else {
			texts = append(texts, ev.Event.Kind)
		}
	}})
	r.sessions.add("ses_1", 0, func(ev api.SessionEvent) { decoded = append(decoded, ev) })
	r.notify("sessions.event", daemonForm(t, "ses_1", 1, 1, api.AgentEvent{RunID: "run_1", Seq: 1, Event: api.Event{Kind: api.EventSession}}))
	r.notify("sessions.event", daemonForm(t, "ses_1", 2, 1, api.AgentEvent{RunID: "run_1", Seq: 2, Event: api.Event{Kind: api.EventText, Text: `say "hi"`, Delta: true}}))
	r.notify("sessions.event", daemonForm(t, "ses_1", 2, 1, api.AgentEvent{RunID: "run_1", Seq: 2, Event: api.Event{Kind: api.EventText, Text: "again"}}))
	assert.Equal(t, []string{api.EventSession, `"say \"hi\""`}, texts)
	require.Len(t, decoded, 2)
	assert.Equal(t, `say "hi"`, decoded[1].Event.Text)
	assert.True(t, decoded[1].Event.Delta)
}

// Whatever bytes come, a split event is the one the decoder reads.
func FuzzSplitTextEvent(f *testing.F) {
	f.Add([]byte(`{"session_id":"ses_1","seq":9,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"text","text":"hi","delta":true}}`))
	f.Add([]byte(`{"session_id":"ses_1","seq":-0,"turn":3,"event":{"run_id":"run_1","seq":7,"kind":"thinking","text":"a\u00e9\\\"\/"}}`))
	f.Add(daemonForm(f, "ses_1", 1, 1, api.AgentEvent{RunID: "r", Seq: 1, Event: api.Event{Kind: api.EventText, Text: "<\u2028\x00é😀"}}))
	f.Fuzz(func(t *testing.T, p []byte) {
		ev, text, ok := splitTextEvent(p)
		if !ok {
			return
		}
		sameAsDecoded(t, p, ev, text)
	})
}

// A terminal event read for a text follower is the event the decoder
// reads, but for its result's answer, however the answer is written.
func TestATerminalEventForATextFollowerIsReadWithoutItsAnswer(t *testing.T) {
	cost := 0.0123
	done := api.AgentEvent{RunID: "run_1", Seq: 24, Event: api.Event{Kind: api.EventDone}, Status: api.Status("succeeded"),
		Result: &api.InvokeResult{Result: api.Result{Answer: "PONG \"<all>\" é\u2028 " + string(make([]byte, 5000)), CostUSD: &cost,
			Usage: api.Usage{InputTokens: 10, OutputTokens: 5}}, RunID: "run_1", Adapter: "claude-code", Status: api.Status("succeeded")}}
	failed := api.AgentEvent{RunID: "run_2", Seq: 3, Event: api.Event{Kind: api.EventRunError}, Status: api.Status("failed"),
		Result: &api.InvokeResult{Result: api.Result{Error: &api.RunError{Kind: "exit", Message: "the agent exited 1"}}, RunID: "run_2", Status: api.Status("failed")}}
	for name, p := range map[string][]byte{
		"a done event":   daemonForm(t, "ses_1", 30, 2, done),
		"an error event": daemonForm(t, "ses_1", 3, 1, failed),
		"a usage event":  daemonForm(t, "ses_1", 4, 1, api.AgentEvent{RunID: "run_1", Seq: 4, Event: api.Event{Kind: api.EventUsage, Usage: &api.Usage{InputTokens: 1}}}),
		"a null result":  []byte(`{"session_id":"ses_1","seq":5,"turn":1,"event":{"run_id":"run_1","seq":5,"kind":"done","result":null}}`),
		"the answer's name in capitals, and twice": []byte(`{"session_id":"ses_1","seq":5,"turn":1,"event":{"run_id":"run_1","seq":5,"kind":"done",` +
			`"result":{"ANSWER":"x","answer":"y","total_cost_usd":0.5,"run_id":"run_1"}}}`),
	} {
		t.Run(name, func(t *testing.T) {
			var want, got api.SessionEvent
			require.NoError(t, decodeEvent(p, &want))
			require.NoError(t, decodeWithoutAnswer(p, &got))
			if want.Event.Result != nil {
				require.NotNil(t, got.Event.Result)
				assert.Empty(t, got.Event.Result.Answer)
				want.Event.Result.Answer = ""
			}
			assert.Equal(t, want, got)
		})
	}
}

// Whatever bytes come, what the decoder reads, the answerless decoder reads
// too, the same but for the answer.
func FuzzDecodeWithoutAnswer(f *testing.F) {
	f.Add([]byte(`{"session_id":"ses_1","seq":5,"turn":1,"event":{"run_id":"run_1","seq":5,"kind":"done","result":{"answer":"y","total_cost_usd":0.5,"usage":{"input_tokens":3}}}}`))
	f.Add([]byte(`{"event":{"result":{"Answer":1,"run_id":"r"}}}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		var want, got api.SessionEvent
		if decodeEvent(p, &want) != nil {
			return
		}
		require.NoError(t, decodeWithoutAnswer(p, &got), "%s", p)
		if want.Event.Result != nil && got.Event.Result != nil {
			want.Event.Result.Answer = ""
		}
		assert.Equal(t, want, got, "%s", p)
	})
}

// The daemon's own form of a terminal event is read by skimming past its
// answer, not by the decoder passing over it, whatever the answer holds.
func TestADaemonsTerminalEventIsReadBySkimmingPastItsAnswer(t *testing.T) {
	for name, answer := range map[string]string{
		"prose":                    strings.Repeat("A line of the answer.\n", 500),
		"quotes and backslashes":   `a "quoted" \ word, \"and\" a \\"tricky" one` + "\"",
		"an empty answer":          "",
		"braces of its own":        `{"answer":"not this one"}]]}`,
		"control and line breaks":  "\x01\u2028\t\r\n\x7f",
		"text in another alphabet": "ответ 答え",
	} {
		t.Run(name, func(t *testing.T) {
			done := api.AgentEvent{RunID: "run_1", Seq: 24, Event: api.Event{Kind: api.EventDone}, Status: "succeeded",
				Result: &api.InvokeResult{Result: api.Result{Answer: answer}, RunID: "run_1", Status: "succeeded"}}
			p := daemonForm(t, "ses_1", 30, 2, done)
			blanked, ok := blankAnswers(p)
			require.True(t, ok, "%s", p)
			assert.Contains(t, string(blanked), `"answer":""`)
			var got api.SessionEvent
			require.NoError(t, decodeEvent(blanked, &got))
			assert.Equal(t, "succeeded", string(got.Event.Result.Status))
			assert.Empty(t, got.Event.Result.Answer)
		})
	}
}

// BenchmarkDecodeWithoutAnswer reads the terminal event of a talkative
// turn, its 120 KB answer of prose, for a text follower.
func BenchmarkDecodeWithoutAnswer(b *testing.B) {
	cost := 0.0123
	answer := strings.Repeat("Some words of the answer, now and then \"quoted\", and a new line.\n", 1800)
	done := api.AgentEvent{RunID: "run_1", Seq: 24, Event: api.Event{Kind: api.EventDone}, Status: "succeeded",
		Result: &api.InvokeResult{Result: api.Result{Answer: answer, CostUSD: &cost, Usage: api.Usage{InputTokens: 10, OutputTokens: 5}},
			RunID: "run_1", Adapter: "claude-code", Status: "succeeded"}}
	p := daemonForm(b, "ses_1", 30, 2, done)
	b.Run("skimming", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			var ev api.SessionEvent
			if err := decodeWithoutAnswer(p, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("the decoder passing over it", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			var ev api.SessionEvent
			if err := jsonv2.Unmarshal(p, &ev, jsonv1.DefaultOptionsV1(), withoutAnswer); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// plainASCII, eight bytes at a time, says what a byte-by-byte look says:
// printable ASCII with no quote or backslash, whatever the length and
// wherever the odd byte sits.
func FuzzPlainASCII(f *testing.F) {
	for _, s := range []string{"", "PONG from fake anthropic", "a\"b", `a\b`, "é", "\x7f\x20", "\x1f", "12345678\x00", "1234567\x80", "12345678abcdefg\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := true
		for _, c := range b {
			if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				want = false
			}
		}
		require.Equal(t, want, plainASCII(b), "%q", b)
		if want {
			require.True(t, jsontext.Value(`"`+string(b)+`"`).IsValid(), "%q", b)
		}
	})
}

// BenchmarkSplitTextEvent reads one merged text event of a talkative turn
// (6.7 KB of an agent's plain text), as the front door reads each.
func BenchmarkSplitTextEvent(b *testing.B) {
	ev := api.AgentEvent{RunID: "run_01JXYZABCDEFGHJKMNPQRSTVWX", Seq: 7,
		Event: api.Event{Kind: api.EventText, Text: strings.Repeat("PONG from fake anthropic", 280), Delta: true}}
	p := daemonForm(b, "ses_01JXYZABCDEFGHJKMNPQRSTVWX", 30, 2, ev)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if _, _, ok := splitTextEvent(p); !ok {
			b.Fatal("the daemon's form was not split")
		}
	}
}
