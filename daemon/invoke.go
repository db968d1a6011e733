package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// Timeout bounds for agents.invoke: a run with no deadline is a process that
// can sit on a model session forever, and one over an hour is almost always
// a client bug, so both ends are clamped rather than trusted.
const (
	DefaultInvokeTimeout = 300 * time.Second
	MinInvokeTimeoutSecs = 1
	MaxInvokeTimeoutSecs = 3600
)

// RunIDEnv is set in every agent's environment to its run id, so a daemon
// restarted after a crash can tell a leftover process of its own run from an
// unrelated process that happens to reuse the recorded process group id.
const RunIDEnv = "CARD_RUN_ID"

// InvokeParams are agents.invoke's (and agents.invoke_external's) params.
type InvokeParams struct {
	// ID is the adapter to run (claude-code, codex, gemini, ...).
	ID string `json:"id"`
	// Task is the prompt. It goes to the agent on stdin, never on argv.
	Task string `json:"task"`
	// InvokedBy is the calling host's own adapter id, when the host is
	// itself an agent; the guard seeds the chain with it.
	InvokedBy string `json:"invoked_by,omitempty"`
	// Cwd is where the agent runs: an absolute, existing directory. It may
	// be omitted only in read_only mode (then the daemon user's home).
	Cwd string `json:"cwd,omitempty"`
	// PermissionMode is read_only (default), edit or bypass.
	PermissionMode string   `json:"permission_mode,omitempty"`
	AllowedTools   []string `json:"allowed_tools,omitempty"`
	Model          string   `json:"model,omitempty"`
	MaxTurns       int      `json:"max_turns,omitempty"`
	Effort         string   `json:"effort,omitempty"`
	// SystemPrompt replaces the agent's own system prompt, or with
	// SystemPromptAppend is added to it. It travels in a private file, never
	// on argv.
	SystemPrompt       string `json:"system_prompt,omitempty"`
	SystemPromptAppend bool   `json:"system_prompt_append,omitempty"`
	// SessionID asks for a new session with this UUID; Resume continues one;
	// DiscardSession leaves no resumable session behind (where the agent
	// can: the refusal names the adapters that cannot).
	SessionID      string `json:"session_id,omitempty"`
	Resume         string `json:"resume,omitempty"`
	DiscardSession bool   `json:"discard_session,omitempty"`
	// TimeoutSecs defaults to 300 and is clamped to [1, 3600].
	TimeoutSecs int `json:"timeout_secs,omitempty"`
	// Stream answers at once with {run_id, accepted} and sends agents.event
	// notifications; without it the answer is the finished run.
	Stream bool `json:"stream,omitempty"`
	// AcknowledgeUnenforcedReadOnly must be true to run an adapter whose
	// read-only mode nothing enforces (detect's read_only_enforcement =
	// not_enforced) in read_only mode: the caller has to know that "read
	// only" is then only a request to the model.
	AcknowledgeUnenforcedReadOnly bool `json:"acknowledge_unenforced_read_only,omitempty"`
}

// Validate checks every field that can be judged without the daemon's state,
// so a bad request is a -32602 naming its field and never becomes a run.
func (p *InvokeParams) Validate() error {
	if strings.TrimSpace(p.ID) == "" {
		return rpc.InvalidField("id", "required: the adapter to run, one of %s", strings.Join(spawn.IDs(), ", "))
	}
	if strings.TrimSpace(p.Task) == "" {
		return rpc.InvalidField("task", "required: the task for the agent must not be empty")
	}
	if strings.ContainsRune(p.Task, 0) {
		return rpc.InvalidField("task", "contains a NUL byte")
	}
	mode := spawn.Mode(p.PermissionMode)
	switch mode {
	case "", spawn.ModeReadOnly, spawn.ModeEdit, spawn.ModeBypass:
	default:
		return rpc.InvalidField("permission_mode", "unknown mode %q; use read_only (default), edit or bypass", p.PermissionMode)
	}
	if p.Cwd == "" {
		if mode == spawn.ModeEdit || mode == spawn.ModeBypass {
			return rpc.InvalidField("cwd", "required when permission_mode is %s: say which directory the agent may change", mode)
		}
	} else {
		if !filepath.IsAbs(p.Cwd) {
			return rpc.InvalidField("cwd", "%q is not an absolute path", p.Cwd)
		}
		st, err := os.Stat(p.Cwd)
		if err != nil {
			return rpc.InvalidField("cwd", "%q does not exist or cannot be read", p.Cwd)
		}
		if !st.IsDir() {
			return rpc.InvalidField("cwd", "%q is not a directory", p.Cwd)
		}
	}
	if p.MaxTurns < 0 {
		return rpc.InvalidField("max_turns", "must be a positive number of turns (or omitted)")
	}
	if p.InvokedBy != "" && strings.ContainsAny(p.InvokedBy, ",\x00\n\r") {
		return rpc.InvalidField("invoked_by", "%q is not one adapter id (no commas)", p.InvokedBy)
	}
	// The rest is spawn's own request check; bypass is judged later, after
	// the guard, so it is reported with its own code.
	req := p.spawnRequest()
	req.AllowBypass = true
	return req.Validate()
}

// Timeout is the run's deadline, with the default and the clamp applied.
func (p *InvokeParams) Timeout() time.Duration {
	secs := p.TimeoutSecs
	switch {
	case secs == 0:
		return DefaultInvokeTimeout
	case secs < MinInvokeTimeoutSecs:
		secs = MinInvokeTimeoutSecs
	case secs > MaxInvokeTimeoutSecs:
		secs = MaxInvokeTimeoutSecs
	}
	return time.Duration(secs) * time.Second
}

// spawnRequest is the argv-shaping part of the params.
func (p *InvokeParams) spawnRequest() spawn.Request {
	return spawn.Request{
		Adapter:            p.ID,
		Mode:               spawn.Mode(p.PermissionMode),
		AllowedTools:       p.AllowedTools,
		Model:              p.Model,
		MaxTurns:           p.MaxTurns,
		Effort:             p.Effort,
		SystemPrompt:       p.SystemPrompt,
		SystemPromptAppend: p.SystemPromptAppend,
		SessionID:          p.SessionID,
		Resume:             p.Resume,
		NoSession:          p.DiscardSession,
		Cwd:                p.Cwd,
	}
}

// InvokeResult is a finished run: the agent's result in CAR's names plus
// which run it was and how it ended.
type InvokeResult struct {
	spawn.Result
	RunID    string       `json:"run_id"`
	Adapter  string       `json:"adapter"`
	Ancestry []string     `json:"ancestry"`
	Status   store.Status `json:"status"`
}

// InvokeAccepted is the immediate answer to a streaming invoke.
type InvokeAccepted struct {
	RunID    string   `json:"run_id"`
	Accepted bool     `json:"accepted"`
	Adapter  string   `json:"adapter"`
	Ancestry []string `json:"ancestry"`
}

// gateInput is everything the pre-run checks look at, as values, so the
// order of refusals is a pure function a test can walk.
type gateInput struct {
	Adapter     string
	InvokedBy   string
	Mode        spawn.Mode
	Acknowledge bool
	Guard       guard.Snapshot
	AllowBypass bool
	// BinaryErr is detection's answer for the adapter (nil: runnable).
	BinaryErr    error
	ReadOnly     detect.ReadOnlyEnforcement
	Running      int
	MaxRuns      int
	ShuttingDown bool
}

// gate applies the checks in their documented order — guard, shutting down,
// bypass, installed/usable, unenforced read-only, concurrency — and returns
// the seeded ancestry (recorded on the run either way) and the first
// refusal. The guard comes first because a looping call must be stopped
// whatever else is wrong with it, and the cap last because it is the only
// transient one.
func gate(in gateInput) ([]string, error) {
	ref, seeded := in.Guard.Check(in.Adapter, in.InvokedBy)
	if ref != nil {
		return seeded, ref
	}
	if in.ShuttingDown {
		return seeded, errShuttingDown
	}
	if in.Mode == spawn.ModeBypass && !in.AllowBypass {
		return seeded, &spawn.BypassRefusedError{Adapter: in.Adapter}
	}
	if in.BinaryErr != nil {
		return seeded, in.BinaryErr
	}
	if in.ReadOnly == detect.NotEnforced && (in.Mode == "" || in.Mode == spawn.ModeReadOnly) && !in.Acknowledge {
		return seeded, &unenforcedReadOnlyError{Adapter: in.Adapter, Enforcement: in.ReadOnly}
	}
	if in.Running >= in.MaxRuns {
		return seeded, &tooManyRunsError{Running: in.Running, Max: in.MaxRuns}
	}
	return seeded, nil
}

// errShuttingDown refuses a run asked for while the daemon shuts down.
var errShuttingDown = errors.New("the daemon is shutting down and starts no new runs; retry once it is back")

// unenforcedReadOnlyError refuses a read_only run of an adapter that cannot
// enforce it, unless the request acknowledged that.
type unenforcedReadOnlyError struct {
	Adapter     string
	Enforcement detect.ReadOnlyEnforcement
}

func (e *unenforcedReadOnlyError) Error() string {
	return fmt.Sprintf("%s cannot enforce read_only: nothing stops the agent from writing files or running commands, "+
		"so read_only is only a request to the model. Pass acknowledge_unenforced_read_only = true to run it anyway, "+
		"or use an adapter whose read_only is enforced", e.Adapter)
}

// tooManyRunsError refuses a run over max_concurrent_runs: refused, never
// queued, because a queue would hide from the caller that nothing runs yet.
type tooManyRunsError struct{ Running, Max int }

func (e *tooManyRunsError) Error() string {
	return fmt.Sprintf("card is already running %d agents (max_concurrent_runs = %d); the run was refused, not queued: "+
		"retry when one ends, or raise max_concurrent_runs in card.toml", e.Running, e.Max)
}

// refusedError is a gate's refusal of a run that was recorded (status
// refused) as RunID; Err is the refusal.
type refusedError struct {
	RunID string
	Err   error
}

func (e *refusedError) Error() string { return e.Err.Error() }
func (e *refusedError) Unwrap() error { return e.Err }

// childEnv is the agent's environment: the daemon's startup environment
// with PATH set to the resolved search path (a supervisor-started daemon's
// own PATH would not find node), the guard's stamp, the run id, and without
// NOTIFY_SOCKET (an agent must not be able to tell systemd the daemon is
// stopping). The operator's adapter env is added later by the plan.
func childEnv(base map[string]string, path string, child []string, runID string) []string {
	out := make([]string, 0, len(base)+2)
	for k, v := range base {
		switch k {
		case "PATH", "NOTIFY_SOCKET", RunIDEnv:
			continue
		}
		out = append(out, k+"="+v)
	}
	if path != "" {
		out = append(out, "PATH="+path)
	}
	out = append(out, RunIDEnv+"="+runID)
	return guard.StampEnv(out, child)
}

// outcome maps how spawn ended a run onto the recorded status. cause is why
// the run's context was cancelled, when it was.
func outcome(err error, cause error) store.Status {
	if err == nil {
		return store.StatusSucceeded
	}
	var se *spawn.Error
	if errors.As(err, &se) {
		switch se.Kind {
		case spawn.KindTimeout:
			return store.StatusTimedOut
		case spawn.KindCancelled:
			if errors.Is(cause, errShutdown) {
				return store.StatusInterrupted
			}
			return store.StatusCancelled
		}
	}
	return store.StatusFailed
}

var (
	errShutdown     = errors.New("card is shutting down")
	errUserCancel   = errors.New("cancelled by agents.cancel")
	errDisconnected = errors.New("the client that started it disconnected (cancel_on_disconnect = true)")
)
