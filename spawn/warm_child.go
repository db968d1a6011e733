package spawn

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/card-dev/card/internal/proc"
)

// warmChild is a warm agent's process: started as every run's child is
// (prepare and start: explicit cwd, its own group killed with the daemon,
// private files, env, the program found on the child's PATH), with its
// stdout lines, bounded and counted, handed to the protocol until stdout
// ends, and a supervisor that ends the whole group when asked, when output
// runs past the limit, or when the leader exits (leftovers included).
type warmChild struct {
	// approver is the one the agent's questions go to: the warm agent's
	// switch to the running turn's, paused in the watchdog while it waits.
	approver Approver
	p        *prepared
	c        *started
	r        *run
	// lines are the child's stdout lines, bounded (MaxLine) and counted
	// (MaxOutput, reset by each turn); closed once stdout ends. The
	// protocol reads every one of them until then.
	lines chan []byte
	// skipped is told of a stdout line over MaxLine.
	skipped func(n int64)
	// readerGone is closed by a protocol that stops reading lines before
	// they close: what is left is drained, so the child never blocks.
	readerGone     chan struct{}
	readerGoneOnce sync.Once

	kill     chan struct{}
	killOnce sync.Once
	// quit asks for a graceful end: stdin closed, the grace to exit.
	quit     chan struct{}
	quitOnce sync.Once
	// writeMu keeps each message written to stdin whole when a turn, a
	// steer and a cancel write at once.
	writeMu sync.Mutex
	// done is closed once the group is gone and every pipe is finished;
	// exit is set before.
	done chan struct{}
	exit ExitInfo
	// limited is set, before done closes, when the output limit ended it.
	limited bool
}

// startWarmChild prepares and starts the plan's child. approver is what
// the plan's ask channel (if any) is opened with, once for the child's life.
func startWarmChild(ctx context.Context, spec WarmSpec, approver Approver, skipped func(int64)) (*warmChild, *Error) {
	rs := RunSpec{Plan: spec.Plan, BaseEnv: spec.BaseEnv, Limits: spec.Limits, TempDir: spec.TempDir, ImageMemory: spec.ImageMemory,
		OnStart: spec.OnStart, Approver: approver}
	// A conversation's child keeps its stdout a pipe: it does not exit
	// after its answer, so nothing is lost to a late reader.
	rs.Plan.StdoutToFile = false
	// Images belong to each turn, not to the start.
	rs.Plan.Input.Images = nil
	if sp := rs.Plan.Session; sp != nil && sp.Protocol == protocolClaudeStream {
		// Claude's stream-json is read by the warm agent itself, not by a
		// one-shot conversation.
		rs.Plan.Session = nil
	}
	p, e := prepare(ctx, rs)
	if e != nil {
		p.cleanup()
		return nil, e
	}
	c, e := start(p)
	if e != nil {
		p.cleanup()
		return nil, e
	}
	lim := p.lim
	r := &run{lim: lim, pgid: c.pgid, exited: make(chan struct{}), limitHit: make(chan struct{}), ioDone: make(chan struct{}),
		ended: make(chan struct{}), groupGone: make(chan struct{}),
		stdin: closer{f: c.stdin}, stdout: closer{f: c.stdout}, stderr: closer{f: c.stderr}, stderrTail: &proc.Capped{Tail: lim.StderrTail}}
	r.stdoutSrc = c.stdout
	// One watchdog for the agent's life, readied for each turn: the
	// agent's output touches it, its questions pause it.
	r.watch = p.watch
	w := &warmChild{approver: p.spec.Approver, p: p, c: c, r: r, lines: make(chan []byte), readerGone: make(chan struct{}), skipped: skipped, kill: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	go w.live(spec.OnExit)
	return w, nil
}

// live runs the child's pipes and its supervision until the group is gone.
func (w *warmChild) live(onExit func(ExitInfo)) {
	r := w.r
	var ioWG sync.WaitGroup
	ioWG.Add(2)
	go func() {
		defer ioWG.Done()
		r.readStderr()
	}()
	var stdoutBytes int64
	go func() {
		defer ioWG.Done()
		stdoutBytes = r.readStdout(func(line []byte) {
			select {
			case w.lines <- append([]byte(nil), line...):
			case <-w.readerGone:
			}
		}, func(n int64) {
			if w.skipped != nil {
				w.skipped(n)
			}
		}, nil)
		close(w.lines)
	}()
	go func() {
		ioWG.Wait()
		close(r.ioDone)
	}()
	go func() {
		r.waitErr = w.c.cmd.Wait()
		close(r.exited)
	}()

	select {
	case <-r.exited:
	case <-r.limitHit:
		w.limited = true
	case <-w.kill:
	case <-w.quit:
		// Its stdin closed, a CLI ends its session the way it does on its
		// own (and saves it, for a cold turn to resume), within the grace.
		r.stdin.close()
		grace := time.NewTimer(r.lim.KillGrace)
		select {
		case <-r.exited:
		case <-grace.C:
		case <-w.kill:
		case <-r.limitHit:
			w.limited = true
		}
		grace.Stop()
	}
	// A member left behind after the leader exits is ended the same way;
	// EndGroup returns at once when there is none.
	r.terminate()
	<-r.exited
	close(r.groupGone)
	drain := time.NewTimer(r.lim.KillGrace)
	select {
	case <-r.ioDone:
	case <-drain.C:
		// A process that escaped the group holds the pipes: stop
		// reading them, so it cannot hold the agent open.
		r.stdout.close()
		r.stderr.close()
	}
	drain.Stop()
	<-r.ioDone
	r.stdin.close()
	code := -1
	if st := w.c.cmd.ProcessState; st != nil {
		code = st.ExitCode()
	}
	if !w.limited && r.overLimit() {
		w.limited = true
	}
	w.exit = ExitInfo{Code: code, StderrTail: r.tail(), StdoutBytes: stdoutBytes}
	w.p.cleanup()
	close(w.done)
	if onExit != nil {
		onExit(w.exit)
	}
}

// stopReading says the protocol reads no more lines.
func (w *warmChild) stopReading() { w.readerGoneOnce.Do(func() { close(w.readerGone) }) }

// close asks the supervisor to end the child gracefully: stdin closed,
// then the group ended after the grace; it does not wait.
func (w *warmChild) close() { w.quitOnce.Do(func() { close(w.quit) }) }

// end asks the supervisor to end the whole group now; it does not wait.
func (w *warmChild) end() { w.killOnce.Do(func() { close(w.kill) }) }

// write writes b on the child's stdin, all of it or an error; a child
// that is gone fails the write rather than blocking it (its stdin closes).
func (w *warmChild) write(b []byte) error {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	_, err := w.r.stdin.f.Write(b)
	if err != nil {
		return fmt.Errorf("writing to the agent's stdin: %w", err)
	}
	return nil
}

// resetOutput starts a turn's output count: MaxOutput bounds each turn.
func (w *warmChild) resetOutput() { w.r.total.Store(0) }

// exitedEarly reports whether the leader has exited.
func (w *warmChild) exitedEarly() bool {
	select {
	case <-w.r.exited:
		return true
	default:
		return false
	}
}
