package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

// A long answer of distinct pieces reaches an ACP editor whole and in
// order, and an /rpc client following the same session reads the same
// text: the buffers an event passes through on its way (the session's
// envelope, the text waiting for the front door's writer, the frame) are
// reused from event to event, and none may hand one event's bytes to
// another.
func TestALongAnswerReachesAnACPEditorAndAnRPCFollowerWholeAndInOrder(t *testing.T) {
	raw, err := os.ReadFile(daemontest.RepoFile(t, "spawn/testdata/claude-stream-partial.jsonl"))
	require.NoError(t, err)
	var stream bytes.Buffer
	var want strings.Builder
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		switch {
		case strings.Contains(line, `"subtype":"status"`):
		case strings.Contains(line, `"text_delta"`):
			// About 300 KB of text in 6,000 distinct deltas: many events,
			// each merged from many lines.
			for i := range 6000 {
				piece := fmt.Sprintf("<%d:%s>", i, strings.Repeat(string(rune('a'+i%26)), i%80))
				want.WriteString(piece)
				stream.WriteString(strings.Replace(line, `"text":"PONG from fake anthropic"`, `"text":"`+piece+`"`, 1))
			}
		default:
			stream.WriteString(line)
		}
	}
	file := filepath.Join(t.TempDir(), "long.jsonl")
	require.NoError(t, os.WriteFile(file, stream.Bytes(), 0o644))
	bin := daemontest.Script(t, "claude", fmt.Sprintf(`case "$1" in
--version) echo "2.1.197 (Claude Code)"; exit 0;;
auth|login) exit 1;;
esac
cat >/dev/null
exec cat %q`, file))
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: bin},
		Logger: zap.NewNop(),
	})
	ctx := daemontest.Context(t)
	cwd := t.TempDir()

	ws, _, err := websocket.Dial(ctx, strings.Replace(d.URL, "/rpc", "/acp", 1),
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	ws.SetReadLimit(16 << 20)
	_, err = call(ctx, ws, 1, "initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	require.NoError(t, err)
	res, err := call(ctx, ws, 2, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{},
		"_meta": map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode, "permissionMode": "read_only"}}})
	require.NoError(t, err)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(t, json.Unmarshal(res, &created))

	// An /rpc client follows the same session, reading each event's text.
	var followed strings.Builder
	got := make(chan struct{})
	_, err = d.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: created.SessionID}, func(ev api.SessionEvent) {
		if ev.Event.Kind == api.EventText {
			followed.WriteString(ev.Event.Text)
		}
		if ev.Event.Status != "" {
			close(got)
		}
	})
	require.NoError(t, err)

	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
		"params": map[string]any{"sessionId": created.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "talk"}}}})
	require.NoError(t, ws.Write(ctx, websocket.MessageText, req))
	var editor strings.Builder
	chunks := 0
	for {
		_, frame, err := ws.Read(ctx)
		require.NoError(t, err)
		var m struct {
			ID     *int `json:"id"`
			Params struct {
				Update struct {
					Kind    string `json:"sessionUpdate"`
					Content struct {
						Text string `json:"text"`
					} `json:"content"`
				} `json:"update"`
			} `json:"params"`
			Result struct {
				StopReason string `json:"stopReason"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal(frame, &m))
		if m.ID != nil {
			require.Equal(t, "end_turn", m.Result.StopReason, "%s", frame)
			break
		}
		if m.Params.Update.Kind == "agent_message_chunk" {
			chunks++
			editor.WriteString(m.Params.Update.Content.Text)
		}
	}
	require.Greater(t, chunks, 3, "the answer came in several chunks")
	assert.True(t, editor.String() == want.String(), "the editor's text is the answer (%d bytes read, %d written)", editor.Len(), want.Len())
	<-got
	assert.True(t, followed.String() == want.String(), "the /rpc follower's text is the answer (%d bytes read, %d written)", followed.Len(), want.Len())
}
