package spawn

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/card-dev/card/api"
)

// codexParser reads `codex exec --json` (0.171.0): thread.started,
// turn.started/completed/failed, item.started/updated/completed, error.
type codexParser struct {
	sessionID string
	turns     int
	toolIDs   map[string]bool
	toolCalls int
	answer    string
	usage     api.Usage
	// base is the thread's total before the run, for a run resuming a
	// thread: `codex exec resume --json` 0.171.0 reports in turn.completed
	// the thread's total, its earlier processes' turns included (seen:
	// 10/5 then 110/55 for turns of 10/5 and 100/50), so the run's part is
	// what it added.
	base      api.Usage
	failed    *api.RunError
	completed bool
}

func (p *codexParser) setUsageBase(u api.Usage) { p.base = u }

func newCodexParser() *codexParser { return &codexParser{toolIDs: map[string]bool{}} }

type codexLine struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Message  string `json:"message"`
	Usage    *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Item *struct {
		ID               string          `json:"id"`
		Type             string          `json:"type"`
		Text             string          `json:"text"`
		Message          string          `json:"message"`
		Command          string          `json:"command"`
		AggregatedOutput string          `json:"aggregated_output"`
		ExitCode         *int            `json:"exit_code"`
		Status           string          `json:"status"`
		Server           string          `json:"server"`
		Tool             string          `json:"tool"`
		Arguments        json.RawMessage `json:"arguments"`
		Changes          json.RawMessage `json:"changes"`
		Query            string          `json:"query"`
		Result           json.RawMessage `json:"result"`
		Error            *struct {
			Message string `json:"message"`
		} `json:"error"`
	} `json:"item"`
}

func (p *codexParser) Feed(line []byte) []Event {
	var l codexLine
	if err := decodeLine(line, &l); (err != nil && !isTypeError(err)) || l.Type == "" {
		return []Event{otherEvent("", line)}
	}
	switch l.Type {
	case "thread.started":
		p.sessionID = l.ThreadID
		return []Event{{Kind: api.EventSession, SessionID: l.ThreadID}}
	case "turn.started":
		p.turns++
		return nil
	case "turn.completed":
		p.completed = true
		if l.Usage == nil {
			return nil
		}
		p.usage.InputTokens += l.Usage.InputTokens
		p.usage.OutputTokens += l.Usage.OutputTokens
		p.usage.CachedInputTokens += l.Usage.CachedInputTokens
		u := usageMinus(p.usage, p.base)
		return []Event{{Kind: api.EventUsage, Usage: &u}}
	case "turn.failed":
		msg := "codex turn failed"
		if l.Error != nil && l.Error.Message != "" {
			msg = l.Error.Message
		}
		p.failed = failure(classifyMessage(msg), clip(msg, 2048))
		return []Event{{Kind: api.EventError, Error: clip(msg, 2048)}}
	case "error":
		if ev, ok := codexRetry(l.Message); ok {
			return []Event{ev}
		}
		// A stream-level error: the CLI is about to give up (a later
		// turn.completed clears it).
		msg := clip(l.Message, 2048)
		p.failed = failure(classifyMessage(msg), msg)
		return []Event{{Kind: api.EventError, Error: msg}}
	case "item.started", "item.updated", "item.completed":
		if l.Item == nil {
			return []Event{otherEvent(l.Type, line)}
		}
		return p.item(l.Type, l, line)
	}
	return []Event{otherEvent(l.Type, line)}
}

func (p *codexParser) item(phase string, l codexLine, line []byte) []Event {
	it := l.Item
	done := phase == "item.completed"
	switch it.Type {
	case "agent_message":
		// codex exec --json has no deltas: a message arrives whole, once
		// it is complete.
		if !done {
			return nil
		}
		p.answer = clip(it.Text, maxAnswer)
		return []Event{{Kind: api.EventText, Text: it.Text}}
	case "reasoning":
		if !done || it.Text == "" {
			return nil
		}
		return []Event{{Kind: api.EventThinking, Text: clip(it.Text, maxAnswer)}}
	case "error":
		// Item errors are warnings the run survives (the fixture's "model
		// metadata not found"); only turn.failed / error end it.
		if !done {
			return nil
		}
		return []Event{{Kind: api.EventWarning, Text: clip(it.Message, 2048)}}
	case "command_execution", "mcp_tool_call", "file_change", "web_search":
		name, input := codexTool(l)
		var evs []Event
		if !p.toolIDs[it.ID] {
			if len(p.toolIDs) < 1<<16 {
				p.toolIDs[it.ID] = true
			}
			p.toolCalls++
			evs = append(evs, Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: name, ID: it.ID, Input: input}})
		}
		if done {
			out := it.AggregatedOutput
			if out == "" && len(it.Result) > 0 {
				out = string(it.Result)
			}
			isErr := it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0)
			if it.Error != nil && it.Error.Message != "" {
				out, isErr = it.Error.Message, true
			}
			evs = append(evs, Event{Kind: api.EventToolResult, Tool: &api.Tool{Name: name, ID: it.ID}, Output: clip(out, maxOutput), IsError: isErr})
		}
		return evs
	}
	if !done {
		return nil
	}
	return []Event{otherEvent(phase+"/"+it.Type, line)}
}

// codexReconnect is how Codex 0.171 announces a retry of a model call, on
// an `error` line: "Reconnecting... 2/5 (<why>)", or, once its own retries
// of a request are used up and the API still cannot be reached,
// "Reconnecting... waiting for network (<why>)", after which it waits with
// no end.
var codexReconnect = regexp.MustCompile(`^Reconnecting\.\.\. (?:(\d+)/(\d+)|(waiting for network))\s*(?:\((.*)\))?\s*$`)

// codexRetry reads an `error` line that is a retry announcement.
func codexRetry(msg string) (Event, bool) {
	m := codexReconnect.FindStringSubmatch(strings.TrimSpace(msg))
	if m == nil {
		return Event{}, false
	}
	why := clip(m[4], 2048)
	if why == "" {
		why = clip(msg, 2048)
	}
	ev := Event{Kind: api.EventRetry, Error: why, cause: classifyMessage(why)}
	if m[3] != "" {
		ev.cause, ev.unbounded = api.KindNetwork, true
		return ev, true
	}
	ev.Attempt, _ = strconv.Atoi(m[1])
	ev.MaxAttempts, _ = strconv.Atoi(m[2])
	return ev, true
}

func codexTool(l codexLine) (string, json.RawMessage) {
	it := l.Item
	var v any
	name := it.Type
	switch it.Type {
	case "command_execution":
		v = map[string]string{"command": it.Command}
	case "mcp_tool_call":
		name = it.Server + "." + it.Tool
		return name, validRaw(it.Arguments)
	case "file_change":
		return name, validRaw(it.Changes)
	case "web_search":
		v = map[string]string{"query": it.Query}
	}
	b, _ := json.Marshal(v)
	return name, validRaw(b)
}

func (p *codexParser) Finish(exit ExitInfo) api.Result {
	res := api.Result{Answer: p.answer, SessionID: p.sessionID, Turns: p.turns, ToolCalls: p.toolCalls, Usage: usageMinus(p.usage, p.base),
		SessionUsage: totalOf(p.usage)}
	switch {
	case p.failed != nil && !(p.completed && exit.Code == 0):
		res.IsError, res.Error = true, p.failed
		if p.failed.Kind == api.KindAuth {
			p.failed.Message += " — sign in with `codex login` or give the provider's key to the daemon's environment"
		}
	case exit.Code != 0 && strings.Contains(exit.StderrTail, "Not logged in"):
		res.IsError, res.Error = true, failure(api.KindAuth, "codex is not logged in — run `codex login`")
	case exit.Code == 0 && exit.StdoutBytes > 0 && !p.completed:
		res.IsError, res.Error = true, failure(api.KindBadOutput, "codex exited 0 without turn.completed; its --json output was cut short or changed shape")
	}
	return res
}

// codexRateLimits is the app-server's account/rateLimits/updated (0.171.0),
// which Codex sends after a model call whose response carried its
// x-codex-primary-* and x-codex-secondary-* headers (used-percent,
// window-minutes, reset-at): the two windows of the account's limit,
// whatever the sign-in. `codex exec --json` prints nothing of them.
type codexRateLimits struct {
	RateLimits struct {
		LimitID   string           `json:"limitId"`
		Primary   *codexRateWindow `json:"primary"`
		Secondary *codexRateWindow `json:"secondary"`
	} `json:"rateLimits"`
}

type codexRateWindow struct {
	UsedPercent        *float64 `json:"usedPercent"`
	WindowDurationMins *int64   `json:"windowDurationMins"`
	ResetsAt           *float64 `json:"resetsAt"`
}

// codexRateLimitEvent reads an account/rateLimits/updated; false when it
// carries no window.
func codexRateLimitEvent(params json.RawMessage) (Event, bool) {
	var p codexRateLimits
	if !decodeParams(params, &p) {
		return Event{}, false
	}
	prefix := ""
	if id := p.RateLimits.LimitID; id != "" && id != "codex" {
		prefix = clip(id, 64) + "/"
	}
	var ws []api.RateLimitWindow
	for _, w := range []struct {
		name string
		win  *codexRateWindow
	}{{"primary", p.RateLimits.Primary}, {"secondary", p.RateLimits.Secondary}} {
		if w.win == nil {
			continue
		}
		rw := api.RateLimitWindow{Window: prefix + w.name, ResetsAt: unixTime(w.win.ResetsAt)}
		if u := w.win.UsedPercent; u != nil && *u >= 0 && *u <= 1000 {
			pct := *u
			rw.UsedPercent = &pct
		}
		if m := w.win.WindowDurationMins; m != nil && *m > 0 && *m <= 366*24*60 {
			rw.WindowMinutes = int(*m)
		}
		ws = append(ws, rw)
	}
	if len(ws) == 0 {
		return Event{}, false
	}
	return Event{Kind: api.EventRateLimit, RateLimits: ws}, true
}
