package spawn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/card-dev/card/api"
)

// Limits bound what one run may cost the daemon, whatever the child prints.
type Limits struct {
	// MaxLine is the longest stdout line handed to the parser; a longer one
	// is skipped (and reported as an "other" event), never buffered whole.
	MaxLine int64
	// MaxOutput is the total of stdout and stderr; past it the run is ended
	// with kind output_limit.
	MaxOutput int64
	// StderrTail is how much of the end of stderr is kept for messages.
	StderrTail int
	// KillGrace is how long the group gets between SIGTERM and SIGKILL.
	KillGrace time.Duration
}

// DefaultLimits are generous for a real agent run (a long Claude session
// with tool results is tens of MB) and still bounded.
var DefaultLimits = Limits{MaxLine: 8 << 20, MaxOutput: 256 << 20, StderrTail: 8 << 10, KillGrace: 2 * time.Second}

func (l Limits) withDefaults() Limits {
	if l.MaxLine <= 0 {
		l.MaxLine = DefaultLimits.MaxLine
	}
	if l.MaxOutput <= 0 {
		l.MaxOutput = DefaultLimits.MaxOutput
	}
	if l.StderrTail <= 0 {
		l.StderrTail = DefaultLimits.StderrTail
	}
	if l.KillGrace <= 0 {
		l.KillGrace = DefaultLimits.KillGrace
	}
	return l
}

// RunSpec is one run: the plan, the prompt and where events go.
type RunSpec struct {
	Plan Plan
	// Prompt is written to stdin (as the plan's Input says), then stdin is
	// closed: Codex hangs and Claude waits while stdin stays open. A plan
	// with a Session sends it, with the Input's images, inside the
	// protocol instead (ACP's session/prompt); it is never on argv either
	// way.
	Prompt string
	// BaseEnv is the child's environment before the plan's additions: the
	// daemon's env with the resolved PATH and the guard's CAR_INVOKED_BY
	// stamp already in it. The runner reads no environment of its own.
	BaseEnv []string
	Limits  Limits
	// OnStart is called once the child runs, with its pid and process group
	// (equal: the child leads its own group), so the daemon can record the
	// group and end it after a crash.
	OnStart func(pid, pgid int)
	// OnEvent receives events in order, never concurrently.
	OnEvent func(Event)
	// OnState is told each change of what the run is doing (starting
	// first), in order; it must not block.
	OnState func(api.RunState)
	// Parser reads stdout; nil means every line becomes an "other" event.
	// A plan with a Session is read by its protocol, and
	// Parser is not used.
	Parser Parser
	// TempDir is where the run's private directory is created; "" means
	// the TMPDIR of the child's environment, else /tmp.
	TempDir string
	// Approver decides the tool calls of an ask-mode plan (Plan.Ask); a
	// plan that asks is refused without one.
	Approver Approver
	// ImageMemory is the daemon's bound on image bytes in memory. A plan
	// with a Session carries its images whole inside a protocol message:
	// the run waits here for room before reading them from disk, and gives
	// it back when its turn is over. nil: no bound.
	ImageMemory *Budget
}

// Error is a failed run, typed by Kind (the Kind* constants). Command is
// the argv the runner started (never the prompt), for a person debugging.
type Error struct {
	Kind          string
	Message       string
	Command       string
	ExitCode      int // -1 when there is no exit status
	StderrExcerpt string
	Err           error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Kind, e.Message)
	if e.Command != "" {
		fmt.Fprintf(&b, " (command: %s)", e.Command)
	}
	if e.StderrExcerpt != "" {
		fmt.Fprintf(&b, "; stderr: %s", e.StderrExcerpt)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// result is the Result of a run that failed with e before its child ran.
func (e *Error) result() api.Result {
	return api.Result{IsError: true, Error: &api.RunError{Kind: e.Kind, Message: e.Message}}
}

// Run starts the plan's program and runs its one turn: the prompt on
// stdin, then stdout through the parser until the child and its whole
// process group are gone; or, for a plan with a Session, one turn of that
// protocol, the agent ended once the turn is over (these CLIs wait for a
// next prompt instead of exiting). It returns the result (partial when the
// run failed) and, when the run failed, an *Error whose Kind matches
// result.Error.Kind.
//
// Deadline and cancel both end the whole group: SIGTERM, then SIGKILL after
// KillGrace. A group member left behind after the leader exits is ended the
// same way, so no grandchild outlives the run.
func Run(ctx context.Context, spec RunSpec) (api.Result, error) {
	plan := spec.Plan
	if b, ok := spec.Parser.(usageBaser); ok {
		b.setUsageBase(plan.UsageBase)
	}
	a := newRunner(plan, false, spec.ImageMemory)
	c := newChild(childSpec{Plan: plan, BaseEnv: spec.BaseEnv, Limits: spec.Limits, TempDir: spec.TempDir,
		OnStart: spec.OnStart, OnState: spec.OnState, Approver: spec.Approver})
	a.child = c
	res, err := a.run(ctx, spec)
	if plan.NoSessionID {
		res.SessionID = ""
	}
	return res, err
}

// run is Run's agent opened for its one turn.
func (a *runner) run(ctx context.Context, spec RunSpec) (api.Result, error) {
	c := a.child
	if e := c.prepare(ctx); e != nil {
		c.cleanup()
		return e.result(), e
	}
	ts := TurnSpec{Prompt: spec.Prompt, OnEvent: spec.OnEvent, OnState: spec.OnState}
	var proto protocol
	if a.plan.Session != nil {
		var err error
		if proto, err = protocolOf(a.plan); err != nil {
			c.cleanup()
			e := c.early(api.KindSpawn, err.Error(), err)
			return e.result(), e
		}
		// The protocol carries the images inside its prompt.
		ts.Images = a.plan.Input.Images
	}
	t, release, e := a.newTurn(ctx, ts)
	if e != nil {
		c.cleanup()
		return e.result(), e
	}
	defer release()
	t.ev.session, t.ev.noSession = a.plan.SessionID, a.plan.NoSessionID
	if proto == nil {
		proto = &printMode{t: t, parser: spec.Parser}
	}
	if e := a.start(c, proto, t); e != nil {
		return e.result(), e
	}
	go a.watchExit(nil)
	res, err := a.runTurn(t)
	<-a.done
	return res, err
}

// printMode is the protocol of a one-shot run: the prompt on stdin, then
// stdin closed (Codex hangs and Claude waits while it stays open), and
// each stdout line through the parser until stdout ends; the turn is over
// once the child and its group are gone. Deltas read together go out
// together (emitter.held).
type printMode struct {
	a      *runner
	t      *turn
	parser Parser
	done   chan struct{}
}

func (p *printMode) open(a *runner) {
	p.a, p.done, a.merges = a, make(chan struct{}), true
	ev := p.t.ev
	ev.parser = p.parser
	a.child.out = lineSink{line: ev.feed, idle: ev.flush, eof: func() { close(p.done) }}
	if sp, ok := p.parser.(StderrParser); ok {
		a.child.stderrLines = func(line []byte) { ev.feedStderr(sp, line) }
	}
}

func (p *printMode) consumed() <-chan struct{} { return p.done }

func (p *printMode) opening(*turn) bool { return true }

// begin writes the prompt, as the plan's Input says, and closes stdin.
func (p *printMode) begin(*turn) {
	c := p.a.child
	_ = writeInput(c.stdin.f, p.a.plan.Input, p.t.spec.Prompt, c.inputPaths)
	c.stdin.close()
}

func (p *printMode) interrupt(*turn) bool { return false }

func (p *printMode) steer(*turn, string) error { return ErrNoSteer }

func (p *printMode) sessionID() string { return "" }

// finish is the parser's result, failed by what the child came to when the
// parser saw nothing wrong: a non-zero exit, or an answer of nothing.
func (p *printMode) finish(_ *turn, exit *ExitInfo) api.Result {
	x := exitOrAlive(exit)
	var res api.Result
	if p.parser != nil {
		res = p.parser.Finish(x)
	}
	if id := p.a.plan.SessionID; id != "" {
		res.SessionID = id
	}
	c := p.a.child
	program := filepath.Base(p.a.plan.Program)
	switch {
	case res.Error != nil:
	case x.Code != 0:
		res.Error = failure(api.KindExit, exitMessage(program, x.Code, c.waitErr, c.cmd.ProcessState))
	case x.StdoutBytes == 0 || (p.parser != nil && strings.TrimSpace(res.Answer) == "" && !hasOutput(res)):
		res.Error = failure(api.KindEmpty, fmt.Sprintf("%s exited 0 and printed nothing", program))
	}
	return res
}

// exitMessage says how a child that did not exit 0 went: its status, what
// a shell's 128+n means, or the signal that killed it.
func exitMessage(program string, exitCode int, waitErr error, state *os.ProcessState) string {
	msg := fmt.Sprintf("%s exited with status %d", program, exitCode)
	if sig := syscall.Signal(exitCode - 128); exitCode > 128 && exitCode <= 128+64 {
		// A shell (a launcher script, npx) reports a child killed by a
		// signal as 128 plus its number; say which.
		msg += fmt.Sprintf(" (128 + %d: a process it ran was killed by signal %d, %v)", int(sig), int(sig), sig)
	}
	if exitCode == -1 {
		msg = fmt.Sprintf("%s was killed by a signal (%v)", program, waitErr)
		if state != nil {
			if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				msg = fmt.Sprintf("%s was killed by signal %d (%v)", program, int(ws.Signal()), ws.Signal())
			}
		}
	}
	return msg
}

// hasOutput is true when a parsed result carries something besides text, so
// a run that only called tools is not "empty".
func hasOutput(r api.Result) bool { return r.ToolCalls > 0 || r.SessionID != "" }

// stderrExcerpt is the end of stderr as a person reads it: colour and
// cursor codes removed (a CLI that thinks it has a terminal writes them),
// trimmed and short.
func stderrExcerpt(tail string) string {
	return clip(strings.TrimSpace(stripANSI(tail)), 600)
}

func ctxKind(ctx context.Context) (string, string) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return api.KindTimeout, "the run hit its deadline and the agent's process group was ended"
	}
	// The kind says "cancelled" already; the message says why and what
	// became of the agent.
	msg := "the agent's process group was ended"
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		msg = c.Error() + "; " + msg
	}
	return api.KindCancelled, msg
}
