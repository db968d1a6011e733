package spawn

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/card-dev/card/api"
)

// Event is one step of a run as a parser reads it: api.Event, the form it
// has inside `agents.event`, plus hints for the runner that are never sent.
// Its exported fields must stay api.Event's (a test holds them equal).
type Event struct {
	Kind      string `json:"kind"`
	SessionID string `json:"session_id,omitempty"`
	Model     string `json:"model,omitempty"`
	// Commands are the slash commands the CLI lists at its start.
	Commands []api.SlashCommand `json:"commands,omitempty"`
	// Text is assistant text for "text" and reasoning for "thinking" (a
	// piece when Delta, else whole), the notice of a "warning", or a
	// description for "other" lines that are not JSON.
	Text  string    `json:"text,omitempty"`
	Delta bool      `json:"delta,omitempty"`
	Tool  *api.Tool `json:"tool,omitempty"`
	// Output and IsError belong to "tool_result".
	Output  string `json:"output,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Attempt, MaxAttempts, DelayMs belong to "retry".
	Attempt     int   `json:"attempt,omitempty"`
	MaxAttempts int   `json:"max_attempts,omitempty"`
	DelayMs     int64 `json:"delay_ms,omitempty"`
	// QuietMs and KillAfterMs belong to "stalled".
	QuietMs     int64      `json:"quiet_ms,omitempty"`
	KillAfterMs int64      `json:"kill_after_ms,omitempty"`
	Usage       *api.Usage `json:"usage,omitempty"`
	// RateLimits belongs to "rate_limit".
	RateLimits []api.RateLimitWindow `json:"rate_limits,omitempty"`
	// Error is the message of an "error" event, or why a retry happened.
	Error string `json:"error,omitempty"`
	// Type is the CLI's own event type, for "other".
	Type string          `json:"type,omitempty"`
	Raw  json.RawMessage `json:"raw,omitempty"`

	// cause is what a retry says about the API, as an error kind (KindAuth,
	// KindRateLimit, KindNetwork, KindAPI): the runner bounds retries by it.
	// It is the parser's reading of the agent's own signal, never sent.
	cause string
	// unbounded marks a retry after which the agent has used up its own
	// bounded retries and waits with no end (Codex's "waiting for
	// network"): the runner ends the run there.
	unbounded bool
	// perCall marks a usage event that carries one model call's tokens
	// (and costUSD its cost), which the runner adds up; a usage event
	// without it carries the run's total so far.
	perCall bool
	costUSD float64
	// capsOnly marks a usage event that only tells card's caps the turn's
	// cost so far (an ACP usage_update, which says nothing of the turn's
	// tokens): it is not sent, as a usage of zero tokens would mislead a
	// client; the turn's usage and cost come in its last usage event.
	capsOnly bool
}

// Wire is e as it goes on the wire: the same fields, less the parser's
// hints for the runner, which are never sent.
func (e Event) Wire() api.Event {
	return api.Event{
		Kind: e.Kind, SessionID: e.SessionID, Model: e.Model, Commands: e.Commands, Text: e.Text, Delta: e.Delta, Tool: e.Tool,
		Output: e.Output, IsError: e.IsError, Attempt: e.Attempt, MaxAttempts: e.MaxAttempts, DelayMs: e.DelayMs,
		QuietMs: e.QuietMs, KillAfterMs: e.KillAfterMs,
		Usage: e.Usage, RateLimits: e.RateLimits, Error: e.Error, Type: e.Type, Raw: e.Raw,
	}
}

// ExitInfo is what the runner knows when the child is gone, for a parser
// that classifies failures from exit codes and stderr (Gemini).
type ExitInfo struct {
	// Code is the exit status, or -1 when the child was killed by a signal.
	Code int
	// StderrTail is the last few KiB of stderr.
	StderrTail string
	// StdoutBytes is how much stdout the child wrote.
	StdoutBytes int64
}

// Parser turns one run's stdout into events and a result. Feed gets one line
// at a time (without its newline; the slice is reused after Feed returns) and
// must never fail: unknown types and non-JSON lines become "other". Finish is
// called once, after the child is gone. A Parser is used by one goroutine.
type Parser interface {
	Feed(line []byte) []Event
	Finish(exit ExitInfo) api.Result
}

// Bounds on what a parser keeps, so memory stays bounded whatever the child
// prints.
const (
	maxAnswer   = 4 << 20  // accumulated answer text
	maxRaw      = 64 << 10 // Raw of an "other" event
	maxOtherTxt = 4 << 10  // Text of a non-JSON line
	maxOutput   = 64 << 10 // tool_result output in one event
)

// otherEvent keeps a line the parser does not know, bounded: a valid JSON
// object travels as Raw, anything else as (valid UTF-8) Text.
func otherEvent(typ string, line []byte) Event {
	ev := Event{Kind: api.EventOther, Type: typ}
	if len(line) <= maxRaw && len(line) > 0 && line[0] == '{' && json.Valid(line) {
		ev.Raw = append(json.RawMessage(nil), line...)
		return ev
	}
	if typ != "" {
		ev.Text = "event of " + strconv.Itoa(len(line)) + " bytes omitted"
		return ev
	}
	ev.Text = clip(string(line), maxOtherTxt)
	return ev
}

// clip shortens s to at most n bytes on a rune boundary. Strings decoded by
// encoding/json are already valid UTF-8, and json.Marshal replaces invalid
// bytes anyway, so an in-bound string is returned as is (the hot path).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for i := 0; i < 3 && len(s) > 0 && !utf8.ValidString(s); i++ {
		s = s[:len(s)-1]
	}
	return s
}

// answerBuf accumulates answer text up to maxAnswer.
type answerBuf struct {
	b         strings.Builder
	truncated bool
}

func (a *answerBuf) add(s string) {
	if a.b.Len()+len(s) > maxAnswer {
		s = clip(s, maxAnswer-a.b.Len())
		a.truncated = true
	}
	a.b.WriteString(s)
}

func (a *answerBuf) String() string { return a.b.String() }

// classifyMessage maps an API error message or status onto an error kind
// for CLIs that report errors as text (Codex, Gemini).
func classifyMessage(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case isNetworkMessage(m):
		return api.KindNetwork
	case strings.Contains(m, "401") || strings.Contains(m, "403") || strings.Contains(m, "unauthorized") ||
		strings.Contains(m, "authentication") || strings.Contains(m, "api key") || strings.Contains(m, "api_key") ||
		strings.Contains(m, "not logged in") || strings.Contains(m, "permission denied") || strings.Contains(m, "forbidden"):
		return api.KindAuth
	case strings.Contains(m, "429") || strings.Contains(m, "rate limit") || strings.Contains(m, "rate_limit") ||
		strings.Contains(m, "too many requests") || strings.Contains(m, "quota") || strings.Contains(m, "resource_exhausted") ||
		strings.Contains(m, "usage limit"):
		return api.KindRateLimit
	default:
		return api.KindAPI
	}
}

// networkMarks are how the CLIs say the API was never reached: Node's
// fetch and errno names, Rust's reqwest, and the CLIs' own words.
var networkMarks = []string{"econnrefused", "connection refused", "enotfound", "ehostunreach", "enetunreach",
	"econnreset", "fetch failed", "unable to connect", "could not connect", "connection failed",
	"connection error", "error sending request", "getaddrinfo", "network is unreachable", "no route to host",
	"waiting for network"}

// isNetworkMessage reports whether a lower-cased message says the API was
// never reached. An HTTP status in the message wins over these words: a
// 401 or 429 came from the API, so it was reached.
func isNetworkMessage(m string) bool {
	for _, w := range networkMarks {
		if strings.Contains(m, w) {
			return !httpStatusRE.MatchString(m)
		}
	}
	return false
}

// httpStatusRE finds an HTTP error status the way the CLIs print one
// ("401 Unauthorized", "status 429", "429 {", "(HTTP 503)", `"code":401,`),
// and not a number inside a port, a path or a timestamp.
var httpStatusRE = regexp.MustCompile(`(^|[\s(":])(4[0-9]{2}|5[0-9]{2})([\s){,.]|$)`)

func failure(kind, msg string) *api.RunError { return &api.RunError{Kind: kind, Message: msg} }
