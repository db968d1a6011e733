package daemon_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/rpc"
)

func ids[T any](xs []T, id func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = id(x)
	}
	return out
}

// CAR: agents.health_external without an id checks every detected adapter:
// the installed ones, runnable or not, and none that is not installed.
func TestHealthExternalWithoutAnIDAnswersEveryDetectedAdapter(t *testing.T) {
	c := daemontest.Start(t, fakeAgents(t)).Client
	ctx := daemontest.Context(t)
	specs, err := c.Detect(ctx, daemon.DetectParams{Refresh: true})
	require.NoError(t, err)
	all, err := c.HealthAll(ctx, false)
	require.NoError(t, err)
	assert.Equal(t, ids(specs, func(s detect.ExternalAgentSpec) string { return s.ID }),
		ids(all, func(h detect.ExternalAgentHealth) string { return h.ID }))
	got := map[string]detect.HealthStatus{}
	for _, h := range all {
		got[h.ID] = h.Status
	}
	assert.Equal(t, detect.StatusNotExecutable, got["gemini"], "an install that cannot run is detected, and not executable")
	assert.Equal(t, detect.StatusNotConfigured, got["codex"])

	// One adapter that is not installed is still answered when named.
	var missing string
	for _, id := range []string{"copilot", "droid", "pi"} {
		if _, ok := got[id]; !ok {
			missing = id
		}
	}
	if missing != "" {
		h, err := c.Health(ctx, missing, false)
		require.NoError(t, err)
		assert.Equal(t, detect.StatusNotExecutable, h.Status)
		assert.Contains(t, h.Reason, "not installed")
	}
}

// CAR: a spec whose binary cannot run carries health {status:
// not_executable, reason} on every detection method, include_health or not,
// for clients from before the execution field.
func TestAnUnusableSpecCarriesNotExecutableHealthWithoutIncludeHealth(t *testing.T) {
	c := daemontest.Start(t, fakeAgents(t)).Client
	ctx := daemontest.Context(t)
	for _, method := range []string{"agents.detect", "agents.list_external", "agents.detect_external"} {
		var specs []detect.ExternalAgentSpec
		require.NoError(t, c.Call(ctx, method, map[string]any{}, &specs), method)
		for _, s := range specs {
			if s.ID == "gemini" {
				require.NotNil(t, s.Health, method)
				assert.Equal(t, detect.StatusNotExecutable, s.Health.Status, method)
				reason, _ := s.Execution.UnusableReason()
				assert.Equal(t, reason, s.Health.Reason, method)
				assert.Contains(t, s.Health.Reason, "CAR_GEMINI_BIN", method)
			} else {
				assert.Nil(t, s.Health, "%s: a runnable spec has no health unless asked (%s)", method, s.ID)
			}
		}
	}
}

// CAR: agents.detect_external {include_health: true} checks health again
// instead of serving the 30 s cache, so a person who just signed in reads
// ready at once; agents.list_external serves the cache.
func TestDetectExternalWithHealthReadsASignInAtOnce(t *testing.T) {
	signedIn := filepath.Join(t.TempDir(), "signed-in")
	claude := daemontest.Script(t, "claude", `case "$1" in
--version) echo "2.1.197 (Claude Code)";;
auth) if [ -f '`+signedIn+`' ]; then echo '{"loggedIn": true, "authMethod": "claude.ai", "apiProvider": "firstParty"}'; exit 0; fi
      echo '{"loggedIn": false, "authMethod": "none", "apiProvider": "firstParty"}'; exit 1;;
esac`)
	c := daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Agents: map[string]string{"claude-code": claude}}).Client
	ctx := daemontest.Context(t)
	status := func(method string) detect.HealthStatus {
		var specs []detect.ExternalAgentSpec
		require.NoError(t, c.Call(ctx, method, daemon.DetectParams{IncludeHealth: true}, &specs))
		for _, s := range specs {
			if s.ID == "claude-code" {
				require.NotNil(t, s.Health)
				return s.Health.Status
			}
		}
		t.Fatalf("%s: no claude-code in %+v", method, specs)
		return ""
	}
	assert.Equal(t, detect.StatusNotConfigured, status("agents.list_external"))
	require.NoError(t, os.WriteFile(signedIn, nil, 0o600)) // `claude auth login`
	assert.Equal(t, detect.StatusNotConfigured, status("agents.list_external"), "list_external serves the 30 s cache")
	assert.Equal(t, detect.StatusReady, status("agents.detect_external"), "detect_external checks again")
	assert.Equal(t, detect.StatusReady, status("agents.list_external"), "and the cache holds the new answer")
}

// CAR's mcp_endpoint on agents.invoke_external: "" is no server; a URL is
// handed to an agent that can take one, and refused, naming why, by one
// that cannot.
func TestInvokeExternalTakesCARsMCPEndpoint(t *testing.T) {
	seen := filepath.Join(t.TempDir(), "seen")
	claude := daemontest.Script(t, "claude", `case "$1" in
--version) echo "2.1.197 (Claude Code)"; exit 0;;
auth) exit 1;;
esac
echo "$@" > '`+seen+`.args'
while [ $# -gt 0 ]; do [ "$1" = --mcp-config ] && cat "$2" > '`+seen+`.mcp'; shift; done
cat >/dev/null
cat '`+daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-success.jsonl")+`'`)
	c := daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Agents: map[string]string{"claude-code": claude}}).Client
	ctx := daemontest.Context(t)
	invoke := func(id, endpoint string) (daemon.InvokeResult, error) {
		var res daemon.InvokeResult
		err := c.Call(ctx, "agents.invoke_external", map[string]any{"id": id, "task": "say pong", "mcp_endpoint": endpoint}, &res)
		return res, err
	}

	res, err := invoke("claude-code", "")
	require.NoError(t, err)
	assert.False(t, res.IsError)
	args, _ := os.ReadFile(seen + ".args")
	assert.NotContains(t, string(args), "--mcp-config {{", "no server asked for, none given")
	assert.Contains(t, string(args), "--strict-mcp-config")
	_, err = os.Stat(seen + ".mcp")
	assert.True(t, os.IsNotExist(err), "\"\" is no MCP server")

	res, err = invoke("claude-code", "http://127.0.0.1:8765/mcp")
	require.NoError(t, err)
	assert.False(t, res.IsError)
	mcp, err := os.ReadFile(seen + ".mcp")
	require.NoError(t, err)
	assert.JSONEq(t, `{"mcpServers":{"client":{"type":"http","url":"http://127.0.0.1:8765/mcp"}}}`, string(mcp))
	args, _ = os.ReadFile(seen + ".args")
	assert.Contains(t, string(args), "--allowedTools mcp__client")

	for _, c := range []struct{ id, endpoint, why string }{
		{"gemini", "http://127.0.0.1:8765/mcp", "settings"},
		{"droid", "http://127.0.0.1:8765/mcp", "mcp.json"},
		{"pi", "http://127.0.0.1:8765/mcp", "no MCP client"},
		{"claude-code", "ftp://127.0.0.1/mcp", "http(s) URL"},
		{"claude-code", "http://user:secret@127.0.0.1:8765/mcp", "credentials"},
	} {
		_, err := invoke(c.id, c.endpoint)
		re := rpcCode(t, err)
		assert.Equal(t, rpc.CodeInvalidParams, re.Code, "%s %s", c.id, c.endpoint)
		assert.Equal(t, "mcp_endpoint", errData(t, re)["field"])
		assert.Contains(t, re.Message, c.why)
		assert.NotContains(t, re.Message, "secret")
	}
}
