package spawn

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/card-dev/card/internal/proc"
)

// The running child: its group's supervision (deadline, cancel, output
// limit, the end of the leader) and its bounded pipes.

const (
	reasonNone = iota
	reasonCtx
	reasonLimit
	// reasonVerdict: the run's own events said it cannot succeed any more
	// (the retry guard), and the runner ended the group.
	reasonVerdict
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
	// turnDone is closed when a conversation's turn is over (nil for a
	// one-shot run): the agent is then ended, since it would wait for a
	// next prompt.
	turnDone chan struct{}

	// ended is closed by end, once; verdict is set before it closes.
	ended   chan struct{}
	endOnce sync.Once
	verdict *Failure

	// stderrLines, when set, gets each line of stderr (the parser reads
	// the agent's retries there).
	stderrLines func([]byte)

	stdin, stdout, stderr closer
	// stdoutSrc is what readStdout reads: the stdout pipe, or a tail of
	// the stdout file (stdoutIsFile), which ends by itself once the group
	// is gone (groupGone) and is never cut short by the drain.
	stdoutSrc    io.Reader
	stdoutIsFile bool
	groupGone    chan struct{}

	stderrTail *proc.Capped

	// watch is told of every byte the agent prints.
	watch *watchdog
}

// closer closes a pipe end once, from whichever goroutine gets there first;
// a Close unblocks a Read or Write pending on it.
type closer struct {
	f    *os.File
	once sync.Once
}

func (c *closer) close() { c.once.Do(func() { c.f.Close() }) }

func (r *run) count(n int) {
	if r.watch != nil && n > 0 {
		r.watch.touch()
	}
	if r.total.Add(int64(n)) > r.lim.MaxOutput {
		r.limOnce.Do(func() { close(r.limitHit) })
	}
}

// end ends the run for the reason f gives: the supervisor ends the group
// and the run fails with f. Only the first call counts.
func (r *run) end(f *Failure) {
	r.endOnce.Do(func() {
		r.verdict = f
		close(r.ended)
	})
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
	case <-r.ended:
		r.reason = reasonVerdict
		r.terminate()
	case <-r.exited:
		// A member left behind after the leader exits is ended the same
		// way; EndGroup returns at once when there is none.
		r.terminate()
	case <-r.turnDone:
		if ctx.Err() != nil {
			// The conversation stopped because the run was cancelled
			// or timed out.
			r.reason = reasonCtx
			r.terminate()
			break
		}
		// Its stdin is closed: an agent that exits on EOF gets the
		// grace period to do so cleanly, then the group is ended.
		grace := time.NewTimer(r.lim.KillGrace)
		select {
		case <-r.exited:
		case <-grace.C:
		case <-r.limitHit:
			r.reason = reasonLimit
		}
		grace.Stop()
		r.terminate()
	}
	<-r.exited
	close(r.groupGone)
	drain := time.NewTimer(r.lim.KillGrace)
	defer drain.Stop()
	select {
	case <-r.ioDone:
		return
	case <-drain.C:
	}
	r.stdin.close()
	if !r.stdoutIsFile {
		r.stdout.close()
	}
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
func (r *run) readStdout(feed func([]byte), skipped func(int64), drained func()) int64 {
	br := bufio.NewReaderSize(r.stdoutSrc, 64<<10)
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
		if drained != nil && err == nil && !lineBuffered(br) {
			// The next read waits for the agent: what the lines so far
			// produced goes out first.
			drained()
		}
		if err != nil && err != bufio.ErrBufferFull {
			if drained != nil {
				drained()
			}
			r.stdout.close()
			return total
		}
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

func (r *run) readStderr() {
	buf := make([]byte, 32<<10)
	var line []byte
	for {
		n, err := r.stderr.f.Read(buf)
		if n > 0 {
			r.count(n)
			_, _ = r.stderrTail.Write(buf[:n])
			if r.stderrLines != nil && !r.overLimit() {
				line = r.splitStderr(line, buf[:n])
			}
		}
		if err != nil {
			if len(line) > 0 && r.stderrLines != nil {
				r.stderrLines(line)
			}
			r.stderr.close()
			return
		}
	}
}

// splitStderr hands every complete line in chunk (after what is pending in
// line) to stderrLines and returns the new pending part.
func (r *run) splitStderr(line, chunk []byte) []byte {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			room := maxStderrLine - len(line)
			line = append(line, chunk[:min(len(chunk), max(room, 0))]...)
			return line
		}
		room := maxStderrLine - len(line)
		line = append(line, chunk[:min(i, max(room, 0))]...)
		if l := bytes.TrimRight(line, "\r"); len(bytes.TrimSpace(l)) > 0 {
			r.stderrLines(l)
		}
		line = line[:0]
		chunk = chunk[i+1:]
	}
	return line
}

func (r *run) tail() string {
	return strings.ToValidUTF8(r.stderrTail.String(), "\uFFFD")
}
