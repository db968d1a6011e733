package agentside

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// frames is a Transport that keeps what is written.
type frames struct {
	mu  sync.Mutex
	out [][]byte
}

func (f *frames) Read(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() }

func (f *frames) Write(_ context.Context, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = append(f.out, append([]byte(nil), b...))
	return nil
}

func (f *frames) last(t *testing.T) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.out)
	return f.out[len(f.out)-1]
}

// A text chunk written from its parts says what encoding the whole
// notification says, for every text and every kind of chunk, and is valid
// JSON; a chunk with more than text is encoded whole.
func TestATextChunkIsWrittenAsItsEncodingReadsWritten(t *testing.T) {
	meta, _ := json.Marshal(map[string]any{MetaKey: map[string]any{"seq": 7, "turn": 2, "runId": "run_1"}})
	id := "msg_1"
	for _, tc := range []struct {
		name string
		n    acp.SessionNotification
	}{
		{"a plain answer", acp.SessionNotification{SessionID: "ses_1", Meta: meta,
			Update: acp.SessionUpdate{Kind: acp.UpdateAgentMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock("PONG from fake anthropic")}}}},
		{"thinking", acp.SessionNotification{SessionID: "ses_1", Meta: meta,
			Update: acp.SessionUpdate{Kind: acp.UpdateAgentThoughtChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock("hmm")}}}},
		{"HTML, quotes, line separators and emoji", acp.SessionNotification{SessionID: "ses_\"1\"", Meta: meta,
			Update: acp.SessionUpdate{Kind: acp.UpdateAgentMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock("<b>a & b</b> \"q\" \\ \u2028 \u2029 \x01 😀\n")}}}},
		{"invalid UTF-8", acp.SessionNotification{SessionID: "ses_1", Meta: meta,
			Update: acp.SessionUpdate{Kind: acp.UpdateAgentMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock("a\xffb")}}}},
		{"an empty text and no meta", acp.SessionNotification{SessionID: "ses_1",
			Update: acp.SessionUpdate{Kind: acp.UpdateUserMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock("")}}}},
		{"a message id", acp.SessionNotification{SessionID: "ses_1", Meta: meta,
			Update: acp.SessionUpdate{Kind: acp.UpdateAgentMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock("x"), MessageID: &id}}}},
		{"an annotated block", acp.SessionNotification{SessionID: "ses_1", Meta: meta,
			Update: acp.SessionUpdate{Kind: acp.UpdateAgentMessageChunk, Chunk: &acp.ContentChunk{Content: acp.ContentBlock{Type: acp.ContentText, Text: "x",
				Annotations: &acp.Annotations{Audience: []string{"user"}}}}}}},
		{"not a chunk", acp.SessionNotification{SessionID: "ses_1", Meta: meta,
			Update: acp.SessionUpdate{Kind: acp.UpdatePlan, Plan: &acp.Plan{Entries: []acp.PlanEntry{{Content: "a", Priority: "high", Status: "pending"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &frames{}
			s := New(Config{})
			s.t, s.ctx = f, t.Context()
			s.notifyUpdate(tc.n)
			fast := f.last(t)
			s.notify(acp.MethodSessionUpdate, tc.n)
			whole := f.last(t)
			require.True(t, json.Valid(fast), "%s", fast)
			var a, b any
			require.NoError(t, json.Unmarshal(fast, &a))
			require.NoError(t, json.Unmarshal(whole, &b))
			assert.Equal(t, b, a, "%s\nagainst\n%s", fast, whole)
			var m struct {
				Params acp.SessionNotification `json:"params"`
			}
			require.NoError(t, json.Unmarshal(fast, &m))
			assert.Equal(t, tc.n.Update.Kind, m.Params.Update.Kind)
		})
	}
}

// BenchmarkATextChunksUpdate writes a 53 KB text chunk's session/update,
// from its parts and encoded whole:
//
//	go test -run '^$' -bench TextChunksUpdate ./acp/agentside/
func BenchmarkATextChunksUpdate(b *testing.B) {
	meta, _ := json.Marshal(map[string]any{MetaKey: map[string]any{"seq": 7, "turn": 2, "runId": "run_1"}})
	n := acp.SessionNotification{SessionID: "ses_1", Meta: meta, Update: acp.SessionUpdate{Kind: acp.UpdateAgentMessageChunk,
		Chunk: &acp.ContentChunk{Content: acp.TextBlock(strings.Repeat("PONG from fake anthropic", 2200))}}}
	s := New(Config{})
	s.t, s.ctx = discard{}, b.Context()
	b.Run("from its parts", func(b *testing.B) {
		b.SetBytes(int64(len(n.Update.Chunk.Content.Text)))
		for b.Loop() {
			s.notifyUpdate(n)
		}
	})
	b.Run("encoded whole", func(b *testing.B) {
		b.SetBytes(int64(len(n.Update.Chunk.Content.Text)))
		for b.Loop() {
			s.notify(acp.MethodSessionUpdate, n)
		}
	})
}

type discard struct{}

func (discard) Read(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() }
func (discard) Write(context.Context, []byte) error      { return nil }

// An update's _meta says what encoding/json says of the map it stands for,
// byte for byte, for card's run ids and for one with a quote and a
// backslash (jsontext leaves <, > and & as they are, which encoding/json
// escapes; card's ids hold none).
func TestAnUpdatesMetaIsWhatEncodingTheMapWrites(t *testing.T) {
	for _, ev := range []api.SessionEvent{
		{Seq: 7, Turn: 2, Event: api.AgentEvent{RunID: "run_06H4JMB4KN1GVEGZAWNZT3GMCC"}},
		{Seq: 1, Turn: 1},
		{Seq: 1 << 40, Turn: 99999, Event: api.AgentEvent{RunID: `run_"x"\y`}},
	} {
		want, err := json.Marshal(map[string]any{MetaKey: map[string]any{"seq": ev.Seq, "turn": ev.Turn, "runId": ev.Event.RunID}})
		require.NoError(t, err)
		assert.Equal(t, string(want), string(updateMeta(ev)))
	}
}

// textBackend is the fake as a TextBackend: text and thinking events come
// with their text as a JSON string, as *client.Client hands them over.
type textBackend struct {
	*fakeBackend
	split *atomic.Int64 // how many events came with their text as JSON
}

func (b textBackend) SubscribeSessionText(ctx context.Context, p api.SessionSubscribeParams, on func(api.SessionEvent, json.RawMessage)) (api.SessionSubscribeResult, error) {
	return b.SubscribeSession(ctx, p, func(ev api.SessionEvent) {
		if k := ev.Event.Kind; k != api.EventText && k != api.EventThinking {
			on(ev, nil)
			return
		}
		text, err := json.Marshal(ev.Event.Text)
		if err != nil {
			panic(err)
		}
		ev.Event.Text = ""
		b.split.Add(1)
		on(ev, text)
	})
}

// A turn followed through a TextBackend, its text spliced into the chunks
// as JSON, gives the editor the updates a turn followed as decoded events
// gives, whatever the text holds.
func TestATurnFollowedWithItsTextAsJSONGivesTheEditorTheSameUpdates(t *testing.T) {
	script := func(_ *fakeSession, _ api.SessionPromptParams) []api.AgentEvent {
		return []api.AgentEvent{
			{Event: api.Event{Kind: api.EventSession, SessionID: "cli-1"}},
			{Event: api.Event{Kind: api.EventThinking, Text: "let me <look> & \"see\"", Delta: true}},
			{Event: api.Event{Kind: api.EventText, Text: "", Delta: true}},
			{Event: api.Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "Bash", ID: "t1", Input: json.RawMessage(`{"command":"ls"}`)}}},
			{Event: api.Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: "t1"}, Output: "a.go"}},
			{Event: api.Event{Kind: api.EventText, Text: "Hel\\lo \u2028 \x01 é 😀 a\xffb", Delta: true}},
			{Event: api.Event{Kind: api.EventText, Text: strings.Repeat("long ", 20000)}},
			{Event: api.Event{Kind: api.EventUsage, Usage: &api.Usage{InputTokens: 100, OutputTokens: 7}}},
		}
	}
	updates := func(text bool) ([]acp.SessionNotification, int64) {
		be := newFake()
		be.script = script
		e := newEditor(t, Config{Adapter: "claude-code"}, be)
		var split atomic.Int64
		if text {
			e.srv.SetBackend(textBackend{be, &split})
		}
		initialize(e)
		id := newSession(e, "")
		assert.Equal(t, acp.StopEndTurn, prompt(e, id, "look").StopReason)
		e.mu.Lock()
		defer e.mu.Unlock()
		out := slices.Clone(e.updates)
		for i := range out {
			// The bytes the editor read, kept as they came: the two ways
			// escape the same text differently (encoding/json writes <
			// as \u003c), which is one meaning.
			out[i].Update.Raw = nil
		}
		return out, split.Load()
	}
	decoded, _ := updates(false)
	spliced, split := updates(true)
	assert.Equal(t, int64(4), split, "every text and thinking event came as JSON")
	require.NotEmpty(t, decoded)
	assert.Equal(t, decoded, spliced)
}

// The buffers a turn's chunks pass through are reused from chunk to
// chunk: a turn of many texts, short and past the size kept for reuse,
// reaches the editor as exactly those texts, in order, none holding
// another's bytes.
func TestEveryChunkOfALongTurnHoldsItsOwnTextThoughTheirBuffersAreReused(t *testing.T) {
	var want []string
	for i := range 300 {
		n := 1 + (i*37)%500
		if i%50 == 7 {
			n = maxPooledBuf + 1000 // too big to go back for reuse
		}
		want = append(want, fmt.Sprintf("<%d>", i)+strings.Repeat(string(rune('a'+i%26)), n))
	}
	be := newFake()
	be.script = func(_ *fakeSession, _ api.SessionPromptParams) []api.AgentEvent {
		evs := make([]api.AgentEvent, len(want))
		for i, text := range want {
			evs[i] = api.AgentEvent{Event: api.Event{Kind: api.EventText, Text: text, Delta: true}}
		}
		return evs
	}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	var split atomic.Int64
	e.srv.SetBackend(textBackend{be, &split})
	initialize(e)
	id := newSession(e, "")
	assert.Equal(t, acp.StopEndTurn, prompt(e, id, "talk").StopReason)
	var got []string
	for _, u := range e.updatesOf(id, acp.UpdateAgentMessageChunk) {
		got = append(got, u.Chunk.Content.Text)
	}
	assert.Equal(t, int64(len(want)), split.Load(), "every text came as JSON")
	assert.Equal(t, want, got)
}
