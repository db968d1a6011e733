package daemontest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/internal/proc"
)

// Build builds ./cmd/card into a temp dir of t and returns the binary, for
// tests that need `card serve` as a process of its own (to signal it, to
// restart it on the same home). It is the build the README gives a user:
// cgo as the go command decides (on where a C compiler exists), so the
// binary links the C library and its loader the way a user's does, and a
// fault that only such a build has shows here too.
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "card")
	build := exec.Command("go", "build", "-o", bin, "github.com/card-dev/card/cmd/card")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/card: %s", out)
	return bin
}

// Process is `card serve` running as a child process.
type Process struct {
	// URL, Home and Token as for Daemon; Client is connected unless
	// Options.NoClient.
	URL, Home, Token string
	Client           *client.Client
	// Cmd is the process, in a process group of its own.
	Cmd *exec.Cmd
	// LogPath is the file its stderr goes to; the test's log gets it when
	// the test fails.
	LogPath string
	done    chan struct{}
}

// Serve starts bin (see Build) as `card serve --home <home>` on a random
// loopback port, with the environment opts describe (Logger is not used: the
// process logs at debug level to LogPath), and waits until it has written
// daemon.json. At cleanup it is sent SIGTERM, and its group SIGKILL if it
// has not exited within 20 s.
func Serve(t testing.TB, bin string, opts Options) *Process {
	t.Helper()
	home := opts.home(t)
	require.NoError(t, os.MkdirAll(home, 0o700))
	logf, err := os.CreateTemp(t.TempDir(), "serve-*.log")
	require.NoError(t, err)
	p := &Process{Home: home, LogPath: logf.Name(), done: make(chan struct{})}
	p.Cmd = exec.Command(bin, append([]string{"serve", "--home", home, "--addr", "127.0.0.1:0", "--log-level", "debug"}, opts.ServeArgs...)...)
	p.Cmd.Dir = home
	p.Cmd.Env = opts.environ(t)
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	p.Cmd.ExtraFiles = opts.ExtraFiles
	p.Cmd.SysProcAttr = proc.NewGroup()
	require.NoError(t, p.Cmd.Start())
	go func() { _ = p.Cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		if p.Client != nil {
			_ = p.Client.Close()
		}
		proc.EndGroup(context.Background(), p.Cmd.Process.Pid, 20*time.Second, p.done)
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(p.LogPath)
			t.Logf("card serve log:\n%s", b)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		disc, err := daemon.ReadDiscovery(home)
		if err == nil && disc.PID == p.Cmd.Process.Pid {
			p.URL = disc.URL
			break
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.LogPath)
			t.Fatalf("card serve exited before it was ready:\n%s", b)
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "card serve wrote no daemon.json within 30 s")
	}
	p.Token, err = daemon.ReadToken(home)
	require.NoError(t, err)
	if !opts.NoClient {
		opts.Client.URL, opts.Client.Token = p.URL, p.Token
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Client, err = client.Dial(ctx, opts.Client)
		require.NoError(t, err)
	}
	return p
}

// Wait waits up to d for the process to exit and returns its exit code.
func (p *Process) Wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("card serve did not exit within %s", d)
		return -1
	}
}
