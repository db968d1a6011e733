package substrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/card-dev/card/api"
)

// Errors of a create-only write. They are sentinels so the RPC layer can map
// them to a "refused" answer rather than a generic failure.
var (
	// ErrPathExists: something (perhaps a dangling symlink) is already there.
	ErrPathExists = errors.New("the path already exists")
	// ErrPathStateUnknown: the environment could not confirm the path is
	// missing, so the write fails closed rather than risk clobbering a file
	// it merely could not see.
	ErrPathStateUnknown = errors.New("cannot confirm the path is missing")
)

// exclusiveCreator is implemented by substrates that can create-if-missing
// atomically (Local, with O_EXCL), closing the gap between check and write.
type exclusiveCreator interface {
	writeTextCreateOnly(ctx context.Context, path, content string) error
}

// WriteTextCreateOnly writes content to path only if nothing is there. It is
// the guarded write: an existing path is refused with ErrPathExists, and a
// path whose state is unknown is refused with ErrPathStateUnknown — never
// treated as missing. On substrates without an atomic create (MCP) the check
// and the write are two steps, so a racing writer in the environment can
// still slip between them; that is the reference's contract too.
func WriteTextCreateOnly(ctx context.Context, s Substrate, path, content string) error {
	if ex, ok := s.(exclusiveCreator); ok {
		return ex.writeTextCreateOnly(ctx, path, content)
	}
	st := s.PathState(ctx, path)
	switch st.Status {
	case api.PathMissing:
		return s.WriteText(ctx, path, content)
	case api.PathExists:
		return fmt.Errorf("refusing to create %s: %w", s.DisplayPath(path), ErrPathExists)
	default:
		return fmt.Errorf("refusing to create %s: %w (%s)", s.DisplayPath(path), ErrPathStateUnknown, st.Reason)
	}
}

// ErrReadOnly is wrapped by every refusal of a read-only substrate.
var ErrReadOnly = errors.New("the substrate is read-only")

// ReadOnlyError names the refused operation and its target, and tells the
// operator which setting caused it.
type ReadOnlyError struct {
	Op     string // e.g. "run_command", "write_text"
	Target string // the command, path or pty the operation concerned
}

func (e *ReadOnlyError) Error() string {
	return fmt.Sprintf("%s %s refused: the substrate is read-only ([substrate] read_only = true in card.toml; set it to false to allow commands and writes)", e.Op, e.Target)
}

func (e *ReadOnlyError) Unwrap() error { return ErrReadOnly }

// ReadOnly wraps s so that it can be looked at but not changed: commands,
// writes, and starting or typing into a PTY are refused with a
// *ReadOnlyError. Reads, presence checks, and reading, resizing or killing a
// PTY still work. The wrapper is how `[substrate] read_only = true` is
// enforced, in one place, for every variant.
func ReadOnly(s Substrate) Substrate { return readOnly{inner: s} }

type readOnly struct{ inner Substrate }

// hasPTY is false: a read-only substrate refuses to start a terminal.
func (r readOnly) hasPTY() bool { return false }

func (r readOnly) Name() string                   { return r.inner.Name() }
func (r readOnly) IsLocal() bool                  { return r.inner.IsLocal() }
func (r readOnly) DisplayPath(path string) string { return r.inner.DisplayPath(path) }

func (r readOnly) RunCommand(_ context.Context, cmd string, _ time.Duration) (api.CommandResult, error) {
	return api.CommandResult{}, &ReadOnlyError{Op: "run_command", Target: fmt.Sprintf("%q", cmd)}
}
func (r readOnly) ReadText(ctx context.Context, path string) (string, error) {
	return r.inner.ReadText(ctx, path)
}
func (r readOnly) WriteText(_ context.Context, path, _ string) error {
	return &ReadOnlyError{Op: "write_text", Target: r.inner.DisplayPath(path)}
}
func (r readOnly) PathState(ctx context.Context, path string) api.PathState {
	return r.inner.PathState(ctx, path)
}
func (r readOnly) ReadBytes(ctx context.Context, path string, offset, length int64) ([]byte, error) {
	return r.inner.ReadBytes(ctx, path, offset, length)
}
func (r readOnly) WriteBytes(_ context.Context, path string, _ []byte) error {
	return &ReadOnlyError{Op: "write_bytes", Target: r.inner.DisplayPath(path)}
}
func (r readOnly) PTYStart(_ context.Context, cmd string) (int, error) {
	return 0, &ReadOnlyError{Op: "pty_start", Target: fmt.Sprintf("%q", cmd)}
}
func (r readOnly) PTYInput(_ context.Context, pid int, _ string) error {
	return &ReadOnlyError{Op: "pty_input", Target: fmt.Sprintf("to pty %d", pid)}
}
func (r readOnly) PTYRead(ctx context.Context, pid int) (string, error) {
	return r.inner.PTYRead(ctx, pid)
}
func (r readOnly) PTYResize(ctx context.Context, pid int, rows, cols uint16) error {
	return r.inner.PTYResize(ctx, pid, rows, cols)
}
func (r readOnly) PTYKill(ctx context.Context, pid int) error { return r.inner.PTYKill(ctx, pid) }
