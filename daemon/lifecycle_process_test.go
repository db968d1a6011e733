package daemon_test

import (
	"context"
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

	"github.com/card-dev/card/daemon"
)

func buildCard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "card")
	build := exec.Command("go", "build", "-o", bin, "github.com/card-dev/card/cmd/card")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// The life of `card serve` as a supervisor sees it: the token survives a
// restart (clients need not re-read it), a second daemon on the same home is
// refused and names the first one's pid, and SIGTERM exits 0 and removes
// daemon.json.
func TestServeLifecycleAsASupervisorSeesIt(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("signals")
	}
	bin := buildCard(t)
	home := filepath.Join(t.TempDir(), "home")
	environ := []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}

	first, c := startCard(t, bin, home, environ)
	tok1, err := daemon.ReadToken(home)
	require.NoError(t, err)
	require.NoError(t, c.Call(context.Background(), "daemon.info", nil, nil))

	second := exec.Command(bin, "serve", "--home", home)
	second.Env = environ
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "a second daemon on the same home must not start")
	assert.Equal(t, 4, ee.ExitCode())
	assert.Contains(t, string(out), "pid "+strconv.Itoa(first.cmd.Process.Pid))

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, first.wait(t, 15*time.Second), "SIGTERM is a clean exit")
	_, err = os.Stat(filepath.Join(home, daemon.DiscoveryFileName))
	assert.True(t, os.IsNotExist(err), "daemon.json is removed on a clean exit")

	restarted, c2 := startCard(t, bin, home, environ)
	tok2, err := daemon.ReadToken(home)
	require.NoError(t, err)
	assert.Equal(t, tok1, tok2, "the token is kept across restarts")
	require.NoError(t, c2.Call(context.Background(), "daemon.info", nil, nil), "the old token still works")
	require.NoError(t, restarted.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 0, restarted.wait(t, 15*time.Second), "SIGINT is a clean exit too")
}
