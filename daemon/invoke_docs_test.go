package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/internal/testskip"
)

// TestCaptureRunsProtocolExamples prints real frames for docs/protocol.md:
//
//	CARD_DOCS_CAPTURE=1 go test -count=1 -run TestCaptureRunsProtocolExamples -v ./daemon/
func TestCaptureRunsProtocolExamples(t *testing.T) {
	if os.Getenv("CARD_DOCS_CAPTURE") != "1" {
		testskip.Skip(t, testskip.DocsCapture, "set CARD_DOCS_CAPTURE=1 to print wire examples for docs/protocol.md")
	}
	rd := startRunsDaemon(t, "", "CAR_INVOKED_BY=claude-code")
	ws := rd.Raw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := 0
	var out strings.Builder
	send := func(method string, params map[string]any, untilTerminal bool) map[string]any {
		id++
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		fmt.Fprintf(&out, "\n### %s\n\n```json\n%s\n```\n", method, req)
		require.NoError(t, ws.Write(ctx, websocket.MessageText, req))
		var answer map[string]any
		for {
			_, b, err := ws.Read(ctx)
			require.NoError(t, err)
			fmt.Fprintf(&out, "```json\n%s\n```\n", b)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			if m["id"] != nil && m["id"].(float64) == float64(id) {
				answer = m
				if !untilTerminal {
					return answer
				}
			}
			if p, ok := m["params"].(map[string]any); ok && (p["kind"] == "done" || p["kind"] == "error") && answer != nil {
				return answer
			}
		}
	}
	cwd := rd.cwd
	send("agents.invoke", map[string]any{"id": "gemini", "task": "say pong", "cwd": cwd, "invoked_by": "codex"}, false)
	acc := send("agents.invoke", map[string]any{"id": "gemini", "task": "say pong", "cwd": cwd, "stream": true}, true)
	runID := acc["result"].(map[string]any)["run_id"].(string)
	send("agents.invoke", map[string]any{"id": "claude-code", "task": "say pong", "cwd": cwd}, false)
	send("agents.invoke", map[string]any{"id": "codex", "task": "x", "cwd": cwd, "permission_mode": "bypass"}, false)
	send("agents.invoke", map[string]any{"id": "codex", "task": "x", "cwd": "relative"}, false)
	send("agents.cancel", map[string]any{"run_id": runID}, false)
	send("agents.cancel", map[string]any{"run_id": "run_unknown"}, false)
	send("runs.get", map[string]any{"run_id": runID}, false)
	send("runs.list", map[string]any{"limit": 2}, false)
	send("runs.subscribe", map[string]any{"run_id": runID, "after_seq": 2}, true)
	t.Log(out.String())
}
