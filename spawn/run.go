package spawn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/card-dev/card/api"
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
	// OnState is told each change of what the run is doing (starting
	// first), in order; it must not block.
	OnState func(api.RunState)
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

// Run starts the plan's program with the prompt on stdin and streams its
// stdout through the parser until the child and its whole process group are
// gone. It returns the result (partial when the run failed) and, when the run
// failed, an *Error whose Kind matches result.Error.Kind.
//
// Deadline and cancel both end the whole group: SIGTERM, then SIGKILL after
// KillGrace. A group member left behind after the leader exits is ended the
// same way, so no grandchild outlives the run.
//
// A run is four steps, each owning one part of the guarantees: prepare
// (nothing is started yet), start (the child in its own group), collect (the
// child's output until the group is gone) and classify (what the run came
// to).
func Run(ctx context.Context, spec RunSpec) (Result, error) {
	p, err := prepare(ctx, spec)
	defer p.cleanup()
	if err != nil {
		return err.result(), err
	}
	c, err := start(p)
	if err != nil {
		return err.result(), err
	}
	out := collect(ctx, p, c)
	res, cerr := classify(ctx, p, c, out)
	if p.plan.NoSessionID {
		res.SessionID = ""
	}
	return res, cerr
}

// prepared is a run checked and made ready, with nothing started yet.
type prepared struct {
	spec    RunSpec
	plan    Plan
	lim     Limits
	command string // the argv for messages, never the prompt
	conv    conversation
	watch   *watchdog

	prog       string // the program's resolved path
	args       []string
	childEnv   []string
	inputPaths []string
	// privateDir is the run's private directory, "" when it has none.
	privateDir string
	// sessionImages are a conversation's images in memory, held within
	// the daemon's image budget until cleanup.
	sessionImages []Image

	cleanups []func()
}

// cleanup undoes prepare, last step first, once the child and its group are
// gone: the private files go, then a question still waiting ends, denied.
func (p *prepared) cleanup() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
}

// early is a run that failed before its child ran: there is no exit status.
func (p *prepared) early(kind, msg string, err error) *Error {
	return &Error{Kind: kind, Message: msg, Command: p.command, ExitCode: -1, Err: err}
}

// result is the Result of a run that failed with e before its child ran.
func (e *Error) result() Result {
	return Result{IsError: true, Error: &Failure{Kind: e.Kind, Message: e.Message}}
}

// prepare owns everything that must hold before a child starts: an
// absolute, existing working directory, a context still live, the session
// protocol and the ask channel, the plan's private files written and every
// reference to them resolved, and the program found on the child's own
// PATH. Its cleanups run whatever it returns.
func prepare(ctx context.Context, spec RunSpec) (*prepared, *Error) {
	p := &prepared{spec: spec, plan: spec.Plan, lim: spec.Limits.withDefaults()}
	p.lim.MaxOutput += p.plan.OutputAllowance
	p.command = p.plan.Command()
	if err := checkDir(p.plan.Dir); err != nil {
		return p, p.early(KindSpawn, err.Error(), err)
	}
	if err := ctx.Err(); err != nil {
		kind, msg := ctxKind(ctx)
		return p, p.early(kind, msg+" before the agent started", err)
	}
	if b, ok := spec.Parser.(usageBaser); ok {
		b.setUsageBase(p.plan.UsageBase)
	}
	if p.plan.Session != nil {
		sp := *p.plan.Session
		sp.usageBase = p.plan.UsageBase
		c, err := newConversation(sp)
		if err != nil {
			return p, p.early(KindSpawn, err.Error(), err)
		}
		p.conv = c
		if imgs := p.plan.Input.Images; len(imgs) > 0 {
			var n int64
			for _, img := range imgs {
				n += img.Size()
			}
			release, err := spec.ImageMemory.Hold(ctx, n)
			if err != nil {
				kind, msg := ctxKind(ctx)
				return p, p.early(kind, msg+" while the run waited for memory for its images ([attachments] max_bytes_in_flight)", err)
			}
			p.cleanups = append(p.cleanups, func() {
				p.sessionImages = nil
				release()
				// The images and the message that carried them are
				// garbage now; give their pages back rather than keep a
				// high-water mark for the daemon's whole life.
				debug.FreeOSMemory()
			})
			if p.sessionImages, err = inMemory(imgs); err != nil {
				return p, p.early(KindSpawn, err.Error(), err)
			}
		}
	}
	p.watch = newWatchdog(p.plan.Stall, spec.OnState)
	if spec.Approver != nil {
		// A question waiting for a person is not the agent being silent.
		p.spec.Approver = watchedApprover{Approver: spec.Approver, w: p.watch}
	}
	if p.plan.Ask != nil {
		stop, err := openAsk(&p.plan, p.spec.Approver)
		if err != nil {
			return p, p.early(KindSpawn, "could not open the run's ask channel: "+err.Error(), err)
		}
		p.cleanups = append(p.cleanups, stop)
	}
	if e := p.writeFiles(); e != nil {
		return p, e
	}
	p.prog = p.plan.Program
	if !strings.ContainsRune(p.prog, os.PathSeparator) {
		// The child's PATH, not the daemon's: the daemon's live environment
		// is not consulted after startup.
		path, err := proc.LookPath(p.prog, proc.EnvMap(p.childEnv)["PATH"])
		if err != nil {
			return p, p.early(KindSpawn, fmt.Sprintf("cannot find %q on the agent's PATH: install it or give its absolute path", p.prog), err)
		}
		p.prog = path
	}
	return p, nil
}

// writeFiles writes the plan's private files into a directory of the run's
// own and puts their paths into the argv, the environment and the input
// files; a reference to a file the plan does not write is refused, so a
// placeholder never reaches the child.
func (p *prepared) writeFiles() *Error {
	spec := p.spec
	args, env, inputPaths := p.plan.Args, p.plan.Env, p.plan.Input.Files
	p.childEnv = mergeEnv(spec.BaseEnv, env)
	if len(p.plan.Files) > 0 || p.plan.StdoutToFile {
		tmp := spec.TempDir
		if tmp == "" {
			tmp = proc.TempDir(proc.EnvMap(p.childEnv))
		}
		pd, err := writePrivateFiles(tmp, p.plan.Files)
		if err != nil {
			return p.early(KindSpawn, "could not write the run's private files: "+err.Error(), err)
		}
		p.cleanups = append(p.cleanups, pd.Remove)
		dir := pd.Path
		p.privateDir = dir
		args, env = substituteFiles(args, env, dir, p.plan.Files)
		inputPaths, _ = substituteFiles(inputPaths, nil, dir, p.plan.Files)
		p.childEnv = mergeEnv(spec.BaseEnv, env)
	}
	for _, a := range append(slices.Clip(args), inputPaths...) {
		if strings.Contains(a, filePrefix) {
			return p.early(KindSpawn, "argument refers to a file the plan does not write: "+a, nil)
		}
	}
	for k, v := range env {
		if strings.Contains(v, filePrefix) {
			return p.early(KindSpawn, "environment variable "+k+" refers to a file the plan does not write", nil)
		}
	}
	p.args, p.inputPaths = args, inputPaths
	return nil
}

// started is the child as start left it: running in its own group, with
// our ends of its three pipes (stdout a file when the plan says so).
type started struct {
	cmd                   *exec.Cmd
	at                    time.Time
	pgid                  int
	stdin, stdout, stderr *os.File
	// stdoutFile, when set, is the child's stdout (stdout is its read end).
	stdoutFile *stdoutFile
}

// start owns the child's birth: three pipes (stdout a file of the run's
// when the plan says so), an explicit working dir and environment, its own
// process group killed with the daemon, and OnStart told the group before
// anything can outlive it. On failure every pipe end is closed.
func start(p *prepared) (*started, *Error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, p.early(KindSpawn, "pipe: "+err.Error(), err)
	}
	var stdoutR, stdoutW *os.File
	var sf *stdoutFile
	if p.plan.StdoutToFile {
		sf, err = openStdoutFile(p.privateDir)
		if err == nil {
			stdoutR, stdoutW = sf.f, sf.child
		}
	} else {
		stdoutR, stdoutW, err = os.Pipe()
	}
	if err != nil {
		closeAll(stdinR, stdinW)
		return nil, p.early(KindSpawn, "stdout: "+err.Error(), err)
	}
	closeWatch := func() {
		if sf != nil {
			sf.watch.Close()
		}
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW)
		closeWatch()
		return nil, p.early(KindSpawn, "pipe: "+err.Error(), err)
	}
	dir, releaseDir, err := holdDir(p.plan.Dir)
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW)
		closeWatch()
		return nil, p.early(KindSpawn, err.Error(), err)
	}
	cmd := &exec.Cmd{
		Path:        p.prog,
		Args:        append([]string{p.plan.Program}, p.args...),
		Dir:         dir,
		Env:         p.childEnv,
		Stdin:       stdinR,
		Stdout:      stdoutW,
		Stderr:      stderrW,
		SysProcAttr: proc.NewGroupKilledWithParent(),
	}
	at := time.Now()
	err = cmd.Start()
	releaseDir()
	if err != nil {
		closeAll(stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW)
		closeWatch()
		return nil, p.early(KindSpawn, fmt.Sprintf("could not start %s: %v", p.plan.Program, err), err)
	}
	// The child holds its ends now; ours must close or EOF never comes.
	closeAll(stdinR, stdoutW, stderrW)
	pid := cmd.Process.Pid
	pgid := pid // the child leads its own group
	if p.spec.OnStart != nil {
		p.spec.OnStart(pid, pgid)
	}
	return &started{cmd: cmd, at: at, pgid: pgid, stdin: stdinW, stdout: stdoutR, stderr: stderrR, stdoutFile: sf}, nil
}

// collected is what collect saw of the child.
type collected struct {
	r           *run
	stdoutBytes int64
	dur         time.Duration
	// capUsage is the usage the cap guard added up (zero without caps),
	// for a result whose parser kept none.
	capUsage Usage
}

// collect owns the child's life after it starts: the prompt or the
// conversation on stdin, stdout to the parser or the conversation (lines
// bounded, output capped), the stderr tail, and the supervisor that ends
// the group by deadline, cancel, limit, verdict or the leader's exit. It
// returns once the leader is reaped, the group is gone and every pipe is
// done, with every event emitted.
func collect(ctx context.Context, p *prepared, c *started) collected {
	lim := p.lim
	r := &run{lim: lim, pgid: c.pgid, exited: make(chan struct{}), limitHit: make(chan struct{}), ioDone: make(chan struct{}),
		ended: make(chan struct{}), groupGone: make(chan struct{}),
		stdin: closer{f: c.stdin}, stdout: closer{f: c.stdout}, stderr: closer{f: c.stderr}, stderrTail: &proc.Capped{Tail: lim.StderrTail}}
	r.watch = p.watch
	ev := newEmitter(p.spec.OnEvent, p.spec.Parser, p.plan.MaxAPIRetries, p.plan.Caps, r.end)
	ev.watch, ev.session, ev.noSession = p.watch, p.plan.SessionID, p.plan.NoSessionID
	// A one-shot run's lines are parsed as they are read, so deltas that
	// were read together can go out together (emitter.held); a
	// conversation's lines go to its protocol one at a time. Set before
	// any goroutine here can emit.
	ev.coalesce = p.conv == nil
	p.watch.emit = func(e Event) { ev.emit([]Event{e}) }
	p.watch.end = ev.endRun
	if sp, ok := p.spec.Parser.(StderrParser); ok {
		r.stderrLines = func(line []byte) { ev.feedStderr(sp, line) }
	}
	var wg, ioWG sync.WaitGroup
	wg.Add(3)
	ioWG.Add(2)
	lines := feedStdin(ctx, p, r, ev, &ioWG)
	r.stdoutSrc = r.stdout.f
	watchDone := make(chan struct{})
	if sf := c.stdoutFile; sf != nil {
		grew := make(chan struct{}, 1)
		r.stdoutIsFile = true
		r.stdoutSrc = &tailReader{f: sf.f, grew: grew, gone: r.groupGone, final: -1}
		go func() {
			defer close(watchDone)
			sf.watchSize(r, grew)
		}()
	} else {
		close(watchDone)
	}
	go func() { // stderr tail, bounded
		defer ioWG.Done()
		r.readStderr()
	}()
	go func() { // leader exit
		defer wg.Done()
		r.waitErr = c.cmd.Wait()
		close(r.exited)
	}()
	go func() { // the group's end: by deadline, cancel, limit, or after the leader
		defer wg.Done()
		r.supervise(ctx)
	}()
	go func() { // the agent's silence, until the leader exits
		defer wg.Done()
		p.watch.watch(r.exited)
	}()

	var drained func()
	if lines == nil {
		drained = ev.flush
	}
	stdoutBytes := r.readStdout(func(line []byte) {
		if lines == nil {
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
	}, drained)
	if lines != nil {
		close(lines)
	}
	if c.stdoutFile != nil {
		c.stdoutFile.watch.Close()
	}
	<-watchDone
	ioWG.Wait()
	close(r.ioDone)
	wg.Wait()
	ev.stop()
	dur := time.Since(c.at)
	if r.reason == reasonNone && r.overLimit() {
		// The child printed past the limit and exited before its output
		// was counted: the limit still decides the run.
		r.reason = reasonLimit
	}
	return collected{r: r, stdoutBytes: stdoutBytes, dur: dur, capUsage: ev.caps.reported()}
}

// feedStdin starts what writes the child's stdin and closes it after: the
// prompt then EOF for a one-shot run, or the conversation's turn for a
// session, which gets the stdout lines through the channel returned (nil
// for a one-shot run). It counts itself done on ioWG.
func feedStdin(ctx context.Context, p *prepared, r *run, ev *emitter, ioWG *sync.WaitGroup) chan []byte {
	if p.conv == nil {
		go func() { // prompt, then EOF
			defer ioWG.Done()
			_ = writeInput(r.stdin.f, p.plan.Input, p.spec.Prompt, p.inputPaths)
			r.stdin.close()
		}()
		return nil
	}
	lines := make(chan []byte)
	r.turnDone = make(chan struct{})
	// A conversation emits from its reader and from the questions it waits
	// on; the emitter takes them one at a time, through the same retry
	// bound as a one-shot run's.
	emit := func(evs ...Event) { ev.emit(evs) }
	t := turn{Prompt: p.spec.Prompt, Images: p.sessionImages, Cwd: p.plan.Dir, Lines: lines, Stdin: r.stdin.f, Emit: emit, Approver: p.spec.Approver}
	go func() { // the conversation, then EOF
		defer ioWG.Done()
		p.conv.converse(ctx, t)
		r.stdin.close()
		close(r.turnDone)
	}()
	return lines
}

// classify owns what the run came to, once the child is gone: the parser's
// or the conversation's result, then the first reason that fails it, in
// order of precedence (cancel or deadline, the run's own verdict, the output
// limit, what the agent reported, a non-zero exit, an empty answer). A
// conversation whose turn ended as its protocol says succeeds however the
// child went after, since card ends it.
func classify(ctx context.Context, p *prepared, c *started, out collected) (Result, error) {
	r := out.r
	exitCode := -1
	if c.cmd.ProcessState != nil {
		exitCode = c.cmd.ProcessState.ExitCode()
	}
	tail := r.tail()
	var res Result
	exit := ExitInfo{Code: exitCode, StderrTail: tail, StdoutBytes: out.stdoutBytes}
	switch {
	case p.conv != nil:
		res = p.conv.finish(exit)
	case p.spec.Parser != nil:
		res = p.spec.Parser.Finish(exit)
	}
	if p.plan.SessionID != "" {
		res.SessionID = p.plan.SessionID
	}
	if res.DurationMs == 0 {
		res.DurationMs = out.dur.Milliseconds()
	}
	if res.Usage == (Usage{}) {
		// A run the cap ended before the CLI's own summary still records
		// what it used.
		res.Usage = out.capUsage
	}
	excerpt := stderrExcerpt(tail)
	e := &Error{Command: p.command, ExitCode: exitCode, StderrExcerpt: excerpt}
	program := filepath.Base(p.plan.Program)
	switch {
	case r.reason == reasonCtx:
		e.Kind, e.Message = ctxKind(ctx)
		e.Err = ctx.Err()
	case r.reason == reasonVerdict:
		e.Kind, e.Message = r.verdict.Kind, r.verdict.Message
	case r.reason == reasonLimit:
		e.Kind = KindOutputLimit
		e.Message = fmt.Sprintf("the agent printed more than %d bytes; the run was ended (raise the output limit or narrow the task)", p.lim.MaxOutput)
	case res.Error != nil:
		e.Kind, e.Message = res.Error.Kind, res.Error.Message
		if e.Kind == KindBudget && p.plan.Caps != nil && p.plan.Caps.CostByCLI {
			// The CLI stopped at its own spending flag: say it in the
			// words of the cap the client set.
			e.Message = p.plan.Caps.capMessage(res)
		}
	case p.conv != nil:
		// The turn ended as the protocol says it ends; how the child
		// went after (card ends it) says nothing about the run.
		res.IsError, res.Error = false, nil
		return res, nil
	case exitCode != 0:
		e.Kind, e.Message = KindExit, exitMessage(program, exitCode, r.waitErr, c.cmd.ProcessState)
	case out.stdoutBytes == 0 || (p.spec.Parser != nil && strings.TrimSpace(res.Answer) == "" && !hasOutput(res)):
		e.Kind = KindEmpty
		e.Message = fmt.Sprintf("%s exited 0 and printed nothing", program)
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
