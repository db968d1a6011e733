package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
)

// The page connects the way a browser must (the token as a subprotocol,
// beside card.v1), sends each request in turn, and posts back every answer.
var callsTmpl = template.Must(template.New("calls").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>running</title></head><body><pre id="results"></pre>
<script>
const url = {{.URL}}, protocols = {{.Protocols}}, calls = {{.Calls}};
const answers = [];
const ws = new WebSocket(url, protocols);
let next = 0;
function send() {
  if (next >= calls.length) { ws.close(1000); return; }
  ws.send(calls[next++]);
}
ws.onopen = send;
ws.onmessage = (ev) => { answers.push(String(ev.data)); send(); };
ws.onclose = async (ev) => {
  document.getElementById("results").textContent = JSON.stringify(answers, null, 1);
  document.title = "DONE";
  await fetch("/verdict", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify([{name: "calls", opened: true, closed: true, code: ev.code, answer: JSON.stringify(answers)}])});
};
</script></body></html>`))

// A page on an origin the operator allowed is what the token and the
// Origin rule let through; what it may call is then the connection's
// grants: read and agents, never the host. In a real browser, the page
// reads the daemon and is refused a shell, a file and a terminal with
// access_denied, and nothing it asked for runs.
func TestAPageOnAnAllowedOriginCannotReachTheHost(t *testing.T) {
	bin := findChromium(t)
	allowed := newPage(t)
	d := daemontest.Start(t, daemontest.Options{
		Config:   fmt.Sprintf("allowed_origins = [%q]\n", allowed.origin()),
		Logger:   zap.NewNop(),
		NoClient: true,
	})
	marker := filepath.Join(t.TempDir(), "ran")
	calls := []string{
		`{"jsonrpc":"2.0","id":1,"method":"daemon.info"}`,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"substrate.run_command","params":{"command":%q}}`, "touch "+marker),
		`{"jsonrpc":"2.0","id":3,"method":"substrate.read_text","params":{"path":"/etc/passwd"}}`,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"substrate.write_text","params":{"path":%q,"content":"x"}}`, marker),
		fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"substrate.pty_start","params":{"command":%q}}`, "touch "+marker),
		`{"jsonrpc":"2.0","id":6,"method":"runs.prune","params":{"max_runs":1}}`,
		`{"jsonrpc":"2.0","id":7,"method":"runs.list"}`,
	}
	allowed.render(t, callsTmpl, map[string]any{
		"URL": d.URL, "Protocols": []string{"card.v1", "card.bearer." + d.Token}, "Calls": calls,
	})

	raw := runChromium(t, bin, allowed.origin()+"/", allowed)
	var verdict []outcome
	require.NoError(t, json.Unmarshal(raw[0], &verdict), "the page posted an unreadable verdict %q", raw[0])
	require.Len(t, verdict, 1)
	var answers []string
	require.NoError(t, json.Unmarshal([]byte(verdict[0].Answer), &answers))
	t.Logf("answers: %s", strings.Join(answers, "\n"))
	require.Len(t, answers, len(calls), "the page got an answer to each call")
	byID := map[int]map[string]any{}
	for _, a := range answers {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(a), &m))
		byID[int(m["id"].(float64))] = m
	}
	assert.Contains(t, byID[1], "result", "the page reads the daemon")
	assert.Contains(t, byID[7], "result", "and its run history")
	for _, id := range []int{2, 3, 4, 5, 6} {
		e, ok := byID[id]["error"].(map[string]any)
		require.True(t, ok, "call %d: THE PAGE REACHED THE HOST: %v", id, byID[id])
		assert.EqualValues(t, daemon.CodeAccessDenied, e["code"], "call %d", id)
		data, _ := e["data"].(map[string]any)
		assert.Equal(t, "host", data["access"], "call %d", id)
		assert.Equal(t, allowed.origin(), data["origin"], "call %d", id)
	}
	_, err := os.Stat(marker)
	assert.True(t, os.IsNotExist(err), "a command the page asked for ran")
}

// The page of an agents attack: it sends its calls one at a time, each
// waiting for its own answer; answers every agents.approve it is sent with
// allow, and decides the same question with agents.approval_decide; after
// a call marked "then" it posts to that path of its own server and waits
// for the reply. With forge, it then sends JSON-RPC responses with every id
// the daemon could have given a question, and calls agents.approval_decide
// for the run it follows. It waits for that run's last event (or a few
// seconds with none to follow) and posts what it saw.
var agentsTmpl = template.Must(template.New("agents").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>running</title></head><body><pre id="results"></pre>
<script>
const url = {{.URL}}, protocols = {{.Protocols}}, calls = {{.Calls}}, forge = {{.Forge}}, follow = {{.Follow}};
const answers = [], asked = [];
const pending = new Map();
let ended = false, endedResolve;
const endedP = new Promise((r) => { endedResolve = r; });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const ws = new WebSocket(url, protocols);
let decideID = 900;
ws.onmessage = (ev) => {
  let m;
  try { m = JSON.parse(String(ev.data)); } catch (e) { return; }
  if (m.method === "agents.approve") {
    asked.push(m);
    ws.send(JSON.stringify({jsonrpc: "2.0", id: m.id, result: {decision: "allow"}}));
    ws.send(JSON.stringify({jsonrpc: "2.0", id: decideID++, method: "agents.approval_decide",
      params: {run_id: m.params.run_id, request_id: m.params.request_id, decision: "allow"}}));
    return;
  }
  if (m.method === "agents.event" && m.params && m.params.run_id === follow &&
      (m.params.kind === "done" || m.params.kind === "error")) { ended = true; endedResolve(); }
  if (m.id !== undefined && pending.has(m.id)) { const f = pending.get(m.id); pending.delete(m.id); f(m); }
};
function call(c) { return new Promise((res) => { pending.set(c.id, res); ws.send(JSON.stringify(c)); }); }
ws.onopen = async () => {
  for (const c of calls) {
    const then = c.then; delete c.then;
    answers.push(await call(c));
    if (then) { await fetch(then, {method: "POST"}); }
  }
  if (forge) {
    for (let i = 1; i <= 8; i++) {
      ws.send(JSON.stringify({jsonrpc: "2.0", id: "card-" + i, result: {decision: "allow"}}));
    }
    answers.push(await call({jsonrpc: "2.0", id: 99, method: "agents.approval_decide",
      params: {run_id: follow, request_id: "apr_1", decision: "allow"}}));
  }
  if (follow) { await Promise.race([endedP, sleep(30000)]); } else { await sleep(1500); }
  ws.close(1000);
};
ws.onclose = async () => {
  const verdict = {answers: answers, asked: asked.length, ended: ended};
  document.getElementById("results").textContent = JSON.stringify(verdict, null, 1);
  document.title = "DONE";
  await fetch("/verdict", {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(verdict)});
};
</script></body></html>`))

// agentsVerdict is what agentsTmpl's page posts.
type agentsVerdict struct {
	Answers []map[string]any `json:"answers"`
	Asked   int              `json:"asked"`
	Ended   bool             `json:"ended"`
}

func (v agentsVerdict) byID(t *testing.T) map[int]map[string]any {
	t.Helper()
	out := map[int]map[string]any{}
	for _, a := range v.Answers {
		id, ok := a["id"].(float64)
		require.True(t, ok, "an answer without a numeric id: %v", a)
		out[int(id)] = a
	}
	return out
}

// shellTask is a task for the asking fake Claude: a Bash command and a
// Write, each making a file in dir.
func shellTask(dir, tag string) string {
	return fmt.Sprintf("TOOL Bash {\"command\":\"touch %s\"}\nTOOL Write {\"file_path\":%q,\"content\":\"x\"}",
		filepath.Join(dir, tag+"-bash"), filepath.Join(dir, tag+"-write"))
}

func requireNoFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "THE PAGE RAN A COMMAND OR WROTE A FILE THROUGH AN AGENT")
}

// agentsDaemon is a daemon whose Claude Code is the asking fake, with
// bypass allowed (so only the grants can refuse it) and the given origins:
// allowed with the default grants, and readOnly granted read alone.
func agentsDaemon(t *testing.T, allowed, readOnly string) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, daemontest.Options{
		Config: fmt.Sprintf("login_shell_path = false\nallow_bypass = true\nallowed_origins = [%q, %q]\n\n[origins.%q]\ngrants = [\"read\"]\n",
			allowed, readOnly, readOnly),
		Agents: map[string]string{"claude-code": daemontest.AskingClaude(t)},
		Logger: zap.NewNop(),
	})
}

// waitingAsker answers no question: it holds each until the daemon
// withdraws it or the connection ends.
func waitingAsker(asked chan<- api.ApproveParams) client.Options {
	return client.Options{OnApprove: func(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
		select {
		case asked <- q:
		default:
		}
		<-ctx.Done()
		return api.ApproveAnswer{}, ctx.Err()
	}}
}

// In a real browser, a page on an allowed origin with the default grants
// (read, agents) cannot get a shell through an agent: an ask run (which it
// would then approve itself), an edit run, a bypass run (with allow_bypass
// on) and the CAR name of the same are refused with access_denied naming
// the mode's class, answering a question is refused as approve, and the
// page is never asked; a read-only run still works. No file appears.
func TestAPageWithTheDefaultGrantsGetsNoShellThroughAnAgent(t *testing.T) {
	bin := findChromium(t)
	allowed, other := newPage(t), newPage(t)
	d := agentsDaemon(t, allowed.origin(), other.origin())
	ctx := daemontest.Context(t)
	cwd, outside := t.TempDir(), t.TempDir()

	// A native client's ask run, waiting on its question: what the page
	// tries to answer.
	asked := make(chan api.ApproveParams, 1)
	native := d.Dial(t, waitingAsker(asked))
	acc, err := native.Stream(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd, PermissionMode: "ask"}, Task: shellTask(outside, "native")}, nil)
	require.NoError(t, err)
	q := <-asked

	invoke := func(id int, method, mode, tag string) map[string]any {
		p := map[string]any{"id": "claude-code", "task": shellTask(outside, tag), "cwd": cwd}
		if mode != "" {
			p["permission_mode"] = mode
		}
		return map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": p}
	}
	calls := []map[string]any{
		{"jsonrpc": "2.0", "id": 1, "method": "daemon.info"},
		invoke(2, "agents.invoke", "ask", "ask"),
		invoke(3, "agents.invoke", "edit", "edit"),
		invoke(4, "agents.invoke", "bypass", "bypass"),
		invoke(5, "agents.invoke_external", "ask", "car-ask"),
		{"jsonrpc": "2.0", "id": 6, "method": "agents.approval_decide", "params": map[string]any{"run_id": acc.RunID, "request_id": q.RequestID, "decision": "allow"}},
		invoke(7, "agents.invoke", "", "read-only"),
	}
	allowed.render(t, agentsTmpl, map[string]any{
		"URL": d.URL, "Protocols": []string{"card.v1", "card.bearer." + d.Token}, "Calls": calls, "Forge": false, "Follow": "",
	})
	raw := runChromium(t, bin, allowed.origin()+"/", allowed)
	var v agentsVerdict
	require.NoError(t, json.Unmarshal(raw[0], &v), "an unreadable verdict %q", raw[0])
	t.Logf("verdict: %s", raw[0])
	byID := v.byID(t)
	assert.Contains(t, byID[1], "result", "the page reads the daemon")
	for id, want := range map[int][2]string{2: {"write", "ask"}, 3: {"write", "edit"}, 4: {"host", "bypass"}, 5: {"write", "ask"}, 6: {"approve", ""}} {
		e, ok := byID[id]["error"].(map[string]any)
		if !ok {
			t.Errorf("call %d: THE PAGE WAS LET THROUGH: %v", id, byID[id])
			continue
		}
		assert.EqualValues(t, daemon.CodeAccessDenied, e["code"], "call %d", id)
		data, _ := e["data"].(map[string]any)
		assert.Equal(t, want[0], data["access"], "call %d", id)
		assert.Equal(t, allowed.origin(), data["origin"], "call %d", id)
		if want[1] != "" {
			assert.Equal(t, want[1], data["permission_mode"], "call %d", id)
			assert.Contains(t, e["message"], fmt.Sprintf("with permission_mode %q", want[1]), "call %d", id)
		}
	}
	res, ok := byID[7]["result"].(map[string]any)
	require.True(t, ok, "the page runs read-only agents: %v", byID[7])
	assert.Contains(t, res["answer"], "Permission to use Bash has been denied")
	assert.Zero(t, v.Asked, "the page was asked a question")
	requireNoFiles(t, outside)
	rec, err := native.Run(ctx, acc.RunID)
	require.NoError(t, err)
	require.NotEmpty(t, rec.Approvals)
	assert.Empty(t, rec.Approvals[0].Decision, "the page's answer decided the native run's question")
	_, err = native.Cancel(ctx, acc.RunID)
	require.NoError(t, err)
}

// In a real browser, a page whose origin is granted only read follows an
// ask-mode run (runs.subscribe is read); once the native client that
// started it disconnects, the page is not asked the run's question, its
// forged JSON-RPC responses and its agents.approval_decide decide nothing,
// and the question is denied at its timeout: the command never runs.
func TestAReadOnlyPageFollowingARunIsNeverAskedAndCannotAnswer(t *testing.T) {
	bin := findChromium(t)
	other, reader := newPage(t), newPage(t)
	d := agentsDaemon(t, other.origin(), reader.origin())
	ctx := daemontest.Context(t)
	cwd, outside := t.TempDir(), t.TempDir()

	asked := make(chan api.ApproveParams, 1)
	starter := d.Dial(t, waitingAsker(asked))
	acc, err := starter.Stream(ctx, api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: cwd, PermissionMode: "ask", ApprovalTimeoutSecs: 5},
		Task:          shellTask(outside, "follow"),
	}, nil)
	require.NoError(t, err)
	<-asked

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		err := agentsTmpl.Execute(w, map[string]any{
			"URL": d.URL, "Protocols": []string{"card.v1", "card.bearer." + d.Token}, "Forge": true, "Follow": acc.RunID,
			"Calls": []map[string]any{{"jsonrpc": "2.0", "id": 1, "method": "runs.subscribe", "params": map[string]any{"run_id": acc.RunID}, "then": "/subscribed"}},
		})
		if err != nil {
			t.Errorf("render: %v", err)
		}
	})
	// The page is subscribed: the starter leaves, so the question would
	// go on to the run's followers.
	mux.HandleFunc("/subscribed", func(w http.ResponseWriter, r *http.Request) {
		_ = starter.Close()
		time.Sleep(300 * time.Millisecond)
	})
	reader.serve(t, mux)

	raw := runChromium(t, bin, reader.origin()+"/", reader)
	var v agentsVerdict
	require.NoError(t, json.Unmarshal(raw[0], &v), "an unreadable verdict %q", raw[0])
	t.Logf("verdict: %s", raw[0])
	byID := v.byID(t)
	assert.Contains(t, byID[1], "result", "the page follows the run")
	e, ok := byID[99]["error"].(map[string]any)
	require.True(t, ok, "agents.approval_decide from a read-only page: %v", byID[99])
	assert.EqualValues(t, daemon.CodeAccessDenied, e["code"])
	assert.Equal(t, "approve", e["data"].(map[string]any)["access"])
	assert.Zero(t, v.Asked, "A READ-ONLY PAGE WAS ASKED THE RUN'S QUESTION")
	assert.True(t, v.Ended, "the page saw the run end")

	rec, err := d.Client.Run(ctx, acc.RunID)
	require.NoError(t, err)
	require.NotEmpty(t, rec.Approvals)
	assert.Equal(t, "deny", rec.Approvals[0].Decision, "%+v", rec.Approvals[0])
	assert.Equal(t, "timeout", rec.Approvals[0].By, "%+v", rec.Approvals[0])
	requireNoFiles(t, outside)
}
