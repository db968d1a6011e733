package spawn

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/card-dev/card/api"
)

// copilotParser reads `copilot --output-format json` (1.0.102): session.*,
// user.message, assistant.turn_start, assistant.message_delta,
// assistant.message, assistant.turn_retry, tool.execution_start/complete,
// assistant.usage, session.error and a final `result` with exitCode.
// Failures are a session.error with data.errorType ("authentication",
// "rate_limit", …) and data.statusCode, then result.exitCode 1.
type copilotParser struct {
	sessionID   string
	sentSession bool
	model       string
	answer      string
	streamed    map[string]bool // messageIds whose text arrived as deltas
	turns       int
	toolCalls   int
	usage       api.Usage
	result      *copilotLine
	// resumed says the run resumed a session (session.resume): its
	// result's figures are then the session's, earlier runs included.
	resumed bool
	err     *api.RunError
	retries int
	// lastFailure is the last model.call_failure: its HTTP status, its
	// kind ("api", "transport") and message, which the retry after it
	// carries.
	lastFailure struct {
		status       int
		kind, reason string
	}
}

func newCopilotParser() *copilotParser { return &copilotParser{streamed: map[string]bool{}} }

type copilotLine struct {
	Type string `json:"type"`
	Data struct {
		SessionID     string          `json:"sessionId"`
		SelectedModel string          `json:"selectedModel"`
		Model         string          `json:"model"`
		MessageID     string          `json:"messageId"`
		DeltaContent  string          `json:"deltaContent"`
		Content       string          `json:"content"`
		ToolCallID    string          `json:"toolCallId"`
		ToolName      string          `json:"toolName"`
		Arguments     json.RawMessage `json:"arguments"`
		Success       *bool           `json:"success"`
		Result        *struct {
			Content string `json:"content"`
		} `json:"result"`
		// Error is an object on tool.execution_complete; session.error
		// carries errorType and message instead.
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		ErrorType       string `json:"errorType"`
		Message         string `json:"message"`
		StatusCode      int    `json:"statusCode"`
		Reason          string `json:"reason"`
		FailureKind     string `json:"failureKind"`
		ErrorMessage    string `json:"errorMessage"`
		InputTokens     int64  `json:"inputTokens"`
		OutputTokens    int64  `json:"outputTokens"`
		CacheReadTokens int64  `json:"cacheReadTokens"`
	} `json:"data"`
	SessionID string `json:"sessionId"`
	ExitCode  *int   `json:"exitCode"`
	Usage     *struct {
		SessionDurationMs int64 `json:"sessionDurationMs"`
	} `json:"usage"`
}

func (p *copilotParser) session(id, model string) []Event {
	if id != "" {
		p.sessionID = id
	}
	if model != "" {
		p.model = model
	}
	if p.sentSession || p.sessionID == "" {
		return nil
	}
	p.sentSession = true
	return []Event{{Kind: api.EventSession, SessionID: p.sessionID, Model: p.model}}
}

func (p *copilotParser) Feed(line []byte) []Event {
	var l copilotLine
	if err := decodeLine(line, &l); (err != nil && !isTypeError(err)) || l.Type == "" {
		return []Event{otherEvent("", line)}
	}
	d := &l.Data
	switch l.Type {
	case "session.start", "session.resume":
		p.resumed = p.resumed || l.Type == "session.resume"
		return p.session(d.SessionID, d.SelectedModel)
	case "session.tools_updated", "session.model_change":
		if d.Model != "" {
			p.model = d.Model
		}
		return nil
	case "user.message":
		// The echo of the prompt; the client has it.
		return nil
	case "assistant.turn_start":
		p.turns++
		return nil
	case "assistant.message_delta":
		if d.DeltaContent == "" {
			return nil
		}
		p.streamed[d.MessageID] = true
		return []Event{{Kind: api.EventText, Text: d.DeltaContent, Delta: true}}
	case "assistant.message":
		if d.Model != "" {
			p.model = d.Model
		}
		if strings.TrimSpace(d.Content) != "" {
			// The answer is the last thing the agent said, not every
			// "let me look" before a tool call.
			p.answer = clip(d.Content, maxAnswer)
		}
		if d.Content == "" || p.streamed[d.MessageID] {
			return nil
		}
		return []Event{{Kind: api.EventText, Text: clip(d.Content, maxAnswer)}}
	case "tool.execution_start":
		p.toolCalls++
		return []Event{{Kind: api.EventToolUse, Tool: &api.Tool{Name: d.ToolName, ID: d.ToolCallID, Input: validRaw(d.Arguments)}}}
	case "tool.execution_complete":
		out := ""
		if d.Result != nil {
			out = d.Result.Content
		}
		if d.Error != nil && d.Error.Message != "" {
			out = d.Error.Message
		}
		failed := d.Success != nil && !*d.Success
		return []Event{{Kind: api.EventToolResult, Tool: &api.Tool{ID: d.ToolCallID}, Output: clip(out, maxOutput), IsError: failed}}
	case "model.call_failure":
		p.lastFailure.status, p.lastFailure.kind, p.lastFailure.reason = d.StatusCode, d.FailureKind, strings.Trim(strings.TrimSpace(d.ErrorMessage), `"`)
		return []Event{otherEvent(l.Type, line)}
	case "assistant.turn_retry":
		p.retries++
		return []Event{p.retry(d.Reason)}
	case "assistant.usage":
		p.usage.InputTokens += d.InputTokens
		p.usage.OutputTokens += d.OutputTokens
		p.usage.CachedInputTokens += d.CacheReadTokens
		u := api.Usage{InputTokens: d.InputTokens, OutputTokens: d.OutputTokens, CachedInputTokens: d.CacheReadTokens}
		return []Event{{Kind: api.EventUsage, Usage: &u, perCall: true}}
	case "session.error":
		msg := clip(strings.TrimSpace(d.Message), 2048)
		p.err = failure(copilotErrorKind(d.ErrorType, d.StatusCode, msg), msg)
		return []Event{{Kind: api.EventError, Error: msg}}
	case "result":
		p.result = &l
		return p.session(l.SessionID, "")
	}
	return []Event{otherEvent(l.Type, line)}
}

// retry is a turn_retry, with the cause and words of the call failure that
// preceded it: Copilot's own reason ("transient_auth_error", "rate_limit",
// "streaming_error") says little alone.
func (p *copilotParser) retry(reason string) Event {
	f := p.lastFailure
	p.lastFailure.status, p.lastFailure.kind, p.lastFailure.reason = 0, "", ""
	ev := Event{Kind: api.EventRetry, Attempt: p.retries, Error: reason}
	why := apiMessage(f.reason)
	switch {
	case f.status != 0 && why != "":
		ev.Error = clip(fmt.Sprintf("HTTP %d: %s", f.status, why), 2048)
	case f.status != 0:
		ev.Error = fmt.Sprintf("HTTP %d: %s", f.status, reason)
	case why != "":
		ev.Error = clip(why, 2048)
	}
	switch {
	case reason == "transient_auth_error":
		ev.cause = api.KindAuth
	case f.kind == "transport" && f.status == 0:
		ev.cause = api.KindNetwork
	default:
		ev.cause = copilotErrorKind(reason, f.status, f.reason)
	}
	return ev
}

// apiMessage is the message of an API error body Copilot quotes as its
// errorMessage (`{"message":…,"type":…}`), or the text itself.
func apiMessage(s string) string {
	var body struct {
		Message string `json:"message"`
	}
	if strings.HasPrefix(s, "{") && json.Unmarshal([]byte(s), &body) == nil && body.Message != "" {
		return body.Message
	}
	return s
}

// copilotErrorKind prefers Copilot's own errorType, then the HTTP status,
// then the words of the message.
func copilotErrorKind(errorType string, status int, msg string) string {
	switch strings.ToLower(errorType) {
	case "authentication", "authorization", "unauthorized":
		return api.KindAuth
	case "rate_limit", "quota", "rate_limited":
		return api.KindRateLimit
	}
	switch {
	case status == 401 || status == 403:
		return api.KindAuth
	case status == 429:
		return api.KindRateLimit
	}
	return classifyMessage(errorType + " " + msg)
}

// copilotNoAuth is what Copilot prints on stderr, exiting 1, when it has
// neither a GitHub login nor a custom provider.
const copilotNoAuth = "No authentication information found"

// copilotAuthHint is what to do when Copilot is not signed in.
const copilotAuthHint = "sign in with /login in interactive `copilot`, set COPILOT_GITHUB_TOKEN for the daemon, " +
	"or configure a custom provider (COPILOT_PROVIDER_BASE_URL) in card.toml [adapters.copilot] env"

func copilotNoAuthFailure() *api.RunError {
	return failure(api.KindAuth, "copilot: "+copilotNoAuth+" — "+copilotAuthHint)
}

func (p *copilotParser) Finish(exit ExitInfo) api.Result {
	res := api.Result{Answer: p.answer, SessionID: p.sessionID, Turns: p.turns, ToolCalls: p.toolCalls, Usage: p.usage}
	if r := p.result; r != nil && r.Usage != nil && !p.resumed {
		// A resumed session's sessionDurationMs counts the runs before
		// (1.0.102: 220 ms, then 1238 ms for a run of about a second):
		// the runner's own measure of the run is used instead.
		res.DurationMs = r.Usage.SessionDurationMs
	}
	switch {
	case p.err != nil:
		res.IsError, res.Error = true, p.err
	case strings.Contains(exit.StderrTail, copilotNoAuth):
		res.IsError, res.Error = true, copilotNoAuthFailure()
	case p.result != nil && p.result.ExitCode != nil && *p.result.ExitCode != 0:
		res.IsError, res.Error = true, failure(api.KindAPI, "copilot reported exit code "+strconv.Itoa(*p.result.ExitCode)+" without an error event")
	case p.result == nil && exit.Code == 0 && exit.StdoutBytes > 0:
		res.IsError, res.Error = true, failure(api.KindBadOutput, "copilot exited 0 without a result event; its JSON output was cut short or changed shape")
	}
	return res
}
