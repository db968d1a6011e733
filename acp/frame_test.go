package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestALineIsAMessageOnlyWhenItIsOneJSONRPCObject(t *testing.T) {
	for line, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`:                           true,
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":{}}}`:                   true,
		`{"jsonrpc":"2.0","id":1,"result":null}`:                                               true,
		`{"jsonrpc":"2.0","id":0,"error":{"code":-32000,"message":"Authentication required"}}`: true,
		`Ripgrep is not available. Falling back to GrepTool.`:                                  false,
		`{"level":"info","msg":"a log line that is JSON"}`:                                     false,
		`{"result":{}}`:                          false,
		`[{"jsonrpc":"2.0","id":1,"result":{}}]`: false,
		`{"jsonrpc":"2.0","id":1,"method":`:      false,
		``:                                       false,
	} {
		assert.Equal(t, want, IsMessage([]byte(line)), line)
	}
}

// A peer that never sends a newline, or one huge line, must not grow the
// reader past its bound; the line is skipped and the stream goes on.
func TestTheReaderSkipsALineOverItsBoundAndGoesOn(t *testing.T) {
	in := strings.Repeat("x", 300<<10) + "\n" +
		`{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}` + "\r\n\n" +
		"not json\n" +
		`{"jsonrpc":"2.0","id":"a","result":{}}` // the last line has no newline
	r := NewReader(strings.NewReader(in), 1<<10)
	_, err := r.Read()
	assert.ErrorIs(t, err, ErrLineTooLong)
	m, err := r.Read()
	require.NoError(t, err)
	assert.True(t, m.IsNotification())
	assert.Equal(t, MethodSessionCancel, m.Method)
	var p CancelNotification
	require.NoError(t, json.Unmarshal(m.Params, &p))
	assert.Equal(t, "s1", p.SessionID)
	_, err = r.Read()
	var nm *NotMessageError
	require.ErrorAs(t, err, &nm)
	assert.Equal(t, "not json", string(nm.Line))
	m, err = r.Read()
	require.NoError(t, err)
	assert.True(t, m.IsResponse())
	assert.Equal(t, `"a"`, string(m.ID))
	_, err = r.Read()
	assert.ErrorIs(t, err, io.EOF)
}

func TestALineExactlyAtTheBoundIsRead(t *testing.T) {
	line := `{"jsonrpc":"2.0","method":"x","params":{"p":"` + strings.Repeat("y", 100) + `"}}`
	r := NewReader(strings.NewReader(line+"\n"), len(line))
	got, err := r.ReadLine()
	require.NoError(t, err)
	assert.Equal(t, line, string(got))
	r = NewReader(strings.NewReader(line+"\n"), len(line)-1)
	_, err = r.ReadLine()
	assert.ErrorIs(t, err, ErrLineTooLong)
}

// Replies from several goroutines (questions answered off the reader)
// never interleave within a line.
func TestTheWriterWritesWholeLinesFromManyGoroutines(t *testing.T) {
	var buf safeBuffer
	w := NewWriter(&buf)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := Response(json.RawMessage(`1`), Selected(strings.Repeat("o", i*100)), nil)
			require.NoError(t, err)
			require.NoError(t, w.Write(m))
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 50)
	for _, l := range lines {
		assert.True(t, IsMessage([]byte(l)), l)
	}
}

func TestANewlineInsideAMessageIsEscaped(t *testing.T) {
	var buf bytes.Buffer
	m, err := Request(json.RawMessage(`1`), MethodSessionPrompt, PromptRequest{SessionID: "s", Prompt: []ContentBlock{TextBlock("two\nlines")}})
	require.NoError(t, err)
	require.NoError(t, NewWriter(&buf).Write(m))
	assert.Equal(t, 1, strings.Count(buf.String(), "\n"))
}

func TestAnErrorResponseCarriesItsCodeAndData(t *testing.T) {
	m, err := Response(json.RawMessage(`3`), nil, &Error{Code: CodeAuthRequired, Message: "Authentication required", Data: json.RawMessage(`"sign in"`)})
	require.NoError(t, err)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"Authentication required","data":"sign in"}}`, string(b))
	var back Message
	require.NoError(t, json.Unmarshal(b, &back))
	var e error = back.Error
	assert.EqualError(t, e, `acp error -32000: Authentication required: "sign in"`)
	assert.True(t, errors.As(e, new(*Error)))
}

// The schema reads an optional field of the wrong type as its default: an
// agent that changes one field's shape costs that field, not the update.
func TestAnUpdateWithAFieldOfTheWrongTypeKeepsTheRest(t *testing.T) {
	raw := `{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","content":"not a list","title":"ls"}`
	var u SessionUpdate
	require.NoError(t, json.Unmarshal([]byte(raw), &u))
	require.NotNil(t, u.ToolCallUpdate)
	assert.Equal(t, "c1", u.ToolCallUpdate.ToolCallID)
	assert.Equal(t, ToolCompleted, u.ToolCallUpdate.Status)
	assert.Equal(t, "ls", u.ToolCallUpdate.Title)
	assert.Nil(t, u.ToolCallUpdate.Content)
	assert.JSONEq(t, raw, string(u.Raw))
}

func TestAnUpdateOfAnUnknownKindIsKeptWhole(t *testing.T) {
	raw := `{"sessionUpdate":"something_new","x":1}`
	var n SessionNotification
	require.NoError(t, json.Unmarshal([]byte(`{"sessionId":"s1","update":`+raw+`}`), &n))
	assert.Equal(t, UpdateKind("something_new"), n.Update.Kind)
	assert.Nil(t, n.Update.slot())
	b, err := json.Marshal(n.Update)
	require.NoError(t, err)
	assert.JSONEq(t, raw, string(b), "passed along as it came")

	var u SessionUpdate
	assert.Error(t, json.Unmarshal([]byte(`{"content":{}}`), &u), "an update with no kind is no update")
	_, err = json.Marshal(SessionUpdate{Kind: UpdatePlan})
	assert.Error(t, err, "a plan update with no plan is refused, not written empty")
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A chunk is written without encoding/json's second pass over its content,
// and exactly as encoding/json writes the struct: the same members, the
// same values, whatever the chunk holds.
func TestAChunkIsWrittenAsEncodingJSONWritesIt(t *testing.T) {
	id := "msg_1"
	prio := 0.5
	cases := []struct {
		name  string
		chunk ContentChunk
	}{
		{"plain text", ContentChunk{Content: TextBlock("a \"quoted\" <tag> & ünïcode\n")}},
		{"text with a message id and meta", ContentChunk{Content: TextBlock("x"), MessageID: &id, Meta: Meta(`{"card": {"seq": 3}}`)}},
		{"text with annotations", ContentChunk{Content: ContentBlock{Type: ContentText, Text: "y", Annotations: &Annotations{Audience: []string{"user"}, Priority: &prio}}}},
		{"an image", ContentChunk{Content: ImageBlock("image/png", []byte{1, 2, 3})}},
		{"a resource link", ContentChunk{Content: ContentBlock{Type: ContentResourceLink, Name: "f.go", URI: "file:///f.go"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.chunk
			got, err := json.Marshal(SessionUpdate{Kind: UpdateAgentMessageChunk, Chunk: &c})
			require.NoError(t, err)
			body, err := json.Marshal(c) // by reflection: the chunk has no MarshalJSON
			require.NoError(t, err)
			want := `{"sessionUpdate":"agent_message_chunk",` + string(body[1:])
			assert.JSONEq(t, want, string(got))
		})
	}
	_, err := json.Marshal(SessionUpdate{Kind: UpdateAgentMessageChunk, Chunk: &ContentChunk{Content: TextBlock("x"), Meta: Meta(`{"card":`)}})
	assert.Error(t, err, "a _meta that is not JSON is refused, as encoding/json refuses it")
	assert.Equal(t, 3, reflect.TypeFor[ContentChunk]().NumField(), "ContentChunk.marshal writes three members: a new field needs writing there too")
}
