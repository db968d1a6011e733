//go:build unix

package deploy

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ExecRunner runs commands as child processes. Each child gets an explicit working directory, a
// deadline, its own process group that is killed whole (SIGTERM, then SIGKILL) when the deadline
// passes or the context is cancelled, and a cap on the output kept, so a wedged systemctl or
// launchctl cannot hang `card service` or leave processes behind.
type ExecRunner struct {
	// Dir is the working directory; empty means "/", which every user can read and no command
	// here depends on.
	Dir string
	// Timeout bounds each command; zero means 30 s.
	Timeout time.Duration
	// Grace is how long a cancelled command has between SIGTERM and SIGKILL; zero means 2 s.
	Grace time.Duration
	// MaxOutput caps the bytes of output kept; zero means 64 KiB.
	MaxOutput int
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, c Command) ([]byte, error) {
	timeout, grace, limit, dir := r.Timeout, r.Grace, r.MaxOutput, r.Dir
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if grace <= 0 {
		grace = 2 * time.Second
	}
	if limit <= 0 {
		limit = 64 << 10
	}
	if dir == "" {
		dir = "/"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &capped{limit: limit}
	cmd.Stdout, cmd.Stderr = out, out

	var killTimer *time.Timer
	var mu sync.Mutex
	cmd.Cancel = func() error {
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		mu.Lock()
		killTimer = time.AfterFunc(grace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		mu.Unlock()
		return nil
	}
	// Wait must return even if a grandchild keeps the output pipe open.
	cmd.WaitDelay = grace + time.Second

	err := cmd.Run()
	mu.Lock()
	if killTimer != nil {
		killTimer.Stop()
	}
	mu.Unlock()
	if ctx.Err() != nil && cmd.Process != nil {
		// Whatever of the group survived SIGTERM goes now, not after we return.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err == nil {
		return out.Bytes(), nil
	}
	code := -1
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		code = exitErr.ExitCode()
	}
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return out.Bytes(), &CommandError{Command: c, ExitCode: code, Output: out.String(), Err: err}
}

// capped keeps the first limit bytes written and discards the rest, so a command that floods its
// output cannot exhaust memory; it never fails a write, which would kill the child with SIGPIPE.
type capped struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.limit - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

func (c *capped) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.buf.Bytes()...)
}

func (c *capped) String() string { return string(c.Bytes()) }
