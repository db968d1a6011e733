package spawn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/card-dev/card/internal/proc"
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
	// Parser reads stdout; nil means every line becomes an "other" event.
	// A plan with a Session is read by its protocol's conversation, and
	// Parser is not used.
	Parser Parser
	// TempDir is where the run's private directory is created; "" means
	// the TMPDIR of the child's environment, else /tmp.
	TempDir string
	// Approver decides the tool calls of an ask-mode plan (Plan.Ask); a
	// plan that asks is refused without one.
	Approver Approver
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

// Run starts the plan's program with the prompt on stdin and streams its
// stdout through the parser until the child and its whole process group are
// gone. It returns the result (partial when the run failed) and, when the run
// failed, an *Error whose Kind matches result.Error.Kind.
//
// Deadline and cancel both end the whole group: SIGTERM, then SIGKILL after
// KillGrace. A group member left behind after the leader exits is ended the
// same way, so no grandchild outlives the run.
func Run(ctx context.Context, spec RunSpec) (Result, error) {
	lim := spec.Limits.withDefaults()
	plan := spec.Plan
	lim.MaxOutput += plan.OutputAllowance
	command := plan.Command()
	fail := func(kind, msg string, err error) (Result, error) {
		e := &Error{Kind: kind, Message: msg, Command: command, ExitCode: -1, Err: err}
		return Result{IsError: true, Error: &Failure{Kind: kind, Message: msg}}, e
	}
	if err := checkDir(plan.Dir); err != nil {
		return fail(KindSpawn, err.Error(), err)
	}
	if err := ctx.Err(); err != nil {
		kind, msg := ctxKind(ctx)
		return fail(kind, msg+" before the agent started", err)
	}
	var conv conversation
	if plan.Session != nil {
		c, err := newConversation(*plan.Session)
		if err != nil {
			return fail(KindSpawn, err.Error(), err)
		}
		conv = c
	}

	if plan.Ask != nil {
		stop, err := openAsk(&plan, spec.Approver)
		if err != nil {
			return fail(KindSpawn, "could not open the run's ask channel: "+err.Error(), err)
		}
		// After the child and its group are gone: a question still
		// waiting then ends, denied.
		defer stop()
	}
	args, env, inputPaths := plan.Args, plan.Env, plan.Input.Files
	childEnv := mergeEnv(spec.BaseEnv, env)
	if len(plan.Files) > 0 {
		tmp := spec.TempDir
		if tmp == "" {
			tmp = proc.TempDir(proc.EnvMap(childEnv))
		}
		dir, err := writePrivateFiles(tmp, plan.Files)
		if err != nil {
			return fail(KindSpawn, "could not write the run's private files: "+err.Error(), err)
		}
		defer os.RemoveAll(dir)
		args, env = substituteFiles(args, env, dir, plan.Files)
		inputPaths, _ = substituteFiles(inputPaths, nil, dir, plan.Files)
		childEnv = mergeEnv(spec.BaseEnv, env)
	}
	for _, a := range append(slices.Clip(args), inputPaths...) {
		if strings.Contains(a, filePrefix) {
			return fail(KindSpawn, "argument refers to a file the plan does not write: "+a, nil)
		}
	}
	for k, v := range env {
		if strings.Contains(v, filePrefix) {
			return fail(KindSpawn, "environment variable "+k+" refers to a file the plan does not write", nil)
		}
	}

	prog := plan.Program
	if !strings.ContainsRune(prog, os.PathSeparator) {
		// The child's PATH, not the daemon's: the daemon's live environment
		// is not consulted after startup.
		p, err := proc.LookPath(prog, proc.EnvMap(childEnv)["PATH"])
		if err != nil {
			return fail(KindSpawn, fmt.Sprintf("cannot find %q on the agent's PATH: install it or give its absolute path", prog), err)
		}
		prog = p
	}

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fail(KindSpawn, "pipe: "+err.Error(), err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW)
		return fail(KindSpawn, "pipe: "+err.Error(), err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW)
		return fail(KindSpawn, "pipe: "+err.Error(), err)
	}
	dir, releaseDir, err := holdDir(plan.Dir)
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW)
		return fail(KindSpawn, err.Error(), err)
	}
	cmd := &exec.Cmd{
		Path:        prog,
		Args:        append([]string{plan.Program}, args...),
		Dir:         dir,
		Env:         childEnv,
		Stdin:       stdinR,
		Stdout:      stdoutW,
		Stderr:      stderrW,
		SysProcAttr: proc.NewGroupKilledWithParent(),
	}
	start := time.Now()
	err = cmd.Start()
	releaseDir()
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW)
		return fail(KindSpawn, fmt.Sprintf("could not start %s: %v", plan.Program, err), err)
	}
	// The child holds its ends now; ours must close or EOF never comes.
	closeAll(stdinR, stdoutW, stderrW)
	pid := cmd.Process.Pid
	pgid := pid
	if spec.OnStart != nil {
		spec.OnStart(pid, pgid)
	}

	r := &run{lim: lim, pgid: pgid, exited: make(chan struct{}), limitHit: make(chan struct{}), ioDone: make(chan struct{}),
		ended: make(chan struct{}),
		stdin: closer{f: stdinW}, stdout: closer{f: stdoutR}, stderr: closer{f: stderrR}, stderrTail: &proc.Capped{Tail: lim.StderrTail}}
	parser := spec.Parser
	ev := newEmitter(spec.OnEvent, parser, plan.MaxAPIRetries, r.end)
	if sp, ok := parser.(StderrParser); ok {
		r.stderrLines = func(line []byte) { ev.feedStderr(sp, line) }
	}
	// A conversation emits from its reader and from the questions it waits
	// on; the emitter takes them one at a time, through the same retry
	// bound as a one-shot run's.
	emit := func(evs ...Event) { ev.emit(evs) }
	var wg, ioWG sync.WaitGroup
	wg.Add(2)
	ioWG.Add(2)
	var lines chan []byte
	if conv == nil {
		go func() { // prompt, then EOF
			defer ioWG.Done()
			_ = writeInput(stdinW, plan.Input, spec.Prompt, inputPaths)
			r.stdin.close()
		}()
	} else {
		lines = make(chan []byte)
		r.turnDone = make(chan struct{})
		go func() { // the conversation, then EOF
			defer ioWG.Done()
			conv.converse(ctx, turn{Prompt: spec.Prompt, Images: plan.Input.Images, Cwd: plan.Dir, Lines: lines, Stdin: stdinW, Emit: emit, Approver: spec.Approver})
			r.stdin.close()
			close(r.turnDone)
		}()
	}
	go func() { // stderr tail, bounded
		defer ioWG.Done()
		r.readStderr()
	}()
	go func() { // leader exit
		defer wg.Done()
		r.waitErr = cmd.Wait()
		close(r.exited)
	}()
	go func() { // the group's end: by deadline, cancel, limit, or after the leader
		defer wg.Done()
		r.supervise(ctx)
	}()

	stdoutBytes := r.readStdout(func(line []byte) {
		if conv == nil {
			ev.feed(line)
			return
		}
		// The conversation's line, until its turn is over; after that
		// stdout is only drained.
		select {
		case lines <- append([]byte(nil), line...):
		case <-r.turnDone:
		}
	}, func(n int64) {
		ev.emit([]Event{{Kind: EventOther, Text: fmt.Sprintf("a stdout line of more than %d bytes was skipped (line limit)", n)}})
	})
	if lines != nil {
		close(lines)
	}
	ioWG.Wait()
	close(r.ioDone)
	wg.Wait()
	ev.stop()
	dur := time.Since(start)
	if r.reason == reasonNone && r.overLimit() {
		// The child printed past the limit and exited before its output
		// was counted: the limit still decides the run.
		r.reason = reasonLimit
	}

	exitCode := -1
	if cmd.ProcessState != nil {
		exitCode = cmd.ProcessState.ExitCode()
	}
	tail := r.tail()
	var res Result
	exit := ExitInfo{Code: exitCode, StderrTail: tail, StdoutBytes: stdoutBytes}
	switch {
	case conv != nil:
		res = conv.finish(exit)
	case parser != nil:
		res = parser.Finish(exit)
	}
	if res.DurationMs == 0 {
		res.DurationMs = dur.Milliseconds()
	}
	excerpt := stderrExcerpt(tail)
	e := &Error{Command: command, ExitCode: exitCode, StderrExcerpt: excerpt}
	switch {
	case r.reason == reasonCtx:
		e.Kind, e.Message = ctxKind(ctx)
		e.Err = ctx.Err()
	case r.reason == reasonVerdict:
		e.Kind, e.Message = r.verdict.Kind, r.verdict.Message
	case r.reason == reasonLimit:
		e.Kind = KindOutputLimit
		e.Message = fmt.Sprintf("the agent printed more than %d bytes; the run was ended (raise the output limit or narrow the task)", lim.MaxOutput)
	case res.Error != nil:
		e.Kind, e.Message = res.Error.Kind, res.Error.Message
	case conv != nil:
		// The turn ended as the protocol says it ends; how the child
		// went after (card ends it) says nothing about the run.
		res.IsError, res.Error = false, nil
		return res, nil
	case exitCode != 0:
		e.Kind = KindExit
		e.Message = fmt.Sprintf("%s exited with status %d", filepath.Base(plan.Program), exitCode)
		if sig := syscall.Signal(exitCode - 128); exitCode > 128 && exitCode <= 128+64 {
			// A shell (a launcher script, npx) reports a child killed by a
			// signal as 128 plus its number; say which.
			e.Message += fmt.Sprintf(" (128 + %d: a process it ran was killed by signal %d, %v)", int(sig), int(sig), sig)
		}
		if exitCode == -1 {
			e.Message = fmt.Sprintf("%s was killed by a signal (%v)", filepath.Base(plan.Program), r.waitErr)
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				e.Message = fmt.Sprintf("%s was killed by signal %d (%v)", filepath.Base(plan.Program), int(ws.Signal()), ws.Signal())
			}
		}
	case stdoutBytes == 0 || (parser != nil && strings.TrimSpace(res.Answer) == "" && !hasOutput(res)):
		e.Kind = KindEmpty
		e.Message = fmt.Sprintf("%s exited 0 and printed nothing", filepath.Base(plan.Program))
	default:
		res.IsError, res.Error = false, nil
		return res, nil
	}
	res.IsError = true
	code := exitCode
	res.Error = &Failure{Kind: e.Kind, Message: e.Message, StderrExcerpt: excerpt}
	if code >= 0 {
		res.Error.ExitCode = &code
	}
	return res, e
}

// hasOutput is true when a parsed result carries something besides text, so
// a run that only called tools is not "empty".
func hasOutput(r Result) bool { return r.ToolCalls > 0 || r.SessionID != "" }

// stderrExcerpt is the end of stderr as a person reads it: colour and
// cursor codes removed (a CLI that thinks it has a terminal writes them),
// trimmed and short.
func stderrExcerpt(tail string) string {
	return clip(strings.TrimSpace(stripANSI(tail)), 600)
}

func ctxKind(ctx context.Context) (string, string) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return KindTimeout, "the run hit its deadline and the agent's process group was ended"
	}
	// The kind says "cancelled" already; the message says why and what
	// became of the agent.
	msg := "the agent's process group was ended"
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		msg = c.Error() + "; " + msg
	}
	return KindCancelled, msg
}

// checkDir insists on an absolute, existing directory: a child that silently
// inherits the daemon's cwd runs the agent somewhere nobody chose.
func checkDir(dir string) error {
	if dir == "" {
		return errors.New("no working directory given: pass cwd as an absolute path to an existing directory")
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("working directory %q is not absolute: pass an absolute path", dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("working directory %q does not exist or cannot be read: %v", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("working directory %q is not a directory", dir)
	}
	return nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
