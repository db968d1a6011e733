package standin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DefaultGeminiModel is the model the helpers ask for with -m.
const DefaultGeminiModel = "gemini-2.5-flash"

// NewGemini serves the Generative Language API v1beta as Gemini CLI uses it
// with an API key: POST /v1beta/models/<model>:streamGenerateContent?alt=sse,
// :generateContent (the CLI's side calls, e.g. its model router and next-speaker
// check) and :countTokens.
func NewGemini(t testing.TB, script Script) *Server {
	return start(t, Gemini, DefaultGeminiModel, script, serveGemini)
}

func serveGemini(s *Server, w http.ResponseWriter, r *http.Request, body []byte) {
	p := r.URL.Path
	model, method, ok := strings.Cut(strings.TrimPrefix(p, "/v1beta/models/"), ":")
	if r.Method != http.MethodPost || !strings.HasPrefix(p, "/v1beta/models/") || !ok {
		geminiError(w, http.StatusNotFound, "NOT_FOUND", "card stand-in does not serve "+r.Method+" "+p, 0)
		return
	}
	if method == "countTokens" {
		in, _ := s.script.usage()
		writeJSON(w, http.StatusOK, map[string]any{"totalTokens": in})
		return
	}
	if method != "streamGenerateContent" && method != "generateContent" {
		geminiError(w, http.StatusNotFound, "NOT_FOUND", "card stand-in does not serve method "+method, 0)
		return
	}
	var req geminiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		geminiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "request body is not JSON", 0)
		return
	}
	if s.failing(r) {
		st, msg := geminiErrorKind(s.script.Status)
		if s.script.Message != "" {
			msg = s.script.Message
		}
		if s.script.Status == http.StatusTooManyRequests {
			retryAfter(w, s.script.RetryAfter)
		}
		geminiError(w, s.script.Status, st, msg, s.script.RetryAfter.Seconds())
		return
	}
	in, out := s.script.usage()
	part := func(text string) map[string]any { return map[string]any{"text": text} }
	candidate := func(p map[string]any, final bool) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": []any{p}}, "index": 0}
		if final {
			c["finishReason"] = "STOP"
		}
		return c
	}
	usage := map[string]any{"promptTokenCount": in, "candidatesTokenCount": out, "totalTokenCount": in + out}
	script := s.script
	if _, last, ends := req.toolResults(); ends {
		script.Answer = script.answer() + " | tool result was: " + last
	}
	call, hasCall := s.nextGeminiToolCall(req)
	if method == "generateContent" {
		p := part(script.answer())
		if hasCall {
			p = map[string]any{"functionCall": map[string]any{"name": call.Name, "args": call.Input}}
		}
		writeJSON(w, http.StatusOK, map[string]any{"candidates": []any{candidate(p, true)},
			"usageMetadata": usage, "modelVersion": model, "responseId": "standin"})
		return
	}
	// streamGenerateContent answers a JSON array unless alt=sse; the CLI
	// always asks for SSE, so only that framing is served.
	e := startSSE(w)
	if hasCall {
		// A tool call arrives whole, in one chunk, as the API sends it.
		e.event("", map[string]any{"candidates": []any{candidate(map[string]any{"functionCall": map[string]any{"name": call.Name, "args": call.Input}}, true)},
			"usageMetadata": usage, "modelVersion": model, "responseId": "standin"})
		return
	}
	parts := script.deltas()
	for i, d := range parts {
		s.pace(r, i, script)
		chunk := map[string]any{"candidates": []any{candidate(part(d), i == len(parts)-1)}, "modelVersion": model, "responseId": "standin"}
		if i == len(parts)-1 {
			chunk["usageMetadata"] = usage
		}
		e.event("", chunk)
		if i == 0 {
			s.stall(r)
		}
	}
}

// geminiRequest is what the stand-in reads of a Gemini model call.
type geminiRequest struct {
	Contents []struct {
		Role  string `json:"role"`
		Parts []struct {
			FunctionResponse *struct {
				Name     string         `json:"name"`
				Response map[string]any `json:"response"`
			} `json:"functionResponse"`
		} `json:"parts"`
	} `json:"contents"`
	Tools []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
}

// toolResults counts the function responses in the conversation and
// returns the last content's, if it ends with one, as the text the model
// was told: is_error is true for a response carrying "error" (Gemini CLI
// puts a denial or a failure there, and a tool's output under "output").
func (r geminiRequest) toolResults() (n int, last string, endsWithResult bool) {
	for i, c := range r.Contents {
		for _, p := range c.Parts {
			fr := p.FunctionResponse
			if fr == nil {
				continue
			}
			n++
			if i != len(r.Contents)-1 {
				continue
			}
			endsWithResult = true
			if e, ok := fr.Response["error"]; ok {
				last = fmt.Sprintf("is_error=true content=%v", e)
			} else if o, ok := fr.Response["output"]; ok {
				last = fmt.Sprintf("is_error=false content=%v", o)
			} else {
				b, _ := json.Marshal(fr.Response)
				last = "is_error=false content=" + string(b)
			}
		}
	}
	return n, last, endsWithResult
}

func (r geminiRequest) offers(name string) bool {
	for _, t := range r.Tools {
		for _, f := range t.FunctionDeclarations {
			if f.Name == name {
				return true
			}
		}
	}
	return false
}

// nextGeminiToolCall is the scripted tool call this model call gets, if
// any: the k-th, for a conversation holding k function responses, when
// the call offers that tool.
func (s *Server) nextGeminiToolCall(req geminiRequest) (ToolCall, bool) {
	n, _, _ := req.toolResults()
	if n >= len(s.script.ToolCalls) || !req.offers(s.script.ToolCalls[n].Name) {
		return ToolCall{}, false
	}
	return s.script.ToolCalls[n], true
}

func geminiErrorKind(status int) (st, msg string) {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key. (card stand-in)"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED", "Request had invalid authentication credentials. (card stand-in)"
	case http.StatusForbidden:
		return "PERMISSION_DENIED", "Permission denied on resource project (card stand-in)."
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details. (card stand-in)"
	}
	return "INTERNAL", statusText(status) + " (card stand-in)"
}

func geminiError(w http.ResponseWriter, status int, st, msg string, retrySecs float64) {
	e := map[string]any{"code": status, "message": msg, "status": st}
	if status == http.StatusTooManyRequests {
		e["details"] = []any{map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": fmt.Sprintf("%gs", retrySecs)}}
	}
	writeJSON(w, status, map[string]any{"error": e})
}

// GeminiSettings is ~/.gemini/settings.json for the stand-in: API-key auth
// (without it the CLI exits 41 asking for an auth method), one attempt per
// model call (general.maxAttempts defaults to 10 with backoff, which turns a
// scripted 429 into minutes), and no auto-update or usage statistics, which
// would reach the network.
const GeminiSettings = `{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "general": {"maxAttempts": 1, "enableAutoUpdate": false, "enableAutoUpdateNotification": false},
  "privacy": {"usageStatisticsEnabled": false}
}
`

// GeminiSetup writes GeminiSettings into home/.gemini and returns the
// complete environment for Gemini CLI to use this stand-in (PATH is the
// caller's). The CLI still needs --skip-trust (or a trusted-folders entry):
// in an untrusted folder it exits 55 before any API call.
func (s *Server) GeminiSetup(home, path string) (env []string, err error) {
	return s.geminiSetup(home, path, GeminiSettings)
}

// GeminiSetupRetrying is GeminiSetup with Gemini's own retries left at its
// default (general.maxAttempts 10, backoff from about 5 s), as a user who
// never changed them has it: what bounds them is card.
func (s *Server) GeminiSetupRetrying(home, path string) (env []string, err error) {
	return s.geminiSetup(home, path, strings.Replace(GeminiSettings, `"maxAttempts": 1, `, "", 1))
}

func (s *Server) geminiSetup(home, path, settings string) (env []string, err error) {
	dir := filepath.Join(home, ".gemini")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("gemini stand-in: create %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), []byte(settings), 0o600); err != nil {
		return nil, fmt.Errorf("gemini stand-in: write settings: %w", err)
	}
	return []string{
		"HOME=" + home,
		"PATH=" + path,
		"GOOGLE_GEMINI_BASE_URL=" + s.URL,
		"GEMINI_API_KEY=" + APIKey,
		"GEMINI_MODEL=" + s.Model,
		"NO_COLOR=1",
	}, nil
}
