package standin

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUserMessagesCountsWhatAPersonWroteNotToolResults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vendor Vendor
		body   string
		want   int
	}{
		{"anthropic first turn", Anthropic, `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, 1},
		{"anthropic second turn", Anthropic, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":[{"type":"tool_result","content":"x"}]},{"role":"user","content":[{"type":"text","text":"again"}]}]}`, 2},
		{"chat completions", OpenAI, `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, 2},
		{"responses", OpenAI, `{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>x</environment_context>"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call_output","output":"x"}]}`, 1},
		{"gemini", Gemini, `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b"}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]},{"role":"user","parts":[{"text":"c"}]}]}`, 2},
		{"not json", Anthropic, `nope`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, UserMessages(tc.vendor, []byte(tc.body)))
		})
	}
}

func TestAStandInAnswersWithTheUserMessagesItWasSent(t *testing.T) {
	s := NewAnthropic(t, Script{AnswerUserMessages: true})
	body := `{"model":"m","stream":false,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`
	resp, err := http.Post(s.URL+"/v1/messages", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(got), "user messages: 2")
}
