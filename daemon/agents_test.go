package daemon_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// fakeAgents pins a fake claude and codex, so the tests do not depend on
// what this machine has installed.
func fakeAgents(t *testing.T) daemontest.Options {
	claude := daemontest.Script(t, "claude", `case "$1" in
--version) echo "2.1.197 (Claude Code)";;
auth) echo '{"loggedIn": false, "authMethod": "none"}'; exit 1;;
esac`)
	codex := daemontest.Script(t, "codex", `case "$1" in
--version) echo "codex-cli 0.171.0";;
login) echo "Not logged in" >&2; exit 1;;
esac`)
	return daemontest.Options{Agents: map[string]string{"claude-code": claude, "codex": codex, "gemini": "/nonexistent/gemini"}}
}

func TestAgentsDetectReportsPinnedAgentsOverTheWire(t *testing.T) {
	c := daemontest.Start(t, fakeAgents(t)).Client
	ctx := daemontest.Context(t)
	specs, err := c.Detect(ctx, api.DetectParams{Refresh: true})
	require.NoError(t, err)
	byID := map[string]api.ExternalAgentSpec{}
	for _, s := range specs {
		byID[s.ID] = s
	}
	require.Contains(t, byID, "claude-code")
	assert.Equal(t, "2.1.197", byID["claude-code"].Version)
	assert.Equal(t, api.SourcePin, byID["claude-code"].Source)
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
	c := daemontest.Start(t, fakeAgents(t)).Client
	ctx := daemontest.Context(t)
	specs, err := c.Detect(ctx, api.DetectParams{InvokedBy: "Claude-Code"})
	require.NoError(t, err)
	for _, s := range specs {
		if s.ID == "claude-code" {
			assert.Contains(t, s.SpawnBlockReason, "the caller named itself claude-code (invoked_by)")
		} else {
			assert.Empty(t, s.SpawnBlockReason, s.ID)
		}
	}
}

func TestHealthOfAnUnknownAdapterNamesTheKnownOnes(t *testing.T) {
	c := daemontest.Start(t, fakeAgents(t)).Client
	ctx := daemontest.Context(t)
	_, err := c.Health(ctx, "nope", false)
	re := rpcCode(t, err)
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
	assert.Contains(t, re.Message, "claude-code")
	assert.Equal(t, "id", errData(t, re)["field"])
}

func TestHealthAnswersOneOrAll(t *testing.T) {
	c := daemontest.Start(t, fakeAgents(t)).Client
	ctx := daemontest.Context(t)
	one, err := c.Health(ctx, "codex", false)
	require.NoError(t, err)
	assert.Equal(t, "codex", one.ID)
	assert.Equal(t, api.StatusNotConfigured, one.Status)
	assert.NotEmpty(t, one.Reason)

	all, err := c.HealthAll(ctx, false)
	require.NoError(t, err)
	ids := map[string]api.HealthStatus{}
	for _, h := range all {
		ids[h.ID] = h.Status
	}
	assert.Equal(t, api.StatusNotConfigured, ids["claude-code"])
	assert.Equal(t, api.StatusNotExecutable, ids["gemini"], "not_executable comes from detection")
}

func TestTheGuardIsReadOnceAtStartup(t *testing.T) {
	t.Setenv("CAR_INVOKED_BY", "claude-code")
	t.Setenv("CAR_AGENT_MAX_CHAIN", "5")
	td := daemontest.Start(t, daemontest.Options{ProcessEnv: true})

	// The process environment changes after startup; decisions must not.
	t.Setenv("CAR_INVOKED_BY", "codex")
	t.Setenv("CAR_AGENT_MAX_CHAIN", "1")

	info, err := td.Client.Info(daemontest.Context(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"claude-code"}, info.Ancestry)
	assert.Equal(t, 5, info.MaxChain)
}
