package spawn

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Event kinds: every agent's stream is mapped onto these.
const (
	EventSession = "session"
	EventText    = "text"
	// EventThinking is the model's visible reasoning, which is not part of
	// the answer; like text it comes in pieces (Delta) or whole.
	EventThinking   = "thinking"
	EventToolUse    = "tool_use"
	EventToolResult = "tool_result"
	EventRetry      = "retry"
	EventUsage      = "usage"
	EventError      = "error"
	// EventWarning is something the agent said went wrong that does not
	// stop the run (Codex's "Model metadata ... not found"): a client shows
	// it as a notice, never as a failure.
	EventWarning = "warning"
	EventOther   = "other"
)

// Error kinds, in Result.Error.Kind and Error.Kind. The first group comes
// from the runner, the second from each CLI's own signals.
const (
	KindSpawn       = "spawn"
	KindTimeout     = "timeout"
	KindCancelled   = "cancelled"
	KindExit        = "exit"
	KindEmpty       = "empty"
	KindOutputLimit = "output_limit"

	KindAuth      = "auth"
	KindRateLimit = "rate_limit"
	// KindNetwork is an API the agent could not reach at all (connection
	// refused, no route, DNS): no HTTP status ever came back.
	KindNetwork            = "network"
	KindAPI                = "api"
	KindMaxTurns           = "max_turns"
	KindUntrustedWorkspace = "untrusted_workspace"
	KindBadOutput          = "bad_output"
	KindBadInput           = "bad_input"
	KindConfig             = "config"
	KindTool               = "tool"
)

// Event is one step of a run as a client sees it; it goes on the wire inside
// `agents.event`, so its JSON names are part of the protocol.
type Event struct {
	Kind      string `json:"kind"`
	SessionID string `json:"session_id,omitempty"`
	Model     string `json:"model,omitempty"`
	// Text is assistant text for "text" and reasoning for "thinking" (a
	// piece when Delta, else whole), the notice of a "warning", or a
	// description for "other" lines that are not JSON.
	Text  string `json:"text,omitempty"`
	Delta bool   `json:"delta,omitempty"`
	Tool  *Tool  `json:"tool,omitempty"`
	// Output and IsError belong to "tool_result".
	Output  string `json:"output,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Attempt, MaxAttempts, DelayMs belong to "retry".
	Attempt     int    `json:"attempt,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	DelayMs     int64  `json:"delay_ms,omitempty"`
	Usage       *Usage `json:"usage,omitempty"`
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
}

// Tool names a tool call; ID ties a tool_result to its tool_use.
type Tool struct {
	Name  string          `json:"name,omitempty"`
	ID    string          `json:"id,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// Usage is token accounting in CAR's names.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
}

// Result is the end of a run in CAR's field names.
type Result struct {
	Answer     string   `json:"answer"`
	SessionID  string   `json:"session_id,omitempty"`
	Turns      int      `json:"turns"`
	ToolCalls  int      `json:"tool_calls"`
	DurationMs int64    `json:"duration_ms"`
	CostUSD    *float64 `json:"total_cost_usd,omitempty"`
	Usage      Usage    `json:"usage"`
	IsError    bool     `json:"is_error"`
	Error      *Failure `json:"error,omitempty"`
}

// Failure is the wire form of why a run failed.
type Failure struct {
	Kind          string `json:"kind"`
	Message       string `json:"message"`
	ExitCode      *int   `json:"exit_code,omitempty"`
	StderrExcerpt string `json:"stderr_excerpt,omitempty"`
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
	Finish(exit ExitInfo) Result
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
	ev := Event{Kind: EventOther, Type: typ}
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
		return KindNetwork
	case strings.Contains(m, "401") || strings.Contains(m, "403") || strings.Contains(m, "unauthorized") ||
		strings.Contains(m, "authentication") || strings.Contains(m, "api key") || strings.Contains(m, "api_key") ||
		strings.Contains(m, "not logged in") || strings.Contains(m, "permission denied") || strings.Contains(m, "forbidden"):
		return KindAuth
	case strings.Contains(m, "429") || strings.Contains(m, "rate limit") || strings.Contains(m, "rate_limit") ||
		strings.Contains(m, "too many requests") || strings.Contains(m, "quota") || strings.Contains(m, "resource_exhausted") ||
		strings.Contains(m, "usage limit"):
		return KindRateLimit
	default:
		return KindAPI
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

func failure(kind, msg string) *Failure { return &Failure{Kind: kind, Message: msg} }
