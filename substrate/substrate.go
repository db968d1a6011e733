// Package substrate is the one environment the daemon's clients act on: run a
// command, read and write files, check whether a path exists, and (optionally)
// drive a terminal. A host app that runs agents needs to look at what those
// agents did in the same place they did it, so every side effect resolves
// against one machine: the host (Local) or a bridge reached over MCP (MCP).
//
// The interface is deliberately small — exec and file I/O, PTY optional.
// Anything richer (list a directory, grep) composes on top of these.
package substrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/card-dev/card/api"
)

// ToEnd is the ReadBytes length that means "up to the end of the file".
const ToEnd int64 = -1

// Substrate is the environment a client acts on. Every method that touches
// the environment takes a context, so a client that hangs up or a daemon that
// shuts down stops the work instead of leaving it running.
//
// Paths are interpreted by the environment; Local accepts absolute paths only
// (see Local). Every error names the path, command or PTY it concerns.
type Substrate interface {
	// Name is the environment label: "local", or the configured bridge name.
	Name() string
	// IsLocal reports whether this substrate is the daemon's own host, so
	// composed helpers can use the host filesystem directly.
	IsLocal() bool
	// DisplayPath is how a path should be shown to a user for this
	// environment. Pure, no I/O.
	DisplayPath(path string) string

	// RunCommand runs cmd with a POSIX shell and waits for it. A timeout of
	// zero means "no per-call timeout": the substrate's own default bound
	// still applies. A command that outlives its timeout is ended and the
	// error is a *TimeoutError.
	RunCommand(ctx context.Context, cmd string, timeout time.Duration) (api.CommandResult, error)
	// ReadText reads a whole UTF-8 text file.
	ReadText(ctx context.Context, path string) (string, error)
	// WriteText truncates (or creates) the file, creating parent directories.
	WriteText(ctx context.Context, path, content string) error
	// PathState tells whether something is at path without following a
	// final symlink; see PathStatus for the three answers.
	PathState(ctx context.Context, path string) api.PathState
	// ReadBytes reads the window [offset, offset+length) of a file, clipped
	// to its size: an offset at or past the end gives an empty slice, and a
	// length of ToEnd (any negative) reads to the end.
	ReadBytes(ctx context.Context, path string, offset, length int64) ([]byte, error)
	// WriteBytes truncates (or creates) the file, creating parent directories.
	WriteBytes(ctx context.Context, path string, data []byte) error

	// The PTY set is optional; substrates without it return errors wrapping
	// ErrNotSupported (embed NoPTY). A PTY is named by its numeric pid.
	PTYStart(ctx context.Context, cmd string) (pid int, err error)
	PTYInput(ctx context.Context, pid int, data string) error
	// PTYRead returns what the terminal has printed since the last read,
	// waiting only briefly when nothing is buffered.
	PTYRead(ctx context.Context, pid int) (string, error)
	PTYResize(ctx context.Context, pid int, rows, cols uint16) error
	PTYKill(ctx context.Context, pid int) error
}

// ErrNotSupported is wrapped by every PTY call on a substrate without a PTY,
// so callers (and the RPC layer) can answer "unsupported" rather than
// "failed".
var ErrNotSupported = errors.New("not supported by this substrate")

// NoPTY supplies the PTY methods of a substrate that has no terminal support.
// Embed it; each method returns an error wrapping ErrNotSupported that names
// the operation.
type NoPTY struct{}

func (NoPTY) PTYStart(_ context.Context, cmd string) (int, error) {
	return 0, fmt.Errorf("pty_start %q: pty is %w", cmd, ErrNotSupported)
}
func (NoPTY) PTYInput(_ context.Context, pid int, _ string) error {
	return fmt.Errorf("pty_input to pty %d: pty is %w", pid, ErrNotSupported)
}
func (NoPTY) PTYRead(_ context.Context, pid int) (string, error) {
	return "", fmt.Errorf("pty_read from pty %d: pty is %w", pid, ErrNotSupported)
}
func (NoPTY) PTYResize(_ context.Context, pid int, _, _ uint16) error {
	return fmt.Errorf("pty_resize of pty %d: pty is %w", pid, ErrNotSupported)
}
func (NoPTY) PTYKill(_ context.Context, pid int) error {
	return fmt.Errorf("pty_kill of pty %d: pty is %w", pid, ErrNotSupported)
}

// TimeoutError reports a command that did not finish within its timeout. It
// is a distinct type because the caller's next step differs from a failure:
// the command may have had side effects, and retrying it blindly may repeat
// them.
type TimeoutError struct {
	Command string
	After   time.Duration
	// Detail says what was done about it (e.g. the process group was killed).
	Detail string
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("command %q timed out after %s", e.Command, e.After)
	if e.Detail != "" {
		msg += "; " + e.Detail
	}
	return msg
}

// Timeout lets callers test with the conventional interface{ Timeout() bool }.
func (e *TimeoutError) Timeout() bool { return true }

// ptyReporter is implemented by substrates that know whether they have a
// PTY; the others are assumed not to.
type ptyReporter interface{ hasPTY() bool }

// Describe answers Info for s.
func Describe(s Substrate) api.SubstrateInfo {
	info := api.SubstrateInfo{Name: s.Name(), Local: s.IsLocal()}
	if r, ok := s.(ptyReporter); ok {
		info.PTY = r.hasPTY()
	}
	_, info.ReadOnly = s.(readOnly)
	return info
}

// The variants satisfy the interface; a method drifting from it is a build
// error here, not a surprise in the daemon.
var (
	_ Substrate = (*Local)(nil)
	_ Substrate = (*MCP)(nil)
	_ Substrate = readOnly{}
)
