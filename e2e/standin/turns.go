package standin

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// UserMessages is how many user messages a model call's body carries, in
// its vendor's dialect: the messages a person (or card, for them) wrote,
// not the tool results that ride in user-role messages too. A CLI that
// continues a conversation sends the earlier turns' prompts again, so
// turn two's count is above turn one's: the proof a test needs that the
// second turn's request carries the first.
func UserMessages(v Vendor, body []byte) int {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Input    json.RawMessage `json:"input"`
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text *string `json:"text"`
			} `json:"parts"`
		} `json:"contents"`
	}
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	n := 0
	switch v {
	case Gemini:
		for _, c := range req.Contents {
			for _, p := range c.Parts {
				if c.Role == "user" && p.Text != nil {
					n++
					break
				}
			}
		}
		return n
	case OpenAI:
		var items []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(req.Input, &items) == nil {
			for _, it := range items {
				if it.Role == "user" && (it.Type == "" || it.Type == "message") && !codexContext(it.Content) {
					n++
				}
			}
		}
	}
	for _, m := range req.Messages {
		if m.Role == "user" && hasText(m.Content) {
			n++
		}
	}
	return n
}

// codexContext says whether a user item is one of the context messages
// Codex sends before the prompt (its environment, the project's
// instructions), which no person wrote.
func codexContext(content json.RawMessage) bool {
	s := string(content)
	return strings.Contains(s, "<environment_context>") || strings.Contains(s, "<user_instructions>") ||
		strings.Contains(s, "AGENTS.md instructions")
}

// hasText says whether a message's content (a string, or a list of
// blocks) holds text, not only tool results.
func hasText(content json.RawMessage) bool {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return true
	}
	var blocks []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(content, &blocks) != nil {
		return false
	}
	for _, b := range blocks {
		if b.Type == "text" || b.Type == "input_text" {
			return true
		}
	}
	return false
}

// scripts holds the script a test set on a running server with
// SetScript, by server.
var scripts sync.Map

// SetScript makes s answer the model calls that arrive from now on by
// script: a conversation's later turn can then be scripted apart from its
// first (one tool call in each turn, say), on the one server the CLI was
// pointed at.
func (s *Server) SetScript(script Script) { scripts.Store(s, script) }

// forRequest is the server a request is answered by: s itself, or a copy
// with the script SetScript set, and with Script.AnswerUserMessages an
// answer saying how many user messages this request carried ("user
// messages: 2").
func (s *Server) forRequest(body []byte) *Server {
	script := s.script
	set, ok := scripts.Load(s)
	if ok {
		script = set.(Script)
	}
	if !ok && !script.AnswerUserMessages {
		return s
	}
	if script.AnswerUserMessages {
		script.Answer = fmt.Sprintf("user messages: %d", UserMessages(s.Vendor, body))
	}
	return &Server{URL: s.URL, Vendor: s.Vendor, Model: s.Model, script: script, srv: s.srv, done: s.done}
}
