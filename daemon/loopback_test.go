package daemon_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
)

// The ACP front door's own connection to /rpc gets its session's events
// in process: an ACP turn is answered with every update while none of the
// events crossed the loopback socket. A client that sends the loopback
// header without the daemon's secret is served over its socket as any.
func TestTheACPFrontDoorGetsItsSessionsEventsInProcessAndNoOtherClientDoes(t *testing.T) {
	bin, _, _ := chattyAgent(t)
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: bin},
		Logger: zap.NewNop(),
	})
	cwd := t.TempDir()
	ctx := daemontest.Context(t)

	before := daemon.LoopbackDeliveries(d.Daemon)
	turn := acpTurns(t, d, cwd)
	runID, err := turn(ctx, "please "+shortTask)
	require.NoError(t, err)
	require.NotEmpty(t, runID, "the turn's last update names its run")
	evs, err := d.Client.Run(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", string(evs.Status))
	// One delivery per event of the turn, and the session_configured
	// and queued events a session may add.
	assert.GreaterOrEqual(t, daemon.LoopbackDeliveries(d.Daemon)-before, int64(3), "the turn's events came in process")

	// A raw /rpc client claiming to be a loopback with a guessed secret.
	ws, _, err := websocket.Dial(ctx, d.URL, &websocket.DialOptions{HTTPHeader: http.Header{
		"Authorization": {"Bearer " + d.Token}, "Card-Loopback": {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	ws.SetReadLimit(16 << 20)
	res, err := call(ctx, ws, 1, "sessions.start", map[string]any{"id": agent.ClaudeCode, "cwd": cwd})
	require.NoError(t, err)
	var started struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(t, json.Unmarshal(res, &started))
	_, err = call(ctx, ws, 2, "sessions.subscribe", map[string]any{"session_id": started.SessionID, "after_seq": 0})
	require.NoError(t, err)
	mark := daemon.LoopbackDeliveries(d.Daemon)
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "sessions.prompt",
		"params": map[string]any{"session_id": started.SessionID, "task": "please " + shortTask}})
	require.NoError(t, ws.Write(ctx, websocket.MessageText, req))
	answered, ended := false, false
	for !answered || !ended {
		_, frame, err := ws.Read(ctx)
		require.NoError(t, err, "the guessing client's events come over its socket")
		switch {
		case bytes.Contains(frame, []byte(`"method":"sessions.event"`)):
			ended = ended || bytes.Contains(frame, []byte(`"kind":"done"`))
		case bytes.Contains(frame, []byte(`"id":3`)):
			require.NotContains(t, string(frame), `"error"`)
			answered = true
		}
	}
	assert.Equal(t, mark, daemon.LoopbackDeliveries(d.Daemon), "nothing of that client's went in process")
}
