//go:build unix

package deploy

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"time"

	"github.com/card-dev/card/internal/proc"
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

	cmd := exec.Command(c.Name, c.Args...)
	cmd.Dir = dir
	// `card service` is a command a person runs: systemctl --user and
	// launchctl need that session's variables (XDG_RUNTIME_DIR, the D-Bus
	// address), minus what describes card's own process.
	cmd.Env = proc.NewEnv(proc.EnvMap(os.Environ())).List()
	out := &proc.Capped{Head: limit}
	cmd.Stdout, cmd.Stderr = out, out
	err := proc.Start(cmd)
	if err == nil {
		err = proc.Wait(ctx, cmd, grace)
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
