package attack

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
)

// runCalls serves agentsTmpl on pg with calls (no forged answers, nothing
// followed), runs it in Chromium and returns the page's answers by id.
func runCalls(t *testing.T, bin string, d *daemontest.Daemon, pg *page, calls []map[string]any) map[int]map[string]any {
	t.Helper()
	pg.render(t, agentsTmpl, map[string]any{
		"URL": d.URL, "Protocols": []string{"card.v1", "card.bearer." + d.Token}, "Calls": calls, "Forge": false, "Follow": "",
	})
	raw := runChromium(t, bin, pg.origin()+"/", pg)
	var v agentsVerdict
	require.NoError(t, json.Unmarshal(raw[0], &v), "an unreadable verdict %q", raw[0])
	t.Logf("verdict: %s", raw[0])
	assert.Zero(t, v.Asked, "the page was asked a question")
	return v.byID(t)
}

func rpcError(t *testing.T, answer map[string]any, what string) (code float64, message string, data map[string]any) {
	t.Helper()
	e, ok := answer["error"].(map[string]any)
	require.True(t, ok, "%s: no error: %v", what, answer)
	data, _ = e["data"].(map[string]any)
	return e["code"].(float64), e["message"].(string), data
}

// In a real browser, a page with the default grants cannot turn the
// daemon's limits against other runs: a run it starts with max_cost_usd
// 10000 under a daily budget of $1 reserves no more than any other run, so
// the next run starts (it used to reserve the whole budget, refusing every
// other run while it lasted); and a timeout_secs of -1 or 10^12 or a list
// limit past 500 is refused naming the field, not clamped without a word.
func TestAPageCannotTurnTheDaemonsLimitsAgainstOtherRuns(t *testing.T) {
	bin := findChromium(t)
	pg := newPage(t)
	fixture := daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-success.jsonl")
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", fixture)
	d := daemontest.Start(t, daemontest.Options{
		Config: fmt.Sprintf("login_shell_path = false\nallowed_origins = [%q]\n\n[budget]\ndaily_usd = 1\n", pg.origin()),
		Agents: map[string]string{"claude-code": claude.Path},
		Logger: zap.NewNop(),
	})
	ctx := daemontest.Context(t)
	cwd := t.TempDir()
	invoke := func(id int, p map[string]any) map[string]any {
		p["id"], p["cwd"] = "claude-code", cwd
		return map[string]any{"jsonrpc": "2.0", "id": id, "method": "agents.invoke", "params": p}
	}
	answers := runCalls(t, bin, d, pg, []map[string]any{
		invoke(1, map[string]any{"task": "SLEEP", "stream": true, "max_cost_usd": 10000}),
		invoke(2, map[string]any{"task": "say pong"}),
		invoke(3, map[string]any{"task": "say pong", "timeout_secs": -1}),
		invoke(4, map[string]any{"task": "say pong", "timeout_secs": 1_000_000_000_000}),
		{"jsonrpc": "2.0", "id": 5, "method": "sessions.start", "params": map[string]any{"id": "claude-code", "cwd": cwd, "timeout_secs": 3601}},
		{"jsonrpc": "2.0", "id": 6, "method": "runs.list", "params": map[string]any{"limit": 501}},
	})

	accepted, ok := answers[1]["result"].(map[string]any)
	require.True(t, ok, "the capped run: %v", answers[1])
	sleeping, _ := accepted["run_id"].(string)
	require.NotEmpty(t, sleeping)
	defer func() { _, _ = d.Client.Cancel(ctx, sleeping) }()
	res, ok := answers[2]["result"].(map[string]any)
	require.True(t, ok, "ONE PAGE RUN WITH A HUGE CAP HELD THE WHOLE BUDGET: %v", answers[2])
	assert.Equal(t, "succeeded", res["status"])
	run, err := d.Client.Run(ctx, sleeping)
	require.NoError(t, err)
	assert.Equal(t, api.StatusRunning, run.Status, "the capped run was still in flight when the next one started")

	for id, field := range map[int]string{3: "timeout_secs", 4: "timeout_secs", 5: "timeout_secs", 6: "limit"} {
		code, msg, data := rpcError(t, answers[id], fmt.Sprintf("call %d", id))
		assert.EqualValues(t, -32602, code, "call %d: %s", id, msg)
		assert.Equal(t, field, data["field"], "call %d", id)
	}
}

// In a real browser, a page granted write (so it may start edit runs)
// is refused an agent's own install directory as an edit run's cwd when
// that directory is not on PATH: here Codex's, pinned with bin = to a link
// into an npm package. The package, the node_modules holding it and the
// link's directory are each refused with rule agent_install, and nothing
// is written there.
func TestAPageWithWriteIsRefusedAnAgentsInstallDirectory(t *testing.T) {
	bin := findChromium(t)
	pg := newPage(t)
	tools := t.TempDir()
	pkg := filepath.Join(tools, "node_modules", "@openai", "codex")
	require.NoError(t, os.MkdirAll(filepath.Join(pkg, "bin"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(tools, "node_modules", ".bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "bin", "codex.js"), []byte("#!/bin/sh\necho codex-cli 0.171.0\n"), 0o755))
	link := filepath.Join(tools, "node_modules", ".bin", "codex")
	require.NoError(t, os.Symlink("../@openai/codex/bin/codex.js", link))
	d := daemontest.Start(t, daemontest.Options{
		Config: fmt.Sprintf("login_shell_path = false\nallowed_origins = [%q]\n\n[origins.%q]\ngrants = [\"read\", \"agents\", \"write\"]\n\n[adapters.codex]\nbin = %q\n",
			pg.origin(), pg.origin(), link),
		Agents: map[string]string{"claude-code": daemontest.AskingClaude(t)},
		Logger: zap.NewNop(),
	})
	dirs := []string{pkg, filepath.Join(tools, "node_modules"), filepath.Join(tools, "node_modules", ".bin")}
	var calls []map[string]any
	for i, dir := range dirs {
		calls = append(calls, map[string]any{"jsonrpc": "2.0", "id": i + 1, "method": "agents.invoke", "params": map[string]any{
			"id": "claude-code", "cwd": dir, "permission_mode": "edit",
			"task": fmt.Sprintf("TOOL Write {\"file_path\":%q,\"content\":\"x\"}", filepath.Join(dir, "planted.js"))}})
	}
	answers := runCalls(t, bin, d, pg, calls)
	for i, dir := range dirs {
		code, msg, data := rpcError(t, answers[i+1], dir)
		assert.EqualValues(t, -32602, code, "%s: %s", dir, msg)
		assert.Equal(t, "agent_install", data["rule"], "%s: %s", dir, msg)
		assert.Contains(t, msg, "where codex is installed")
		assert.NoFileExists(t, filepath.Join(dir, "planted.js"))
	}
}

// In a real browser, a page granted write but not approve starts an ask
// run; it is never asked, so the run's tool calls are denied, and the
// denial says why: the starter may not approve. It used to say the
// starter's connection "has closed", while the page was still connected.
func TestAPageThatMayNotApproveHearsWhyItsRunsQuestionsWereDenied(t *testing.T) {
	bin := findChromium(t)
	pg := newPage(t)
	d := daemontest.Start(t, daemontest.Options{
		Config: fmt.Sprintf("login_shell_path = false\nallowed_origins = [%q]\n\n[origins.%q]\ngrants = [\"read\", \"agents\", \"write\"]\n",
			pg.origin(), pg.origin()),
		Agents: map[string]string{"claude-code": daemontest.AskingClaude(t)},
		Logger: zap.NewNop(),
	})
	cwd, outside := t.TempDir(), t.TempDir()
	answers := runCalls(t, bin, d, pg, []map[string]any{{"jsonrpc": "2.0", "id": 1, "method": "agents.invoke", "params": map[string]any{
		"id": "claude-code", "cwd": cwd, "permission_mode": "ask", "task": shellTask(outside, "ask")}}})
	res, ok := answers[1]["result"].(map[string]any)
	require.True(t, ok, "%v", answers[1])
	rec, err := d.Client.Run(daemontest.Context(t), res["run_id"].(string))
	require.NoError(t, err)
	require.NotEmpty(t, rec.Approvals)
	for _, a := range rec.Approvals {
		assert.Equal(t, "deny", a.Decision)
		assert.Contains(t, a.Message, "may not approve tool calls (its grants lack the approve access class")
		assert.NotContains(t, a.Message, "has closed")
	}
	requireNoFiles(t, outside)
}

// rotationTmpl connects with the token it was given, confirms it with
// session.auth, has the test rotate the daemon's token (/rotate answers
// the new one), then tries the new token with session.auth on the same
// connection, and posts both answers and how the connection closed.
var rotationTmpl = template.Must(template.New("rotation").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>running</title></head><body>
<script>
const url = {{.URL}}, token = {{.Token}};
const answers = [];
const ws = new WebSocket(url, ["card.v1", "card.bearer." + token]);
const pending = new Map();
ws.onmessage = (ev) => { const m = JSON.parse(String(ev.data)); if (pending.has(m.id)) { pending.get(m.id)(m); pending.delete(m.id); } };
function call(id, method, params) { return new Promise((res) => { pending.set(id, res); ws.send(JSON.stringify({jsonrpc: "2.0", id, method, params})); }); }
ws.onopen = async () => {
  answers.push(await call(1, "session.auth", {token}));
  const rotated = await (await fetch("/rotate", {method: "POST"})).text();
  answers.push(await call(2, "session.auth", {token: rotated}));
};
ws.onclose = async (ev) => {
  await fetch("/verdict", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({answers, code: ev.code})});
};
</script></body></html>`))

// In a real browser, a page kept connected across a `card token rotate`
// cannot use session.auth to test a candidate for the new token: even the
// right one is refused, since a connection confirms only the token it was
// opened with, and the connection is closed with 1008.
func TestAPageKeptOpenAcrossATokenRotationCannotTestTheNewToken(t *testing.T) {
	bin := findChromium(t)
	pg := newPage(t)
	d := daemontest.Start(t, daemontest.Options{
		Config: fmt.Sprintf("login_shell_path = false\nallowed_origins = [%q]\n", pg.origin()), Logger: zap.NewNop(), NoClient: true})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := rotationTmpl.Execute(w, map[string]any{"URL": d.URL, "Token": d.Token}); err != nil {
			t.Errorf("render: %v", err)
		}
	})
	mux.HandleFunc("/rotate", func(w http.ResponseWriter, r *http.Request) {
		tok, err := daemon.RotateToken(d.Home)
		if err != nil {
			t.Errorf("rotate: %v", err)
		}
		_, _ = w.Write([]byte(tok))
	})
	pg.serve(t, mux)
	raw := runChromium(t, bin, pg.origin()+"/", pg)
	t.Logf("verdict: %s", raw[0])
	var v struct {
		Answers []map[string]any `json:"answers"`
		Code    int              `json:"code"`
	}
	require.NoError(t, json.Unmarshal(raw[0], &v))
	require.Len(t, v.Answers, 2)
	assert.Contains(t, v.Answers[0], "result", "the page confirms the token it connected with")
	code, msg, _ := rpcError(t, v.Answers[1], "session.auth with the new token")
	assert.EqualValues(t, -32603, code, "THE PAGE CONFIRMED THE NEW TOKEN: %v", v.Answers[1])
	assert.True(t, strings.HasPrefix(msg, "auth failed: token mismatch"), msg)
	assert.Equal(t, 1008, v.Code)
}
