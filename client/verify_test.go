package client_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	homedir "github.com/card-dev/card/internal/home"
)

// fakeHome is a private home whose daemon.json says what disc says, with a
// token beside it.
func fakeHome(t *testing.T, disc homedir.Discovery) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.Mkdir(home, 0o700))
	b, err := json.Marshal(disc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(home, homedir.DiscoveryFileName), b, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(home, homedir.TokenFileName), []byte(fmt.Sprintf("%064d\n", 7)), 0o600))
	return home
}

// acceptNothing listens and records whether anyone connected: the token
// must never reach it.
func acceptNothing(t *testing.T) (net.Listener, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	connected := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			select {
			case connected <- struct{}{}:
			default:
			}
		}
	}()
	return ln, connected
}

func TestTheClientRefusesAPortHeldByAProcessThatDaemonJSONDoesNotName(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the socket checks read /proc")
	}
	ln, connected := acceptNothing(t)
	// A process of ours that is alive and is not what listens.
	sleeper := exec.Command("sleep", "60")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", sleeper.Process.Pid))
	require.NoError(t, err)

	home := fakeHome(t, homedir.Discovery{URL: "ws://" + ln.Addr().String() + "/rpc", PID: sleeper.Process.Pid, Exe: exe})
	_, err = client.Dial(daemontest.Context(t), client.Options{Home: home})
	var le *client.ListenerError
	require.ErrorAs(t, err, &le)
	assert.Contains(t, err.Error(), fmt.Sprintf("pid %d, which daemon.json names, does not hold the socket listening on port %d: not sending the token", sleeper.Process.Pid, le.Port))
	select {
	case <-connected:
		t.Fatal("the client connected to the port before refusing")
	default:
	}
}

func TestADaemonJSONNamingADeadPidOrAFreePortIsNoDaemon(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{NoClient: true})
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	exe, _ := os.Executable()

	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	freeURL := "ws://" + free.Addr().String() + "/rpc"
	free.Close()

	for name, disc := range map[string]homedir.Discovery{
		"a dead pid on a live daemon's port": {URL: d.URL, PID: dead.Process.Pid, Exe: exe},
		"a port nothing listens on":          {URL: freeURL, PID: os.Getpid(), Exe: exe},
	} {
		t.Run(name, func(t *testing.T) {
			home := fakeHome(t, disc)
			_, err := client.Dial(daemontest.Context(t), client.Options{Home: home})
			var nd *client.NoDaemonError
			require.ErrorAs(t, err, &nd)
			assert.Contains(t, err.Error(), "start it with `card serve --home "+home+"`")
		})
	}
}

func TestAClientFindsARealDaemonThroughItsHome(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{NoClient: true})
	c, err := client.Dial(daemontest.Context(t), client.Options{Home: d.Home})
	require.NoError(t, err)
	defer c.Close()
	info, err := c.Info(daemontest.Context(t))
	require.NoError(t, err)
	assert.Equal(t, d.Home, info.Home)
}
