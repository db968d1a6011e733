package attack

import (
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

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
