// Package spawn runs an agent CLI headless inside its boundary.
//
// It has three parts, each usable on its own: one argv builder per adapter
// (the boundary: which flags keep the agent read-only, editing, or — only when
// the operator allowed it — unprotected), the subprocess runner (prompt on
// stdin, deadline, cancel, process group, output limits), and one parser per
// adapter that turns the CLI's JSON stream into one event model and a result.
//
// Nothing else in the project builds an agent argv: a second builder would be
// a second boundary that the tests here do not pin.
package spawn

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/card-dev/card/api"
)

// Mode is the permission mode a client asks for on the wire.
type Mode string

const (
	// ModeReadOnly lets the agent read the working dir and nothing else. The
	// default, because a client that forgets to say is not asking for writes.
	ModeReadOnly Mode = "read_only"
	// ModeEdit lets the agent change files under the working dir, with no
	// shell: a shell can write anywhere, which is more than "edit" promises.
	ModeEdit Mode = "edit"
	// ModeBypass removes the agent-side protection. Refused unless the
	// operator set allow_bypass = true in card.toml.
	ModeBypass Mode = "bypass"
	// ModeAsk runs the read-only boundary unasked and puts every other tool
	// call to the client as a question (the run's Approver). Refused for an
	// adapter that cannot ask (agent.Capabilities.Ask).
	ModeAsk Mode = "ask"
)

// Modes lists every mode, in the order docs and tests walk them.
var Modes = []Mode{ModeReadOnly, ModeEdit, ModeBypass, ModeAsk}

// EffortLevels are the reasoning-effort levels a request may name. They are
// Claude's own (`--effort low|medium|high|xhigh|max`); anything else is
// refused at validation so a typo never reaches a CLI as a spawn failure.
var EffortLevels = []string{"low", "medium", "high", "xhigh", "max"}

// Request is everything a client may ask of one run that shapes the argv.
type Request struct {
	Adapter string
	// Mode is empty for the default, ModeReadOnly.
	Mode Mode
	// AllowedTools may only narrow what Mode allows. nil means "the mode's
	// default set"; an empty non-nil slice means "no tools at all".
	AllowedTools []string
	Model        string
	// MaxTurns is 0 for "the CLI's default".
	MaxTurns int
	Effort   string
	// SystemPrompt travels in a private file, never on argv: argv is
	// readable by every process of every user on the machine.
	SystemPrompt string
	// SystemPromptAppend appends SystemPrompt to the agent's own instead of
	// replacing it.
	SystemPromptAppend bool
	// SessionID is a new session id (a UUID) for the run to use.
	SessionID string
	// Resume is an existing session to continue.
	Resume string
	// UsageBase is what the CLI's session had used before this run, as the
	// previous run of it reported (Result.SessionUsage): a CLI that reports
	// its session's running total, earlier processes' turns included, has
	// this run charged the difference. Zero for a new session.
	UsageBase api.Usage
	// NoSession discards the session instead of leaving a resumable one.
	NoSession bool
	// AgentSessionDir is a private directory of card's (in its 0700
	// home) where a CLI that keeps its session in a file card names (Pi)
	// keeps it; "" when there is none, and such a session is refused.
	AgentSessionDir string
	// Cwd is where the agent runs: an absolute, existing directory.
	Cwd string
	// MCPEndpoint is the URL of an MCP server (streamable HTTP) the client
	// hands the agent for this run; "" for none. See withMCP.
	MCPEndpoint string
	// Extras are the operator's [adapters.<id>] args and env from card.toml.
	Extras Extras
	// AllowBypass is the operator's allow_bypass from card.toml.
	AllowBypass bool
	// ApprovalTimeout is how long the Approver waits for an answer in ask
	// mode; an adapter whose CLI bounds a question itself is given a
	// backstop above it.
	ApprovalTimeout time.Duration
	// Images are attached to the prompt, in order; refused for an adapter
	// whose Capabilities.Images is false (the daemon drops them first).
	Images []Image
	// MaxAPIRetries bounds the agent's own retries of a failed model call
	// (rate limit, overload, network); nil means DefaultMaxAPIRetries.
	MaxAPIRetries *int
	// StallSecs and StallKillSecs are the run's watchdog (Watchdog): nil
	// means DefaultStallSecs and no kill.
	StallSecs     *int
	StallKillSecs *int
	// MaxCostUSD and MaxTokens are the request's caps (nil: none); see
	// Caps for how each adapter enforces them.
	MaxCostUSD *float64
	MaxTokens  *int64
}

// Watchdog is the request's watchdog, with the defaults filled in.
func (r Request) Watchdog() Watchdog {
	w := Watchdog{After: DefaultStallSecs * time.Second}
	if r.StallSecs != nil {
		w.After = time.Duration(*r.StallSecs) * time.Second
	}
	if r.StallKillSecs != nil {
		w.KillAfter = time.Duration(*r.StallKillSecs) * time.Second
	}
	return w
}

// APIRetries is the request's retry bound, with the default filled in.
func (r Request) APIRetries() int {
	if r.MaxAPIRetries == nil {
		return DefaultMaxAPIRetries
	}
	return *r.MaxAPIRetries
}

// EffectiveMode is the mode a request runs in, with the default filled in.
func (r Request) EffectiveMode() Mode {
	if r.Mode == "" {
		return ModeReadOnly
	}
	return r.Mode
}

// BypassRefusedError is returned for a bypass request the operator has not
// allowed. It is its own type because the daemon answers it with its own
// code, and the person reading it needs the config key, not a field name.
type BypassRefusedError struct{ Adapter string }

func (e *BypassRefusedError) Error() string {
	return fmt.Sprintf("permission_mode %q is refused for %s: the operator has not set allow_bypass = true in card.toml; "+
		"use read_only or edit, or ask the operator to enable it", ModeBypass, e.Adapter)
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// sessionRE keeps a resume id to the shape the CLIs use, so it can never be
// read as a flag (`--resume --yolo`) or carry a path.
var sessionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// Validate checks what can be checked without knowing the adapter's flags.
// It returns *api.FieldError or *BypassRefusedError.
func (r Request) Validate() error {
	// card's private-file placeholder belongs to the plans card builds: in
	// a client's value it would become a path of the client's choosing.
	for _, f := range []struct {
		name   string
		values []string
	}{
		{"model", []string{r.Model}}, {"effort", []string{r.Effort}}, {"allowed_tools", r.AllowedTools},
		{"session_id", []string{r.SessionID}}, {"resume", []string{r.Resume}}, {"cwd", []string{r.Cwd}},
	} {
		for _, v := range f.values {
			if strings.Contains(v, filePrefix) {
				return &api.FieldError{Field: f.name, Message: fmt.Sprintf("%q holds card's private-file placeholder %q, which only card itself may write", v, filePrefix)}
			}
		}
	}
	switch r.EffectiveMode() {
	case ModeReadOnly, ModeEdit, ModeAsk:
	case ModeBypass:
		if !r.AllowBypass {
			return &BypassRefusedError{Adapter: r.Adapter}
		}
	default:
		return &api.FieldError{Field: "permission_mode", Message: fmt.Sprintf("unknown mode %q; use read_only (default), edit, ask or bypass", r.Mode)}
	}
	if r.Effort != "" && !contains(EffortLevels, r.Effort) {
		return &api.FieldError{Field: "effort", Message: fmt.Sprintf("unknown effort %q; use one of %s", r.Effort, strings.Join(EffortLevels, ", "))}
	}
	if n := r.APIRetries(); n < 0 || n > MaxAPIRetriesLimit {
		return &api.FieldError{Field: "max_api_retries", Message: fmt.Sprintf("must be between 0 and %d (retries of a failed model call; default %d)", MaxAPIRetriesLimit, DefaultMaxAPIRetries)}
	}
	if err := r.checkWatchdog(); err != nil {
		return err
	}
	if err := checkCaps(r.MaxCostUSD, r.MaxTokens); err != nil {
		return err
	}
	if r.MaxTurns < 0 {
		return &api.FieldError{Field: "max_turns", Message: "must be a positive number of turns (or omitted)"}
	}
	if strings.HasPrefix(r.Model, "-") || strings.ContainsAny(r.Model, "\x00\n\r") {
		return &api.FieldError{Field: "model", Message: fmt.Sprintf("%q is not a model name", r.Model)}
	}
	for _, t := range r.AllowedTools {
		if t == "" || strings.HasPrefix(t, "-") || strings.ContainsAny(t, ",\x00\n\r") {
			return &api.FieldError{Field: "allowed_tools", Message: fmt.Sprintf("%q is not a tool name (no commas, no leading dash)", t)}
		}
		if why := toolEntryProblem(t); why != "" {
			return &api.FieldError{Field: "allowed_tools", Message: fmt.Sprintf("%q %s", t, why)}
		}
	}
	if r.SessionID != "" && !uuidRE.MatchString(r.SessionID) {
		return &api.FieldError{Field: "session_id", Message: "must be a UUID such as 123e4567-e89b-12d3-a456-426614174000"}
	}
	if r.Resume != "" && !sessionRE.MatchString(r.Resume) {
		return &api.FieldError{Field: "resume", Message: "must be a session id the agent reported (letters, digits, '-', '.', '_', ':')"}
	}
	n := 0
	for _, b := range []bool{r.SessionID != "", r.Resume != "", r.NoSession} {
		if b {
			n++
		}
	}
	if n > 1 {
		return &api.FieldError{Field: "session_id", Message: "choose one of session_id (new), resume, or discard_session"}
	}
	if strings.ContainsRune(r.SystemPrompt, 0) {
		return &api.FieldError{Field: "system_prompt", Message: "contains a NUL byte"}
	}
	if len(r.SystemPrompt) > MaxSystemPromptBytes {
		return &api.FieldError{Field: "system_prompt", Message: fmt.Sprintf("is %d bytes; at most %d (%d KiB): a session keeps it for every turn, and a longer one is context for a file the agent reads, not a prompt",
			len(r.SystemPrompt), MaxSystemPromptBytes, MaxSystemPromptBytes>>10)}

	}
	if r.SystemPromptAppend && r.SystemPrompt == "" {
		return &api.FieldError{Field: "system_prompt", Message: "append asked for but the prompt is empty"}
	}
	return checkImages(r.Images)
}

// MaxSystemPromptBytes bounds a system prompt. Every run and every turn of
// a session carries its own, and the history keeps a session's: unbounded,
// a page could park megabytes of them in sessions.
const MaxSystemPromptBytes = 256 << 10

// toolEntryProblem refuses an allowed_tools entry a CLI could read as more
// than one. Claude splits its allowlist on whitespace outside parentheses
// ("Bash(git *) Edit" is two entries), so "Read(/) Bash" would pass the
// mode's check as Read and reach the CLI as Read and Bash. Whitespace inside
// balanced parentheses is a pattern's own ("Bash(git *)",
// "shell(git log:*)") and stays.
func toolEntryProblem(t string) string {
	depth := 0
	for _, r := range t {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
			if depth < 0 {
				return "has a ')' without its '('"
			}
		case unicode.IsSpace(r) && depth == 0:
			return "holds whitespace outside parentheses, which a CLI reads as two entries; give one tool or pattern per entry"
		}
	}
	if depth != 0 {
		return "has a '(' without its ')'"
	}
	return ""
}

// Extras are the operator's additions for one adapter, from card.toml
// [adapters.<id>]: args = [...] and env = {...}. They exist so a person can
// point an agent at their own provider (for example Codex's
// `-c model_providers.<name>={...}`), never to widen the boundary.
type Extras struct {
	Args []string
	Env  map[string]string
}

// ForbiddenFlags turn an agent's own protection off. None may appear in any
// argv card writes except the mapping of an operator-allowed bypass, and none
// may appear in operator extras at all: an extra is applied in every mode.
var ForbiddenFlags = []string{
	"--dangerously-skip-permissions",
	"--allow-dangerously-skip-permissions",
	"bypassPermissions",
	"--yolo",
	"--full-auto",
	"--dangerously-bypass-approvals-and-sandbox",
	"--dangerously-allow-all",
	"--skip-permissions-unsafe",
	"--allow-all-tools",
	"--allow-all-paths",
	"--auto",
}

// CheckExtras refuses operator extras that could widen the boundary: a
// forbidden flag anywhere (alone, as --flag=value, or inside one arg such as
// "--approval-mode yolo"), a flag card itself owns for that adapter, or an
// env key that would rewrite the agent-loop guard's stamp; and an arg one
// of the adapter's channels does not take (channels.go), since every run
// over that channel would fail. The daemon calls it at config load so a
// bad card.toml fails at startup, not mid-run.
func CheckExtras(adapter string, e Extras) error {
	ad, _ := Lookup(adapter) // unknown adapter: only the universal rules apply
	for i, a := range e.Args {
		where := fmt.Sprintf("card.toml [adapters.%s] args[%d]", adapter, i)
		if strings.Contains(a, filePrefix) {
			return fmt.Errorf("%s: %q uses card's private file placeholder; remove it", where, a)
		}
		for _, tok := range argTokens(a) {
			for _, f := range ForbiddenFlags {
				if tok == f {
					return fmt.Errorf("%s: %q turns off the agent's protection (%s); remove it — bypass is a per-request mode the operator enables with allow_bypass = true", where, a, f)
				}
			}
			if what, ok := ad.BypassValues[tok]; ok {
				return fmt.Errorf("%s: %q sets %s; remove it — bypass is a per-request mode the operator enables with allow_bypass = true", where, a, what)
			}
			for _, f := range ad.OwnedFlags {
				if tok == f {
					return fmt.Errorf("%s: %q sets %s, which card sets itself from the permission mode; remove it", where, a, f)
				}
			}
		}
		if ad.CheckExtraArg != nil { // nil only for an unknown adapter
			if why := ad.CheckExtraArg(e.Args, i); why != "" {
				return fmt.Errorf("%s: %s; remove it", where, why)
			}
		}
		if err := checkChannels(ad, where, e.Args, i); err != nil {
			return err
		}
	}
	for k := range e.Env {
		if strings.HasPrefix(k, "CAR_") || k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("card.toml [adapters.%s] env: key %q is not allowed (CAR_* belongs to the agent-loop guard)", adapter, k)
		}
	}
	return nil
}

// argTokens splits one argument the ways a CLI might read it: whole, on
// whitespace (an arg holding "--approval-mode yolo"), and on '=' (--flag=v).
func argTokens(a string) []string {
	var out []string
	for _, w := range strings.Fields(a) {
		out = append(out, w)
		if k, v, ok := strings.Cut(w, "="); ok {
			out = append(out, k, v)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// errUnsupported builds the *api.FieldError an adapter returns for a request
// field its CLI cannot honour. Refusing beats silently dropping: a client
// that asked for a turn cap and did not get one has lost a limit it relied on.
func errUnsupported(field, adapter, why string) error {
	return &api.FieldError{Field: field, Message: fmt.Sprintf("not supported by %s: %s", adapter, why)}
}

// narrowTools is what the mode offers narrowed by the request's
// allowed_tools: a tool it does not offer (kind reads the tool an entry
// names) is refused rather than dropped.
func narrowTools(adapter, offers string, mode Mode, offered, requested []string, kind func(string) string) ([]string, error) {
	if requested == nil {
		return offered, nil
	}
	out := []string{}
	for _, entry := range requested {
		if k := kind(entry); !contains(offered, k) {
			return nil, &api.FieldError{Field: "allowed_tools", Message: k + " is not available in " + string(mode) + " mode for " + adapter + " (it " + offers + " " +
				strings.Join(offered, ", ") + "); allowed_tools may only narrow the mode"}

		}
		out = append(out, entry)
	}
	return out, nil
}

// refusal is a request field a CLI cannot honour, and why, when it is set.
type refusal struct {
	set        bool
	field, why string
}

// refuse is the first refusal that is set, as errUnsupported says it.
func refuse(adapter string, rs ...refusal) error {
	for _, r := range rs {
		if r.set {
			return errUnsupported(r.field, adapter, r.why)
		}
	}
	return nil
}

// checkWatchdog refuses a watchdog that means nothing: a warning of no
// silence at all or past any run's deadline, or a kill that would come
// before the warning.
func (r Request) checkWatchdog() error {
	stall := DefaultStallSecs
	if r.StallSecs != nil {
		stall = *r.StallSecs
		if stall < 1 || stall > api.MaxInvokeTimeoutSecs {
			return &api.FieldError{Field: "stall_secs", Message: fmt.Sprintf("must be between 1 and %d seconds of silence (default %d)", api.MaxInvokeTimeoutSecs, DefaultStallSecs)}
		}
	}
	if r.StallKillSecs == nil || *r.StallKillSecs == 0 {
		return nil
	}
	if k := *r.StallKillSecs; k < 0 || k > api.MaxInvokeTimeoutSecs {
		return &api.FieldError{Field: "stall_kill_secs", Message: fmt.Sprintf("must be 0 (never end a run for its silence) or between stall_secs and %d seconds", api.MaxInvokeTimeoutSecs)}
	} else if k <= stall {
		return &api.FieldError{Field: "stall_kill_secs", Message: fmt.Sprintf("%d must be more than stall_secs (%d): the run is marked stalled before it is ended", k, stall)}
	}
	return nil
}
