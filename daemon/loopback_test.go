package daemon_test

import (
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
	bin, _, _, _ := chattyAgent(t)
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
	turnOver := sessionTurnsOn(t, ws, cwd)
	mark := daemon.LoopbackDeliveries(d.Daemon)
	_, err = turnOver(ctx, "please "+shortTask)
	require.NoError(t, err, "the guessing client's events come over its socket")
	assert.Equal(t, mark, daemon.LoopbackDeliveries(d.Daemon), "nothing of that client's went in process")
}
