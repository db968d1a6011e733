package detect

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
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

// cappedBuffer keeps the first outputLimit bytes and discards the rest while
// still accepting writes, so a chatty child never blocks on a full pipe.
type cappedBuffer struct{ buf bytes.Buffer }

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := outputLimit - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

// runProbe runs bin with args in its own process group, in dir, with env,
// stdin from /dev/null and a deadline. On timeout or cancellation the whole
// group gets SIGTERM then SIGKILL: Node CLIs spawn helpers, and killing only
// the launcher leaves them running as orphans of the daemon.
func runProbe(ctx context.Context, bin string, args []string, env []string, dir string, timeout time.Duration) ProbeOutput {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var stdout, stderr cappedBuffer
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = nil // os/exec connects nil stdin to /dev/null
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that left our process group could hold the pipes open
	// forever; WaitDelay bounds how long Wait waits for them after exit.
	cmd.WaitDelay = killGrace

	if err := cmd.Start(); err != nil {
		return ProbeOutput{ExitCode: -1, StartErr: err}
	}
	pgid := cmd.Process.Pid

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var waitErr error
	timedOut := false
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		timedOut = true
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case waitErr = <-done:
		case <-time.After(killGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			waitErr = <-done
		}
	}
	// The leader is gone; anything it left behind in its group goes too, so
	// a probe never leaves an orphan.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)

	out := ProbeOutput{Stdout: stdout.buf.String(), Stderr: stderr.buf.String(), ExitCode: -1, TimedOut: timedOut}
	if timedOut {
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
// daemon's base environment: PATH is the resolved search path (so a probe sees
// the same `node` a later spawn will), HOME is the home detection inspects,
// and CAR_INVOKED_BY is removed. A probe is not an agent hop: stamping it would
// make the agent's own nested-call checks think it runs inside another agent,
// and leaving the daemon's inherited ancestry in place would do the same.
func probeEnv(base []string, path, home string) []string {
	out := make([]string, 0, len(base)+2)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "HOME", "CAR_INVOKED_BY":
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "PATH="+path)
	if home != "" {
		out = append(out, "HOME="+home)
	}
	return out
}

// probeDir is the working directory of probes: the home when it exists
// (never the daemon's cwd, which may be a project a CLI would read config
// from), else the OS temp dir.
func probeDir(home string) string {
	if home != "" {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			return home
		}
	}
	return os.TempDir()
}
