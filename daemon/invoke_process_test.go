package daemon_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
)

// cardProcess is `card serve` as a real process, so it can be SIGKILLed.
type cardProcess struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{}
}

func startCard(t *testing.T, bin, home string, environ []string) (*cardProcess, *rpc.Client) {
	t.Helper()
	os.Remove(filepath.Join(home, daemon.DiscoveryFileName))
	p := &cardProcess{stderr: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve", "--home", home, "--log-level", "debug")
	p.cmd.Env = environ
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("card serve stderr:\n%s", p.stderr)
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		disc, err := daemon.ReadDiscovery(home)
		if err == nil && disc.PID == p.cmd.Process.Pid {
			tok, err := daemon.ReadToken(home)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c, err := rpc.Dial(ctx, disc.URL, tok, rpc.ClientOptions{})
			cancel()
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			return p, c
		}
		require.True(t, time.Now().Before(deadline), "card serve did not come up:\n%s", p.stderr)
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *cardProcess) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("card serve did not exit within %s", d)
		return -1
	}
}

func TestARealDaemonProcessLeavesNoRunOrChildBehind(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the leftover-process checks read /proc")
	}
	bin := buildCard(t)

	agents := replayAgents(t)
	environ := append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, agents.environ...)
	cwd := t.TempDir()
	newHome := func(t *testing.T) string {
		home := filepath.Join(t.TempDir(), "home")
		require.NoError(t, os.MkdirAll(home, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(home, daemon.ConfigFileName), []byte("login_shell_path = false\n"), 0o600))
		return home
	}
	startSleeper := func(t *testing.T, c *rpc.Client) string {
		var acc daemon.InvokeAccepted
		require.NoError(t, call(t, c, "agents.invoke", map[string]any{"id": "claude-code", "task": "SLEEP", "cwd": cwd, "stream": true}, &acc))
		waitForProcesses(t, acc.RunID)
		require.Len(t, processesOfRun(acc.RunID), 2, "the fake agent and its sleeping grandchild")
		return acc.RunID
	}

	t.Run("SIGKILL mid-run: the restarted daemon records it interrupted and ends the leftovers", func(t *testing.T) {
		home := newHome(t)
		p, c := startCard(t, bin, home, environ)
		id := startSleeper(t, c)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		p.wait(t, 5*time.Second)
		time.Sleep(100 * time.Millisecond)
		require.NotEmpty(t, processesOfRun(id), "a grandchild outlives a SIGKILLed daemon; without this the test proves nothing")

		_, c2 := startCard(t, bin, home, environ)
		var run store.Run
		require.NoError(t, call(t, c2, "runs.get", map[string]any{"run_id": id}, &run))
		assert.Equal(t, store.StatusInterrupted, run.Status)
		require.NotNil(t, run.Error)
		assert.Equal(t, "interrupted", run.Error.Kind)
		waitNoProcesses(t, id, 3*time.Second)
	})

	t.Run("SIGTERM: runs recorded interrupted, no child left, exit 0", func(t *testing.T) {
		home := newHome(t)
		p, c := startCard(t, bin, home, environ)
		id := startSleeper(t, c)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 0, p.wait(t, 10*time.Second), "card serve exits 0 after a graceful stop")
		assert.Empty(t, processesOfRun(id))

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := store.Open(ctx, filepath.Join(home, daemon.RunsDBName), store.Options{})
		require.NoError(t, err)
		defer st.Close()
		run, err := st.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, store.StatusInterrupted, run.Status)
		require.NotNil(t, run.Error)
		assert.Contains(t, run.Error.Message, "shut down")
	})
}
