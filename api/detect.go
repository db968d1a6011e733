package api

import (
	"encoding/json"
	"fmt"
)

// ReadOnlyEnforcement discloses how an adapter's read-only mode is enforced,
// so a host can tell a person the truth before letting an agent near their
// files: an OS sandbox is a wall, an allowlist is a fence the agent's own code
// keeps, and not_enforced means read-only is only a request.
type ReadOnlyEnforcement string

const (
	EnforcedByOSSandbox    ReadOnlyEnforcement = "os_sandbox"
	EnforcedByAllowlist    ReadOnlyEnforcement = "allowlist"
	EnforcedByAgentDefault ReadOnlyEnforcement = "agent_default"
	NotEnforced            ReadOnlyEnforcement = "not_enforced"
)

// Valid reports whether e is one of the four kinds.
func (e ReadOnlyEnforcement) Valid() bool {
	switch e {
	case EnforcedByOSSandbox, EnforcedByAllowlist, EnforcedByAgentDefault, NotEnforced:
		return true
	}
	return false
}

// Capabilities is the static, advisory feature set of an adapter's headless
// protocol. The JSON names are the wire names detection reports; every field
// is always serialised (false is information).
type Capabilities struct {
	ToolUse   bool `json:"tool_use"`
	MCP       bool `json:"mcp"`
	Hooks     bool `json:"hooks"`
	Sessions  bool `json:"sessions"`
	Streaming bool `json:"streaming"`
	// Images: card hands the agent the images attached to a request
	// (agents.invoke attachments); an adapter without it lists them in the
	// result's dropped_attachments instead.
	Images bool `json:"images"`
	// Ask: card can run the agent in permission_mode ask, where a tool call
	// outside read_only becomes a question to the client (agents.approve).
	Ask bool `json:"ask"`
}

// Capabilities (above) is the static, advisory feature set of an adapter's
// headless protocol, as detection reports it. Every field is always
// serialised (false is information).

// AuthKind is a heuristic guess at how an installed CLI is authenticated,
// made from the shape of its credential files and never from their values.
// Vendors change credential layouts without notice and modern installs keep
// secrets in OS keystores, so AuthKindUnknown is the safe default and no trust
// decision may rest on this field: use ExternalAgentHealth instead.
type AuthKind string

const (
	// AuthSubscription: an OAuth login against the vendor's subscription
	// product (Claude Pro/Max, ChatGPT Plus/Pro, a Google account).
	AuthSubscription AuthKind = "subscription"
	// AuthAPIKey: an API key is configured; usage is billed per request.
	AuthAPIKey AuthKind = "api_key"
	// AuthKindUnknown: a credential file exists but its shape matches no known
	// pattern, or the platform keeps credentials where we do not look.
	AuthKindUnknown AuthKind = "unknown"
	// AuthUnauthenticated: no credential file at all; installed but never
	// signed in.
	AuthUnauthenticated AuthKind = "unauthenticated"
)

// MarshalText writes the zero value as "unknown", because the wire contract
// says auth_kind defaults to unknown and an empty string is not a valid kind.
func (k AuthKind) MarshalText() ([]byte, error) {
	if k == "" {
		return []byte(AuthKindUnknown), nil
	}
	return []byte(k), nil
}

// ExecState names the two states of ExecutableStatus on the wire.
type ExecState string

const (
	StateRunnable ExecState = "runnable"
	StateUnusable ExecState = "unusable"
)

// ExecutableStatus says whether a spec's binary can be executed at all.
//
// It is written by detection and by nothing else. It lives apart from health
// because health is "whoever probed last writes": when executability was a
// health status, a later auth probe (which cannot run on a binary the OS
// refuses) overwrote the diagnosis with "unknown" and a known-broken binary
// looked fine again. Keeping it in its own field makes that overwrite
// impossible rather than merely discouraged.
//
// The zero value is runnable, which is also how a payload without an
// `execution` field reads: an absent diagnosis always meant runnable.
type ExecutableStatus struct {
	state     ExecState
	reason    string
	checkedAt uint64
}

// Runnable is the status of a binary detection could execute, or had no
// reason to doubt.
func Runnable() ExecutableStatus { return ExecutableStatus{state: StateRunnable} }

// Unusable is the status of a binary the OS refused to run. The reason must
// name the path and the cause, because the person's next step is to fix or
// remove that specific file. checkedAt is UNIX seconds.
func Unusable(reason string, checkedAt uint64) ExecutableStatus {
	return ExecutableStatus{state: StateUnusable, reason: reason, checkedAt: checkedAt}
}

// IsRunnable reports whether the binary may be handed to the OS.
func (s ExecutableStatus) IsRunnable() bool { return s.state != StateUnusable }

// UnusableReason returns the reason and true when the binary cannot run.
func (s ExecutableStatus) UnusableReason() (string, bool) {
	if s.IsRunnable() {
		return "", false
	}
	return s.reason, true
}

// CheckedAt is when detection established an unusable verdict (UNIX seconds);
// zero for runnable.
func (s ExecutableStatus) CheckedAt() uint64 { return s.checkedAt }

// Execution is ExecutableStatus as the wire carries it: the state, and the
// reason and when it was found for an unusable binary. rpc.discover
// describes ExecutableStatus by it (JSONSchemaAlias), since its own fields
// are unexported on purpose.
type Execution struct {
	State ExecState `json:"state"`
	// Reason names the path and the cause; only when unusable.
	Reason *string `json:"reason,omitempty"`
	// CheckedAt is when detection found it unusable (UNIX seconds); only
	// when unusable.
	CheckedAt *uint64 `json:"checked_at,omitempty"`
}

// JSONSchemaAlias tells the schema reflector to describe the wire form.
func (ExecutableStatus) JSONSchemaAlias() any { return Execution{} }

// MarshalJSON writes {"state":"runnable"} or
// {"state":"unusable","reason":…,"checked_at":…}.
func (s ExecutableStatus) MarshalJSON() ([]byte, error) {
	if s.IsRunnable() {
		return json.Marshal(Execution{State: StateRunnable})
	}
	return json.Marshal(Execution{State: StateUnusable, Reason: &s.reason, CheckedAt: &s.checkedAt})
}

// UnmarshalJSON accepts both states and rejects an unknown one, so a newer
// producer's state is not silently read as runnable.
func (s *ExecutableStatus) UnmarshalJSON(b []byte) error {
	var w Execution
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	switch w.State {
	case StateRunnable:
		*s = Runnable()
	case StateUnusable:
		var reason string
		var at uint64
		if w.Reason != nil {
			reason = *w.Reason
		}
		if w.CheckedAt != nil {
			at = *w.CheckedAt
		}
		*s = Unusable(reason, at)
	default:
		return fmt.Errorf("unknown execution state %q", w.State)
	}
	return nil
}

// Source says where detection found a binary, so a person can tell why the
// daemon picked the one it did (a pin they forgot, or a directory the login
// shell added).
type Source string

const (
	SourcePin        Source = "pin"         // CAR_*_BIN or card.toml
	SourcePath       Source = "path"        // the daemon's own $PATH
	SourceLoginShell Source = "login_shell" // added by the user's login shell PATH
	SourceWellKnown  Source = "well_known"  // a per-user install dir card knows about
)

// ExternalAgentSpec is the detection result for one installed adapter.
type ExternalAgentSpec struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	// BinaryPath is the absolute path detection resolved. Invocation uses it
	// instead of consulting PATH again, which closes the window in which a
	// planted binary could be picked up later.
	BinaryPath string `json:"binary_path"`
	// Version parsed from `<bin> --version`; absent when the probe timed out
	// or printed nothing version-like (the binary is still there).
	Version string `json:"version,omitempty"`
	// AuthKind is deprecated: it is a file-shape heuristic kept for older
	// clients. Health is the signal to use.
	AuthKind     AuthKind     `json:"auth_kind"`
	Capabilities Capabilities `json:"capabilities"`
	// DetectedAt is UNIX seconds.
	DetectedAt uint64 `json:"detected_at"`
	// Health is present only when the caller asked for it.
	Health *ExternalAgentHealth `json:"health,omitempty"`
	// Execution is detection's verdict on whether BinaryPath can run; no
	// health refresh writes it.
	Execution ExecutableStatus `json:"execution"`

	// Source (additive, omitted when empty): where BinaryPath was found.
	Source Source `json:"source,omitempty"`
	// ReadOnlyEnforcement (additive, omitted when empty): how this adapter's
	// read-only mode is enforced; see ReadOnlyEnforcement.
	ReadOnlyEnforcement ReadOnlyEnforcement `json:"read_only_enforcement,omitempty"`
	// EditEnforcement (additive, omitted when edit is held as the
	// adapter's page says, as for every built-in adapter): not_enforced
	// for an agent that may write without asking (an agent declared in
	// card.toml), whose edit mode then needs acknowledge_unenforced_edit.
	EditEnforcement ReadOnlyEnforcement `json:"edit_enforcement,omitempty"`
	// SpawnBlockReason (additive, omitted when empty) is filled by the daemon
	// from the cycle guard when the calling host could not spawn this agent,
	// so a host never offers an agent it would then be refused. Detection
	// itself never sets it.
	SpawnBlockReason string `json:"spawn_block_reason,omitempty"`
}

// UnmarshalJSON defaults auth_kind to unknown, as the wire contract says,
// for producers that omit it.
func (s *ExternalAgentSpec) UnmarshalJSON(b []byte) error {
	type plain ExternalAgentSpec
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if p.AuthKind == "" {
		p.AuthKind = AuthKindUnknown
	}
	*s = ExternalAgentSpec(p)
	return nil
}

// UnusableReason returns why BinaryPath cannot be executed, and true, when it
// cannot. Spawning code must ask this first: detection still returns broken
// installs (a person hunting for one must find it), so BinaryPath alone is no
// promise that the OS will run it.
//
// Execution is authoritative. The fallback to a health status of
// not_executable exists for payloads from producers that predate the split;
// dropping it early would silently turn a known-broken binary into a fine one.
func (s ExternalAgentSpec) UnusableReason() (string, bool) {
	if reason, ok := s.Execution.UnusableReason(); ok {
		return reason, true
	}
	if s.Health == nil || s.Health.Status != StatusNotExecutable {
		return "", false
	}
	if s.Health.Reason == "" {
		return "binary is not executable", true
	}
	return s.Health.Reason, true
}

// WithCompatHealth returns s with, when its binary is unusable and it carries
// no health answer, health {status: not_executable, reason} holding
// detection's reason. Clients written before the execution field learn that
// an install is broken only from health.status, and CAR keeps that signal
// on every detection answer for them, asked for or not; a spec that already
// has a health answer keeps it.
func (s ExternalAgentSpec) WithCompatHealth() ExternalAgentSpec {
	reason, bad := s.Execution.UnusableReason()
	if !bad || s.Health != nil {
		return s
	}
	s.Health = &ExternalAgentHealth{ID: s.ID, Status: StatusNotExecutable, Reason: reason, Details: map[string]any{}, CheckedAt: s.Execution.CheckedAt()}
	return s
}

// HealthStatus is the "can I invoke it now" bucket. Only StatusReady means
// yes; every other status comes with a reason a person can act on.
type HealthStatus string

const (
	StatusReady         HealthStatus = "ready"
	StatusNotConfigured HealthStatus = "not_configured"
	StatusExpired       HealthStatus = "expired"
	StatusNetworkError  HealthStatus = "network_error"
	// StatusNotExecutable is taken from detection: the status command is not
	// run on a binary the OS refuses, and detection's reason is reported.
	StatusNotExecutable HealthStatus = "not_executable"
	StatusUnknown       HealthStatus = "unknown"
)

// ExternalAgentHealth is the answer of one health check.
type ExternalAgentHealth struct {
	ID     string       `json:"id"`
	Status HealthStatus `json:"status"`
	// Details is the tool's parsed status output with anything secret-shaped
	// removed. Always an object, possibly empty.
	Details map[string]any `json:"details"`
	// Reason says what to do next; empty only for ready.
	Reason string `json:"reason,omitempty"`
	// CheckedAt is UNIX seconds.
	CheckedAt uint64 `json:"checked_at"`
	// RateLimits is card's addition: the latest rate-limit windows a run of
	// this adapter reported (as in usage.summary), absent when none has
	// since the daemon started.
	RateLimits []RateLimitSeen `json:"rate_limits,omitempty"`
}

// MarshalJSON keeps details an object even when nil, so clients can index it
// without a null check.
func (h ExternalAgentHealth) MarshalJSON() ([]byte, error) {
	type plain ExternalAgentHealth
	p := plain(h)
	if p.Details == nil {
		p.Details = map[string]any{}
	}
	return json.Marshal(p)
}
