package spawn

import (
	"encoding/json"
	"fmt"
	"strings"
)

// geminiParser reads `gemini --output-format stream-json` (0.61.0): init,
// message, tool_use, tool_result, error, result.
type geminiParser struct {
	sessionID     string
	answer        answerBuf
	turns         int
	lastAssistant bool
	toolCalls     int
	result        *geminiLine
	lastErr       string
}

func newGeminiParser() *geminiParser { return &geminiParser{} }

type geminiLine struct {
	Type       string          `json:"type"`
	SessionID  string          `json:"session_id"`
	Model      string          `json:"model"`
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	Delta      bool            `json:"delta"`
	ToolName   string          `json:"tool_name"`
	ToolID     string          `json:"tool_id"`
	Parameters json.RawMessage `json:"parameters"`
	Status     string          `json:"status"`
	Output     string          `json:"output"`
	Severity   string          `json:"severity"`
	Message    string          `json:"message"`
	Error      *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	Stats *struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
		Cached       int64 `json:"cached"`
		DurationMs   int64 `json:"duration_ms"`
		ToolCalls    int   `json:"tool_calls"`
	} `json:"stats"`
}

func (p *geminiParser) Feed(line []byte) []Event {
	var l geminiLine
	if err := decodeLine(line, &l); (err != nil && !isTypeError(err)) || l.Type == "" {
		return []Event{otherEvent("", line)}
	}
	assistant := false
	defer func() { p.lastAssistant = assistant }()
	switch l.Type {
	case "init":
		p.sessionID = l.SessionID
		return []Event{{Kind: EventSession, SessionID: l.SessionID, Model: l.Model}}
	case "message":
		if l.Role != "assistant" {
			// The user message echoes the prompt; the client has it.
			return nil
		}
		assistant = true
		if !p.lastAssistant {
			p.turns++
		}
		p.answer.add(l.Content)
		return []Event{{Kind: EventText, Text: l.Content, Delta: l.Delta}}
	case "tool_use":
		p.toolCalls++
		return []Event{{Kind: EventToolUse, Tool: &Tool{Name: l.ToolName, ID: l.ToolID, Input: validRaw(l.Parameters)}}}
	case "tool_result":
		out := l.Output
		if l.Error != nil && l.Error.Message != "" {
			out = l.Error.Message
		}
		return []Event{{Kind: EventToolResult, Tool: &Tool{ID: l.ToolID}, Output: clip(out, maxOutput), IsError: l.Status == "error"}}
	case "error":
		p.lastErr = clip(l.Message, 2048)
		return []Event{{Kind: EventError, Error: p.lastErr}}
	case "result":
		p.result = &l
		if l.Stats != nil {
			u := Usage{InputTokens: l.Stats.InputTokens, OutputTokens: l.Stats.OutputTokens, CachedInputTokens: l.Stats.Cached}
			return []Event{{Kind: EventUsage, Usage: &u}}
		}
		return nil
	}
	return []Event{otherEvent(l.Type, line)}
}

// geminiExitKinds are Gemini CLI's fatal exit codes (FatalError subclasses).
var geminiExitKinds = map[int]struct{ kind, hint string }{
	41:  {KindAuth, "set an auth method in ~/.gemini/settings.json or GEMINI_API_KEY for the daemon"},
	42:  {KindBadInput, "Gemini refused the input"},
	44:  {KindConfig, "Gemini's sandbox could not start"},
	52:  {KindConfig, "fix the Gemini settings file it names"},
	53:  {KindMaxTurns, "Gemini hit its session turn limit (model.maxSessionTurns)"},
	54:  {KindTool, "a Gemini tool failed fatally"},
	55:  {KindUntrustedWorkspace, "Gemini does not trust this folder: trust it once in interactive `gemini`, or have the operator add args = [\"--skip-trust\"] to card.toml [adapters.gemini]"},
	130: {KindCancelled, "Gemini was cancelled"},
}

func (p *geminiParser) Finish(exit ExitInfo) Result {
	res := Result{Answer: p.answer.String(), SessionID: p.sessionID, Turns: p.turns, ToolCalls: p.toolCalls}
	if r := p.result; r != nil && r.Stats != nil {
		res.Usage = Usage{InputTokens: r.Stats.InputTokens, OutputTokens: r.Stats.OutputTokens, CachedInputTokens: r.Stats.Cached}
		res.DurationMs = r.Stats.DurationMs
		if r.Stats.ToolCalls > res.ToolCalls {
			res.ToolCalls = r.Stats.ToolCalls
		}
	}
	if k, ok := geminiExitKinds[exit.Code]; ok {
		msg := lastLine(exit.StderrTail)
		if msg == "" {
			msg = p.lastErr
		}
		res.IsError = true
		res.Error = failure(k.kind, clip(fmt.Sprintf("gemini exited %d: %s — %s", exit.Code, msg, k.hint), 2048))
		return res
	}
	if r := p.result; r != nil {
		if r.Status != "success" {
			msg := "gemini reported status " + r.Status
			kind := KindAPI
			if r.Error != nil && r.Error.Message != "" {
				msg = r.Error.Message
				kind = classifyMessage(r.Error.Type + " " + msg)
			}
			res.IsError, res.Error = true, failure(kind, clip(msg, 2048))
		}
		return res
	}
	if exit.Code == 0 && exit.StdoutBytes > 0 {
		res.IsError, res.Error = true, failure(KindBadOutput, "gemini exited 0 without a result event; its stream-json output was cut short or changed shape")
	}
	return res
}

// lastLine is the last non-empty line of s with ANSI colour codes removed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(stripANSI(lines[i]))
		if l != "" {
			return l
		}
	}
	return ""
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
