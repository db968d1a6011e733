package spawn

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// A Node CLI that ends with process.exit loses what it had not yet written
// to a pipe or a socket: Node writes to those asynchronously, queues what
// the kernel's buffer does not take, and exit drops the queue. A Gemini
// that prints a big prompt back in its stream exits before the pipe drains
// and its answer, the last line, is never written (Copilot and Droid do
// the same). To a regular file a write is synchronous, so such a CLI's
// stdout is a file card tails.

// stdoutFileName is the child's stdout in the run's private directory, for
// the instant between its creation and its unlinking.
const stdoutFileName = ".card-stdout"

// stdoutFile is a child's stdout as a file: the child's end (append only),
// card's end (read as it grows, truncated past the output limit) and what
// wakes the reader when the child writes. Nothing names it on disk once the
// child has it: it is unlinked as soon as both ends are open.
type stdoutFile struct {
	child *os.File
	f     *os.File
	watch growthWatch
}

// growthWatch wakes a waiter each time the file may have grown. Wait
// returns an error once Close was called.
type growthWatch interface {
	Wait() error
	Close() error
}

// openStdoutFile makes the file in dir (the run's private 0700 directory),
// 0600, watched, and unlinked.
func openStdoutFile(dir string) (*stdoutFile, error) {
	path := filepath.Join(dir, stdoutFileName)
	child, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		child.Close()
		_ = os.Remove(path)
		return nil, err
	}
	watch, err := newGrowthWatch(path)
	if rmErr := os.Remove(path); err == nil && rmErr != nil {
		watch.Close()
		err = rmErr
	}
	if err != nil {
		closeAll(child, f)
		return nil, err
	}
	return &stdoutFile{child: child, f: f, watch: watch}, nil
}

// watchSize runs until the watch is closed: at each write it checks the
// file against the output limit — the child is not held back by card's
// reading as a pipe would hold it, so the file's size is checked, not only
// what card has read — and, past the limit, ends the run and empties the
// file so the disk is not filled while the group is ended; then it wakes
// the reader.
func (s *stdoutFile) watchSize(c *child, grew chan<- struct{}) {
	for s.watch.Wait() == nil {
		if st, err := s.f.Stat(); err == nil && st.Size() > c.lim.MaxOutput {
			c.limOnce.Do(func() { close(c.limitHit) })
			// The child appends, so its next write lands at the new end.
			_ = s.f.Truncate(0)
		}
		select {
		case grew <- struct{}{}:
		default:
		}
	}
}

// tailReader reads a growing file as a pipe reads: a Read at the end waits
// for the file to grow. Once the group is gone it reads up to the size the
// file had then and returns io.EOF, so a writer that escaped the group
// cannot keep the run open.
type tailReader struct {
	f     *os.File
	grew  <-chan struct{}
	gone  <-chan struct{}
	off   int64
	final int64 // -1 until the group is gone
}

func (t *tailReader) Read(p []byte) (int, error) {
	for {
		if t.final < 0 {
			// Looked at on every read, not only at the end of the file: a
			// writer that escaped the group and writes faster than card
			// reads would otherwise keep the reader from ever reaching the
			// end, and the run open until the output limit.
			select {
			case <-t.gone:
				st, err := t.f.Stat()
				if err != nil {
					return 0, err
				}
				t.final = st.Size()
			default:
			}
		}
		if t.final >= 0 {
			if t.off >= t.final {
				return 0, io.EOF
			}
			p = p[:min(int64(len(p)), t.final-t.off)]
		}
		n, err := t.f.Read(p)
		t.off += int64(n)
		if n > 0 {
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if t.final >= 0 {
			return 0, io.EOF
		}
		select {
		case <-t.grew:
		case <-t.gone:
			st, err := t.f.Stat()
			if err != nil {
				return 0, err
			}
			t.final = st.Size()
		}
	}
}
