package detect

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/card-dev/card/internal/proc"
)

// outputLimit caps what one probe may make the daemon hold in memory. A
// `--version` or status answer is a few hundred bytes; a CLI that prints a
// megabyte of banner is not worth buffering.
const outputLimit = 64 << 10

// killGrace is how long a probe gets between SIGTERM and SIGKILL. Node CLIs
// exit promptly on SIGTERM; anything slower is not a well-behaved probe.
const killGrace = 300 * time.Millisecond

// ProbeOutput is what one short-lived CLI run produced.
type ProbeOutput struct {
	Stdout   string
	Stderr   string
	ExitCode int // -1 when the process did not exit normally
	// TimedOut: the deadline passed and the process group was killed.
	TimedOut bool
	// Signal is set when the process was killed by a signal it did not get
	// from us (for example SIGKILL from macOS code-signing enforcement).
	Signal syscall.Signal
	// StartErr is set when the OS refused to start the process at all.
	StartErr error
}

// Ran reports whether the program started and exited 0.
func (o ProbeOutput) Ran() bool {
	return o.StartErr == nil && !o.TimedOut && o.Signal == 0 && o.ExitCode == 0
}

// runProbe runs bin with args in its own process group, in dir, with env,
// stdin from /dev/null and a deadline. On timeout or cancellation the whole
// group gets SIGTERM then SIGKILL: Node CLIs spawn helpers, and killing only
// the launcher leaves them running as orphans of the daemon. Whatever the
// launcher leaves in its group after a normal exit is killed too.
func runProbe(ctx context.Context, bin string, args []string, env []string, dir string, timeout time.Duration) ProbeOutput {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	stdout, stderr := &proc.Capped{Head: outputLimit}, &proc.Capped{Head: outputLimit}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil // os/exec connects nil stdin to /dev/null
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	// A probe dies with the daemon as an agent does: Copilot's first
	// --version unpacks its package for seconds, and a daemon killed
	// meanwhile must not leave it writing in the person's home.
	cmd.SysProcAttr = proc.NewGroupKilledWithParent()
	if err := proc.Start(cmd); err != nil {
		return ProbeOutput{ExitCode: -1, StartErr: err}
	}
	waitErr := proc.Wait(ctx, cmd, killGrace)

	out := ProbeOutput{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: -1, TimedOut: ctx.Err() != nil}
	if out.TimedOut {
		return out
	}
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
		out.ExitCode = 0
	case errors.As(waitErr, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			out.Signal = ws.Signal()
		} else {
			out.ExitCode = exitErr.ExitCode()
		}
	default:
		// exec.ErrWaitDelay: the process exited but a stray holder kept a
		// pipe open; the exit status is still valid.
		if cmd.ProcessState != nil {
			out.ExitCode = cmd.ProcessState.ExitCode()
		}
	}
	return out
}

// probeEnv builds the environment of every version and health probe from the
// daemon's startup environment, minus the variables no child inherits
// (proc.Stripped, CAR_INVOKED_BY among them: a probe is not an agent hop, and
// an inherited chain would make the agent's own nested-call checks think it
// runs inside another agent). PATH is the resolved search path, so a probe
// sees the same `node` a later spawn will, and HOME is the home detection
// inspects. The one variable of base kept past the strip is the probe tag
// (proc.ProbeEnv), which a daemon puts there for its probes to carry.
func probeEnv(base map[string]string, path, home string) []string {
	e := proc.NewEnv(base).Set("PATH", path)
	if home != "" {
		e.Set("HOME", home)
	} else {
		e.Unset("HOME")
	}
	if tag := base[proc.ProbeEnv]; tag != "" {
		e.Set(proc.ProbeEnv, tag)
	}
	return e.List()
}

// probeDir is the working directory of probes: the home when it exists
// (never the daemon's cwd, which may be a project a CLI would read config
// from), else the temp dir of the startup environment.
func probeDir(home string, env map[string]string) string {
	if home != "" {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			return home
		}
	}
	return proc.TempDir(env)
}
