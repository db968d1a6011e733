package standin

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type sseEvent struct {
	Name string
	Data map[string]any
	Raw  string
}

func post(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Raw = strings.TrimPrefix(line, "data: ")
			if cur.Raw != "[DONE]" {
				require.NoError(t, json.Unmarshal([]byte(cur.Raw), &cur.Data), cur.Raw)
			}
		case line == "":
			if cur.Raw != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func names(evs []sseEvent) []string {
	var n []string
	for _, e := range evs {
		n = append(n, e.Name)
	}
	return n
}

func TestAnthropicStreamsTheAnswerAsTextDeltasBetweenMessageStartAndStop(t *testing.T) {
	s := NewAnthropic(t, Script{Answer: "hello there world", OutputTokens: 7})
	resp := post(t, s.URL+"/v1/messages?beta=true", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		map[string]string{"x-api-key": "secret-value"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	evs := readSSE(t, resp.Body)
	assert.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names(evs))
	var text string
	for _, e := range evs {
		if e.Name == "content_block_delta" {
			text += e.Data["delta"].(map[string]any)["text"].(string)
		}
	}
	assert.Equal(t, "hello there world", text)
	assert.EqualValues(t, 7, evs[7].Data["usage"].(map[string]any)["output_tokens"])
}

func TestAnthropicAnswersANonStreamingCallWithOneMessage(t *testing.T) {
	s := NewAnthropic(t, Script{Answer: "title"})
	resp := post(t, s.URL+"/v1/messages", `{"model":"m","messages":[]}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var m struct {
		Content []struct{ Text string } `json:"content"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	require.Len(t, m.Content, 1)
	assert.Equal(t, "title", m.Content[0].Text)
}

// Each vendor's SDK decides retry and error kind from the status, the body's
// error type and the retry headers; a stand-in that gets them wrong would test
// card against errors no real vendor sends.
func TestScriptedErrorsSpeakEachVendorsErrorShape(t *testing.T) {
	cases := []struct {
		name      string
		start     func(testing.TB, Script) *Server
		path      string
		status    int
		kindPath  []string
		wantKind  string
		wantRetry bool
	}{
		{"anthropic 401", NewAnthropic, "/v1/messages", 401, []string{"error", "type"}, "authentication_error", false},
		{"anthropic 429", NewAnthropic, "/v1/messages", 429, []string{"error", "type"}, "rate_limit_error", true},
		{"openai 401", NewOpenAI, "/v1/responses", 401, []string{"error", "code"}, "invalid_api_key", false},
		{"openai 429", NewOpenAI, "/v1/chat/completions", 429, []string{"error", "code"}, "rate_limit_exceeded", true},
		{"gemini 403", NewGemini, "/v1beta/models/g:streamGenerateContent", 403, []string{"error", "status"}, "PERMISSION_DENIED", false},
		{"gemini 429", NewGemini, "/v1beta/models/g:generateContent", 429, []string{"error", "status"}, "RESOURCE_EXHAUSTED", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t, Script{Status: tc.status, RetryAfter: 2 * time.Second})
			resp := post(t, s.URL+tc.path, `{"model":"m","stream":true}`, nil)
			assert.Equal(t, tc.status, resp.StatusCode)
			var body map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			var v any = body
			for _, k := range tc.kindPath {
				v = v.(map[string]any)[k]
			}
			assert.Equal(t, tc.wantKind, v)
			if tc.wantRetry {
				assert.Equal(t, "2", resp.Header.Get("Retry-After"))
				assert.Equal(t, "2000", resp.Header.Get("Retry-After-Ms"))
			} else {
				assert.Empty(t, resp.Header.Get("Retry-After"))
			}
			require.Len(t, s.ModelCalls(), 1)
			assert.Equal(t, tc.status, s.ModelCalls()[0].Status)
		})
	}
}

func TestOpenAIResponsesStreamEndsWithCompletedAndUsage(t *testing.T) {
	s := NewOpenAI(t, Script{Answer: "two words"})
	resp := post(t, s.URL+"/v1/responses", `{"model":"gpt-x","stream":true,"input":[]}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs := readSSE(t, resp.Body)
	n := names(evs)
	require.NotEmpty(t, n)
	assert.Equal(t, "response.created", n[0])
	assert.Equal(t, "response.completed", n[len(n)-1])
	assert.Contains(t, n, "response.output_item.added")
	assert.Contains(t, n, "response.output_item.done")
	var text string
	for i, e := range evs {
		assert.Equal(t, e.Name, e.Data["type"], "event name and payload type agree")
		assert.EqualValues(t, i, e.Data["sequence_number"])
		if e.Name == "response.output_text.delta" {
			text += e.Data["delta"].(string)
		}
	}
	assert.Equal(t, "two words", text)
	done := evs[len(evs)-1].Data["response"].(map[string]any)
	assert.Equal(t, "gpt-x", done["model"])
	assert.EqualValues(t, 15, done["usage"].(map[string]any)["total_tokens"])
}

func TestOpenAIChatCompletionsStreamEndsWithDone(t *testing.T) {
	s := NewOpenAI(t, Script{Answer: "chat answer"})
	resp := post(t, s.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs := readSSE(t, resp.Body)
	require.GreaterOrEqual(t, len(evs), 3)
	assert.Equal(t, "[DONE]", evs[len(evs)-1].Raw)
	var text string
	for _, e := range evs[:len(evs)-1] {
		ch := e.Data["choices"].([]any)[0].(map[string]any)
		if c, ok := ch["delta"].(map[string]any)["content"].(string); ok {
			text += c
		}
	}
	assert.Equal(t, "chat answer", text)
	last := evs[len(evs)-2].Data
	assert.Equal(t, "stop", last["choices"].([]any)[0].(map[string]any)["finish_reason"])
	assert.NotNil(t, last["usage"])
}

func TestGeminiStreamsChunksAndPutsUsageOnTheLast(t *testing.T) {
	s := NewGemini(t, Script{Answer: "gem answer"})
	resp := post(t, s.URL+"/v1beta/models/gemini-x:streamGenerateContent?alt=sse&key=secret-value", `{"contents":[]}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	evs := readSSE(t, resp.Body)
	require.Len(t, evs, 2)
	var text string
	for _, e := range evs {
		c := e.Data["candidates"].([]any)[0].(map[string]any)
		text += c["content"].(map[string]any)["parts"].([]any)[0].(map[string]any)["text"].(string)
	}
	assert.Equal(t, "gem answer", text)
	assert.Nil(t, evs[0].Data["usageMetadata"])
	assert.NotNil(t, evs[1].Data["usageMetadata"])
	assert.Equal(t, "STOP", evs[1].Data["candidates"].([]any)[0].(map[string]any)["finishReason"])
}

func TestRecordedRequestsKeepTheCredentialsNameButNeverItsValue(t *testing.T) {
	s := NewGemini(t, Script{})
	post(t, s.URL+"/v1beta/models/g:generateContent?key=secret-value", `{"contents":[{"parts":[{"text":"the prompt"}]}]}`,
		map[string]string{"x-goog-api-key": "secret-value", "Authorization": "Bearer secret-value"})
	reqs := s.Requests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	assert.Equal(t, Redacted, r.Header.Get("X-Goog-Api-Key"))
	assert.Equal(t, Redacted, r.Header.Get("Authorization"))
	assert.NotContains(t, r.Query, "secret-value")
	assert.Contains(t, string(r.Body), "the prompt", "bodies are kept so tests can find the prompt")
	var body map[string]any
	require.NoError(t, r.JSON(&body))
}

func TestUnknownEndpointsAreRecordedAndAnswered404(t *testing.T) {
	for _, start := range []func(testing.TB, Script) *Server{NewAnthropic, NewOpenAI, NewGemini} {
		s := start(t, Script{})
		resp := post(t, s.URL+"/v9/nothing", `{}`, nil)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, s.Vendor)
		require.Len(t, s.Requests(), 1)
		assert.Empty(t, s.ModelCalls())
	}
}

func TestHelpersPointEachCLIAtItsServer(t *testing.T) {
	a := NewAnthropic(t, Script{})
	env := a.ClaudeEnv("/h", "/bin")
	assert.Contains(t, env, "ANTHROPIC_BASE_URL="+a.URL)
	assert.Contains(t, env, "HOME=/h")
	assert.Contains(t, env, "CLAUDE_CODE_MAX_RETRIES=0")

	o := NewOpenAI(t, Script{})
	args, oenv := o.CodexExtras()
	joined := strings.Join(args, " ")
	assert.Contains(t, joined, `base_url="`+o.URL+`/v1"`)
	assert.Contains(t, joined, `wire_api="responses"`)
	assert.Contains(t, joined, "request_max_retries=0")
	assert.Contains(t, joined, `model_provider="`+CodexProvider+`"`)
	assert.Equal(t, APIKey, oenv[CodexKeyEnv])

	g := NewGemini(t, Script{})
	home := t.TempDir()
	genv, err := g.GeminiSetup(home, "/bin")
	require.NoError(t, err)
	assert.Contains(t, genv, "GOOGLE_GEMINI_BASE_URL="+g.URL)
	raw, err := os.ReadFile(filepath.Join(home, ".gemini", "settings.json"))
	require.NoError(t, err)
	var settings struct {
		Security struct {
			Auth struct{ SelectedType string } `json:"auth"`
		} `json:"security"`
		General struct{ MaxAttempts int } `json:"general"`
	}
	require.NoError(t, json.Unmarshal(raw, &settings))
	assert.Equal(t, "gemini-api-key", settings.Security.Auth.SelectedType)
	assert.Equal(t, 1, settings.General.MaxAttempts)
}

// A stalled stream must hold until the client gives up, and Close must still
// return: otherwise a deadline test would hang the suite instead of the CLI.
func TestAStalledStreamHoldsUntilTheClientLeavesAndCloseStillReturns(t *testing.T) {
	for _, tc := range []struct {
		start func(testing.TB, Script) *Server
		path  string
	}{
		{NewAnthropic, "/v1/messages"},
		{NewOpenAI, "/v1/responses"},
		{NewOpenAI, "/v1/chat/completions"},
		{NewGemini, "/v1beta/models/g:streamGenerateContent"},
	} {
		s := tc.start(t, Script{Stall: true, Answer: "never sent in full"})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+tc.path, strings.NewReader(`{"stream":true}`))
		require.NoError(t, err)
		begin := time.Now()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "headers and the first event arrive before the stall")
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		cancel()
		assert.Error(t, err, "%s %s: the body never ends on its own", s.Vendor, tc.path)
		assert.GreaterOrEqual(t, time.Since(begin), 250*time.Millisecond)

		// A second stalled request left open: Close must release it.
		started, finished := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(finished)
			resp, err := http.Post(s.URL+tc.path, "application/json", strings.NewReader(`{"stream":true}`))
			close(started)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}()
		<-started // headers are sent with the first event, before the stall
		closed := make(chan struct{})
		go func() { s.Close(); close(closed) }()
		select {
		case <-closed:
			<-finished
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Close hung on a stalled stream", s.Vendor)
		}
	}
}

// A slow model: each piece after the first waits DeltaDelay, in every
// dialect, so a test can tell text that streams from text that comes whole.
func TestASlowScriptPacesEveryPieceOfTheAnswer(t *testing.T) {
	const pause = 150 * time.Millisecond
	script := Script{Answer: "one two three", DeltaDelay: pause}
	cases := []struct {
		name, path, body string
		start            func(testing.TB, Script) *Server
	}{
		{"anthropic", "/v1/messages", `{"model":"m","stream":true,"messages":[]}`, NewAnthropic},
		{"openai responses", "/v1/responses", `{"model":"m","stream":true}`, NewOpenAI},
		{"openai chat", "/v1/chat/completions", `{"model":"m","stream":true}`, NewOpenAI},
		{"gemini", "/v1beta/models/m:streamGenerateContent", `{}`, NewGemini},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.start(t, script)
			start := time.Now()
			resp := post(t, s.URL+c.path, c.body, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			readSSE(t, resp.Body)
			assert.GreaterOrEqual(t, time.Since(start), 2*pause, "three pieces, two pauses")
		})
	}
}

// A call is on record from the moment it arrives: a test that waits for
// a turn's model call must not have to wait out its slow answer.
func TestACallIsRecordedWhileItsAnswerIsStillStreaming(t *testing.T) {
	s := NewAnthropic(t, Script{Answer: "one two", DeltaDelay: time.Minute})
	resp := post(t, s.URL+"/v1/messages", `{"model":"m","stream":true,"messages":[{"role":"user","content":"slow"}]}`, nil)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	calls := s.ModelCalls()
	require.Len(t, calls, 1, "the call is under way, its answer held a minute")
	assert.Contains(t, string(calls[0].Body), "slow")
	assert.Equal(t, http.StatusOK, calls[0].Status)
}

// A thinking model: the answer comes after a thinking block streamed as
// thinking pieces and a signature.
func TestAnthropicThinksBeforeItAnswers(t *testing.T) {
	s := NewAnthropic(t, Script{Answer: "done", Thinking: "let me look"})
	resp := post(t, s.URL+"/v1/messages", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	var thinking, text string
	var blocks []string
	for _, e := range readSSE(t, resp.Body) {
		switch e.Name {
		case "content_block_start":
			blocks = append(blocks, e.Data["content_block"].(map[string]any)["type"].(string))
		case "content_block_delta":
			d := e.Data["delta"].(map[string]any)
			switch d["type"] {
			case "thinking_delta":
				thinking += d["thinking"].(string)
			case "text_delta":
				text += d["text"].(string)
			}
		}
	}
	assert.Equal(t, []string{"thinking", "text"}, blocks)
	assert.Equal(t, "let me look", thinking)
	assert.Equal(t, "done", text)
}

// The retrying helpers leave the CLI's own retry settings out, so a test
// sees the retries a user's CLI makes.
func TestTheRetryingHelpersLeaveTheCLIsOwnRetriesAlone(t *testing.T) {
	o := NewOpenAI(t, Script{})
	args, _ := o.CodexExtras()
	assert.Contains(t, strings.Join(args, " "), "request_max_retries=0")
	args, _ = o.CodexExtrasRetrying()
	assert.NotContains(t, strings.Join(args, " "), "max_retries")
	assert.Contains(t, strings.Join(args, " "), "base_url=\""+o.URL+"/v1\"")

	g := NewGemini(t, Script{})
	home := t.TempDir()
	_, err := g.GeminiSetupRetrying(home, "/usr/bin")
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(home, ".gemini", "settings.json"))
	require.NoError(t, err)
	var settings map[string]map[string]any
	require.NoError(t, json.Unmarshal(b, &settings))
	assert.NotContains(t, settings["general"], "maxAttempts")
	assert.Equal(t, "gemini-api-key", settings["security"]["auth"].(map[string]any)["selectedType"])
}

// A scripted tool call is made once per place in the script, to a call that
// offers the tool, and the text answer after it quotes the tool result.
func TestAnthropicMakesTheScriptedToolCallsThenQuotesTheLastResult(t *testing.T) {
	s := NewAnthropic(t, Script{Answer: "DONE", ToolCalls: []ToolCall{{Name: "Bash", Input: map[string]any{"command": "echo hi > f.txt"}}}})
	offer := `"tools":[{"name":"Bash"},{"name":"Read"}]`
	first := post(t, s.URL+"/v1/messages", `{"model":"m","stream":true,`+offer+`,"messages":[{"role":"user","content":"go"}]}`, nil)
	evs := readSSE(t, first.Body)
	require.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names(evs))
	block := evs[1].Data["content_block"].(map[string]any)
	assert.Equal(t, "tool_use", block["type"])
	assert.Equal(t, "Bash", block["name"])
	assert.Equal(t, "toolu_standin01", block["id"])
	assert.JSONEq(t, `{"command":"echo hi > f.txt"}`, evs[2].Data["delta"].(map[string]any)["partial_json"].(string))
	assert.Equal(t, "tool_use", evs[4].Data["delta"].(map[string]any)["stop_reason"])

	side := post(t, s.URL+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"title?"}]}`, nil)
	var msg map[string]any
	require.NoError(t, json.NewDecoder(side.Body).Decode(&msg))
	assert.Equal(t, "text", msg["content"].([]any)[0].(map[string]any)["type"], "a call that offers no tools gets text")

	second := post(t, s.URL+"/v1/messages", `{"model":"m","stream":true,`+offer+`,"messages":[{"role":"user","content":"go"},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_standin01","name":"Bash","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_standin01","content":"denied by you","is_error":true}]}]}`, nil)
	var text strings.Builder
	for _, e := range readSSE(t, second.Body) {
		if d, ok := e.Data["delta"].(map[string]any); ok && d["type"] == "text_delta" {
			text.WriteString(d["text"].(string))
		}
	}
	assert.Equal(t, "DONE | tool result was: is_error=true content=denied by you", text.String())
	assert.Equal(t, []string{"is_error=true content=denied by you"}, s.ToolResults())
}

func TestGeminiMakesTheScriptedToolCallsThenQuotesTheLastFunctionResponse(t *testing.T) {
	s := NewGemini(t, Script{Answer: "DONE", ToolCalls: []ToolCall{{Name: "run_shell_command", Input: map[string]any{"command": "echo hi > f.txt"}}}})
	offer := `"tools":[{"functionDeclarations":[{"name":"read_file"},{"name":"run_shell_command"}]}]`
	url := s.URL + "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
	evs := readSSE(t, post(t, url, `{`+offer+`,"contents":[{"role":"user","parts":[{"text":"go"}]}]}`, nil).Body)
	require.Len(t, evs, 1, "a tool call arrives whole, in one chunk")
	part := evs[0].Data["candidates"].([]any)[0].(map[string]any)["content"].(map[string]any)["parts"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"name": "run_shell_command", "args": map[string]any{"command": "echo hi > f.txt"}}, part["functionCall"])

	side := readSSE(t, post(t, url, `{"contents":[{"role":"user","parts":[{"text":"route?"}]}]}`, nil).Body)
	assert.NotNil(t, side[0].Data["candidates"].([]any)[0].(map[string]any)["content"].(map[string]any)["parts"].([]any)[0].(map[string]any)["text"],
		"a call that offers no tools gets text")

	for _, c := range []struct{ response, want string }{
		{`{"error":"Tool \"run_shell_command\" was canceled by the user."}`, `is_error=true content=Tool "run_shell_command" was canceled by the user.`},
		{`{"output":"Output: (empty)"}`, `is_error=false content=Output: (empty)`},
	} {
		body := `{` + offer + `,"contents":[{"role":"user","parts":[{"text":"go"}]},` +
			`{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{}}}]},` +
			`{"role":"user","parts":[{"functionResponse":{"name":"run_shell_command","response":` + c.response + `}}]}]}`
		var text strings.Builder
		for _, e := range readSSE(t, post(t, url, body, nil).Body) {
			text.WriteString(e.Data["candidates"].([]any)[0].(map[string]any)["content"].(map[string]any)["parts"].([]any)[0].(map[string]any)["text"].(string))
		}
		assert.Equal(t, "DONE | tool result was: "+c.want, text.String())
	}
	assert.Equal(t, []string{`is_error=true content=Tool "run_shell_command" was canceled by the user.`, `is_error=false content=Output: (empty)`}, s.ToolResults())
}

// The image finder knows each dialect's image part, and nothing else is an
// image: a text block that merely says "image" is not one.
func TestImagesAreFoundInEachVendorsRequestShape(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nbody")
	b64 := base64.StdEncoding.EncodeToString(png)
	bodies := map[string]string{
		"anthropic_image": `{"messages":[{"role":"user","content":[{"type":"text","text":"an image"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}]}]}`,
		"input_image":     `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,` + b64 + `","detail":"high"}]}]}`,
		"image_url":       `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}]}]}`,
		"inline_data":     `{"contents":[{"role":"user","parts":[{"text":"x"},{"inlineData":{"mimeType":"image/png","data":"` + b64 + `"}}]}]}`,
	}
	for form, body := range bodies {
		var v any
		require.NoError(t, json.Unmarshal([]byte(body), &v), form)
		var got []Image
		walkImages(v, func(f, mime string, data []byte) { got = append(got, Image{Form: f, MIME: mime, Data: data}) })
		require.Len(t, got, 1, form)
		assert.Equal(t, Image{Form: form, MIME: "image/png", Data: png}, got[0])
	}
	var v any
	require.NoError(t, json.Unmarshal([]byte(`{"messages":[{"content":[{"type":"text","text":"image"},{"type":"image_url"}]}]}`), &v))
	walkImages(v, func(string, string, []byte) { t.Error("no image here") })
}

func TestOpenAIResponsesMakesTheScriptedToolCallsThenQuotesTheLastOutput(t *testing.T) {
	s := NewOpenAI(t, Script{Answer: "DONE", ToolCalls: []ToolCall{{Name: "exec_command", Input: map[string]any{"cmd": "echo hi > f.txt"}}}})
	offer := `"tools":[{"type":"function","name":"exec_command"},{"type":"function","name":"view_image"}]`
	evs := readSSE(t, post(t, s.URL+"/v1/responses", `{"model":"m","stream":true,`+offer+`,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}]}`, nil).Body)
	require.Equal(t, []string{"response.created", "response.output_item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}, names(evs))
	item := evs[4].Data["item"].(map[string]any)
	assert.Equal(t, "function_call", item["type"])
	assert.Equal(t, "exec_command", item["name"])
	assert.Equal(t, "call_standin01", item["call_id"])
	assert.JSONEq(t, `{"cmd":"echo hi > f.txt"}`, item["arguments"].(string))

	side := readSSE(t, post(t, s.URL+"/v1/responses", `{"model":"m","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"title?"}]}]}`, nil).Body)
	assert.Contains(t, names(side), "response.output_text.delta", "a call that offers no tools gets text")

	second := readSSE(t, post(t, s.URL+"/v1/responses", `{"model":"m","stream":true,`+offer+`,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]},`+
		`{"type":"function_call","call_id":"call_standin01","name":"exec_command","arguments":"{}"},`+
		`{"type":"function_call_output","call_id":"call_standin01","output":"rejected by user"}]}`, nil).Body)
	var text strings.Builder
	for _, e := range second {
		if e.Name == "response.output_text.delta" {
			text.WriteString(e.Data["delta"].(string))
		}
	}
	assert.Equal(t, "DONE | tool result was: content=rejected by user", text.String())
	assert.Equal(t, []string{"content=rejected by user"}, s.ToolResults())
}

// FailFirst refuses only the first model calls, in each dialect, and
// Headers go out with every model call's answer, refused or not; side
// calls (token counting) neither count nor carry them.
func TestFailFirstRefusesOnlyTheFirstModelCallsAndHeadersGoWithEveryAnswer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB, Script) *Server
		path  string
		side  string
	}{
		{"anthropic", NewAnthropic, "/v1/messages", "/v1/messages/count_tokens"},
		{"openai", NewOpenAI, "/v1/responses", ""},
		{"gemini", NewGemini, "/v1beta/models/g:generateContent", "/v1beta/models/g:countTokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("x-codex-primary-used-percent", "42")
			s := tc.start(t, Script{Status: 529, FailFirst: 2, Headers: h})
			if tc.side != "" {
				side := post(t, s.URL+tc.side, `{"model":"m"}`, nil)
				assert.Equal(t, http.StatusOK, side.StatusCode, "a side call is no model call")
				assert.Empty(t, side.Header.Get("X-Codex-Primary-Used-Percent"))
			}
			var got []int
			for range 4 {
				resp := post(t, s.URL+tc.path, `{"model":"m","stream":false}`, nil)
				got = append(got, resp.StatusCode)
				assert.Equal(t, "42", resp.Header.Get("X-Codex-Primary-Used-Percent"))
			}
			assert.Equal(t, []int{529, 529, 200, 200}, got)
		})
	}
}

// Chat Completions, which OpenCode's and Qwen Code's OpenAI-compatible
// providers speak, gets the scripted tool calls as the Responses API does:
// streamed as id and name, then arguments, with finish_reason tool_calls.
func TestOpenAIChatCompletionsMakesTheScriptedToolCallsThenQuotesTheLastToolMessage(t *testing.T) {
	s := NewOpenAI(t, Script{Answer: "DONE", ToolCalls: []ToolCall{{Name: "bash", Input: map[string]any{"command": "echo hi > f.txt"}}}})
	offer := `"tools":[{"type":"function","function":{"name":"read"}},{"type":"function","function":{"name":"bash"}}]`
	evs := readSSE(t, post(t, s.URL+"/v1/chat/completions", `{"model":"m","stream":true,`+offer+`,"messages":[{"role":"user","content":"go"}]}`, nil).Body)
	require.Len(t, evs, 4)
	assert.Equal(t, "[DONE]", evs[3].Raw)
	first := evs[0].Data["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	assert.Equal(t, "call_standin01", first["id"])
	assert.Equal(t, "bash", first["function"].(map[string]any)["name"])
	args := evs[1].Data["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"]
	assert.JSONEq(t, `{"command":"echo hi > f.txt"}`, args.(string))
	assert.Equal(t, "tool_calls", evs[2].Data["choices"].([]any)[0].(map[string]any)["finish_reason"])

	side := readSSE(t, post(t, s.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"title?"}]}`, nil).Body)
	assert.Contains(t, side[1].Data["choices"].([]any)[0].(map[string]any)["delta"], "content", "a call that offers no tools gets text")

	resp := post(t, s.URL+"/v1/chat/completions", `{"model":"m",`+offer+`,"messages":[{"role":"user","content":"go"},`+
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_standin01","type":"function","function":{"name":"bash","arguments":"{}"}}]},`+
		`{"role":"tool","tool_call_id":"call_standin01","content":"The user rejected permission to use this specific tool call."}]}`, nil)
	var done struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&done))
	assert.Equal(t, "stop", done.Choices[0].FinishReason)
	assert.Equal(t, "DONE | tool result was: content=The user rejected permission to use this specific tool call.", done.Choices[0].Message.Content)
	assert.Equal(t, []string{"content=The user rejected permission to use this specific tool call."}, s.ToolResults())
}

// OpenCode's whole setup travels in its environment: the config names the
// stand-in as the default provider, with a price and a context limit (its
// usage_update needs both), and extra config lands at the top level.
// Qwen Code's is the three OPENAI_ variables and its settings file.
func TestOpenCodeAndQwenCodeHelpersPointEachAtTheOpenAIServer(t *testing.T) {
	o := NewOpenAI(t, Script{})
	env, err := o.OpenCodeEnv("/h", "/bin", map[string]any{"permission": map[string]any{"bash": "ask"}})
	require.NoError(t, err)
	assert.Contains(t, env, "HOME=/h")
	assert.Contains(t, env, "OPENCODE_SERVER_PASSWORD="+OpenCodePassword)
	assert.Contains(t, env, "OPENCODE_DISABLE_MODELS_FETCH=1")
	var cfg struct {
		Provider map[string]struct {
			NPM     string `json:"npm"`
			Options struct{ BaseURL, APIKey string }
			Models  map[string]struct {
				Limit struct{ Context int }
				Cost  struct{ Input, Output float64 }
			}
		}
		Model      string
		Permission map[string]string
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "OPENCODE_CONFIG_CONTENT="); ok {
			require.NoError(t, json.Unmarshal([]byte(v), &cfg))
		}
	}
	p := cfg.Provider[OpenCodeProvider]
	assert.Equal(t, "@ai-sdk/openai-compatible", p.NPM)
	assert.Equal(t, o.URL+"/v1", p.Options.BaseURL)
	assert.Equal(t, APIKey, p.Options.APIKey)
	assert.Equal(t, 200000, p.Models[PlainModel].Limit.Context)
	assert.Positive(t, p.Models[PlainModel].Cost.Output)
	assert.Equal(t, OpenCodeProvider+"/"+PlainModel, cfg.Model)
	assert.Equal(t, map[string]string{"bash": "ask"}, cfg.Permission)

	home := t.TempDir()
	qenv, err := o.QwenSetup(home, "/bin")
	require.NoError(t, err)
	assert.Contains(t, qenv, "OPENAI_BASE_URL="+o.URL+"/v1")
	assert.Contains(t, qenv, "OPENAI_MODEL="+PlainModel)
	raw, err := os.ReadFile(filepath.Join(home, ".qwen", "settings.json"))
	require.NoError(t, err)
	var settings struct {
		Memory struct{ EnableManagedAutoMemory *bool }
	}
	require.NoError(t, json.Unmarshal(raw, &settings))
	require.NotNil(t, settings.Memory.EnableManagedAutoMemory)
	assert.False(t, *settings.Memory.EnableManagedAutoMemory)

	_, err = NewAnthropic(t, Script{}).OpenCodeEnv("/h", "/bin", nil)
	assert.ErrorContains(t, err, "use NewOpenAI")
}
