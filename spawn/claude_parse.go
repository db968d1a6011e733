package spawn

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/card-dev/card/api"
)

// claudeParser reads `claude -p --output-format stream-json --verbose
// --include-partial-messages`.
//
// With partial messages Claude Code writes each model message twice: as it
// is generated (stream_event lines: message_start, then content_block_delta
// with text_delta, thinking_delta or input_json_delta) and then whole (an
// assistant line per content block, carrying the message's id). A text or
// thinking block becomes events exactly once: as its deltas when they were
// streamed, else whole. So a client that joins every text event in order
// gets each message's text once.
type claudeParser struct {
	sessionID   string
	toolCalls   int
	assistantN  int
	lastText    string
	apiErr      string // the assistant message's `error` (authentication_failed, rate_limit, ...)
	result      *claudeResult
	resultUsage api.Usage

	// The message being streamed (its id from message_start) and which of
	// its kinds of content arrived as deltas.
	streamID         string
	streamedText     bool
	streamedThinking bool

	// line is where each line is decoded and one what a delta returns:
	// a token-a-line stream would otherwise cost two allocations a line.
	// Feed's callers use its events before the next Feed (the emitter
	// sends copies), so a line's events may live in the parser.
	line claudeLine
	one  [1]Event
	// quotedSession is the session id as the last delta line quoted it;
	// unquoted is delta's scratch for unquoting.
	quotedSession, unquoted []byte
}

func newClaudeParser() *claudeParser { return &claudeParser{} }

type claudeLine struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	// system/init
	SlashCommands []string `json:"slash_commands"`
	// system/api_retry
	Attempt      int             `json:"attempt"`
	MaxRetries   int             `json:"max_retries"`
	RetryDelayMs float64         `json:"retry_delay_ms"`
	ErrorStatus  json.RawMessage `json:"error_status"`
	Error        json.RawMessage `json:"error"`
	// rate_limit_event
	RateLimitInfo *claudeRateLimit `json:"rate_limit_info"`
	// assistant / user
	// Content is decoded in the same pass as the line: a second Unmarshal
	// of a RawMessage doubles the cost on the hot path (assistant text).
	Message *struct {
		ID      string        `json:"id"`
		Model   string        `json:"model"`
		Content []claudeBlock `json:"content"`
	} `json:"message"`
	// stream_event (only with --include-partial-messages): the API's own
	// stream events, one per line.
	Event claudeStreamEvent `json:"event"`
	claudeResult
}

// claudeStreamEvent is a stream_event's event. Its parts are values, not
// pointers: an absent part reads as empty, which every use treats as
// absent, and a line a token long then costs no allocation for them (it is
// the line Claude Code prints most).
type claudeStreamEvent struct {
	Type    string `json:"type"`
	Message struct {
		ID string `json:"id"`
	} `json:"message"`
	Delta struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Thinking string `json:"thinking"`
	} `json:"delta"`
}

type claudeResult struct {
	IsError        bool            `json:"is_error"`
	APIErrorStatus json.RawMessage `json:"api_error_status"`
	DurationMs     int64           `json:"duration_ms"`
	NumTurns       int             `json:"num_turns"`
	Result         string          `json:"result"`
	TotalCostUSD   *float64        `json:"total_cost_usd"`
	Usage          *struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	// ModelUsage is the run's tokens per model. Claude Code 2.1.197 zeroes
	// usage in the result of a run its --max-budget-usd stopped, and keeps
	// the counts only here.
	ModelUsage map[string]struct {
		InputTokens              int64 `json:"inputTokens"`
		OutputTokens             int64 `json:"outputTokens"`
		CacheReadInputTokens     int64 `json:"cacheReadInputTokens"`
		CacheCreationInputTokens int64 `json:"cacheCreationInputTokens"`
	} `json:"modelUsage"`
	Errors []string `json:"errors"`
	// subtype lives on the outer line
	subtype string
}

type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// Feed reads one line. The slice it returns may be the parser's own, good
// until the next Feed.
func (p *claudeParser) Feed(line []byte) []Event {
	if evs, ok := p.delta(line); ok {
		return evs
	}
	return p.decode(line)
}

// decode reads any line by decoding it whole.
func (p *claudeParser) decode(line []byte) []Event {
	l := &p.line
	*l = claudeLine{}
	if err := decodeLine(line, l); (err != nil && !isTypeError(err)) || l.Type == "" {
		return []Event{otherEvent("", line)}
	}
	if l.SessionID != "" {
		p.sessionID = l.SessionID
	}
	switch l.Type {
	case "system":
		switch l.Subtype {
		case "init":
			return []Event{{Kind: api.EventSession, SessionID: l.SessionID, Model: l.Model, Commands: slashCommands(l.SlashCommands)}}
		case "api_retry":
			return []Event{claudeRetry(*l)}
		}
		return []Event{otherEvent("system/"+l.Subtype, line)}
	case "assistant":
		if l.Message == nil {
			return []Event{otherEvent(l.Type, line)}
		}
		if e := rawText(l.Error, ""); e != "" || l.Message.Model == "<synthetic>" {
			return p.ownError(e, l.Message.Content)
		}
		p.assistantN++
		streamed := l.Message.ID != "" && l.Message.ID == p.streamID
		evs := make([]Event, 0, len(l.Message.Content))
		text := ""
		for _, b := range l.Message.Content {
			switch b.Type {
			case "text":
				text += b.Text // one block is the common case: no copy
				if !(streamed && p.streamedText) {
					evs = append(evs, Event{Kind: api.EventText, Text: b.Text})
				}
			case "thinking":
				if b.Thinking != "" && !(streamed && p.streamedThinking) {
					evs = append(evs, Event{Kind: api.EventThinking, Text: b.Thinking})
				}
			case "tool_use":
				p.toolCalls++
				evs = append(evs, Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: b.Name, ID: b.ID, Input: validRaw(b.Input)}})
			}
		}
		if text != "" {
			p.lastText = clip(text, maxAnswer)
		}
		return evs
	case "user":
		if l.Message == nil {
			return []Event{otherEvent(l.Type, line)}
		}
		var evs []Event
		for _, b := range l.Message.Content {
			if b.Type == "tool_result" {
				evs = append(evs, Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: b.ToolUseID},
					Output: clip(contentText(b.Content), maxOutput), IsError: b.IsError})
			}
		}
		return evs
	case "stream_event":
		return p.streamEvent(l)
	case "rate_limit_event":
		if w, ok := l.RateLimitInfo.window(); ok {
			return []Event{{Kind: api.EventRateLimit, RateLimits: []api.RateLimitWindow{w}}}
		}
		return []Event{otherEvent(l.Type, line)}
	case "result":
		r := l.claudeResult
		r.subtype = l.Subtype
		p.result = &r
		if r.Usage != nil {
			p.resultUsage = api.Usage{InputTokens: r.Usage.InputTokens + r.Usage.CacheCreationInputTokens,
				OutputTokens: r.Usage.OutputTokens, CachedInputTokens: r.Usage.CacheReadInputTokens}
		}
		if p.resultUsage == (api.Usage{}) {
			for _, m := range r.ModelUsage {
				p.resultUsage.InputTokens += m.InputTokens + m.CacheCreationInputTokens
				p.resultUsage.OutputTokens += m.OutputTokens
				p.resultUsage.CachedInputTokens += m.CacheReadInputTokens
			}
		}
		if r.Usage != nil || len(r.ModelUsage) > 0 {
			u := p.resultUsage
			ev := Event{Kind: api.EventUsage, Usage: &u}
			if r.TotalCostUSD != nil {
				ev.costUSD = *r.TotalCostUSD
			}
			return []Event{ev}
		}
		return nil
	}
	return []Event{otherEvent(l.Type, line)}
}

// streamEvent turns the API's own stream into deltas. Text and thinking
// pieces go out as they come; a tool's input (input_json_delta) does not:
// a fragment of JSON is of no use to a client, and the tool_use event with
// the whole input follows as soon as the block is complete.
func (p *claudeParser) streamEvent(l *claudeLine) []Event {
	e := &l.Event
	switch e.Type {
	case "message_start":
		p.streamID, p.streamedText, p.streamedThinking = e.Message.ID, false, false
	case "content_block_delta":
		switch e.Delta.Type {
		case "text_delta":
			if e.Delta.Text != "" {
				p.streamedText = true
				p.one[0] = Event{Kind: api.EventText, Text: e.Delta.Text, Delta: true}
				return p.one[:]
			}
		case "thinking_delta":
			if e.Delta.Thinking != "" {
				p.streamedThinking = true
				p.one[0] = Event{Kind: api.EventThinking, Text: e.Delta.Thinking, Delta: true}
				return p.one[:]
			}
		}
	}
	return nil
}

// ownError is an assistant line Claude Code writes itself when a model call
// failed for good (its `error` is set, its model "<synthetic>"): the text is
// Claude's message about the failure, not the model's answer, so it is an
// agent_error and never text.
func (p *claudeParser) ownError(code string, content []claudeBlock) []Event {
	if code != "" {
		p.apiErr = code
	}
	msg := ""
	for _, b := range content {
		msg += b.Text
	}
	if msg = strings.TrimSpace(msg); msg == "" {
		msg = code
	}
	if msg == "" {
		return nil
	}
	return []Event{{Kind: api.EventError, Error: clip(msg, 2048)}}
}

// claudeRetry is an api_retry line: Claude Code will call the API again
// after retry_delay_ms. The reason reads "rate_limit (HTTP 429)"; with no
// HTTP status the API was never reached.
func claudeRetry(l claudeLine) Event {
	code := rawText(l.Error, "")
	var status int
	_ = json.Unmarshal(l.ErrorStatus, &status)
	ev := Event{Kind: api.EventRetry, Attempt: l.Attempt, MaxAttempts: l.MaxRetries, DelayMs: int64(l.RetryDelayMs)}
	switch {
	case status != 0:
		ev.Error = fmt.Sprintf("%s (HTTP %d)", code, status)
		ev.cause = claudeErrorKind(code, l.ErrorStatus)
	default:
		ev.Error = strings.TrimSpace(code + " (no HTTP answer: the API could not be reached)")
		ev.cause = api.KindNetwork
		if k := claudeErrorKind(code, nil); k != api.KindAPI {
			ev.cause = k
		}
	}
	return ev
}

func (p *claudeParser) Finish(exit ExitInfo) api.Result {
	res := api.Result{SessionID: p.sessionID, ToolCalls: p.toolCalls, Turns: p.assistantN, Answer: p.lastText}
	r := p.result
	if r == nil {
		if exit.Code == 0 && exit.StdoutBytes > 0 {
			res.IsError = true
			res.Error = failure(api.KindBadOutput, "claude exited 0 without a result line; its stream-json output was cut short or changed shape")
		} else if p.apiErr != "" {
			res.IsError = true
			res.Error = failure(claudeErrorKind(p.apiErr, nil), "claude reported "+p.apiErr)
		}
		return res
	}
	res.Turns = r.NumTurns
	res.DurationMs = r.DurationMs
	res.CostUSD = r.TotalCostUSD
	res.Usage = p.resultUsage
	// is_error decides, never subtype: Claude Code reports a failed API
	// call as subtype "success" with is_error true.
	if r.IsError || strings.HasPrefix(r.subtype, "error") {
		res.IsError = true
		kind := claudeErrorKind(p.apiErr, r.APIErrorStatus)
		msg := r.Result
		if kind == api.KindAPI && classifyMessage(msg) == api.KindNetwork {
			kind = api.KindNetwork
		}
		switch {
		case r.subtype == "error_max_turns":
			kind = api.KindMaxTurns
			msg = fmt.Sprintf("claude stopped at the turn cap after %d turns; raise max_turns or narrow the task", r.NumTurns)
		case r.subtype == "error_max_budget_usd":
			// --max-budget-usd passed: the runner words it with the cap,
			// and Claude's own words follow.
			kind = api.KindBudget
			msg = "claude stopped at its spending cap (--max-budget-usd)"
			if len(r.Errors) > 0 {
				msg = strings.Join(r.Errors, "; ")
			}
		case msg == "" && len(r.Errors) > 0:
			msg = strings.Join(r.Errors, "; ")
		}
		if msg == "" {
			msg = "claude reported an error (" + r.subtype + ")"
		}
		if kind == api.KindAuth {
			msg += " — sign in with `claude auth login` or set ANTHROPIC_API_KEY for the daemon"
		}
		res.Error = failure(kind, clip(msg, 2048))
		return res
	}
	res.Answer = clip(r.Result, maxAnswer)
	return res
}

// claudeErrorKind classifies from the assistant message's `error` and the
// result's api_error_status, the two signals Claude Code gives.
func claudeErrorKind(apiErr string, status json.RawMessage) string {
	switch apiErr {
	case "authentication_failed", "oauth_org_not_allowed":
		return api.KindAuth
	case "rate_limit":
		return api.KindRateLimit
	}
	var code int
	if json.Unmarshal(status, &code) == nil && code != 0 {
		switch {
		case code == 401 || code == 403:
			return api.KindAuth
		case code == 429:
			return api.KindRateLimit
		}
	}
	return api.KindAPI
}

// contentText flattens a tool_result's content: a string, or text blocks.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []claudeBlock
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, x := range parts {
			b.WriteString(x.Text)
		}
		return b.String()
	}
	return ""
}

// rawText reads a JSON string or number as text; def when absent or null.
func rawText(raw json.RawMessage, def string) string {
	if len(raw) == 0 || string(raw) == "null" {
		return def
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return clip(s, 2048)
	}
	return clip(string(raw), 2048)
}

// claudeRateLimit is the rate_limit_info of Claude Code's rate_limit_event
// (2.1.197), which it writes when its reading of the API's
// anthropic-ratelimit-unified-* headers changes: only on a claude.ai
// sign-in (an OAuth token), never with an API key. It names one window
// (the one the API says binds, its representative claim), says whether it
// is allowed, allowed_warning or rejected, and when it resets (UNIX
// seconds); utilization (0 to 1) only once the window nears its limit.
type claudeRateLimit struct {
	Status        string   `json:"status"`
	ResetsAt      *float64 `json:"resetsAt"`
	RateLimitType string   `json:"rateLimitType"`
	Utilization   *float64 `json:"utilization"`
}

// claudeWindowMinutes are the lengths of the windows Claude Code names.
var claudeWindowMinutes = map[string]int{"five_hour": 300, "seven_day": 7 * 24 * 60, "seven_day_opus": 7 * 24 * 60,
	"seven_day_sonnet": 7 * 24 * 60, "seven_day_overage_included": 7 * 24 * 60}

// window is the report as card's window; false when it names nothing a
// client could use (no window and no status).
func (r *claudeRateLimit) window() (api.RateLimitWindow, bool) {
	if r == nil || (r.RateLimitType == "" && r.Status == "") {
		return api.RateLimitWindow{}, false
	}
	w := api.RateLimitWindow{Window: clip(r.RateLimitType, 64), Status: clip(r.Status, 64), WindowMinutes: claudeWindowMinutes[r.RateLimitType]}
	if w.Window == "" {
		w.Window = "unified"
	}
	if r.Utilization != nil && *r.Utilization >= 0 && *r.Utilization <= 10 {
		pct := math.Round(*r.Utilization*1000) / 10
		w.UsedPercent = &pct
	}
	w.ResetsAt = unixTime(r.ResetsAt)
	return w, true
}

// unixTime is a CLI's UNIX-seconds timestamp as a time, nil when absent or
// outside any plausible reset (before 2020, or centuries ahead).
func unixTime(secs *float64) *time.Time {
	if secs == nil || *secs < 1_577_836_800 || *secs > 32_503_680_000 {
		return nil
	}
	t := time.Unix(int64(*secs), 0).UTC()
	return &t
}

// slashCommands are the names init's slash_commands lists (it gives no
// description or argument hint), nil when it lists none.
func slashCommands(names []string) []api.SlashCommand {
	var out []api.SlashCommand
	for _, n := range names {
		if n = strings.TrimPrefix(strings.TrimSpace(n), "/"); n != "" {
			out = append(out, api.SlashCommand{Name: n})
		}
	}
	return out
}
