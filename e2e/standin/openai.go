package standin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// DefaultOpenAIModel is the model the helpers ask for. Codex 0.171 has no
// offline metadata for it and says so in an item of type "error" before the
// turn ("Model metadata for `gpt-5` not found"), then carries on: parsers
// must not treat that item as a failed run.
const DefaultOpenAIModel = "gpt-5"

// CodexProvider is the provider name CodexExtras registers.
const CodexProvider = "cardstandin"

// CodexKeyEnv is the env var Codex is told to read the stand-in's key from.
const CodexKeyEnv = "CARD_STANDIN_OPENAI_KEY"

// NewOpenAI serves the OpenAI Responses API (POST /v1/responses, SSE, what
// Codex speaks) and Chat Completions (POST /v1/chat/completions, streamed or
// not, what OpenAI-compatible providers of Copilot, Pi, OpenCode and Qwen
// Code speak), plus GET /v1/models.
func NewOpenAI(t testing.TB, script Script) *Server {
	return start(t, OpenAI, DefaultOpenAIModel, script, serveOpenAI)
}

type openAIRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	// Input is a Responses request's input items (a list; a plain
	// string input decodes as none).
	Input json.RawMessage `json:"input"`
	// Messages is a Chat Completions request's conversation.
	Messages []chatMessage `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
		// Function is where a Chat Completions tool names itself.
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// chatMessage is one message of a Chat Completions conversation; a tool's
// result is a message of role "tool".
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// responsesItem is one input item of a Responses request.
type responsesItem struct {
	Type   string          `json:"type"`
	Output json.RawMessage `json:"output"`
}

// toolResults counts the function call outputs in a Responses request (or
// the tool messages of a Chat Completions one) and returns the last input
// item's, if the input ends with one, as the text the model was told.
// Neither API has an error flag on a result: the quote is
// "content=<output>".
func (r openAIRequest) toolResults() (n int, last string, endsWithResult bool) {
	if len(r.Messages) > 0 {
		return r.chatToolResults()
	}
	var items []responsesItem
	if json.Unmarshal(r.Input, &items) != nil {
		return 0, "", false
	}
	for i, it := range items {
		if !strings.HasSuffix(it.Type, "_call_output") {
			continue
		}
		n++
		if i == len(items)-1 {
			endsWithResult = true
			last = "content=" + toolResultText(it.Output)
		}
	}
	return n, last, endsWithResult
}

// chatToolResults is toolResults for a Chat Completions conversation.
func (r openAIRequest) chatToolResults() (n int, last string, endsWithResult bool) {
	for i, m := range r.Messages {
		if m.Role != "tool" {
			continue
		}
		n++
		if i == len(r.Messages)-1 {
			endsWithResult = true
			last = "content=" + toolResultText(m.Content)
		}
	}
	return n, last, endsWithResult
}

func (r openAIRequest) offers(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name || t.Function.Name == name {
			return true
		}
	}
	return false
}

func serveOpenAI(s *Server, w http.ResponseWriter, r *http.Request, body []byte) {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(p, "/models"):
		// Codex asks its provider for a model catalogue; an empty one makes it
		// fall back to built-in metadata, which is all a stand-in needs.
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{
			map[string]any{"id": s.Model, "object": "model", "owned_by": "card-standin"}}, "models": []any{}})
		return
	case r.Method == http.MethodPost && (strings.HasSuffix(p, "/responses") || strings.HasSuffix(p, "/chat/completions")):
	default:
		openAIError(w, http.StatusNotFound, "invalid_request_error", "not_found", "card stand-in does not serve "+r.Method+" "+p)
		return
	}
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "request body is not JSON: "+err.Error())
		return
	}
	if req.Model == "" {
		req.Model = s.Model
	}
	if s.failing(r) {
		typ, code, msg := openAIErrorKind(s.script.Status)
		if s.script.Message != "" {
			msg = s.script.Message
		}
		if s.script.Status == http.StatusTooManyRequests {
			retryAfter(w, s.script.RetryAfter)
		}
		openAIError(w, s.script.Status, typ, code, msg)
		return
	}
	if strings.HasSuffix(p, "/responses") {
		// As the Anthropic stand-in: the k-th scripted tool call to a
		// request holding k outputs that offers its tool, then text that
		// quotes the last output.
		n, last, ends := req.toolResults()
		if n < len(s.script.ToolCalls) && req.offers(s.script.ToolCalls[n].Name) {
			s.responsesToolCall(w, req, s.script.ToolCalls[n], fmt.Sprintf("call_standin%02d", n+1))
			return
		}
		answer := s.script.answer()
		if ends {
			answer += " | tool result was: " + last
		}
		s.responses(w, r, req, answer)
		return
	}
	s.chatCompletions(w, r, req)
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request, req openAIRequest, answer string) {
	script := s.script
	script.Answer = answer
	in, out := s.script.usage()
	created := time.Now().Unix()
	resp := func(status string, output []any, usage any) map[string]any {
		return map[string]any{"id": "resp_standin", "object": "response", "created_at": created,
			"status": status, "model": req.Model, "output": output, "usage": usage}
	}
	msg := func(status string, content []any) map[string]any {
		return map[string]any{"id": "msg_standin", "type": "message", "status": status, "role": "assistant", "content": content}
	}
	text := map[string]any{"type": "output_text", "text": script.answer(), "annotations": []any{}}
	usage := map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": in + out}

	if !req.Stream {
		writeJSON(w, http.StatusOK, resp("completed", []any{msg("completed", []any{text})}, usage))
		return
	}
	e := startSSE(w)
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		e.event(typ, fields)
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []any{}, nil)})
	ev("response.in_progress", map[string]any{"response": resp("in_progress", []any{}, nil)})
	s.stall(r)
	ev("response.output_item.added", map[string]any{"output_index": 0, "item": msg("in_progress", []any{})})
	ev("response.content_part.added", map[string]any{"item_id": "msg_standin", "output_index": 0, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	for i, d := range script.deltas() {
		s.pace(r, i, script)
		ev("response.output_text.delta", map[string]any{"item_id": "msg_standin", "output_index": 0, "content_index": 0, "delta": d})
	}
	ev("response.output_text.done", map[string]any{"item_id": "msg_standin", "output_index": 0, "content_index": 0, "text": script.answer()})
	ev("response.content_part.done", map[string]any{"item_id": "msg_standin", "output_index": 0, "content_index": 0, "part": text})
	ev("response.output_item.done", map[string]any{"output_index": 0, "item": msg("completed", []any{text})})
	ev("response.completed", map[string]any{"response": resp("completed", []any{msg("completed", []any{text})}, usage)})
}

// responsesToolCall answers a Responses call with one function call,
// streamed as the API does: the arguments arrive as deltas.
func (s *Server) responsesToolCall(w http.ResponseWriter, req openAIRequest, call ToolCall, callID string) {
	in, out := s.script.usage()
	args, err := json.Marshal(call.Input)
	if err != nil {
		openAIError(w, http.StatusInternalServerError, "server_error", "server_error", "card stand-in: tool input does not encode: "+err.Error())
		return
	}
	fcID := "fc_" + strings.TrimPrefix(callID, "call_")
	item := func(status, arguments string) map[string]any {
		return map[string]any{"type": "function_call", "id": fcID, "call_id": callID, "name": call.Name, "arguments": arguments, "status": status}
	}
	usage := map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": in + out}
	resp := func(status string, output []any, usage any) map[string]any {
		return map[string]any{"id": "resp_standin", "object": "response", "created_at": time.Now().Unix(),
			"status": status, "model": req.Model, "output": output, "usage": usage}
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, resp("completed", []any{item("completed", string(args))}, usage))
		return
	}
	e := startSSE(w)
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		e.event(typ, fields)
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []any{}, nil)})
	ev("response.output_item.added", map[string]any{"output_index": 0, "item": item("in_progress", "")})
	ev("response.function_call_arguments.delta", map[string]any{"item_id": fcID, "output_index": 0, "delta": string(args)})
	ev("response.function_call_arguments.done", map[string]any{"item_id": fcID, "output_index": 0, "arguments": string(args)})
	ev("response.output_item.done", map[string]any{"output_index": 0, "item": item("completed", string(args))})
	ev("response.completed", map[string]any{"response": resp("completed", []any{item("completed", string(args))}, usage)})
}

// chatCompletions answers a Chat Completions call as the Responses one is
// answered: the k-th scripted tool call to a request holding k tool results
// that offers its tool, else text that quotes the last result.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, req openAIRequest) {
	n, last, ends := req.toolResults()
	if n < len(s.script.ToolCalls) && req.offers(s.script.ToolCalls[n].Name) {
		s.chatToolCall(w, req, s.script.ToolCalls[n], fmt.Sprintf("call_standin%02d", n+1))
		return
	}
	script := s.script
	script.Answer = script.answer()
	if ends {
		script.Answer += " | tool result was: " + last
	}
	in, out := script.usage()
	created := time.Now().Unix()
	usage := map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": "chatcmpl-standin", "object": "chat.completion", "created": created,
			"model": req.Model, "choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": script.answer()}}}, "usage": usage})
		return
	}
	e := startSSE(w)
	chunk := func(delta map[string]any, finish any, u any) map[string]any {
		c := map[string]any{"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if u != nil {
			c["usage"] = u
		}
		return c
	}
	e.event("", chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil))
	s.stall(r)
	for i, d := range script.deltas() {
		s.pace(r, i, script)
		e.event("", chunk(map[string]any{"content": d}, nil, nil))
	}
	e.event("", chunk(map[string]any{}, "stop", usage))
	e.raw("data: [DONE]\n\n")
}

// chatToolCall answers a Chat Completions call with one tool call, streamed
// as the API does: the call's id and name first, then its arguments.
func (s *Server) chatToolCall(w http.ResponseWriter, req openAIRequest, call ToolCall, callID string) {
	in, out := s.script.usage()
	args, err := json.Marshal(call.Input)
	if err != nil {
		openAIError(w, http.StatusInternalServerError, "server_error", "server_error", "card stand-in: tool input does not encode: "+err.Error())
		return
	}
	created := time.Now().Unix()
	usage := map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	fn := func(arguments string) map[string]any {
		return map[string]any{"index": 0, "id": callID, "type": "function", "function": map[string]any{"name": call.Name, "arguments": arguments}}
	}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": "chatcmpl-standin", "object": "chat.completion", "created": created,
			"model": req.Model, "choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls",
				"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{fn(string(args))}}}}, "usage": usage})
		return
	}
	e := startSSE(w)
	chunk := func(delta map[string]any, finish any, u any) map[string]any {
		c := map[string]any{"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if u != nil {
			c["usage"] = u
		}
		return c
	}
	e.event("", chunk(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{fn("")}}, nil, nil))
	e.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": string(args)}}}}, nil, nil))
	e.event("", chunk(map[string]any{}, "tool_calls", usage))
	e.raw("data: [DONE]\n\n")
}

func openAIErrorKind(status int) (typ, code, msg string) {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key", "Incorrect API key provided (card stand-in)."
	case http.StatusForbidden:
		return "invalid_request_error", "unsupported_country_region_territory", "Forbidden (card stand-in)."
	case http.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded", "Rate limit reached for requests (card stand-in)."
	}
	return "server_error", "server_error", statusText(status) + " (card stand-in)"
}

func openAIError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

// CodexExtras returns the `-c` overrides that point Codex at this stand-in as
// a custom provider, and the env that carries its key. The retry knobs are
// the provider's own: Codex retries a failed request 4 times and a dropped
// stream 5 times by default, with backoff, which turns a scripted 429 into a
// minute-long test; here each is 0 so an error surfaces on the first attempt.
func (s *Server) CodexExtras() (args []string, env map[string]string) {
	return s.codexExtras(", request_max_retries=0, stream_max_retries=0")
}

// CodexExtrasRetrying is CodexExtras with Codex's own retry defaults left
// alone (4 request retries, 5 stream retries, each announced as
// "Reconnecting... n/5"), as they are for the built-in OpenAI provider,
// which no setting can change: what bounds them is card.
func (s *Server) CodexExtrasRetrying() (args []string, env map[string]string) {
	return s.codexExtras("")
}

func (s *Server) codexExtras(retries string) (args []string, env map[string]string) {
	provider := `{name="card stand-in", base_url="` + s.URL + `/v1", env_key="` + CodexKeyEnv +
		`", wire_api="responses"` + retries + `, stream_idle_timeout_ms=30000}`
	return []string{
		"-c", "model_providers." + CodexProvider + "=" + provider,
		"-c", `model_provider="` + CodexProvider + `"`,
		"-c", `model="` + s.Model + `"`,
	}, map[string]string{CodexKeyEnv: APIKey}
}
