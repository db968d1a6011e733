package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/rpc"
)

// fakeCLI writes an executable shell script and returns its path.
func fakeCLI(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return p
}

// fakeAgents pins a fake claude and codex, so the tests do not depend on
// what this machine has installed.
func fakeAgents(t *testing.T) []string {
	claude := fakeCLI(t, "claude", `case "$1" in
--version) echo "2.1.197 (Claude Code)";;
auth) echo '{"loggedIn": false, "authMethod": "none"}'; exit 1;;
esac`)
	codex := fakeCLI(t, "codex", `case "$1" in
--version) echo "codex-cli 0.171.0";;
login) echo "Not logged in" >&2; exit 1;;
esac`)
	return []string{"CAR_CLAUDE_CODE_BIN=" + claude, "CAR_CODEX_BIN=" + codex, "CAR_GEMINI_BIN=/nonexistent/gemini"}
}

func TestAgentsDetectReportsPinnedAgentsOverTheWire(t *testing.T) {
	td := startDaemon(t, fakeAgents(t)...)
	c := td.client(t, rpc.ClientOptions{})
	var specs []detect.ExternalAgentSpec
	require.NoError(t, c.Call(context.Background(), "agents.detect", daemon.DetectParams{Refresh: true}, &specs))
	byID := map[string]detect.ExternalAgentSpec{}
	for _, s := range specs {
		byID[s.ID] = s
	}
	require.Contains(t, byID, "claude-code")
	assert.Equal(t, "2.1.197", byID["claude-code"].Version)
	assert.Equal(t, detect.SourcePin, byID["claude-code"].Source)
	assert.Equal(t, "0.171.0", byID["codex"].Version)
	require.Contains(t, byID, "gemini", "a pin that does not resolve is reported, not hidden")
	reason, unusable := byID["gemini"].UnusableReason()
	assert.True(t, unusable)
	assert.Contains(t, reason, "CAR_GEMINI_BIN")
	for _, s := range specs {
		assert.Empty(t, s.SpawnBlockReason, "a caller that names nobody may spawn anything")
	}
}

func TestAgentsDetectMarksWhatTheCallerCouldNotSpawn(t *testing.T) {
	td := startDaemon(t, fakeAgents(t)...)
	c := td.client(t, rpc.ClientOptions{})
	var specs []detect.ExternalAgentSpec
	require.NoError(t, c.Call(context.Background(), "agents.detect", daemon.DetectParams{InvokedBy: "Claude-Code"}, &specs))
	for _, s := range specs {
		if s.ID == "claude-code" {
			assert.Contains(t, s.SpawnBlockReason, "already in this invocation chain")
		} else {
			assert.Empty(t, s.SpawnBlockReason, s.ID)
		}
	}
}

func TestHealthOfAnUnknownAdapterNamesTheKnownOnes(t *testing.T) {
	td := startDaemon(t, fakeAgents(t)...)
	c := td.client(t, rpc.ClientOptions{})
	err := c.Call(context.Background(), "agents.health_external", daemon.HealthParams{ID: "nope"}, nil)
	var re *rpc.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, rpc.CodeInvalidParams, re.Code)
	assert.Contains(t, re.Message, "claude-code")
	var data map[string]any
	require.NoError(t, json.Unmarshal(re.Data.(json.RawMessage), &data))
	assert.Equal(t, "id", data["field"])
}

func TestHealthAnswersOneOrAll(t *testing.T) {
	td := startDaemon(t, fakeAgents(t)...)
	c := td.client(t, rpc.ClientOptions{})
	var one detect.ExternalAgentHealth
	require.NoError(t, c.Call(context.Background(), "agents.health_external", daemon.HealthParams{ID: "codex"}, &one))
	assert.Equal(t, "codex", one.ID)
	assert.Equal(t, detect.StatusNotConfigured, one.Status)
	assert.NotEmpty(t, one.Reason)

	var all []detect.ExternalAgentHealth
	require.NoError(t, c.Call(context.Background(), "agents.health_external", nil, &all))
	ids := map[string]detect.HealthStatus{}
	for _, h := range all {
		ids[h.ID] = h.Status
	}
	assert.Equal(t, detect.StatusNotConfigured, ids["claude-code"])
	assert.Equal(t, detect.StatusNotExecutable, ids["gemini"], "not_executable comes from detection")
}

func TestTheGuardIsReadOnceAtStartup(t *testing.T) {
	t.Setenv("CAR_INVOKED_BY", "claude-code")
	t.Setenv("CAR_AGENT_MAX_CHAIN", "5")
	home := filepath.Join(t.TempDir(), "home")
	d, err := daemon.New(daemon.Options{Home: home, Addr: "127.0.0.1:0"}) // nil Environ: the real process env
	require.NoError(t, err)
	require.NoError(t, d.Start())
	t.Cleanup(func() { d.Shutdown(context.Background()) })
	tok, err := daemon.ReadToken(home)
	require.NoError(t, err)
	td := &testDaemon{Daemon: d, home: home, token: tok}

	// The process environment changes after startup; decisions must not.
	t.Setenv("CAR_INVOKED_BY", "codex")
	t.Setenv("CAR_AGENT_MAX_CHAIN", "1")

	c := td.client(t, rpc.ClientOptions{})
	var info daemon.Info
	require.NoError(t, c.Call(context.Background(), "daemon.info", nil, &info))
	assert.Equal(t, []string{"claude-code"}, info.Ancestry)
	assert.Equal(t, 5, info.MaxChain)
}
