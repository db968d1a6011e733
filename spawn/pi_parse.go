package spawn

import (
	"encoding/json"
	"strings"

	"github.com/card-dev/card/api"
)

// piParser reads `pi --mode json` (0.73.1): a `session` header, then agent,
// turn, message and tool_execution events, and auto_retry_*.
//
// Pi exits 0 when the model API fails. The failure is only in the stream:
// the assistant's message_end has "stopReason":"error" and an errorMessage
// such as `401 {…}`. So the run's outcome is decided from stopReason, never
// from the exit code, or a signed-out Pi would read as a silent success.
type piParser struct {
	sessionID string
	model     string
	answer    string
	turns     int
	toolCalls int
	usage     api.Usage
	cost      float64
	errMsg    string
	aborted   bool
}

func newPiParser() *piParser { return &piParser{} }

type piMessage struct {
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Usage *struct {
		Input     int64 `json:"input"`
		Output    int64 `json:"output"`
		CacheRead int64 `json:"cacheRead"`
		Cost      struct {
			Total float64 `json:"total"`
		} `json:"cost"`
	} `json:"usage"`
	StopReason   string `json:"stopReason"`
	ErrorMessage string `json:"errorMessage"`
}

type piLine struct {
	Type    string     `json:"type"`
	ID      string     `json:"id"`
	Message *piMessage `json:"message"`
	Event   *struct {
		Type  string `json:"type"`
		Delta string `json:"delta"`
	} `json:"assistantMessageEvent"`
	ToolCallID   string          `json:"toolCallId"`
	ToolName     string          `json:"toolName"`
	Args         json.RawMessage `json:"args"`
	ToolResult   json.RawMessage `json:"result"`
	IsError      bool            `json:"isError"`
	Attempt      int             `json:"attempt"`
	MaxAttempts  int             `json:"maxAttempts"`
	DelayMs      int64           `json:"delayMs"`
	ErrorMessage string          `json:"errorMessage"`
	Success      bool            `json:"success"`
	FinalError   string          `json:"finalError"`
}

func (p *piParser) Feed(line []byte) []Event {
	var l piLine
	if err := decodeLine(line, &l); (err != nil && !isTypeError(err)) || l.Type == "" {
		return []Event{otherEvent("", line)}
	}
	switch l.Type {
	case "session":
		p.sessionID = l.ID
		return []Event{{Kind: api.EventSession, SessionID: l.ID}}
	case "agent_start", "agent_end", "turn_start", "turn_end", "message_start", "tool_execution_update":
		// Lifecycle and partial states already covered by the events below.
		return nil
	case "message_update":
		if l.Event != nil && l.Event.Type == "text_delta" && l.Event.Delta != "" {
			return []Event{{Kind: api.EventText, Text: l.Event.Delta, Delta: true}}
		}
		return nil
	case "message_end":
		if l.Message == nil || l.Message.Role != "assistant" {
			return nil
		}
		return p.assistantEnd(l.Message)
	case "tool_execution_start":
		p.toolCalls++
		return []Event{{Kind: api.EventToolUse, Tool: &api.Tool{Name: l.ToolName, ID: l.ToolCallID, Input: validRaw(l.Args)}}}
	case "tool_execution_end":
		return []Event{{Kind: api.EventToolResult, Tool: &api.Tool{Name: l.ToolName, ID: l.ToolCallID}, Output: clip(piResultText(l.ToolResult), maxOutput), IsError: l.IsError}}
	case "auto_retry_start":
		// The failed call before it (a message_end with stopReason error)
		// is being retried: it decides nothing unless the retries run out.
		p.errMsg = ""
		why := clip(l.ErrorMessage, 2048)
		return []Event{{Kind: api.EventRetry, Attempt: l.Attempt, MaxAttempts: l.MaxAttempts, DelayMs: l.DelayMs, Error: why, cause: classifyMessage(why)}}
	case "auto_retry_end":
		if !l.Success && p.errMsg == "" {
			p.errMsg = clip(strings.TrimSpace(l.FinalError), 2048)
		}
		return nil
	}
	return []Event{otherEvent(l.Type, line)}
}

func (p *piParser) assistantEnd(m *piMessage) []Event {
	p.turns++
	if m.Model != "" {
		p.model = m.Model
	}
	var evs []Event
	var text strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			text.WriteString(c.Text)
		}
	}
	if t := text.String(); strings.TrimSpace(t) != "" {
		p.answer = clip(t, maxAnswer)
	}
	if u := m.Usage; u != nil {
		p.usage.InputTokens += u.Input
		p.usage.OutputTokens += u.Output
		p.usage.CachedInputTokens += u.CacheRead
		p.cost += u.Cost.Total
		evs = append(evs, Event{Kind: api.EventUsage, Model: m.Model, Usage: &api.Usage{InputTokens: u.Input, OutputTokens: u.Output, CachedInputTokens: u.CacheRead},
			perCall: true, costUSD: u.Cost.Total})
	}
	switch m.StopReason {
	case "error":
		p.errMsg = clip(strings.TrimSpace(m.ErrorMessage), 2048)
		if p.errMsg == "" {
			p.errMsg = "the model call failed (stopReason error) with no message"
		}
		evs = append(evs, Event{Kind: api.EventError, Error: p.errMsg})
	case "aborted":
		p.aborted = true
	}
	return evs
}

// piResultText is a tool result's text: Pi's results are
// {"content":[{"type":"text","text":…}], …}; anything else is kept as JSON.
func piResultText(raw json.RawMessage) string {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if json.Unmarshal(raw, &r) == nil && len(r.Content) > 0 {
		var b strings.Builder
		for _, c := range r.Content {
			b.WriteString(c.Text)
		}
		return b.String()
	}
	return jsonText(raw)
}

// piNoKey is what Pi prints on stderr, exiting 1, when the selected model's
// provider has no credentials.
const piNoKey = "No API key found"

func (p *piParser) Finish(exit ExitInfo) api.Result {
	res := api.Result{Answer: p.answer, SessionID: p.sessionID, Turns: p.turns, ToolCalls: p.toolCalls, Usage: p.usage}
	if p.cost > 0 {
		c := p.cost
		res.CostUSD = &c
	}
	switch {
	case p.errMsg != "":
		kind := classifyMessage(p.errMsg)
		msg := "pi: " + p.errMsg
		if exit.Code == 0 {
			msg += " (pi exited 0; the failure was only in its stream)"
		}
		res.IsError, res.Error = true, failure(kind, clip(msg, 2048))
	case strings.Contains(exit.StderrTail, piNoKey):
		res.IsError, res.Error = true, failure(api.KindAuth, "pi: "+lineWith(exit.StderrTail, piNoKey)+" — set a provider key (for example ANTHROPIC_API_KEY) for the daemon, run /login in interactive `pi`, or name a provider and model in card.toml [adapters.pi]")
	case p.aborted:
		res.IsError, res.Error = true, failure(api.KindCancelled, "pi: the model call was aborted")
	case p.turns == 0 && exit.Code == 0 && exit.StdoutBytes > 0:
		res.IsError, res.Error = true, failure(api.KindBadOutput, "pi exited 0 without an assistant message; its JSON output was cut short or changed shape")
	}
	return res
}
