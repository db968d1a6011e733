package standin

import (
	"encoding/json"
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
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// hasToolResult reports whether the request carries a tool's result: the
// turn after a tool call.
func (r anthropicRequest) hasToolResult() bool {
	for _, m := range r.Messages {
		if strings.Contains(string(m.Content), `"tool_result"`) {
			return true
		}
	}
	return false
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
	if s.script.failing() {
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
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "msg_standin", "type": "message", "role": "assistant", "model": req.Model,
			"content":     []any{map[string]any{"type": "text", "text": s.script.answer()}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out},
		})
		return
	}
	e := startSSE(w)
	id := "msg_standin"
	toolTurn := s.script.ToolCall != nil && !req.hasToolResult()
	if s.script.ToolCall != nil && !toolTurn {
		id = "msg_standin_2"
	}
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": in, "output_tokens": 1},
	}})
	index := 0
	block := func(start map[string]any, deltas []map[string]any) {
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": start})
		for i, d := range deltas {
			if start["type"] == "text" {
				if i == 0 {
					e.event("ping", map[string]any{"type": "ping"})
					s.stall(r)
				}
				s.pace(r, i)
			}
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d})
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	if s.script.Thinking != "" {
		var deltas []map[string]any
		for _, piece := range strings.SplitAfter(s.script.Thinking, " ") {
			deltas = append(deltas, map[string]any{"type": "thinking_delta", "thinking": piece})
		}
		deltas = append(deltas, map[string]any{"type": "signature_delta", "signature": "c3RhbmRpbi1zaWduYXR1cmU="})
		block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, deltas)
	}
	stop := "end_turn"
	if toolTurn {
		tc := s.script.ToolCall
		input, _ := json.Marshal(tc.Input)
		half := len(input) / 2
		block(map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": map[string]any{}}, []map[string]any{
			{"type": "input_json_delta", "partial_json": string(input[:half])},
			{"type": "input_json_delta", "partial_json": string(input[half:])},
		})
		stop = "tool_use"
	} else {
		var deltas []map[string]any
		for _, d := range s.script.deltas() {
			deltas = append(deltas, map[string]any{"type": "text_delta", "text": d})
		}
		block(map[string]any{"type": "text", "text": ""}, deltas)
	}
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
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
