package detect

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

func baseSpec() api.ExternalAgentSpec {
	return api.ExternalAgentSpec{
		ID:          "codex",
		DisplayName: "Codex CLI",
		BinaryPath:  "/opt/homebrew/bin/codex",
		AuthKind:    api.AuthKindUnknown,
		Execution:   Runnable(),
	}
}

func TestRunnableSpecSerialisesToThePinnedBytes(t *testing.T) {
	s := baseSpec()
	s.Version = "0.171.0"
	s.Capabilities = api.Capabilities{ToolUse: true, Streaming: true}
	s.DetectedAt = 1700000000
	b, err := json.Marshal(s)
	require.NoError(t, err)
	assert.Equal(t, `{"id":"codex","display_name":"Codex CLI","binary_path":"/opt/homebrew/bin/codex","version":"0.171.0","auth_kind":"unknown","capabilities":{"tool_use":true,"mcp":false,"hooks":false,"sessions":false,"streaming":true,"images":false,"ask":false},"detected_at":1700000000,"execution":{"state":"runnable"}}`, string(b))
}

func TestUnusableSpecWithHealthAndAdditiveFieldsSerialisesToThePinnedBytes(t *testing.T) {
	s := baseSpec()
	s.AuthKind = api.AuthSubscription
	s.Execution = Unusable("bad", 5)
	s.Health = &api.ExternalAgentHealth{ID: "codex", Status: api.StatusNotExecutable, Reason: "bad", CheckedAt: 7}
	s.Source = api.SourceLoginShell
	s.ReadOnlyEnforcement = api.EnforcedByOSSandbox
	s.SpawnBlockReason = "cycle"
	b, err := json.Marshal(s)
	require.NoError(t, err)
	assert.Equal(t, `{"id":"codex","display_name":"Codex CLI","binary_path":"/opt/homebrew/bin/codex","auth_kind":"subscription","capabilities":{"tool_use":false,"mcp":false,"hooks":false,"sessions":false,"streaming":false,"images":false,"ask":false},"detected_at":0,"health":{"id":"codex","status":"not_executable","details":{},"reason":"bad","checked_at":7},"execution":{"state":"unusable","reason":"bad","checked_at":5},"source":"login_shell","read_only_enforcement":"os_sandbox","spawn_block_reason":"cycle"}`, string(b))
}

func TestUnusableWithZeroTimeStillCarriesCheckedAt(t *testing.T) {
	b, err := json.Marshal(Unusable("r", 0))
	require.NoError(t, err)
	assert.Equal(t, `{"state":"unusable","reason":"r","checked_at":0}`, string(b))
}

func TestZeroAuthKindIsWrittenAsUnknownAndAbsentAuthKindReadsAsUnknown(t *testing.T) {
	s := baseSpec()
	s.AuthKind = ""
	b, err := json.Marshal(s)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"auth_kind":"unknown"`)

	var back api.ExternalAgentSpec
	require.NoError(t, json.Unmarshal([]byte(`{"id":"codex","display_name":"Codex CLI","binary_path":"/x","capabilities":{}}`), &back))
	assert.Equal(t, api.AuthKindUnknown, back.AuthKind)
}

func TestEnumStringsMatchTheWire(t *testing.T) {
	pairs := [][2]string{
		{string(api.AuthSubscription), "subscription"},
		{string(api.AuthAPIKey), "api_key"},
		{string(api.AuthKindUnknown), "unknown"},
		{string(api.AuthUnauthenticated), "unauthenticated"},
		{string(api.StatusReady), "ready"},
		{string(api.StatusNotConfigured), "not_configured"},
		{string(api.StatusExpired), "expired"},
		{string(api.StatusNetworkError), "network_error"},
		{string(api.StatusNotExecutable), "not_executable"},
		{string(api.StatusUnknown), "unknown"},
		{agent.ClaudeCode, "claude-code"},
		{agent.Codex, "codex"},
		{agent.Gemini, "gemini"},
		{string(api.SourcePin), "pin"},
		{string(api.SourcePath), "path"},
		{string(api.SourceLoginShell), "login_shell"},
		{string(api.SourceWellKnown), "well_known"},
		{string(api.EnforcedByOSSandbox), "os_sandbox"},
		{string(api.EnforcedByAllowlist), "allowlist"},
		{string(api.EnforcedByAgentDefault), "agent_default"},
		{string(api.NotEnforced), "not_enforced"},
	}
	for _, p := range pairs {
		assert.Equal(t, p[1], p[0])
	}
}

func specWithHealth(status *api.HealthStatus) api.ExternalAgentSpec {
	s := baseSpec()
	if status != nil {
		s.Health = &api.ExternalAgentHealth{ID: "codex", Status: *status, Details: map[string]any{}, Reason: "killed by signal 9"}
	}
	return s
}

// Only an exec fault blocks invocation; every auth state is for the person
// to fix and must not stop a run.
func TestUnusableReasonFiresOnlyForNotExecutable(t *testing.T) {
	ne := api.StatusNotExecutable
	reason, bad := specWithHealth(&ne).UnusableReason()
	assert.True(t, bad)
	assert.Equal(t, "killed by signal 9", reason)
	for _, ok := range []api.HealthStatus{api.StatusReady, api.StatusNotConfigured, api.StatusExpired, api.StatusNetworkError, api.StatusUnknown} {
		_, bad := specWithHealth(&ok).UnusableReason()
		assert.False(t, bad, "%s describes auth state and must not block invocation", ok)
	}
	_, bad = specWithHealth(nil).UnusableReason()
	assert.False(t, bad, "unprobed health must not read as broken")
}

// Execution is written by detection alone, so a later health probe cannot
// hide a binary the OS refuses.
func TestAHealthRefreshCannotOverwriteTheExecutionVerdict(t *testing.T) {
	s := baseSpec()
	s.Execution = Unusable("quarantined at /opt/homebrew/bin/codex", 42)
	s.Health = &api.ExternalAgentHealth{ID: "codex", Status: api.StatusUnknown, Details: map[string]any{}, CheckedAt: 99}
	reason, bad := s.UnusableReason()
	assert.True(t, bad)
	assert.Equal(t, "quarantined at /opt/homebrew/bin/codex", reason)
}

// Auth trouble is health's business: it never makes a binary unrunnable.
func TestARunnableBinaryWithAuthProblemsIsStillRunnable(t *testing.T) {
	s := baseSpec()
	for _, st := range []api.HealthStatus{api.StatusUnknown, api.StatusNotConfigured, api.StatusExpired, api.StatusReady} {
		s.Health = &api.ExternalAgentHealth{ID: "codex", Status: st, Reason: "some auth detail", CheckedAt: 1}
		_, bad := s.UnusableReason()
		assert.False(t, bad, "%s is not an exec fault", st)
	}
}

// A producer that predates the execution field reported a broken binary as
// health not_executable; that payload must still block.
func TestAPreSplitSpecIsStillUnderstood(t *testing.T) {
	var s api.ExternalAgentSpec
	require.NoError(t, json.Unmarshal([]byte(`{
		"id":"codex","display_name":"Codex CLI","binary_path":"/opt/homebrew/bin/codex",
		"auth_kind":"unknown","capabilities":{},"detected_at":0,
		"health":{"id":"codex","status":"not_executable","details":{},"reason":"quarantined at /opt/homebrew/bin/codex","checked_at":7}}`), &s))
	assert.True(t, s.Execution.IsRunnable(), "absent execution reads as runnable")
	reason, bad := s.UnusableReason()
	assert.True(t, bad)
	assert.Equal(t, "quarantined at /opt/homebrew/bin/codex", reason)
}

func TestPreSplitNotExecutableWithoutReasonStillBlocks(t *testing.T) {
	var s api.ExternalAgentSpec
	require.NoError(t, json.Unmarshal([]byte(`{"id":"codex","display_name":"Codex CLI","binary_path":"/x","capabilities":{},"health":{"id":"codex","status":"not_executable","details":{},"checked_at":7}}`), &s))
	reason, bad := s.UnusableReason()
	assert.True(t, bad)
	assert.Equal(t, "binary is not executable", reason)
}

// The zero value is runnable, and the common case writes nothing but its
// state.
func TestExecutionDefaultsToRunnable(t *testing.T) {
	var zero api.ExecutableStatus
	assert.True(t, zero.IsRunnable())
	b, err := json.Marshal(zero)
	require.NoError(t, err)
	assert.Equal(t, `{"state":"runnable"}`, string(b))
}

// An unusable verdict survives the wire with its reason and time.
func TestUnusableRoundTripsOnTheWire(t *testing.T) {
	s := baseSpec()
	s.Execution = Unusable("bad", 5)
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back api.ExternalAgentSpec
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, s.Execution, back.Execution)
	reason, _ := back.Execution.UnusableReason()
	assert.Equal(t, "bad", reason)
	assert.Equal(t, uint64(5), back.Execution.CheckedAt())
}

func TestAnUnknownExecutionStateIsRejectedNotReadAsRunnable(t *testing.T) {
	var e api.ExecutableStatus
	assert.Error(t, json.Unmarshal([]byte(`{"state":"quarantined"}`), &e))
}

func TestHealthWithNilDetailsSerialisesAnEmptyObject(t *testing.T) {
	b, err := json.Marshal(api.ExternalAgentHealth{ID: "gemini", Status: api.StatusReady, CheckedAt: 3})
	require.NoError(t, err)
	assert.Equal(t, `{"id":"gemini","status":"ready","details":{},"checked_at":3}`, string(b))
}

func TestEveryAdapterDisclosesItsReadOnlyEnforcement(t *testing.T) {
	want := map[string]api.ReadOnlyEnforcement{agent.ClaudeCode: api.EnforcedByAllowlist, agent.Codex: api.EnforcedByOSSandbox, agent.Gemini: api.EnforcedByAgentDefault,
		agent.Copilot: api.EnforcedByAllowlist, agent.Droid: api.EnforcedByAgentDefault, agent.Pi: api.NotEnforced,
		agent.OpenCode: api.EnforcedByAllowlist, agent.QwenCode: api.EnforcedByAgentDefault}
	assert.Equal(t, []string{agent.ClaudeCode, agent.Codex, agent.Gemini, agent.Copilot, agent.Droid, agent.Pi, agent.OpenCode, agent.QwenCode}, agent.IDs())
	for id, ro := range want {
		d, ok := Lookup(id)
		require.True(t, ok)
		assert.Equal(t, ro, d.ReadOnly, id)
		assert.NotEmpty(t, d.PinEnv)
		assert.NotNil(t, d.Health)
		assert.NotNil(t, d.AuthKind)
	}
	_, ok := Lookup("nope")
	assert.False(t, ok)
}
