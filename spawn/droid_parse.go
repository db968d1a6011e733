package spawn

import (
	"encoding/json"
	"strings"

	"github.com/card-dev/card/api"
)

// droidParser reads `droid exec -o stream-json` (0.225.2): system/init,
// message (user and assistant, whole text), tool_call, tool_result,
// completion (finalText, numTurns, durationMs, usage) and error. A failed
// run has no completion: an `error` from the agent loop carrying the API's
// status ("401 {…}"), then a generic `error` from the cli ("Exec failed"),
// and exit 1.
type droidParser struct {
	sessionID  string
	answer     string
	turns      int
	toolCalls  int
	completion *droidLine
	// cause is the most specific error seen: the agent loop's API error
	// outranks the cli's closing "Exec failed".
	cause      string
	causeFinal bool
}

func newDroidParser() *droidParser { return &droidParser{} }

type droidLine struct {
	Type      string          `json:"type"`
	Subtype   string          `json:"subtype"`
	SessionID string          `json:"session_id"`
	Model     string          `json:"model"`
	Role      string          `json:"role"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	ToolID    string          `json:"toolId"`
	ToolName  string          `json:"toolName"`
	Params    json.RawMessage `json:"parameters"`
	Value     json.RawMessage `json:"value"`
	IsError   bool            `json:"isError"`
	Source    string          `json:"source"`
	Message   string          `json:"message"`
	FinalText string          `json:"finalText"`
	NumTurns  int             `json:"numTurns"`
	Duration  int64           `json:"durationMs"`
	Usage     *struct {
		InputTokens     int64 `json:"input_tokens"`
		OutputTokens    int64 `json:"output_tokens"`
		CacheReadTokens int64 `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

func (p *droidParser) Feed(line []byte) []Event {
	var l droidLine
	if err := decodeLine(line, &l); (err != nil && !isTypeError(err)) || l.Type == "" {
		return []Event{otherEvent("", line)}
	}
	if l.SessionID != "" {
		p.sessionID = l.SessionID
	}
	switch l.Type {
	case "system":
		if l.Subtype == "init" {
			return []Event{{Kind: api.EventSession, SessionID: l.SessionID, Model: l.Model}}
		}
	case "message":
		if l.Role != "assistant" {
			return nil // the prompt's echo
		}
		p.turns++
		if strings.TrimSpace(l.Text) != "" {
			p.answer = clip(l.Text, maxAnswer)
		}
		return []Event{{Kind: api.EventText, Text: clip(l.Text, maxAnswer)}}
	case "tool_call":
		p.toolCalls++
		id := l.ToolID
		if id == "" {
			id = l.ID
		}
		return []Event{{Kind: api.EventToolUse, Tool: &api.Tool{Name: l.ToolName, ID: id, Input: validRaw(l.Params)}}}
	case "tool_result":
		id := l.ToolID
		if id == "" {
			id = l.ID
		}
		return []Event{{Kind: api.EventToolResult, Tool: &api.Tool{ID: id}, Output: clip(jsonText(l.Value), maxOutput), IsError: l.IsError}}
	case "error":
		msg := clip(strings.TrimSpace(l.Message), 2048)
		if !p.causeFinal || p.cause == "" {
			p.cause = msg
			// "Exec failed" only closes the run; a specific cause before
			// it (or the cli's own auth message) is the one to keep.
			p.causeFinal = !strings.EqualFold(msg, "Exec failed")
		}
		return []Event{{Kind: api.EventError, Error: msg}}
	case "completion":
		p.completion = &l
		if l.Usage != nil {
			u := api.Usage{InputTokens: l.Usage.InputTokens, OutputTokens: l.Usage.OutputTokens, CachedInputTokens: l.Usage.CacheReadTokens}
			return []Event{{Kind: api.EventUsage, Usage: &u}}
		}
		return nil
	}
	return []Event{otherEvent(l.Type, line)}
}

// jsonText is a tool result's value as text: a JSON string unquoted, any
// other value as its JSON.
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if json.Valid(raw) {
		return string(raw)
	}
	return ""
}

func (p *droidParser) Finish(exit ExitInfo) api.Result {
	res := api.Result{Answer: p.answer, SessionID: p.sessionID, Turns: p.turns, ToolCalls: p.toolCalls}
	if c := p.completion; c != nil {
		if c.FinalText != "" {
			res.Answer = clip(c.FinalText, maxAnswer)
		}
		if c.NumTurns > res.Turns {
			res.Turns = c.NumTurns
		}
		res.DurationMs = c.Duration
		if c.Usage != nil {
			res.Usage = api.Usage{InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens, CachedInputTokens: c.Usage.CacheReadTokens}
		}
	}
	switch {
	case p.cause != "":
		kind := classifyMessage(p.cause)
		msg := "droid: " + p.cause
		if kind == api.KindAuth {
			msg += " — sign in with `droid`, set FACTORY_API_KEY for the daemon, or use a BYOK custom model (card.toml [adapters.droid])"
		}
		res.IsError, res.Error = true, failure(kind, clip(msg, 2048))
	case p.completion == nil && exit.Code == 0 && exit.StdoutBytes > 0:
		res.IsError, res.Error = true, failure(api.KindBadOutput, "droid exited 0 without a completion event; its stream-json output was cut short or changed shape")
	}
	return res
}
