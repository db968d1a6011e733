package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
)

// The life of `card serve` as a supervisor sees it: the token survives a
// restart (clients need not re-read it), a second daemon on the same home is
// refused and names the first one's pid, and SIGTERM exits 0 and removes
// daemon.json.
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
	_, err = os.Stat(filepath.Join(home, daemon.DiscoveryFileName))
	assert.True(t, os.IsNotExist(err), "daemon.json is removed on a clean exit")

	restarted := daemontest.Serve(t, bin, daemontest.Options{Home: home, NoClient: true})
	assert.Equal(t, first.Token, restarted.Token, "the token is kept across restarts")
	c2, err := client.Dial(ctx, client.Options{URL: restarted.URL, Token: first.Token})
	require.NoError(t, err, "the old token still works")
	defer c2.Close()
	_, err = c2.Info(ctx)
	require.NoError(t, err)
	require.NoError(t, restarted.Cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 0, restarted.Wait(t, 15*time.Second), "SIGINT is a clean exit too")
}
