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

// The ACP front door calls card's methods in process: an ACP turn is
// answered with every update while the daemon's /rpc endpoint has only the
// test's own connection open, and a client that sends the header the
// front door's own connection once carried is served as any other.
func TestTheACPFrontDoorCallsTheDaemonInProcess(t *testing.T) {
	bin, _, _, _ := chattyAgent(t)
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: bin},
		Logger: zap.NewNop(),
	})
	cwd := t.TempDir()
	ctx := daemontest.Context(t)

	turn := acpTurns(t, d, cwd)
	assert.Equal(t, 1, daemon.RPCConnections(d.Daemon), "the front door holds no connection to /rpc")
	runID, err := turn(ctx, "please "+shortTask)
	require.NoError(t, err)
	require.NotEmpty(t, runID, "the turn's last update names its run")
	evs, err := d.Client.Run(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", string(evs.Status))

	ws, _, err := websocket.Dial(ctx, d.URL, &websocket.DialOptions{HTTPHeader: http.Header{
		"Authorization": {"Bearer " + d.Token}, "Card-Loopback": {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	ws.SetReadLimit(16 << 20)
	turnOver := sessionTurnsOn(t, ws, cwd)
	_, err = turnOver(ctx, "please "+shortTask)
	require.NoError(t, err, "that client's events come over its socket")
}
