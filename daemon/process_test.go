package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
	homedir "github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/rpc/rpcclient"
)

// The life of `card serve` as a supervisor sees it: a second daemon on the
// same home is refused and names the first one's pid; SIGTERM exits 0 and
// removes daemon.json and the token; a restart makes a new token, so the
// old one opens nothing.
func TestServeLifecycleAsASupervisorSeesIt(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("signals")
	}
	bin := daemontest.Build(t)
	ctx := daemontest.Context(t)
	first := daemontest.Serve(t, bin, daemontest.Options{NoClient: true})
	home := first.Home
	c, err := client.Dial(ctx, client.Options{Home: home})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Info(ctx)
	require.NoError(t, err)

	second := exec.Command(bin, "serve", "--home", home)
	second.Env = first.Cmd.Env
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "a second daemon on the same home must not start")
	assert.Equal(t, 4, ee.ExitCode())
	assert.Contains(t, string(out), "pid "+strconv.Itoa(first.Cmd.Process.Pid))

	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, first.Wait(t, 15*time.Second), "SIGTERM is a clean exit")
	_, err = os.Stat(filepath.Join(home, homedir.DiscoveryFileName))
	assert.True(t, os.IsNotExist(err), "daemon.json is removed on a clean exit")
	_, err = os.Stat(filepath.Join(home, homedir.TokenFileName))
	assert.True(t, os.IsNotExist(err), "the token does not outlive the daemon")

	restarted := daemontest.Serve(t, bin, daemontest.Options{Home: home, NoClient: true})
	assert.NotEqual(t, first.Token, restarted.Token, "every start makes a new token")
	_, err = client.Dial(ctx, client.Options{URL: restarted.URL, Token: first.Token})
	var de *rpcclient.DialError
	require.ErrorAs(t, err, &de, "the old token opens nothing")
	assert.Equal(t, 401, de.Status)
	c2, err := client.Dial(ctx, client.Options{Home: home})
	require.NoError(t, err, "a client that reads the token file again gets in")
	defer c2.Close()
	_, err = c2.Info(ctx)
	require.NoError(t, err)
	require.NoError(t, restarted.Cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 0, restarted.Wait(t, 15*time.Second), "SIGINT is a clean exit too")
}

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
		acc, err := c.Stream(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd}, Task: "SLEEP"}, nil)
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

		again := serve(t, p.Home)
		run, err := again.Client.Run(daemontest.Context(t), id)
		require.NoError(t, err)
		assert.Equal(t, api.StatusInterrupted, run.Status)
		require.NotNil(t, run.Error)
		assert.Equal(t, "interrupted", run.Error.Kind)
		waitNoProcesses(t, id, 3*time.Second)

		// A client that follows the run again from the start is sent its
		// events and then one terminal event: without it, it would wait for
		// an end that never comes.
		ended := make(chan api.AgentEvent, 1)
		var seqs []int64
		_, err = again.Client.Subscribe(daemontest.Context(t), id, 0, func(ev api.AgentEvent) {
			seqs = append(seqs, ev.Seq)
			if ev.Kind == "done" || ev.Kind == "error" {
				ended <- ev
			}
		})
		require.NoError(t, err)
		select {
		case ev := <-ended:
			assert.Equal(t, "error", ev.Kind)
			assert.Equal(t, api.StatusInterrupted, ev.Status)
			require.NotNil(t, ev.Result)
			require.NotNil(t, ev.Result.Error)
			assert.Equal(t, "interrupted", ev.Result.Error.Kind)
			assert.Equal(t, int64(len(seqs)), ev.Seq, "the terminal event comes at the seq after the last stored one: %v", seqs)
		case <-time.After(5 * time.Second):
			t.Fatalf("no terminal event for the interrupted run; got seqs %v", seqs)
		}
	})

	t.Run("SIGTERM: runs recorded interrupted, no child left, exit 0", func(t *testing.T) {
		p := serve(t, "")
		id := startSleeper(t, p.Client)
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 0, p.Wait(t, 10*time.Second), "card serve exits 0 after a graceful stop")
		assert.Empty(t, processesOfRun(id))

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := store.Open(ctx, filepath.Join(p.Home, homedir.RunsDBName), store.Options{})
		require.NoError(t, err)
		defer st.Close()
		run, err := st.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, api.StatusInterrupted, run.Status)
		require.NotNil(t, run.Error)
		assert.Contains(t, run.Error.Message, "shut down")
	})
}

// A descriptor card's launcher left open (not close-on-exec) reaches no
// agent: card marks every inherited one close-on-exec at start. The daemon
// itself still has it, so the test shows the launcher did leak it.
func TestADescriptorTheLauncherLeftOpenReachesNoAgent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/<pid>/fd")
	}
	bin := daemontest.Build(t)
	_, pins := replayAgents(t)
	leak, err := os.CreateTemp(t.TempDir(), "launcher-secret-*")
	require.NoError(t, err)
	defer leak.Close()
	p := daemontest.Serve(t, bin, daemontest.Options{Config: "login_shell_path = false\n", Agents: pins,
		Environ: []string{"PATH=" + os.Getenv("PATH")}, ExtraFiles: []*os.File{leak}})
	holds := func(pid int) bool {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, e := range ents {
			if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); target == leak.Name() {
				return true
			}
		}
		return false
	}
	require.True(t, holds(p.Cmd.Process.Pid), "card serve was started with the leaked descriptor")

	acc, err := p.Client.Stream(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: t.TempDir()}, Task: "SLEEP"}, nil)
	require.NoError(t, err)
	waitForProcesses(t, acc.RunID)
	pids := processesOfRun(acc.RunID)
	require.NotEmpty(t, pids)
	for _, pid := range pids {
		assert.False(t, holds(pid), "agent process %d has the launcher's descriptor", pid)
	}
	_, err = p.Client.Cancel(daemontest.Context(t), acc.RunID)
	require.NoError(t, err)
}

// A probe's leader dies with a SIGKILLed daemon, but not what it started
// (Copilot's launcher runs its native binary as a child, which may be
// unpacking itself into the home). The next daemon on the same home ends
// it; a daemon on another home leaves it alone.
func TestWhatADeadDaemonsProbeLeftRunningIsEndedByTheNextDaemonOnItsHome(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc, and the dead daemon's probe leaders die only through Pdeathsig")
	}
	bin := daemontest.Build(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "helper.pid")
	// The fake CLI's --version starts a helper and waits for it, as a
	// launcher waits for the binary it runs.
	fake := filepath.Join(dir, "copilot")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\n"+
		"if [ \"$1\" = --version ]; then sleep 1000 & echo $! > "+pidFile+".tmp; mv "+pidFile+".tmp "+pidFile+"; wait; fi\n"), 0o755))
	serve := func(t *testing.T, home string) *daemontest.Process {
		return daemontest.Serve(t, bin, daemontest.Options{Home: home, Config: "login_shell_path = false\nprobe_timeout_secs = 600\n",
			Agents: map[string]string{"copilot": fake}, Environ: []string{"PATH=" + os.Getenv("PATH")}})
	}
	helper := func(t *testing.T) int {
		t.Helper()
		var pid int
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(pidFile)
			if err != nil {
				return false
			}
			pid, err = strconv.Atoi(string(b[:len(b)-1]))
			return err == nil
		}, 10*time.Second, 10*time.Millisecond, "the daemon never probed the fake CLI")
		require.NoError(t, os.Remove(pidFile))
		return pid
	}
	alive := func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
		return len(f) > 0 && f[0] != "Z" && f[0] != "X"
	}

	first := serve(t, "")
	orphan := helper(t)
	t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", orphan))
	require.NoError(t, err)
	assert.Regexp(t, `(^|\x00)CARD_PROBE=[0-9]+\.[0-9a-z]+ `+regexp.QuoteMeta(first.Home)+`\x00`, string(env), "the probe carries its daemon's tag")
	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	first.Wait(t, 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	require.True(t, alive(orphan), "the probe's helper outlives a SIGKILLed daemon; without this the test proves nothing")

	other := serve(t, "")
	helper(t)
	assert.True(t, alive(orphan), "a daemon on another home leaves the dead daemon's probe alone")
	require.NoError(t, other.Cmd.Process.Signal(syscall.SIGTERM))
	other.Wait(t, 15*time.Second)

	again := serve(t, first.Home)
	assert.False(t, alive(orphan), "the next daemon on the home ended its dead daemon's probe before it answered")
	own := helper(t)
	assert.True(t, alive(own), "the next daemon's own probe runs")
	require.NoError(t, again.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, again.Wait(t, 15*time.Second))
	assert.False(t, alive(own), "a daemon that stops ends its own probes")
}
