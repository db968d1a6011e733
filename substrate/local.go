package substrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

// Defaults for Local. They bound what one client request can cost the host.
const (
	// DefaultCommandTimeout applies when RunCommand is given no timeout, so
	// no command can run unbounded on a daemon that lives for months.
	DefaultCommandTimeout = 10 * time.Minute
	// DefaultMaxOutput caps each of stdout and stderr of one command; a
	// runaway `cat /dev/urandom` must not exhaust the daemon's memory.
	DefaultMaxOutput = 4 << 20
	// DefaultKillGrace is how long a timed-out process group gets between
	// SIGTERM and SIGKILL.
	DefaultKillGrace = 2 * time.Second
	// DefaultMaxRead caps one read answer. A client that asks for a 10 GB
	// log in one call gets an error telling it to read windows, not a daemon
	// that runs out of memory.
	DefaultMaxRead = 32 << 20
)

// Local is the host itself: its filesystem and its processes.
//
// Paths must be absolute. The reference implementation joined relative paths
// to the process working directory, but a daemon's working directory is
// wherever its supervisor started it (often "/"), which means nothing to a
// client, so a relative path is refused with an error naming it instead of
// silently landing somewhere surprising.
//
// Commands run with `/bin/sh -c` in Dir (default: the user's home directory,
// the one place every client can reason about), in their own process group,
// with stdin from /dev/null. When a command exits or times out, whatever is
// left of its process group is killed, so no background job outlives its
// request. Commands and terminals get the environment the daemon read at
// startup minus the variables no child inherits (proc.Stripped): the same
// rules as an agent's.
//
// The zero value is not ready; use NewLocal. Close ends every PTY session.
type Local struct {
	// Dir is the working directory of commands and PTYs.
	Dir string
	// Env is the daemon's environment as read at startup, the base of every
	// command's and terminal's environment. The process's live environment
	// is never consulted.
	Env map[string]string
	// DefaultTimeout bounds a RunCommand called with timeout 0.
	DefaultTimeout time.Duration
	// MaxOutput caps each of stdout and stderr; the excess is dropped and a
	// marker line says how much.
	MaxOutput int
	// KillGrace is the SIGTERM→SIGKILL interval for a timed-out group.
	KillGrace time.Duration
	// MaxRead caps the bytes one ReadText or ReadBytes returns.
	MaxRead int64

	ptys *ptyTable
}

// NewLocal returns a Local with the defaults above over env, the daemon's
// environment as read at startup, working in its HOME (or "/" when there is
// no absolute one).
func NewLocal(env map[string]string) *Local {
	return &Local{
		Dir:            homeDir(env),
		Env:            env,
		DefaultTimeout: DefaultCommandTimeout,
		MaxOutput:      DefaultMaxOutput,
		KillGrace:      DefaultKillGrace,
		MaxRead:        DefaultMaxRead,
		ptys:           newPTYTable(),
	}
}

// Close kills every PTY session still open and waits for them to be reaped.
func (l *Local) Close() error {
	if l.ptys != nil {
		l.ptys.closeAll(l.grace())
	}
	return nil
}

func (l *Local) Name() string  { return "local" }
func (l *Local) IsLocal() bool { return true }

// DisplayPath shows an absolute path in its clean form; a relative path is
// echoed unchanged, since Local will refuse it anyway.
func (l *Local) DisplayPath(path string) string {
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	return path
}

// ErrInvalidPath is wrapped by the refusal of a path Local cannot use
// (relative, empty, NUL byte): the caller's mistake, answered as bad params.
var ErrInvalidPath = errors.New("invalid path")

// resolve is the single host-locality rule: absolute paths only.
func resolve(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%w: empty path; substrate paths must be absolute", ErrInvalidPath)
	}
	if strings.IndexByte(path, 0) >= 0 {
		return "", fmt.Errorf("%w: path %q contains a NUL byte", ErrInvalidPath, path)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%w: path %q is relative: the daemon's working directory means nothing to its clients, so give an absolute path", ErrInvalidPath, path)
	}
	return filepath.Clean(path), nil
}

// ReadText refuses a file that is not valid UTF-8 (use ReadBytes): passing
// it on would have JSON replace the bad bytes silently.
func (l *Local) ReadText(ctx context.Context, path string) (string, error) {
	b, err := l.readWindow(ctx, "read_text", path, 0, ToEnd)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("read_text %s: not valid UTF-8 text; read it with read_bytes", l.DisplayPath(path))
	}
	return string(b), nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "special file " + m.Type().String()
}

// readWindow reads [offset, offset+length) of the file without loading the
// rest of it, refusing an answer larger than MaxRead.
func (l *Local) readWindow(ctx context.Context, op, path string, offset, length int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, path, err)
	}
	full, err := resolve(path)
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("%s %s: negative offset %d", op, full, offset)
	}
	// Stat before opening: opening a named pipe blocks until a writer
	// comes, which would hang the request past any deadline.
	if fi, err := os.Stat(full); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, full, unwrapPathError(err))
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s: not a regular file (%s)", op, full, fileKind(fi.Mode()))
	}
	f, err := os.Open(full)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, full, unwrapPathError(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, full, unwrapPathError(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s: not a regular file (%s)", op, full, fileKind(fi.Mode()))
	}
	limit := l.MaxRead
	if limit <= 0 {
		limit = DefaultMaxRead
	}
	want := length
	if fi.Size() > 0 {
		// The reference's window: clipped to the file, empty past its end.
		remain := max(fi.Size()-offset, 0)
		if want < 0 || want > remain {
			want = remain
		}
	} else if want < 0 {
		// Size 0 may be a generated file (/proc): read one byte past the
		// limit, and the check after the read notices an oversized answer.
		want = limit + 1
	}
	if sized := length >= 0 || fi.Size() > 0; sized && want > limit {
		return nil, fmt.Errorf("%s %s: the answer would exceed %d bytes; read it in windows with read_bytes offset/length", op, full, limit)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return nil, fmt.Errorf("%s %s: seek to %d: %w", op, full, offset, err)
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, want))
	if b == nil {
		b = []byte{}
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, full, unwrapPathError(err))
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s %s: the answer would exceed %d bytes; read it in windows with read_bytes offset/length", op, full, limit)
	}
	return b, nil
}

func (l *Local) WriteText(ctx context.Context, path, content string) error {
	return l.writeFile(ctx, path, []byte(content), false)
}

func (l *Local) WriteBytes(ctx context.Context, path string, data []byte) error {
	return l.writeFile(ctx, path, data, false)
}

// writeTextCreateOnly creates path only if nothing is there, atomically: the
// O_EXCL open refuses an existing entry (a dangling symlink included), so no
// race between a presence check and the write can clobber a file.
func (l *Local) writeTextCreateOnly(ctx context.Context, path, content string) error {
	return l.writeFile(ctx, path, []byte(content), true)
}

func (l *Local) writeFile(ctx context.Context, path string, data []byte, exclusive bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	full, err := resolve(path)
	if err != nil {
		return err
	}
	parent := filepath.Dir(full)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create parent directory %s of %s: %w", parent, full, unwrapPathError(err))
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if exclusive {
		flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(full, flags, 0o644)
	if err != nil {
		if exclusive && errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("refusing to create %s: %w", full, ErrPathExists)
		}
		return fmt.Errorf("write file %s: %w", full, unwrapPathError(err))
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write file %s: %w", full, unwrapPathError(err))
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write file %s: %w", full, unwrapPathError(err))
	}
	return nil
}

func (l *Local) PathState(ctx context.Context, path string) api.PathState {
	if err := ctx.Err(); err != nil {
		return api.PathState{Status: api.PathUnknown, Reason: fmt.Sprintf("inspect %s: %v", path, err)}
	}
	full, err := resolve(path)
	if err != nil {
		return api.PathState{Status: api.PathUnknown, Reason: err.Error()}
	}
	_, err = os.Lstat(full)
	return pathStateFromLstat(full, err)
}

// pathStateFromLstat decides presence from an lstat outcome. Only ENOENT
// proves absence: EACCES on a parent, ENOTDIR, ELOOP and the rest say the
// question could not be answered, and a guarded write must not take them for
// "missing".
func pathStateFromLstat(path string, err error) api.PathState {
	switch {
	case err == nil:
		return api.PathState{Status: api.PathExists}
	case errors.Is(err, syscall.ENOENT):
		return api.PathState{Status: api.PathMissing}
	default:
		return api.PathState{Status: api.PathUnknown, Reason: fmt.Sprintf("cannot inspect %s: %v", path, unwrapPathError(err))}
	}
}

func (l *Local) ReadBytes(ctx context.Context, path string, offset, length int64) ([]byte, error) {
	return l.readWindow(ctx, "read_bytes", path, offset, length)
}

// unwrapPathError drops the *PathError wrapper, whose text repeats the path
// and op we already put in our own message.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// homeDir is env's HOME when it is absolute, else "/": the working directory
// of commands, terminals and a stdio bridge.
func homeDir(env map[string]string) string {
	if h := env["HOME"]; filepath.IsAbs(h) {
		return h
	}
	return "/"
}

func (l *Local) grace() time.Duration {
	if l.KillGrace > 0 {
		return l.KillGrace
	}
	return DefaultKillGrace
}

func (l *Local) RunCommand(ctx context.Context, cmd string, timeout time.Duration) (api.CommandResult, error) {
	if strings.TrimSpace(cmd) == "" {
		return api.CommandResult{}, errors.New("run_command: empty command")
	}
	if timeout <= 0 {
		timeout = l.DefaultTimeout
		if timeout <= 0 {
			timeout = DefaultCommandTimeout
		}
	}
	max := l.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	c := exec.Command("/bin/sh", "-c", cmd)
	c.Dir = l.Dir
	c.Env = proc.NewEnv(l.Env).List()
	stdout, stderr := &proc.Capped{Head: max}, &proc.Capped{Head: max}
	c.Stdout, c.Stderr = stdout, stderr
	if err := proc.Start(c); err != nil {
		return api.CommandResult{}, fmt.Errorf("run_command %q: start sh in %s: %w", cmd, l.Dir, err)
	}
	// On timeout or cancel the whole group gets SIGTERM, then SIGKILL after
	// the grace period; whatever is left of the group when the shell exits
	// (background jobs) dies with the request: the daemon leaves no orphans.
	waitErr := proc.Wait(runCtx, c, l.grace())

	res := api.CommandResult{Stdout: cappedText(stdout, max), Stderr: cappedText(stderr, max), ExitCode: -1}
	if c.ProcessState != nil {
		res.ExitCode = c.ProcessState.ExitCode()
	}
	switch {
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		return res, &TimeoutError{Command: cmd, After: timeout, Detail: "its process group was terminated"}
	case ctx.Err() != nil:
		return res, fmt.Errorf("run_command %q: %w; its process group was terminated", cmd, ctx.Err())
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("run_command %q: %w", cmd, waitErr)
	}
	return res, nil
}

// cappedText is what a command printed, with a line saying how much was
// dropped past the first max bytes.
func cappedText(c *proc.Capped, max int) string {
	if c.Dropped() == 0 {
		return c.String()
	}
	return fmt.Sprintf("%s\n[card: output truncated, %d bytes dropped after the first %d]\n", c.String(), c.Dropped(), max)
}
