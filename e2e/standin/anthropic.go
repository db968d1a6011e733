package standin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// DefaultAnthropicModel is the model the helpers ask for. Claude Code accepts
// any id; a real one keeps its pricing table (and total_cost_usd) meaningful.
const DefaultAnthropicModel = "claude-sonnet-4-5"

// NewAnthropic serves the Anthropic Messages API: POST /v1/messages (SSE when
// the request says stream:true, one JSON message otherwise) and
// POST /v1/messages/count_tokens. Claude Code also makes side calls through
// the same endpoint (titles, topic detection); they get the same answer,
// which is harmless, and they show up in Requests.
func NewAnthropic(t testing.TB, script Script) *Server {
	return start(t, Anthropic, DefaultAnthropicModel, script, serveAnthropic)
}

type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type anthropicBlock struct {
	Type    string          `json:"type"`
	IsError bool            `json:"is_error"`
	Content json.RawMessage `json:"content"`
}

// toolResults counts the tool results in the conversation and returns the
// last message's, if it ends with one, as the text the model was told.
func (r anthropicRequest) toolResults() (n int, last string, endsWithResult bool) {
	for i, m := range r.Messages {
		var blocks []anthropicBlock
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type != "tool_result" {
				continue
			}
			n++
			if i == len(r.Messages)-1 {
				endsWithResult = true
				last = fmt.Sprintf("is_error=%v content=%s", b.IsError, toolResultText(b.Content))
			}
		}
	}
	return n, last, endsWithResult
}

// toolResultText is a tool's result as text, whichever API carried it
// (Anthropic's tool_result content, OpenAI's function call output): a
// string, or the text of its blocks.
func toolResultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func (r anthropicRequest) offers(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// nextToolCall is the scripted tool call this model call gets, if any, with
// a tool_use id unique to its place in the script (Claude re-sends a
// request whose id repeats an earlier one).
func (s *Server) nextToolCall(req anthropicRequest) (ToolCall, string, bool) {
	n, _, _ := req.toolResults()
	if n >= len(s.script.ToolCalls) || !req.offers(s.script.ToolCalls[n].Name) {
		return ToolCall{}, "", false
	}
	return s.script.ToolCalls[n], fmt.Sprintf("toolu_standin%02d", n+1), true
}

func serveAnthropic(s *Server, w http.ResponseWriter, r *http.Request, body []byte) {
	w.Header().Set("Request-Id", "req_standin")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages/count_tokens"):
		in, _ := s.script.usage()
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": in})
		return
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages"):
	default:
		anthropicError(w, http.StatusNotFound, "not_found_error", "card stand-in does not serve "+r.Method+" "+r.URL.Path)
		return
	}
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "request body is not JSON: "+err.Error())
		return
	}
	if req.Model == "" {
		req.Model = s.Model
	}
	if s.failing(r) {
		kind, msg := anthropicErrorKind(s.script.Status)
		if s.script.Message != "" {
			msg = s.script.Message
		}
		if s.script.Status == http.StatusTooManyRequests {
			retryAfter(w, s.script.RetryAfter)
		}
		anthropicError(w, s.script.Status, kind, msg)
		return
	}
	in, out := s.script.usage()
	if call, id, ok := s.nextToolCall(req); ok {
		s.serveAnthropicToolCall(w, req, call, id)
		return
	}
	answer := s.script.answer()
	if _, last, ends := req.toolResults(); ends {
		answer += " | tool result was: " + last
	}
	script := s.script
	script.Answer = answer
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "msg_standin", "type": "message", "role": "assistant", "model": req.Model,
			"content":     []any{map[string]any{"type": "text", "text": answer}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out},
		})
		return
	}
	e := startSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_standin", "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": 1},
	}})
	index := 0
	if script.Thinking != "" {
		// A thinking block first, as a model with extended thinking
		// streams it: thinking pieces, then the block's signature.
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
		for _, piece := range strings.SplitAfter(script.Thinking, " ") {
			e.event("content_block_delta", blockDelta(index, thinkingDelta{"thinking_delta", piece}))
		}
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
			"delta": map[string]any{"type": "signature_delta", "signature": "c3RhbmRpbi1zaWduYXR1cmU="}})
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
		"content_block": map[string]any{"type": "text", "text": ""}})
	e.event("ping", map[string]any{"type": "ping"})
	s.stall(r)
	for i, d := range script.deltas() {
		s.pace(r, i, script)
		e.event("content_block_delta", blockDelta(index, textDelta{"text_delta", d}))
	}
	e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out}})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

func anthropicErrorKind(status int) (kind, msg string) {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error", "invalid x-api-key"
	case http.StatusForbidden:
		return "permission_error", "Your API key does not have permission to use the specified resource."
	case http.StatusTooManyRequests:
		return "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit (card stand-in)."
	case 529:
		return "overloaded_error", "Overloaded"
	case http.StatusBadRequest:
		return "invalid_request_error", "invalid request (card stand-in)"
	}
	return "api_error", statusText(status) + " (card stand-in)"
}

func anthropicError(w http.ResponseWriter, status int, kind, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": kind, "message": msg}})
}

// ClaudeEnv returns the environment for Claude Code to use this stand-in from
// an empty HOME: base URL and key, and the switches that stop it reaching the
// network for telemetry, updates and error reports (with no network those
// calls only add latency, and in CI they would leak the test run).
// CLAUDE_CODE_MAX_RETRIES=0 stops Claude's exponential retries (10 by default,
// minutes in total) so a scripted 429 or 5xx fails the run at once.
// The result is a complete environment: PATH is the caller's, nothing else leaks in.
func (s *Server) ClaudeEnv(home, path string) []string {
	return []string{
		"HOME=" + home,
		"PATH=" + path,
		"ANTHROPIC_BASE_URL=" + s.URL,
		"ANTHROPIC_API_KEY=" + APIKey,
		"ANTHROPIC_MODEL=" + s.Model,
		"CLAUDE_CODE_MAX_RETRIES=0",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"NO_COLOR=1",
	}
}

// contentBlockDelta, textDelta and thinkingDelta are the stream's deltas
// with their members in the order the Messages API writes them (Go maps
// would sort them): Claude Code prints each event again as it parsed it,
// so the stand-in's order is what card reads on a Claude Code line.
type contentBlockDelta struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
	Delta any    `json:"delta"`
}

type textDelta struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type thinkingDelta struct {
	Type     string `json:"type"`
	Thinking string `json:"thinking"`
}

func blockDelta(index int, delta any) contentBlockDelta {
	return contentBlockDelta{Type: "content_block_delta", Index: index, Delta: delta}
}

// serveAnthropicToolCall answers a model call with one tool_use block,
// streamed as the Messages API does: the input arrives as JSON deltas.
func (s *Server) serveAnthropicToolCall(w http.ResponseWriter, req anthropicRequest, call ToolCall, id string) {
	in, out := s.script.usage()
	input, err := json.Marshal(call.Input)
	if err != nil {
		anthropicError(w, http.StatusInternalServerError, "api_error", "card stand-in: tool input does not encode: "+err.Error())
		return
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "msg_standin", "type": "message", "role": "assistant", "model": req.Model,
			"content":     []any{map[string]any{"type": "tool_use", "id": id, "name": call.Name, "input": call.Input}},
			"stop_reason": "tool_use", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out},
		})
		return
	}
	e := startSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_standin", "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": 1},
	}})
	e.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "tool_use", "id": id, "name": call.Name, "input": map[string]any{}}})
	e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
	e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": "tool_use", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out}})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

// ToolResults returns, per model call that carried tool results, the text
// of its last one as the stand-in quoted it ("is_error=… content=…"), in
// arrival order: what the agent sent back after running, or being denied,
// each tool call.
func (s *Server) ToolResults() []string {
	var out []string
	for _, r := range s.ModelCalls() {
		var last string
		var ends bool
		switch s.Vendor {
		case Gemini:
			var req geminiRequest
			if r.JSON(&req) != nil {
				continue
			}
			_, last, ends = req.toolResults()
		case OpenAI:
			var req openAIRequest
			if r.JSON(&req) != nil {
				continue
			}
			_, last, ends = req.toolResults()
		default:
			var req anthropicRequest
			if r.JSON(&req) != nil {
				continue
			}
			_, last, ends = req.toolResults()
		}
		if ends {
			out = append(out, last)
		}
	}
	return out
}
