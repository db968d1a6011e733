package spawn

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/card-dev/card/api"
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
	// waited is a multi-line retry notice of stderr being read.
	waited *geminiNotice
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
		return []Event{{Kind: api.EventSession, SessionID: l.SessionID, Model: l.Model}}
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
		return []Event{{Kind: api.EventText, Text: l.Content, Delta: l.Delta}}
	case "tool_use":
		p.toolCalls++
		return []Event{{Kind: api.EventToolUse, Tool: &api.Tool{Name: l.ToolName, ID: l.ToolID, Input: validRaw(l.Parameters)}}}
	case "tool_result":
		out := l.Output
		if l.Error != nil && l.Error.Message != "" {
			out = l.Error.Message
		}
		return []Event{{Kind: api.EventToolResult, Tool: &api.Tool{ID: l.ToolID}, Output: clip(out, maxOutput), IsError: l.Status == "error"}}
	case "error":
		if l.Severity == "warning" {
			return []Event{{Kind: api.EventWarning, Text: clip(l.Message, 2048)}}
		}
		p.lastErr = clip(l.Message, 2048)
		return []Event{{Kind: api.EventError, Error: p.lastErr}}
	case "result":
		p.result = &l
		if l.Stats != nil {
			u := api.Usage{InputTokens: l.Stats.InputTokens, OutputTokens: l.Stats.OutputTokens, CachedInputTokens: l.Stats.Cached}
			return []Event{{Kind: api.EventUsage, Usage: &u}}
		}
		return nil
	}
	return []Event{otherEvent(l.Type, line)}
}

// Gemini CLI 0.61 announces a retry of a model call only on stderr, in one
// of two shapes (retryWithBackoff in its bundle):
//
//	Attempt 2 failed with status 429. Retrying with backoff... _ApiError: {…}
//	Attempt 1 failed. Retrying with backoff... Error: exception TypeError: fetch failed sending request
//
// (also "failed with 429 error (no Retry-After header)" and "failed with
// 5xx error"), or, when the API named a wait (a quota error with
// RetryInfo), a message that may run over several lines:
//
//	Attempt 1 failed: You exceeded your current quota, …
//	Suggested retry after 1s.. Retrying after 5747ms...
//
// which ends "Max attempts reached" instead when it will not retry. Its
// stream-json output says nothing until it gives up.
var (
	geminiBackoff = regexp.MustCompile(`^Attempt (\d+) failed(?: with status (\d+)| with (429) error \(no Retry-After header\)| with 5xx error)?\. Retrying with backoff\.\.\.\s*(.*)$`)
	geminiWaited  = regexp.MustCompile(`^Attempt (\d+) failed: (.*)$`)
	geminiAfter   = regexp.MustCompile(`Retrying after (\d+)ms\.\.\.\s*$`)
)

// geminiPendingLines bounds how far a multi-line retry notice is followed.
const geminiPendingLines = 8

// FeedStderr turns Gemini's retry notices into retry events; every other
// stderr line is left to the stderr excerpt.
func (p *geminiParser) FeedStderr(line []byte) []Event {
	l := strings.TrimSpace(stripANSI(string(line)))
	if p.waited != nil {
		p.waited.text += "\n" + l
		p.waited.lines++
		switch {
		case geminiAfter.MatchString(l):
			return p.flushWaited()
		case strings.Contains(l, "Max attempts reached") || p.waited.lines >= geminiPendingLines:
			p.waited = nil
		}
		return nil
	}
	if m := geminiBackoff.FindStringSubmatch(l); m != nil {
		attempt, _ := strconv.Atoi(m[1])
		status, _ := strconv.Atoi(m[2])
		if m[3] != "" {
			status = 429
		}
		why := geminiReason(m[4])
		ev := Event{Kind: api.EventRetry, Attempt: attempt, Error: why, cause: classifyMessage(why)}
		switch {
		case status == 401 || status == 403:
			ev.cause = api.KindAuth
		case status == 429:
			ev.cause = api.KindRateLimit
		case status != 0:
			ev.cause = api.KindAPI
		}
		if status != 0 {
			ev.Error = fmt.Sprintf("HTTP %d: %s", status, why)
		}
		return []Event{ev}
	}
	if m := geminiWaited.FindStringSubmatch(l); m != nil {
		attempt, _ := strconv.Atoi(m[1])
		p.waited = &geminiNotice{attempt: attempt, text: m[2], lines: 1}
		switch {
		case geminiAfter.MatchString(l):
			return p.flushWaited()
		case strings.Contains(l, "Max attempts reached"):
			p.waited = nil
		}
	}
	return nil
}

// geminiNotice is a "failed: …" retry notice read so far.
type geminiNotice struct {
	attempt int
	text    string
	lines   int
}

// flushWaited is the retry event of a complete "failed: …. Retrying after
// Nms..." notice: the API's message (its first line) and the wait.
func (p *geminiParser) flushWaited() []Event {
	n := p.waited
	p.waited = nil
	ev := Event{Kind: api.EventRetry, Attempt: n.attempt}
	if m := geminiAfter.FindStringSubmatch(n.text); m != nil {
		ev.DelayMs, _ = strconv.ParseInt(m[1], 10, 64)
	}
	why, _, _ := strings.Cut(n.text, "\n")
	why = strings.TrimSpace(geminiAfter.ReplaceAllString(why, ""))
	why = strings.TrimSuffix(strings.TrimSuffix(why, "."), ".")
	ev.Error = clip(why, 2048)
	// Gemini waits like this only on a quota error (or a 5xx): a quota
	// message reads as rate_limit, anything else as api.
	ev.cause = classifyMessage(why)
	if ev.cause == api.KindNetwork || ev.cause == api.KindAuth {
		ev.cause = api.KindAPI
	}
	return []Event{ev}
}

// geminiReason is the message of a retry notice's error: the API's own
// message when the notice carries its JSON body, else the error text
// without its class name.
func geminiReason(rest string) string {
	if i := strings.IndexByte(rest, '{'); i >= 0 {
		var body struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(rest[i:]), &body) == nil && body.Error.Message != "" {
			return clip(body.Error.Message, 2048)
		}
	}
	for _, prefix := range []string{"_ApiError:", "ApiError:", "Error:"} {
		if after, ok := strings.CutPrefix(rest, prefix); ok {
			rest = after
			break
		}
	}
	return clip(strings.TrimSpace(rest), 2048)
}

// geminiExitKinds are Gemini CLI's fatal exit codes (FatalError subclasses).
var geminiExitKinds = map[int]struct{ kind, hint string }{
	41:  {api.KindAuth, "set an auth method in ~/.gemini/settings.json or GEMINI_API_KEY for the daemon"},
	42:  {api.KindBadInput, "Gemini refused the input"},
	44:  {api.KindConfig, "Gemini's sandbox could not start"},
	52:  {api.KindConfig, "fix the Gemini settings file it names"},
	53:  {api.KindMaxTurns, "Gemini hit its session turn limit (model.maxSessionTurns)"},
	54:  {api.KindTool, "a Gemini tool failed fatally"},
	55:  {api.KindUntrustedWorkspace, "Gemini does not trust this folder: trust it once in interactive `gemini`, or have the operator add args = [\"--skip-trust\"] to card.toml [adapters.gemini]"},
	130: {api.KindCancelled, "Gemini was cancelled"},
}

func (p *geminiParser) Finish(exit ExitInfo) api.Result {
	res := api.Result{Answer: p.answer.String(), SessionID: p.sessionID, Turns: p.turns, ToolCalls: p.toolCalls}
	if r := p.result; r != nil && r.Stats != nil {
		res.Usage = api.Usage{InputTokens: r.Stats.InputTokens, OutputTokens: r.Stats.OutputTokens, CachedInputTokens: r.Stats.Cached}
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
			kind := api.KindAPI
			if r.Error != nil && r.Error.Message != "" {
				msg = r.Error.Message
				kind = classifyMessage(r.Error.Type + " " + msg)
			}
			res.IsError, res.Error = true, failure(kind, clip(msg, 2048))
		}
		return res
	}
	if exit.Code == 0 && exit.StdoutBytes > 0 {
		res.IsError, res.Error = true, failure(api.KindBadOutput, "gemini exited 0 without a result event; its stream-json output was cut short or changed shape")
	}
	return res
}
