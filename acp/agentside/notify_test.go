package agentside

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
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
