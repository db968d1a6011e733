package substrate_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/substrate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// daemonOnly are variables of the daemon's own environment that no command,
// terminal or bridge may inherit.
var daemonOnly = map[string]string{
	"NOTIFY_SOCKET":  "/run/systemd/notify",
	"CAR_INVOKED_BY": "claude-code",
	"CARD_RUN_ID":    "run_from_a_parent_daemon",
	"GIT_DIR":        "/elsewhere/.git",
}

// withDaemonOnly is the startup environment plus daemonOnly and a variable
// the children must keep.
func withDaemonOnly() map[string]string {
	env := startupEnv()
	for k, v := range daemonOnly {
		env[k] = v
	}
	env["CARD_TEST_KEEP"] = "kept"
	return env
}

// assertStripped checks an `env` listing: the daemon's own variables are
// gone, the ordinary one is there, and nothing set in the live process
// environment after startup leaked in.
func assertStripped(t *testing.T, listing string) {
	t.Helper()
	vars := proc.EnvMap(strings.Split(strings.ReplaceAll(listing, "\r", ""), "\n"))
	for k := range daemonOnly {
		assert.NotContains(t, vars, k, "a child must not inherit %s", k)
	}
	assert.Equal(t, "kept", vars["CARD_TEST_KEEP"])
	assert.NotContains(t, vars, "CARD_TEST_LIVE_ONLY", "the environment is the one read at startup, not the live one")
}

func TestCommandsAndTerminalsGetTheStrippedStartupEnvironment(t *testing.T) {
	ctx := context.Background()
	l := substrate.NewLocal(withDaemonOnly())
	t.Cleanup(func() { _ = l.Close() })
	t.Setenv("CARD_TEST_LIVE_ONLY", "1")
	for k, v := range daemonOnly {
		t.Setenv(k, v)
	}

	out, err := l.RunCommand(ctx, "env", 10*time.Second)
	require.NoError(t, err)
	assertStripped(t, out.Stdout)

	pid, err := l.PTYStart(ctx, "env; echo END-OF-''ENV; sleep 30")
	require.NoError(t, err)
	listing := readUntil(t, l, pid, "END-OF-ENV")
	assertStripped(t, listing)
	assert.Contains(t, listing, "TERM=", "a terminal always has a TERM")
}

func TestAStdioBridgeGetsTheStrippedStartupEnvironment(t *testing.T) {
	ctx := context.Background()
	envFile := filepath.Join(t.TempDir(), "bridge.env")
	startup := withDaemonOnly()
	t.Setenv("CARD_TEST_LIVE_ONLY", "1")
	for k, v := range daemonOnly {
		t.Setenv(k, v)
	}
	s, closer, err := substrate.Open(ctx, substrate.Config{MCP: &substrate.MCPConfig{
		Name: "vm",
		// The bridge records its own environment, then becomes the test
		// bridge (exec keeps the process and its environment).
		Command: []string{"sh", "-c", `env > "$0"; exec "$1" -test.run='^$'`, envFile, testBinary(t)},
		Env:     map[string]string{bridgeEnv: "1", "GORACE": noExitSleep},
		Timeout: 10 * time.Second,
	}}, startup)
	require.NoError(t, err)
	defer func() { require.NoError(t, closer.Close()) }()
	_, err = s.RunCommand(ctx, "true", 10*time.Second)
	require.NoError(t, err)

	b, err := os.ReadFile(envFile)
	require.NoError(t, err)
	assertStripped(t, string(b))
	assert.Contains(t, string(b), bridgeEnv+"=1\n", "the configured env is added")
}
