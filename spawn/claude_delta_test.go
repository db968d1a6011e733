package spawn

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/e2e/standin"
)

// deltaLine is a text delta line as Claude Code 2.1.197 prints it, with
// its text, session id and parent tool call put in.
func deltaLine(kind, text, session, parent string) string {
	member := `"type":"text_delta","text":`
	if kind == "thinking" {
		member = `"type":"thinking_delta","thinking":`
	}
	return `{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{` + member + text +
		`}},"session_id":` + session + `,"parent_tool_use_id":` + parent + `,"uuid":"6bf0a57b-1414-4d22-9dc8-97e194b6ef11"}`
}

const sess = `"993febd9-67ce-473e-92fe-5108d7030f4d"`

// sameAsDecoder feeds line to a parser through the fast path and to
// another through the whole decode, both after the same earlier line, and
// requires the same events and the same state after. It says whether the
// fast path took the line.
func sameAsDecoder(t *testing.T, line string) bool {
	t.Helper()
	fast, slow := newClaudeParser(), newClaudeParser()
	first := `{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_1"}},"session_id":"earlier"}`
	fast.Feed([]byte(first))
	slow.decode([]byte(first))
	evs, took := fast.delta([]byte(line))
	if !took {
		evs = fast.decode([]byte(line))
	}
	want := slow.decode([]byte(line))
	require.Equal(t, want, evs, "events of %s", line)
	assert.Equal(t, slow.sessionID, fast.sessionID, "session id after %s", line)
	assert.Equal(t, slow.streamID, fast.streamID)
	assert.Equal(t, slow.streamedText, fast.streamedText, "streamed text after %s", line)
	assert.Equal(t, slow.streamedThinking, fast.streamedThinking, "streamed thinking after %s", line)
	return took
}

// The fast path reads the common delta line, and every variant of it,
// exactly as decoding the line whole does; it declines whatever is not
// the one shape, which the decoder then reads.
func TestTheDeltaFastPathReadsALineAsTheDecoderDoes(t *testing.T) {
	for _, tc := range []struct {
		name string
		line string
		fast bool
	}{
		{"a text delta", deltaLine("text", `"PONG from fake anthropic"`, sess, "null"), true},
		{"a thinking delta", deltaLine("thinking", `"let me see"`, sess, "null"), true},
		{"a subagent's delta", deltaLine("text", `"x"`, sess, `"toolu_01"`), true},
		{"escapes and non-ASCII text", deltaLine("text", `"a \"quoted\"\n\\ \u00e9 \ud83d\ude00 é"`, sess, "null"), true},
		{"an empty text", deltaLine("text", `""`, sess, "null"), true},
		{"an empty session id", deltaLine("text", `"x"`, `""`, "null"), true},
		{"an escaped session id", deltaLine("text", `"x"`, `"s\u0031"`, "null"), true},
		{"a two-digit index", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `"index":0`, `"index":12`, 1), true},
		{"a lone surrogate", deltaLine("text", `"\ud800"`, sess, "null"), false},
		{"invalid UTF-8 in the text", deltaLine("text", "\"a\xffb\"", sess, "null"), false},
		{"invalid UTF-8 in the session id", deltaLine("text", `"x"`, "\"s\xff\"", "null"), false},
		{"a raw control character", deltaLine("text", "\"a\x01b\"", sess, "null"), false},
		{"a bad escape", deltaLine("text", `"a\qb"`, sess, "null"), false},
		{"a short unicode escape", deltaLine("text", `"a\u12"`, sess, "null"), false},
		{"a text that is not a string", deltaLine("text", `5`, sess, "null"), false},
		{"a session id that is not a string", deltaLine("text", `"x"`, `7`, "null"), false},
		{"a parent that is neither", deltaLine("text", `"x"`, sess, `false`), false},
		{"an index with a leading zero", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `"index":0`, `"index":01`, 1), false},
		{"a negative index", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `"index":0`, `"index":-1`, 1), false},
		{"a fractional index", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `"index":0`, `"index":0.5`, 1), false},
		{"a member after the uuid", strings.TrimSuffix(deltaLine("text", `"x"`, sess, "null"), "}") + `,"type":"result"}`, false},
		{"a repeated type after the delta", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `}},"session_id"`, `},"type":"message_stop"},"session_id"`, 1), false},
		{"a space after a colon", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `"text":`, `"text": `, 1), false},
		{"spaces between members", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `,"session_id"`, `, "session_id"`, 1), false},
		{"trailing bytes", deltaLine("text", `"x"`, sess, "null") + `x`, false},
		{"cut short", deltaLine("text", `"x"`, sess, "null")[:200], false},
		{"a text delta of another kind", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `"text_delta"`, `"input_json_delta"`, 1), false},
		{"an escaped key", strings.Replace(deltaLine("text", `"x"`, sess, "null"), `"uuid"`, `"uu\u0069d"`, 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.fast, sameAsDecoder(t, tc.line), "fast path taken")
		})
	}
}

// Whatever the line, the fast path either declines it or reads it as the
// decoder does.
func FuzzClaudeDelta(f *testing.F) {
	for _, s := range []string{
		deltaLine("text", `"PONG"`, sess, "null"),
		deltaLine("thinking", `"a \"b\" \u00e9"`, sess, `"toolu_1"`),
		deltaLine("text", `""`, `""`, "null"),
		deltaLine("text", "\"a\xffb\"", sess, "null"),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		sameAsDecoder(t, line)
	})
}

// deltaRecorder is Claude Code's parser with a record of the delta lines
// it was fed and of those the fast path took.
type deltaRecorder struct {
	*claudeParser
	deltas, fast []string
}

func (r *deltaRecorder) Feed(line []byte) []Event {
	if strings.Contains(string(line), `"content_block_delta"`) {
		r.deltas = append(r.deltas, string(line))
		probe := newClaudeParser()
		if _, ok := probe.delta(line); ok {
			r.fast = append(r.fast, string(line))
		}
	}
	return r.claudeParser.Feed(line)
}

// The real Claude Code, run as card runs it against a loopback stand-in of
// the Messages API, prints its text and thinking deltas in the one shape
// the fast path reads: the shape is the CLI's, not only the fixture's.
func TestTheRealClaudeCodesDeltaLinesTakeTheFastPath(t *testing.T) {
	bin := standin.CLI(t, "claude")
	s := standin.NewAnthropic(t, standin.Script{Answer: `an answer with "quotes", a \ backslash, é and 😀 in it`,
		Thinking: "first I think about it"})
	home, cwd := t.TempDir(), t.TempDir()
	plan, err := Build(bin, Request{Adapter: agent.ClaudeCode, Cwd: cwd, Mode: ModeReadOnly})
	require.NoError(t, err)
	rec := &deltaRecorder{claudeParser: newClaudeParser()}
	var text, thinking strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, RunSpec{Plan: plan, Prompt: "say it", BaseEnv: s.ClaudeEnv(home, os.Getenv("PATH")), Parser: rec,
		OnEvent: func(e Event) {
			switch {
			case e.Kind == api.EventText && e.Delta:
				text.WriteString(e.Text)
			case e.Kind == api.EventThinking && e.Delta:
				thinking.WriteString(e.Text)
			}
		}})
	require.NoError(t, err)
	require.Equal(t, `an answer with "quotes", a \ backslash, é and 😀 in it`, res.Answer, "error: %+v", res.Error)
	assert.Equal(t, res.Answer, text.String(), "the streamed text is the answer")
	assert.Equal(t, "first I think about it", thinking.String())
	var textDeltas int
	for _, l := range rec.deltas {
		if strings.Contains(l, `"text_delta"`) || strings.Contains(l, `"thinking_delta"`) {
			textDeltas++
			assert.Contains(t, rec.fast, l, "a delta line the fast path declined")
		}
	}
	assert.Greater(t, textDeltas, 5, "text and thinking deltas were printed")
}
