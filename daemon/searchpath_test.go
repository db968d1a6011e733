package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/daemontest"
)

// The login shell's PATH is asked after the daemon is up, no longer before
// it listens; an agent started later must still run with it.
func TestAgentsRunWithTheLoginShellsPathThoughItIsAskedAfterStartup(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "from-the-login-shell")
	require.NoError(t, os.Mkdir(marker, 0o755))
	// Called as `shell -l -c SCRIPT`: a login session that adds marker,
	// slowly, as a heavy profile does, so it answers well after startup.
	shell := daemontest.Script(t, "fake-login-shell", "sleep 0.3\nPATH=\""+marker+":$PATH\" exec /bin/sh -c \"$3\"")

	agents, pins := replayAgents(t)
	rd := &runsDaemon{agents: agents, cwd: t.TempDir(), events: daemontest.NewEvents()}
	rd.Daemon = daemontest.Start(t, daemontest.Options{Agents: pins, Environ: []string{"SHELL=" + shell}})
	res := rd.finished(t, rd.params("claude-code", "say pong"))
	env := rd.agents["claude-code"].ChildEnv(t, res.RunID)
	assert.Contains(t, strings.Split(env["PATH"], ":"), marker, "PATH %q", env["PATH"])
}
