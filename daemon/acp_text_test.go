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
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

// distinctAnswerAgent writes a Claude Code stand-in that answers any task
// with pieces distinct text deltas (pad + about 45 bytes each) and returns
// it with the answer they make.
func distinctAnswerAgent(t *testing.T, pieces, pad int) (bin, answer string) {
	t.Helper()
	raw, err := os.ReadFile(daemontest.RepoFile(t, "spawn/testdata/claude-stream-partial.jsonl"))
	require.NoError(t, err)
	var stream bytes.Buffer
	var want strings.Builder
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		switch {
		case strings.Contains(line, `"subtype":"status"`):
		case strings.Contains(line, `"text_delta"`):
			for i := range pieces {
				piece := fmt.Sprintf("<%d:%s>", i, strings.Repeat(string(rune('a'+i%26)), pad+i%80))
				want.WriteString(piece)
				stream.WriteString(strings.Replace(line, `"text":"PONG from fake anthropic"`, `"text":"`+piece+`"`, 1))
			}
		default:
			stream.WriteString(line)
		}
	}
	file := filepath.Join(t.TempDir(), "long.jsonl")
	require.NoError(t, os.WriteFile(file, stream.Bytes(), 0o644))
	bin = daemontest.Script(t, "claude", fmt.Sprintf(`case "$1" in
--version) echo "2.1.197 (Claude Code)"; exit 0;;
auth|login) exit 1;;
esac
cat >/dev/null
exec cat %q`, file))
	return bin, want.String()
}

// acpSession opens an ACP session on ws (initialize, session/new in cwd)
// and returns its id.
func acpSession(t *testing.T, ws *websocket.Conn, cwd string) string {
	t.Helper()
	ctx := daemontest.Context(t)
	ws.SetReadLimit(16 << 20)
	_, err := call(ctx, ws, 1, "initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}})
	require.NoError(t, err)
	res, err := call(ctx, ws, 2, "session/new", map[string]any{"cwd": cwd, "mcpServers": []any{},
		"_meta": map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode, "permissionMode": "read_only"}}})
	require.NoError(t, err)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(t, json.Unmarshal(res, &created))
	return created.SessionID
}

// sendPrompt sends session/prompt (request id 3) without reading.
func sendPrompt(t *testing.T, ws *websocket.Conn, sessionID string) {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
		"params": map[string]any{"sessionId": sessionID, "prompt": []any{map[string]any{"type": "text", "text": "talk"}}}})
	require.NoError(t, ws.Write(daemontest.Context(t), websocket.MessageText, req))
}

// readTurn reads ws up to the prompt's answer, which must be end_turn,
// and returns the agent_message_chunk texts joined and how many there were.
func readTurn(t *testing.T, ws *websocket.Conn) (string, int) {
	t.Helper()
	ctx := daemontest.Context(t)
	var text strings.Builder
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
			require.Equal(t, "end_turn", m.Result.StopReason, "%.300s", frame)
			return text.String(), chunks
		}
		if m.Params.Update.Kind == "agent_message_chunk" {
			chunks++
			text.WriteString(m.Params.Update.Content.Text)
		}
	}
}

// A long answer of distinct pieces reaches an ACP editor whole and in
// order, and an /rpc client following the same session reads the same
// text: the buffers an event passes through on its way (the session's
// envelope, the text waiting for the front door's writer, the frame) are
// reused from event to event, and none may hand one event's bytes to
// another.
func TestALongAnswerReachesAnACPEditorAndAnRPCFollowerWholeAndInOrder(t *testing.T) {
	bin, want := distinctAnswerAgent(t, 6000, 0) // about 300 KB
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: bin},
		Logger: zap.NewNop(),
	})
	ctx := daemontest.Context(t)
	ws, _, err := websocket.Dial(ctx, strings.Replace(d.URL, "/rpc", "/acp", 1),
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	id := acpSession(t, ws, t.TempDir())

	// An /rpc client follows the same session, reading each event's text.
	var followed strings.Builder
	got := make(chan struct{})
	_, err = d.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: id}, func(ev api.SessionEvent) {
		if ev.Event.Kind == api.EventText {
			followed.WriteString(ev.Event.Text)
		}
		if ev.Event.Status != "" {
			close(got)
		}
	})
	require.NoError(t, err)

	sendPrompt(t, ws, id)
	editor, chunks := readTurn(t, ws)
	require.Greater(t, chunks, 3, "the answer came in several chunks")
	assert.True(t, editor == want, "the editor's text is the answer (%d bytes read, %d written)", len(editor), len(want))
	<-got
	assert.True(t, followed.String() == want, "the /rpc follower's text is the answer (%d bytes read, %d written)", followed.Len(), len(want))
}

// An ACP editor that stops reading through a long turn holds the front
// door's queue at its bound, the daemon's sending to the front door waits
// behind it and is cut off past max_subscriber_queue_bytes, and the front
// door takes the session up again from the history: once the editor reads,
// it gets the whole answer, once, in order.
func TestAnACPEditorThatStopsReadingThroughALongTurnStillGetsTheWholeAnswerInOrder(t *testing.T) {
	bin, want := distinctAnswerAgent(t, 30000, 400) // about 13 MB, past the front door's 4 MiB
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\nmax_subscriber_queue_bytes = 65536\n",
		Agents: map[string]string{agent.ClaudeCode: bin},
		Logger: zap.NewNop(),
	})
	ctx := daemontest.Context(t)
	// An editor whose socket buffers little, so the front door's writes
	// wait as soon as it stops reading.
	ws := dialURLWithTinyReceiveBuffer(t, d, strings.Replace(d.URL, "/rpc", "/acp", 1))
	id := acpSession(t, ws, t.TempDir())

	sendPrompt(t, ws, id)
	// The editor reads nothing until the turn's run has ended, or for
	// five seconds: a write the editor holds up for the daemon's write
	// timeout (rpc.DefaultWriteTimeout, 10 s) ends the connection, as it
	// must for a client that stopped reading for good, and on a loaded
	// machine the 13 MB turn can outlast that. Five seconds of not reading
	// is far past the 4 MiB the front door holds for a slow editor.
	paused := time.Now()
	require.Eventually(t, func() bool {
		s, err := d.Client.Session(ctx, id)
		return err == nil && s.Turns == 1 && (s.State == api.SessionIdle || time.Since(paused) > 5*time.Second)
	}, 60*time.Second, 20*time.Millisecond)
	editor, chunks := readTurn(t, ws)
	require.Greater(t, chunks, 300)
	assert.True(t, editor == want, "the editor's text is the answer (%d bytes read, %d written)", len(editor), len(want))
}
