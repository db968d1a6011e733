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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

// child is an agent's process, whatever its protocol and however long it
// is kept. It is started with an explicit cwd in its own process group,
// killed with the daemon, its private files written and its program found
// on its own PATH; its stdout goes, line by line, bounded and counted, to
// what reads it (out); and its supervisor ends the whole group when asked,
// when output runs past the limit, or when the leader exits, leftovers
// included.
type child struct {
	childSpec
	lim     Limits
	command string // the argv for messages, never the prompt
	watch   *watchdog

	prog       string // the program's resolved path
	args       []string
	env        []string
	inputPaths []string
	privateDir string // "" when the run has none
	cleanups   []func()

	cmd                   *exec.Cmd
	pgid                  int
	stdin, stdout, stderr closer
	// stdoutFile, when set, is the child's stdout as a file; stdoutSrc is
	// what the reader reads: the pipe, or a tail of that file, which ends
	// by itself once the group is gone and is never cut short by the drain.
	stdoutFile *stdoutFile
	stdoutSrc  io.Reader
	stderrTail *proc.Capped

	// out reads stdout; stderrLines, when set, gets each stderr line;
	// skipped is told of a stdout line over MaxLine.
	out         lineSink
	stderrLines func([]byte)
	skipped     func(n int64)

	total                                     atomic.Int64
	limitHit, exited, ioDone, groupGone, done chan struct{}
	limOnce, killOnce, quitOnce               sync.Once
	kill, quit                                chan struct{}
	waitErr                                   error
	// writeMu keeps each message written to stdin whole when a turn, a
	// steer and a cancel write at once.
	writeMu sync.Mutex

	// exit and limited are set before done closes.
	exit    ExitInfo
	limited bool
}

// childSpec is what a child is started from: RunSpec's and WarmSpec's
// process part. Approver is what the plan's ask channel is opened with;
// nil refuses a plan that asks.
type childSpec struct {
	Plan     Plan
	BaseEnv  []string
	Limits   Limits
	TempDir  string
	OnStart  func(pid, pgid int)
	OnState  func(api.RunState)
	Approver Approver
}

// lineSink reads an agent's stdout on the child's reader: line gets each
// complete line (the slice is the reader's again once line returns), idle
// is told when no whole line is in hand and the next read waits for the
// agent, and eof once stdout has ended.
type lineSink struct {
	line func([]byte)
	idle func()
	eof  func()
}

// closer closes a pipe end once, from whichever goroutine gets there first;
// a Close unblocks a Read or Write pending on it.
type closer struct {
	f    *os.File
	once sync.Once
}

func (c *closer) close() { c.once.Do(func() { c.f.Close() }) }

func newChild(spec childSpec) *child {
	c := &child{childSpec: spec, lim: spec.Limits.withDefaults(), command: spec.Plan.Command(),
		limitHit: make(chan struct{}), exited: make(chan struct{}), ioDone: make(chan struct{}), groupGone: make(chan struct{}),
		done: make(chan struct{}), kill: make(chan struct{}), quit: make(chan struct{})}
	c.lim.MaxOutput += spec.Plan.OutputAllowance
	return c
}

// early is a failure before the child ran: there is no exit status.
func (c *child) early(kind, msg string, err error) *Error {
	return &Error{Kind: kind, Message: msg, Command: c.command, ExitCode: -1, Err: err}
}

// cleanup undoes prepare, last step first, once the group is gone: the
// private files go, then a question still waiting ends, denied.
func (c *child) cleanup() {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
}

// prepare owns everything that must hold before a child starts: an
// absolute, existing working directory, a context still live, the ask
// channel, the plan's private files written and every reference to them
// resolved, and the program found on the child's own PATH. Whatever it
// returns, cleanup undoes it.
func (c *child) prepare(ctx context.Context) *Error {
	if err := checkDir(c.Plan.Dir); err != nil {
		return c.early(api.KindSpawn, err.Error(), err)
	}
	if err := ctx.Err(); err != nil {
		kind, msg := ctxKind(ctx)
		return c.early(kind, msg+" before the agent started", err)
	}
	c.watch = newWatchdog(c.Plan.Stall, c.OnState)
	if c.Approver != nil {
		// A question waiting for a person is not the agent being silent.
		c.Approver = watchedApprover{Approver: c.Approver, w: c.watch}
	}
	if c.Plan.Ask != nil {
		stop, err := openAsk(&c.Plan, c.Approver)
		if err != nil {
			return c.early(api.KindSpawn, "could not open the run's ask channel: "+err.Error(), err)
		}
		c.cleanups = append(c.cleanups, stop)
	}
	if e := c.writeFiles(); e != nil {
		return e
	}
	c.prog = c.Plan.Program
	if !strings.ContainsRune(c.prog, os.PathSeparator) {
		// The child's PATH, not the daemon's: the daemon's live environment
		// is not consulted after startup.
		path, err := proc.LookPath(c.prog, proc.EnvMap(c.env)["PATH"])
		if err != nil {
			return c.early(api.KindSpawn, fmt.Sprintf("cannot find %q on the agent's PATH: install it or give its absolute path", c.prog), err)
		}
		c.prog = path
	}
	return nil
}

// writeFiles writes the plan's private files into a directory of the run's
// own and puts their paths into the argv, the environment and the input
// files; a reference to a file the plan does not write is refused, so a
// placeholder never reaches the child.
func (c *child) writeFiles() *Error {
	args, env, inputPaths := c.Plan.Args, c.Plan.Env, c.Plan.Input.Files
	c.env = mergeEnv(c.BaseEnv, env)
	if len(c.Plan.Files) > 0 || c.Plan.StdoutToFile {
		tmp := c.TempDir
		if tmp == "" {
			tmp = proc.TempDir(proc.EnvMap(c.env))
		}
		pd, err := writePrivateFiles(tmp, c.Plan.Files)
		if err != nil {
			return c.early(api.KindSpawn, "could not write the run's private files: "+err.Error(), err)
		}
		c.cleanups = append(c.cleanups, pd.Remove)
		c.privateDir = pd.Path
		args, env = substituteFiles(args, env, pd.Path, c.Plan.Files)
		inputPaths, _ = substituteFiles(inputPaths, nil, pd.Path, c.Plan.Files)
		c.env = mergeEnv(c.BaseEnv, env)
	}
	for _, a := range append(slices.Clip(args), inputPaths...) {
		if strings.Contains(a, filePrefix) {
			return c.early(api.KindSpawn, "argument refers to a file the plan does not write: "+a, nil)
		}
	}
	for k, v := range env {
		if strings.Contains(v, filePrefix) {
			return c.early(api.KindSpawn, "environment variable "+k+" refers to a file the plan does not write", nil)
		}
	}
	c.args, c.inputPaths = args, inputPaths
	return nil
}

// start owns the child's birth: three pipes (stdout a file of the run's
// when the plan says so), an explicit working dir and environment, its own
// process group killed with the daemon, and OnStart told the group before
// anything can outlive it. On failure every pipe end is closed.
func (c *child) start() *Error {
	var ends []*os.File // every end, closed on failure
	fail := func(kind, msg string, err error) *Error {
		closeAll(ends...)
		if c.stdoutFile != nil {
			c.stdoutFile.watch.Close()
		}
		return c.early(kind, msg, err)
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fail(api.KindSpawn, "pipe: "+err.Error(), err)
	}
	ends = append(ends, stdinR, stdinW)
	var stdoutR, stdoutW *os.File
	if c.Plan.StdoutToFile {
		if c.stdoutFile, err = openStdoutFile(c.privateDir); err == nil {
			stdoutR, stdoutW = c.stdoutFile.f, c.stdoutFile.child
		}
	} else {
		stdoutR, stdoutW, err = os.Pipe()
	}
	if err != nil {
		return fail(api.KindSpawn, "stdout: "+err.Error(), err)
	}
	ends = append(ends, stdoutR, stdoutW)
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		return fail(api.KindSpawn, "pipe: "+err.Error(), err)
	}
	ends = append(ends, stderrR, stderrW)
	dir, releaseDir, err := holdDir(c.Plan.Dir)
	if err != nil {
		return fail(api.KindSpawn, err.Error(), err)
	}
	c.cmd = &exec.Cmd{Path: c.prog, Args: append([]string{c.Plan.Program}, c.args...), Dir: dir, Env: c.env,
		Stdin: stdinR, Stdout: stdoutW, Stderr: stderrW, SysProcAttr: proc.NewGroupKilledWithParent()}
	err = c.cmd.Start()
	releaseDir()
	if err != nil {
		return fail(api.KindSpawn, fmt.Sprintf("could not start %s: %v", c.Plan.Program, err), err)
	}
	// The child holds its ends now; ours must close or EOF never comes.
	closeAll(stdinR, stdoutW, stderrW)
	c.pgid = c.cmd.Process.Pid // the child leads its own group
	c.stdin, c.stdout, c.stderr = closer{f: stdinW}, closer{f: stdoutR}, closer{f: stderrR}
	c.stdoutSrc = stdoutR
	c.stderrTail = &proc.Capped{Tail: c.lim.StderrTail}
	if c.OnStart != nil {
		c.OnStart(c.pgid, c.pgid)
	}
	return nil
}

// live runs the child's pipes and its supervision until the group is gone
// and every pipe is finished; then done closes.
func (c *child) live() {
	watched := c.watchFile()
	var ioWG sync.WaitGroup
	ioWG.Add(2)
	go func() {
		defer ioWG.Done()
		c.readStderr()
	}()
	var stdoutBytes int64
	go func() {
		defer ioWG.Done()
		stdoutBytes = c.readStdout()
	}()
	go func() {
		ioWG.Wait()
		<-watched
		close(c.ioDone)
	}()
	go func() {
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	c.supervise()
	code := -1
	if st := c.cmd.ProcessState; st != nil {
		code = st.ExitCode()
	}
	if c.overLimit() {
		// The child printed past the limit and exited before its output
		// was counted: the limit still decides.
		c.limited = true
	}
	c.exit = ExitInfo{Code: code, StderrTail: strings.ToValidUTF8(c.stderrTail.String(), "\uFFFD"), StdoutBytes: stdoutBytes}
	c.cleanup()
	close(c.done)
}

// watchFile follows a stdout file's size and wakes its reader; the
// channel closes once it has stopped.
func (c *child) watchFile() <-chan struct{} {
	stopped := make(chan struct{})
	sf := c.stdoutFile
	if sf == nil {
		close(stopped)
		return stopped
	}
	grew := make(chan struct{}, 1)
	c.stdoutSrc = &tailReader{f: sf.f, grew: grew, gone: c.groupGone, final: -1}
	go func() {
		defer close(stopped)
		sf.watchSize(c, grew)
	}()
	return stopped
}

// supervise ends the group when asked (kill), gracefully when asked (quit:
// stdin closed, the grace to exit), when output runs past the limit, or
// after the leader exits, leftovers included; then, once the group is gone,
// stops reading pipes a process that escaped the group still holds.
func (c *child) supervise() {
	select {
	case <-c.exited:
	case <-c.limitHit:
		c.limited = true
	case <-c.kill:
	case <-c.quit:
		// Its stdin closed, a CLI ends its session the way it does on its
		// own (and saves it, for a cold turn to resume), within the grace.
		c.stdin.close()
		grace := time.NewTimer(c.lim.KillGrace)
		select {
		case <-c.exited:
		case <-grace.C:
		case <-c.kill:
		case <-c.limitHit:
			c.limited = true
		}
		grace.Stop()
	}
	// A member left behind after the leader exits is ended the same way;
	// EndGroup returns at once when there is none.
	proc.EndGroup(context.Background(), c.pgid, c.lim.KillGrace, c.exited)
	<-c.exited
	close(c.groupGone)
	if c.stdoutFile != nil {
		c.stdoutFile.watch.Close()
	}
	drain := time.NewTimer(c.lim.KillGrace)
	select {
	case <-c.ioDone:
	case <-drain.C:
		// A process that escaped the group holds the pipes: stop
		// reading them, so it cannot hold the agent open.
		c.stdin.close()
		if c.stdoutFile == nil {
			c.stdout.close()
		}
		c.stderr.close()
	}
	drain.Stop()
	<-c.ioDone
	c.stdin.close()
}

// close asks the supervisor to end the child gracefully: stdin closed,
// then the group ended after the grace; it does not wait.
func (c *child) close() { c.quitOnce.Do(func() { close(c.quit) }) }

// end asks the supervisor to end the whole group now; it does not wait.
func (c *child) end() { c.killOnce.Do(func() { close(c.kill) }) }

// write writes b on the child's stdin, all of it or an error; a child
// that is gone fails the write rather than blocking it (its stdin closes).
func (c *child) write(b []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.stdin.f.Write(b); err != nil {
		return fmt.Errorf("writing to the agent's stdin: %w", err)
	}
	return nil
}

// resetOutput starts a turn's output count: MaxOutput bounds each turn.
func (c *child) resetOutput() { c.total.Store(0) }

// exitedEarly reports whether the leader has exited.
func (c *child) exitedEarly() bool { return isClosed(c.exited) }

func (c *child) overLimit() bool { return isClosed(c.limitHit) }

// isClosed says whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (c *child) count(n int) {
	if n > 0 {
		c.watch.touch()
	}
	if c.total.Add(int64(n)) > c.lim.MaxOutput {
		c.limOnce.Do(func() { close(c.limitHit) })
	}
}

// readStdout hands complete lines to out as they arrive, skipping any line
// longer than MaxLine without buffering it, and stops handing them on once
// output is over the limit (still draining so the child never blocks on a
// full pipe).
func (c *child) readStdout() int64 {
	br := bufio.NewReaderSize(c.stdoutSrc, 64<<10)
	var total int64
	var long []byte // a line longer than the reader's buffer, up to MaxLine
	var dropping bool
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			total += int64(len(chunk))
			c.count(len(chunk))
		}
		complete := err == nil || (len(chunk) > 0 && err != bufio.ErrBufferFull)
		switch {
		case c.overLimit():
			long, dropping = nil, false
		case dropping:
			dropping = !complete
		case err == bufio.ErrBufferFull:
			if int64(len(long)+len(chunk)) > c.lim.MaxLine {
				c.skipped(c.lim.MaxLine)
				long, dropping = nil, true
			} else {
				long = append(long, chunk...)
			}
		case complete:
			c.line(long, chunk)
			long = nil
		}
		if c.out.idle != nil && err == nil && !lineBuffered(br) {
			// The next read waits for the agent: what the lines so far
			// produced goes out first.
			c.out.idle()
		}
		if err != nil && err != bufio.ErrBufferFull {
			if c.out.idle != nil {
				c.out.idle()
			}
			c.stdout.close()
			if c.out.eof != nil {
				c.out.eof()
			}
			return total
		}
	}
}

// line hands out the line that chunk completes (after long, the part read
// before), unless it is over MaxLine or blank.
func (c *child) line(long, chunk []byte) {
	line := chunk
	if long != nil {
		if int64(len(long)+len(chunk)) > c.lim.MaxLine+1 {
			c.skipped(c.lim.MaxLine)
			return
		}
		line = append(long, chunk...)
	}
	line = bytes.TrimRight(line, "\r\n")
	if len(bytes.TrimSpace(line)) > 0 {
		c.out.line(line)
	}
}

// lineBuffered says whether br holds a whole line already read, which the
// next ReadSlice returns without reading the pipe.
func lineBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := br.Peek(n)
	return bytes.IndexByte(b, '\n') >= 0
}

// maxStderrLine bounds a stderr line handed to the parser; the rest of a
// longer line is dropped (retry notices are short).
const maxStderrLine = 16 << 10

func (c *child) readStderr() {
	buf := make([]byte, 32<<10)
	var line []byte
	for {
		n, err := c.stderr.f.Read(buf)
		if n > 0 {
			c.count(n)
			_, _ = c.stderrTail.Write(buf[:n])
			if c.stderrLines != nil && !c.overLimit() {
				line = c.splitStderr(line, buf[:n])
			}
		}
		if err != nil {
			if len(line) > 0 && c.stderrLines != nil {
				c.stderrLines(line)
			}
			c.stderr.close()
			return
		}
	}
}

// splitStderr hands every complete line in chunk (after what is pending in
// line) to stderrLines and returns the new pending part.
func (c *child) splitStderr(line, chunk []byte) []byte {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			room := maxStderrLine - len(line)
			return append(line, chunk[:min(len(chunk), max(room, 0))]...)
		}
		room := maxStderrLine - len(line)
		line = append(line, chunk[:min(i, max(room, 0))]...)
		if l := bytes.TrimRight(line, "\r"); len(bytes.TrimSpace(l)) > 0 {
			c.stderrLines(l)
		}
		line = line[:0]
		chunk = chunk[i+1:]
	}
	return line
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
