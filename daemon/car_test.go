package daemon_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
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
	specs, err := c.Detect(ctx, api.DetectParams{Refresh: true})
	require.NoError(t, err)
	all, err := c.HealthAll(ctx, false)
	require.NoError(t, err)
	assert.Equal(t, ids(specs, func(s api.ExternalAgentSpec) string { return s.ID }),
		ids(all, func(h api.ExternalAgentHealth) string { return h.ID }))
	got := map[string]api.HealthStatus{}
	for _, h := range all {
		got[h.ID] = h.Status
	}
	assert.Equal(t, api.StatusNotExecutable, got["gemini"], "an install that cannot run is detected, and not executable")
	assert.Equal(t, api.StatusNotConfigured, got["codex"])

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
		assert.Equal(t, api.StatusNotExecutable, h.Status)
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
		var specs []api.ExternalAgentSpec
		require.NoError(t, c.Call(ctx, method, map[string]any{}, &specs), method)
		for _, s := range specs {
			if s.ID == "gemini" {
				require.NotNil(t, s.Health, method)
				assert.Equal(t, api.StatusNotExecutable, s.Health.Status, method)
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
	status := func(method string) api.HealthStatus {
		var specs []api.ExternalAgentSpec
		require.NoError(t, c.Call(ctx, method, api.DetectParams{IncludeHealth: true}, &specs))
		for _, s := range specs {
			if s.ID == "claude-code" {
				require.NotNil(t, s.Health)
				return s.Health.Status
			}
		}
		t.Fatalf("%s: no claude-code in %+v", method, specs)
		return ""
	}
	assert.Equal(t, api.StatusNotConfigured, status("agents.list_external"))
	require.NoError(t, os.WriteFile(signedIn, nil, 0o600)) // `claude auth login`
	assert.Equal(t, api.StatusNotConfigured, status("agents.list_external"), "list_external serves the 30 s cache")
	assert.Equal(t, api.StatusReady, status("agents.detect_external"), "detect_external checks again")
	assert.Equal(t, api.StatusReady, status("agents.list_external"), "and the cache holds the new answer")
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
	invoke := func(id, endpoint string) (api.InvokeResult, error) {
		var res api.InvokeResult
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
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, "%s %s", c.id, c.endpoint)
		assert.Equal(t, "mcp_endpoint", errData(t, re)["field"])
		assert.Contains(t, re.Message, c.why)
		assert.NotContains(t, re.Message, "secret")
	}
}

// agents.invoke_external takes every field of agents.invoke but the three
// CAR gives another meaning (session_id is the host's routing id, card's is
// agent_session_id; attachments are CAR's {path, media_type} and skipped,
// never required), and isolation (CAR's answer has no place for the
// session that holds the worktree to review), with the same JSON name and
// type: a field added to agents.invoke and forgotten here fails this test.
func TestInvokeExternalTakesEveryFieldOfAgentsInvoke(t *testing.T) {
	external := map[string]reflect.Type{}
	for _, f := range jsonFields(reflect.TypeFor[api.ExternalInvokeParams]()) {
		external[strings.Split(f.Tag.Get("json"), ",")[0]] = f.Type
	}
	for _, f := range jsonFields(reflect.TypeFor[api.InvokeParams]()) {
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		switch name {
		case "session_id":
			assert.Equal(t, f.Type, external["agent_session_id"])
		case "attachments":
			assert.Equal(t, reflect.TypeFor[[]api.ExternalAttachment](), external[name])
		case "require_attachments":
			assert.NotContains(t, external, name, "CAR skips what it cannot send; there is nothing to require")
		case "isolation", "base":
			assert.NotContains(t, external, name, "an isolated run is reviewed by its session, which CAR's answer cannot name")
		default:
			assert.Equal(t, f.Type, external[name], "agents.invoke_external's %s", name)
		}
	}
	assert.Equal(t, reflect.TypeFor[string](), external["session_id"])
}

// jsonFields lists the fields a struct puts on the wire: an embedded struct
// without a JSON name of its own lends its fields to the outer object, the
// way encoding/json flattens it.
func jsonFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || (f.Anonymous && f.Tag.Get("json") == "") {
			continue
		}
		out = append(out, f)
	}
	return out
}

func externalCall(t *testing.T, c *rpcclient.Client, params map[string]any, out any) error {
	t.Helper()
	return c.Call(daemontest.Context(t), "agents.invoke_external", params, out)
}

// One running agents.invoke_external per session_id per connection: a
// second is refused -32042 naming the first run, while another connection
// may use the same id (a host's ids are its own), and agents.chat.cancel
// from it does not reach the first connection's run.
func TestASessionIDNamesOneRunningRunPerConnection(t *testing.T) {
	rd := startRunsDaemon(t, "")
	a, b := rd.RPC(t, rpcclient.ClientOptions{}), rd.RPC(t, rpcclient.ClientOptions{})
	p := map[string]any{"id": "claude-code", "task": "SLEEP", "cwd": rd.cwd, "stream": true, "session_id": "chat-1"}
	var first, second api.ExternalInvokeAccepted
	require.NoError(t, externalCall(t, a, p, &first))
	assert.Equal(t, "chat-1", first.SessionID)

	re := rpcCode(t, externalCall(t, a, p, nil))
	assert.Equal(t, daemon.CodeSessionInUse, re.Code)
	assert.Equal(t, first.RunID, errData(t, re)["run_id"])
	assert.Equal(t, "chat-1", errData(t, re)["session_id"])

	require.NoError(t, externalCall(t, b, p, &second))
	assert.NotEqual(t, first.RunID, second.RunID)
	var res api.ChatCancelResult
	require.NoError(t, b.Call(daemontest.Context(t), "agents.chat.cancel", map[string]any{"session_id": "chat-1"}, &res))
	assert.True(t, res.Cancelled)
	assert.Equal(t, second.RunID, res.RunID, "b's cancel ends b's run")
	run, err := rd.Client.Run(daemontest.Context(t), first.RunID)
	require.NoError(t, err)
	assert.Equal(t, api.StatusRunning, run.Status, "and not a's")

	require.NoError(t, a.Call(daemontest.Context(t), "agents.chat.cancel", map[string]any{"session_id": "chat-1"}, &res))
	assert.True(t, res.Cancelled)
	assert.Equal(t, api.StatusCancelled, res.Status)
	// The id is free again once its run has ended.
	p["task"] = "say pong"
	require.NoError(t, externalCall(t, a, p, &first))
}

// A session_id is any printable text the host chooses, up to 256 bytes;
// longer, or with control characters, it is refused naming the field.
func TestARoutingIDIsBoundedPrintableText(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.RPC(t, rpcclient.ClientOptions{})
	for _, id := range []string{strings.Repeat("a", 257), "chat\n1", "chat\x001"} {
		re := rpcCode(t, externalCall(t, c, map[string]any{"id": "codex", "task": "say pong", "cwd": rd.cwd, "session_id": id}, nil))
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
		assert.Equal(t, "session_id", errData(t, re)["field"])
	}
	var res api.ExternalInvokeResult
	require.NoError(t, externalCall(t, c, map[string]any{"id": "codex", "task": "say pong", "cwd": rd.cwd, "session_id": strings.Repeat("é", 128)}, &res))
	assert.False(t, res.IsError)
}

// card's private-file placeholder is refused in a CAR attachment's path,
// as in every field that is not text for the agent, rather than skipped.
func TestACARAttachmentMayNotHoldCardsPlaceholder(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.RPC(t, rpcclient.ClientOptions{})
	re := rpcCode(t, externalCall(t, c, map[string]any{"id": "codex", "task": "x", "cwd": rd.cwd,
		"attachments": []map[string]any{{"path": "/tmp/ok.png"}, {"path": "/tmp/{{card-file:x}}.png"}}}, nil))
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
	assert.Equal(t, "attachments[1].path", errData(t, re)["field"])
}

// The agent CLI's own session is kept apart from the host's routing id:
// the answer's agent_session_id is the run's session_id in the history,
// and resume continues it.
func TestTheAgentsOwnSessionIsKeptForResume(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.RPC(t, rpcclient.ClientOptions{})
	var res api.ExternalInvokeResult
	require.NoError(t, externalCall(t, c, map[string]any{"id": "claude-code", "task": "say pong", "cwd": rd.cwd, "session_id": "chat-abc123"}, &res))
	assert.Equal(t, "chat-abc123", res.SessionID)
	require.NotEmpty(t, res.AgentSessionID)
	run, err := rd.Client.Run(daemontest.Context(t), res.RunID)
	require.NoError(t, err)
	assert.Equal(t, res.AgentSessionID, run.SessionID)
	args, _ := rd.agents["claude-code"].Received(t, res.RunID)
	assert.NotContains(t, strings.Join(args, " "), "chat-abc123", "the routing id never reaches the agent")

	require.NoError(t, externalCall(t, c, map[string]any{"id": "claude-code", "task": "go on", "cwd": rd.cwd, "session_id": "chat-abc123", "resume": res.AgentSessionID}, &res))
	args, _ = rd.agents["claude-code"].Received(t, res.RunID)
	assert.Contains(t, strings.Join(args, " "), "--resume "+run.SessionID)
}

// A web page may not have card read a file through agents.invoke_external
// either: refused, not skipped.
func TestAWebPageMayNotNameAFileOnInvokeExternal(t *testing.T) {
	rd := startRunsDaemon(t, "allowed_origins = [\"https://app.example\"]\n")
	page := rd.RPC(t, rpcclient.ClientOptions{Header: http.Header{"Origin": {"https://app.example"}}})
	re := rpcCode(t, externalCall(t, page, map[string]any{"id": "claude-code", "task": "look", "cwd": rd.cwd,
		"attachments": []map[string]any{{"path": "/etc/hostname"}}}, nil))
	assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
	assert.Equal(t, "attachments[0].path", errData(t, re)["field"])
	assert.Contains(t, re.Message, "https://app.example")
}

// card's own agents.invoke keeps card's meaning beside CAR's: a
// CAR-shaped attachment and a non-UUID session_id are refused, a bad
// attachment refuses the request, and a stream is agents.event, never
// agents.chat.event.
func TestAgentsInvokeKeepsCardsMeaning(t *testing.T) {
	rd := startRunsDaemon(t, "")
	var mu sync.Mutex
	var methods []string
	c := rd.RPC(t, rpcclient.ClientOptions{OnNotification: func(method string, _ json.RawMessage) {
		mu.Lock()
		defer mu.Unlock()
		methods = append(methods, method)
	}})
	call := func(params map[string]any, out any) error {
		return c.Call(daemontest.Context(t), "agents.invoke", params, out)
	}
	re := rpcCode(t, call(map[string]any{"id": "claude-code", "task": "x", "cwd": rd.cwd, "attachments": []map[string]any{{"path": "/nonexistent.png", "media_type": "image/png"}}}, nil))
	assert.Equal(t, "attachments[0].media_type", errData(t, re)["field"])
	re = rpcCode(t, call(map[string]any{"id": "claude-code", "task": "x", "cwd": rd.cwd, "attachments": []map[string]any{{"path": "/nonexistent.png"}}}, nil))
	assert.Equal(t, "attachments[0].path", errData(t, re)["field"])
	re = rpcCode(t, call(map[string]any{"id": "claude-code", "task": "x", "cwd": rd.cwd, "session_id": "chat-abc123"}, nil))
	assert.Equal(t, "session_id", errData(t, re)["field"])

	var acc api.InvokeAccepted
	require.NoError(t, call(map[string]any{"id": "claude-code", "task": "say pong", "cwd": rd.cwd, "stream": true}, &acc))
	waitRun(t, rd.Client, acc.RunID, 30*time.Second)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(methods) > 0 && methods[len(methods)-1] == "agents.event"
	}, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, methods, api.ChatEventMethod)
}

// agents.invoke_external takes agents.invoke's caps, refused the same way.
func TestTheExternalInvokeRefusesCapsThatAreNotALimitNamingTheField(t *testing.T) {
	rd := startRunsDaemon(t, "")
	c := rd.RPC(t, rpcclient.ClientOptions{})
	for _, tc := range []struct {
		field string
		value any
	}{{"max_cost_usd", -0.5}, {"max_cost_usd", 0}, {"max_cost_usd", 1e9}, {"max_tokens", 0}, {"max_tokens", -3}, {"max_tokens", 2e9}} {
		re := rpcCode(t, externalCall(t, c, map[string]any{"id": "pi", "task": "say pong", "cwd": rd.cwd, tc.field: tc.value}, nil))
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, "%s %v", tc.field, tc.value)
		assert.Equal(t, tc.field, errData(t, re)["field"], re.Message)
	}
}

// session.auth confirms only the token the connection was opened with, so
// no connection learns anything from it: after `card token rotate`, a page
// connection opened with the old token, which stays open, is refused the
// new token (it used to be told ok: one guess per connection it kept) and
// still answered ok for its own; a connection opened with the new token is
// answered ok for it and refused the old. A refusal closes the connection.
func TestSessionAuthConfirmsOnlyTheTokenItsConnectionWasOpenedWith(t *testing.T) {
	const origin = "https://app.example"
	d := daemontest.Start(t, daemontest.Options{Config: "allowed_origins = [\"" + origin + "\"]\n", NoClient: true})
	ctx := daemontest.Context(t)
	page := func(token string) *rpcclient.Client {
		c, err := rpc.Dial(ctx, d.URL, token, rpcclient.ClientOptions{Header: http.Header{"Origin": {origin}}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	old := d.Token
	guesser, keeper := page(old), page(old)
	rotated, err := daemon.RotateToken(d.Home)
	require.NoError(t, err)
	require.NotEqual(t, old, rotated)

	var res api.SessionAuthResult
	err = guesser.Call(ctx, "session.auth", map[string]any{"token": rotated}, &res)
	re := rpcCode(t, err)
	assert.Equal(t, rpcclient.CodeInternalError, re.Code, "A PAGE OPENED WITH THE OLD TOKEN CONFIRMED THE NEW ONE")
	assert.Contains(t, re.Message, "auth failed: token mismatch")
	assert.NotContains(t, re.Message, rotated)
	select {
	case <-guesser.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the connection that guessed stayed open")
	}

	require.NoError(t, keeper.Call(ctx, "session.auth", map[string]any{"token": old}, &res))
	assert.True(t, res.OK, "a connection is answered for the token it was opened with")

	fresh := page(rotated)
	require.NoError(t, fresh.Call(ctx, "session.auth", map[string]any{"token": rotated}, &res))
	assert.True(t, res.OK)
	assert.Equal(t, rpcclient.CodeInternalError, rpcCode(t, fresh.Call(ctx, "session.auth", map[string]any{"token": old}, &res)).Code)
}
