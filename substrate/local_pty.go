package substrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/card-dev/card/internal/proc"
)

// Bounds of the local PTY. A terminal is an open-ended process a client may
// forget; these keep one forgotten session from costing the host much.
const (
	// MaxPTYSessions caps concurrently open terminals.
	MaxPTYSessions = 32
	// ptyBufferMax is how much unread output a session keeps; beyond it the
	// oldest output is dropped (a terminal's newest lines matter most).
	ptyBufferMax = 1 << 20
	// ptyReadMax bounds one PTYRead answer.
	ptyReadMax = 64 << 10
	// ptyReadWait is how long PTYRead waits when nothing is buffered, so a
	// polling client does not spin yet is never blocked for long.
	ptyReadWait = 100 * time.Millisecond
	// ptyInputTimeout bounds a write to a terminal whose program stopped
	// reading its input.
	ptyInputTimeout = 5 * time.Second
	// ptyExitedTTL is how long an exited, never-collected session is kept
	// for a late PTYRead before the next PTYStart reaps it.
	ptyExitedTTL = 5 * time.Minute
	// ptyReaderWait bounds how long killing a terminal waits for its output
	// pump to stop after the master is closed.
	ptyReaderWait = time.Second
)

type ptyTable struct {
	mu       sync.Mutex
	sessions map[int]*ptySession
}

func newPTYTable() *ptyTable { return &ptyTable{sessions: map[int]*ptySession{}} }

type ptySession struct {
	pid  int
	cmd  *exec.Cmd
	ptmx *os.File
	// tty is the terminal's device (/dev/pts/N): a process still holding it
	// is part of the terminal even after it left the session.
	tty string

	mu       sync.Mutex
	buf      []byte
	dropped  int64
	exitedAt time.Time
	exitErr  error

	notify     chan struct{} // a token when output arrives
	exited     chan struct{} // closed when the process has been reaped
	readerDone chan struct{} // closed when the output pump has stopped
}

func (l *Local) hasPTY() bool { return true }

func (l *Local) table() (*ptyTable, error) {
	if l.ptys == nil {
		return nil, errors.New("local substrate not initialised: use NewLocal")
	}
	return l.ptys, nil
}

// PTYStart runs cmd with `sh -c` on a new pseudo-terminal (24x80) in Dir, as
// the leader of its own session, and returns its pid, which names the PTY in
// the other calls.
func (l *Local) PTYStart(ctx context.Context, cmd string) (int, error) {
	t, err := l.table()
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(cmd) == "" {
		return 0, errors.New("pty_start: empty command")
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("pty_start %q: %w", cmd, err)
	}
	t.reapExpired(time.Now())
	t.mu.Lock()
	n := len(t.sessions)
	t.mu.Unlock()
	if n >= MaxPTYSessions {
		return 0, fmt.Errorf("pty_start %q: %d terminals are already open; kill one with pty_kill first", cmd, n)
	}

	c := exec.Command("/bin/sh", "-c", cmd)
	c.Dir = l.Dir
	c.Env = proc.NewEnv(l.Env).SetDefault("TERM", "xterm-256color").List()
	ptmx, err := pty.StartWithSize(c, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		return 0, fmt.Errorf("pty_start %q: start sh in %s on a pty: %w", cmd, l.Dir, err)
	}
	var tty string
	if f, ok := c.Stdin.(*os.File); ok {
		tty = f.Name()
	}
	if p, err := pollable(ptmx); err == nil {
		ptmx = p
	}
	s := &ptySession{
		pid:        c.Process.Pid,
		cmd:        c,
		ptmx:       ptmx,
		tty:        tty,
		notify:     make(chan struct{}, 1),
		exited:     make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	go s.pump()
	go s.wait()
	t.mu.Lock()
	t.sessions[s.pid] = s
	t.mu.Unlock()
	return s.pid, nil
}

// pollable returns a non-blocking duplicate of the terminal's master,
// registered with Go's poller, and closes f. creack/pty leaves the master in
// blocking mode (its ioctls go through File.Fd), and a blocking read cannot be
// interrupted: Close waits for it, and the read waits for every holder of the
// terminal to let go, which a process that escaped the session may never do.
func pollable(f *os.File) (*os.File, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd, derr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		_ = unix.Close(nfd)
		return nil, err
	}
	p := os.NewFile(uintptr(nfd), f.Name())
	_ = f.Close()
	return p, nil
}

// pump copies terminal output into the session buffer until the terminal
// closes (EIO once every holder of the tty is gone) or ptmx is closed.
func (s *ptySession) pump() {
	defer close(s.readerDone)
	chunk := make([]byte, 32<<10)
	for {
		n, err := s.ptmx.Read(chunk)
		if n > 0 {
			s.mu.Lock()
			s.buf = append(s.buf, chunk[:n]...)
			if over := len(s.buf) - ptyBufferMax; over > 0 {
				s.buf = append(s.buf[:0], s.buf[over:]...)
				s.dropped += int64(over)
			}
			s.mu.Unlock()
			select {
			case s.notify <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// wait reaps the process, then kills what is left of its session (jobs in
// groups of their own included) and whatever still holds the terminal, so no
// background job outlives it.
func (s *ptySession) wait() {
	err := s.cmd.Wait()
	proc.EndSession(context.Background(), s.pid, s.tty, 0, nil)
	s.mu.Lock()
	s.exitErr = err
	s.exitedAt = time.Now()
	s.mu.Unlock()
	close(s.exited)
}

func (t *ptyTable) get(op string, pid int) (*ptySession, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.sessions[pid]
	if !ok {
		return nil, fmt.Errorf("%s: no open pty with pid %d (it was never started here, was killed, or its exit was already read)", op, pid)
	}
	return s, nil
}

func (t *ptyTable) remove(s *ptySession) {
	t.mu.Lock()
	if t.sessions[s.pid] == s {
		delete(t.sessions, s.pid)
	}
	t.mu.Unlock()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (l *Local) PTYInput(ctx context.Context, pid int, data string) error {
	t, err := l.table()
	if err != nil {
		return err
	}
	s, err := t.get("pty_input", pid)
	if err != nil {
		return err
	}
	if isClosed(s.exited) {
		return fmt.Errorf("pty_input to pty %d: its process has exited", pid)
	}
	deadline := time.Now().Add(ptyInputTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.ptmx.SetWriteDeadline(deadline)
	if _, err := s.ptmx.Write([]byte(data)); err != nil {
		return fmt.Errorf("pty_input to pty %d: %w", pid, err)
	}
	return nil
}

// PTYRead returns the output buffered since the last read (at most 64 KiB),
// waiting up to 100 ms if there is none. Once the process has exited and its
// output is drained, the read reports the exit as an error and forgets the
// session, so every session is reaped by whoever observes its end.
func (l *Local) PTYRead(ctx context.Context, pid int) (string, error) {
	t, err := l.table()
	if err != nil {
		return "", err
	}
	s, err := t.get("pty_read", pid)
	if err != nil {
		return "", err
	}
	if out, ok := s.take(); ok {
		return out, nil
	}
	timer := time.NewTimer(ptyReadWait)
	defer timer.Stop()
	select {
	case <-s.notify:
	case <-s.readerDone:
	case <-timer.C:
	case <-ctx.Done():
		return "", fmt.Errorf("pty_read from pty %d: %w", pid, ctx.Err())
	}
	if out, ok := s.take(); ok {
		return out, nil
	}
	if isClosed(s.exited) && isClosed(s.readerDone) {
		t.remove(s)
		_ = s.ptmx.Close()
		return "", fmt.Errorf("pty %d has exited (%s); the session is closed", pid, exitText(s.exitErr))
	}
	return "", nil
}

func (s *ptySession) take() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) == 0 {
		return "", false
	}
	n := min(len(s.buf), ptyReadMax)
	out := string(s.buf[:n])
	s.buf = append(s.buf[:0], s.buf[n:]...)
	if s.dropped > 0 {
		out = fmt.Sprintf("[card: %d bytes of unread pty output were dropped]\n%s", s.dropped, out)
		s.dropped = 0
	}
	return out, true
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (l *Local) PTYResize(_ context.Context, pid int, rows, cols uint16) error {
	t, err := l.table()
	if err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return fmt.Errorf("pty_resize of pty %d: rows and cols must be positive (got %dx%d)", pid, rows, cols)
	}
	s, err := t.get("pty_resize", pid)
	if err != nil {
		return err
	}
	if err := setSize(s.ptmx, rows, cols); err != nil {
		return fmt.Errorf("pty_resize of pty %d: %w", pid, err)
	}
	return nil
}

// setSize resizes the terminal through the file's own descriptor access:
// pty.Setsize goes through File.Fd, which would put the master back into
// blocking mode.
func setSize(f *os.File, rows, cols uint16) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}

// PTYKill ends every process of the terminal's session and every process
// still holding the terminal (SIGTERM, then SIGKILL after the grace period),
// reaps the leader and forgets the session. A shell with job control puts
// jobs in process groups of their own, so the leader's group is not enough.
func (l *Local) PTYKill(ctx context.Context, pid int) error {
	t, err := l.table()
	if err != nil {
		return err
	}
	s, err := t.get("pty_kill", pid)
	if err != nil {
		return err
	}
	t.remove(s)
	s.kill(ctx, l.grace())
	return nil
}

// kill terminates the session and waits, bounded, for it to be reaped.
// ctx ending cuts the grace short. It never blocks on the output pump:
// closing the (non-blocking) master ends its read at once, and the wait for
// that is bounded too, in case the master could not be made pollable.
func (s *ptySession) kill(ctx context.Context, grace time.Duration) {
	proc.EndSession(ctx, s.pid, s.tty, grace, s.exited)
	_ = s.ptmx.Close()
	t := time.NewTimer(ptyReaderWait)
	defer t.Stop()
	select {
	case <-s.readerDone:
	case <-t.C:
	}
}

// reapExpired forgets sessions that exited long ago and were never read.
func (t *ptyTable) reapExpired(now time.Time) {
	t.mu.Lock()
	var old []*ptySession
	for pid, s := range t.sessions {
		s.mu.Lock()
		expired := !s.exitedAt.IsZero() && now.Sub(s.exitedAt) > ptyExitedTTL
		s.mu.Unlock()
		if expired {
			delete(t.sessions, pid)
			old = append(old, s)
		}
	}
	t.mu.Unlock()
	for _, s := range old {
		s.kill(context.Background(), 0)
	}
}

func (t *ptyTable) closeAll(grace time.Duration) {
	t.mu.Lock()
	all := make([]*ptySession, 0, len(t.sessions))
	for pid, s := range t.sessions {
		all = append(all, s)
		delete(t.sessions, pid)
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() { s.kill(context.Background(), grace) })
	}
	wg.Wait()
}
