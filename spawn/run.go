package spawn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	// Prompt is written to stdin, then stdin is closed: Codex hangs and
	// Claude waits while stdin stays open.
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

	if plan.Ask != nil {
		stop, err := openAsk(&plan, spec.Approver)
		if err != nil {
			return fail(KindSpawn, "could not open the run's ask channel: "+err.Error(), err)
		}
		// After the child and its group are gone: a question still
		// waiting then ends, denied.
		defer stop()
	}
	args, env := plan.Args, plan.Env
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
		childEnv = mergeEnv(spec.BaseEnv, env)
	}
	for _, a := range args {
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
	cmd := &exec.Cmd{
		Path:        prog,
		Args:        append([]string{plan.Program}, args...),
		Dir:         plan.Dir,
		Env:         childEnv,
		Stdin:       stdinR,
		Stdout:      stdoutW,
		Stderr:      stderrW,
		SysProcAttr: proc.NewGroupKilledWithParent(),
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
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
		stdin: closer{f: stdinW}, stdout: closer{f: stdoutR}, stderr: closer{f: stderrR}, stderrTail: &proc.Capped{Tail: lim.StderrTail}}
	var wg, ioWG sync.WaitGroup
	wg.Add(2)
	ioWG.Add(2)
	go func() { // prompt, then EOF
		defer ioWG.Done()
		_, _ = io.WriteString(stdinW, spec.Prompt)
		r.stdin.close()
	}()
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

	parser := spec.Parser
	emit := func(evs []Event) {
		if spec.OnEvent == nil {
			return
		}
		for _, ev := range evs {
			spec.OnEvent(ev)
		}
	}
	stdoutBytes := r.readStdout(func(line []byte) {
		if parser == nil {
			emit([]Event{otherEvent("", line)})
			return
		}
		emit(parser.Feed(line))
	}, func(n int64) {
		emit([]Event{{Kind: EventOther, Text: fmt.Sprintf("a stdout line of more than %d bytes was skipped (line limit)", n)}})
	})
	ioWG.Wait()
	close(r.ioDone)
	wg.Wait()
	dur := time.Since(start)

	exitCode := -1
	if cmd.ProcessState != nil {
		exitCode = cmd.ProcessState.ExitCode()
	}
	tail := r.tail()
	var res Result
	if parser != nil {
		res = parser.Finish(ExitInfo{Code: exitCode, StderrTail: tail, StdoutBytes: stdoutBytes})
	}
	if res.DurationMs == 0 {
		res.DurationMs = dur.Milliseconds()
	}
	excerpt := clip(strings.TrimSpace(tail), 600)
	e := &Error{Command: command, ExitCode: exitCode, StderrExcerpt: excerpt}
	switch {
	case r.reason == reasonCtx:
		e.Kind, e.Message = ctxKind(ctx)
		e.Err = ctx.Err()
	case r.reason == reasonLimit:
		e.Kind = KindOutputLimit
		e.Message = fmt.Sprintf("the agent printed more than %d bytes; the run was ended (raise the output limit or narrow the task)", lim.MaxOutput)
	case res.Error != nil:
		e.Kind, e.Message = res.Error.Kind, res.Error.Message
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

const (
	reasonNone = iota
	reasonCtx
	reasonLimit
)

type run struct {
	lim      Limits
	pgid     int
	exited   chan struct{}
	ioDone   chan struct{} // closed when stdin, stdout and stderr are finished
	waitErr  error
	limitHit chan struct{}
	limOnce  sync.Once
	total    atomic.Int64
	reason   int // written by supervise before wg.Done, read after wg.Wait

	stdin, stdout, stderr closer

	stderrTail *proc.Capped
}

// closer closes a pipe end once, from whichever goroutine gets there first;
// a Close unblocks a Read or Write pending on it.
type closer struct {
	f    *os.File
	once sync.Once
}

func (c *closer) close() { c.once.Do(func() { c.f.Close() }) }

func (r *run) count(n int) {
	if r.total.Add(int64(n)) > r.lim.MaxOutput {
		r.limOnce.Do(func() { close(r.limitHit) })
	}
}

func (r *run) overLimit() bool {
	select {
	case <-r.limitHit:
		return true
	default:
		return false
	}
}

// supervise ends the process group when the context ends or output runs over,
// and cleans up leftovers after the leader exits; then, once the group is
// gone, closes our pipe ends after a short drain so a process that escaped
// the group cannot hold the run open.
func (r *run) supervise(ctx context.Context) {
	select {
	case <-ctx.Done():
		r.reason = reasonCtx
		r.terminate()
	case <-r.limitHit:
		r.reason = reasonLimit
		r.terminate()
	case <-r.exited:
		// A member left behind after the leader exits is ended the same
		// way; EndGroup returns at once when there is none.
		r.terminate()
	}
	<-r.exited
	drain := time.NewTimer(r.lim.KillGrace)
	defer drain.Stop()
	select {
	case <-r.ioDone:
		return
	case <-drain.C:
	}
	r.stdin.close()
	r.stdout.close()
	r.stderr.close()
}

// terminate ends the group (SIGTERM, SIGKILL after the grace period unless
// the whole group is already gone) and waits, bounded, for it to go; the
// leader counts as gone once it is reaped.
func (r *run) terminate() {
	proc.EndGroup(context.Background(), r.pgid, r.lim.KillGrace, r.exited)
}

// readStdout hands complete lines to feed as they arrive, skipping any line
// longer than MaxLine without buffering it, and stops feeding once output is
// over the limit (still draining so the child never blocks on a full pipe).
func (r *run) readStdout(feed func([]byte), skipped func(int64)) int64 {
	br := bufio.NewReaderSize(r.stdout.f, 64<<10)
	var total int64
	var long []byte // a line longer than the reader's buffer, up to MaxLine
	var dropping bool
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			total += int64(len(chunk))
			r.count(len(chunk))
		}
		complete := err == nil || (len(chunk) > 0 && err != bufio.ErrBufferFull)
		switch {
		case r.overLimit():
			long, dropping = nil, false
		case dropping:
			if complete {
				dropping = false
			}
		case err == bufio.ErrBufferFull:
			if int64(len(long)+len(chunk)) > r.lim.MaxLine {
				skipped(r.lim.MaxLine)
				long, dropping = nil, true
			} else {
				long = append(long, chunk...)
			}
		case complete:
			line := chunk
			if long != nil {
				if int64(len(long)+len(chunk)) > r.lim.MaxLine+1 {
					skipped(r.lim.MaxLine)
					long = nil
					break
				}
				line = append(long, chunk...)
				long = nil
			}
			line = bytes.TrimRight(line, "\r\n")
			if len(bytes.TrimSpace(line)) > 0 {
				feed(line)
			}
		}
		if err != nil && err != bufio.ErrBufferFull {
			r.stdout.close()
			return total
		}
	}
}

func (r *run) readStderr() {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.stderr.f.Read(buf)
		if n > 0 {
			r.count(n)
			_, _ = r.stderrTail.Write(buf[:n])
		}
		if err != nil {
			r.stderr.close()
			return
		}
	}
}

func (r *run) tail() string {
	return strings.ToValidUTF8(r.stderrTail.String(), "\uFFFD")
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
