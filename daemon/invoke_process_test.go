package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
)

func TestARealDaemonProcessLeavesNoRunOrChildBehind(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the leftover-process checks read /proc")
	}
	bin := daemontest.Build(t)
	_, pins := replayAgents(t)
	cwd := t.TempDir()
	serve := func(t *testing.T, home string) *daemontest.Process {
		return daemontest.Serve(t, bin, daemontest.Options{Home: home, Config: "login_shell_path = false\n",
			Agents: pins, Environ: []string{"PATH=" + os.Getenv("PATH")}})
	}
	startSleeper := func(t *testing.T, c *client.Client) string {
		acc, err := c.Stream(daemontest.Context(t), daemon.InvokeParams{ID: "claude-code", Task: "SLEEP", Cwd: cwd}, nil)
		require.NoError(t, err)
		waitForProcesses(t, acc.RunID)
		require.Len(t, processesOfRun(acc.RunID), 2, "the fake agent and its sleeping grandchild")
		return acc.RunID
	}

	t.Run("SIGKILL mid-run: the restarted daemon records it interrupted and ends the leftovers", func(t *testing.T) {
		p := serve(t, "")
		id := startSleeper(t, p.Client)
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGKILL))
		p.Wait(t, 5*time.Second)
		time.Sleep(100 * time.Millisecond)
		require.NotEmpty(t, processesOfRun(id), "a grandchild outlives a SIGKILLed daemon; without this the test proves nothing")

		run, err := serve(t, p.Home).Client.Run(daemontest.Context(t), id)
		require.NoError(t, err)
		assert.Equal(t, store.StatusInterrupted, run.Status)
		require.NotNil(t, run.Error)
		assert.Equal(t, "interrupted", run.Error.Kind)
		waitNoProcesses(t, id, 3*time.Second)
	})

	t.Run("SIGTERM: runs recorded interrupted, no child left, exit 0", func(t *testing.T) {
		p := serve(t, "")
		id := startSleeper(t, p.Client)
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 0, p.Wait(t, 10*time.Second), "card serve exits 0 after a graceful stop")
		assert.Empty(t, processesOfRun(id))

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := store.Open(ctx, filepath.Join(p.Home, daemon.RunsDBName), store.Options{})
		require.NoError(t, err)
		defer st.Close()
		run, err := st.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, store.StatusInterrupted, run.Status)
		require.NotNil(t, run.Error)
		assert.Contains(t, run.Error.Message, "shut down")
	})
}
