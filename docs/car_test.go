package docs

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// captureCAR records what a CAR host sees: session.auth (the token shown as
// a placeholder) and server.handshake, a non-streamed agents.invoke_external
// with CAR-shaped attachments of which two are skipped, a streamed one with
// its agents.chat.event notifications, agents.chat.cancel, and a wrong
// token refused on a connection of its own.
func captureCAR(c *capturer, home, url, token string) {
	dot := filepath.Join(home, "dot.png")
	require.NoError(c.t, os.WriteFile(dot, []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0x0d, 'I', 'H', 'D', 'R',
		0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89, 0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82}, 0o600))
	notes := filepath.Join(home, "notes.txt")
	require.NoError(c.t, os.WriteFile(notes, []byte("hello\n"), 0o600))

	start := c.buf.Len()
	c.call("session.auth", `{"token":"`+token+`"}`)
	c.call("server.handshake", `{"protocol_version":2,"client_version":"0.48.0"}`)
	c.call("agents.invoke_external", `{"id":"claude-code","task":"Describe the image.","cwd":"`+home+`","session_id":"chat-abc123",`+
		`"attachments":[{"path":"`+dot+`","media_type":"image/png"},{"path":"`+notes+`","media_type":"image/png"},{"path":"`+home+`/missing.png"}]}`)
	c.chatEnded = false
	c.call("agents.invoke_external", `{"id":"claude-code","task":"TOOL: read the README.","cwd":"`+home+`","session_id":"chat-abc123","stream":true}`)
	c.drainChat()
	c.call("agents.invoke_external", `{"id":"claude-code","task":"SLOW: think for a long time.","cwd":"`+home+`","session_id":"chat-slow","stream":true}`)
	time.Sleep(300 * time.Millisecond)
	c.call("agents.chat.cancel", `{"session_id":"chat-slow"}`)
	c.drainChat()
	// The token is this daemon's secret: the example shows where it goes.
	redacted := strings.ReplaceAll(c.buf.String()[start:], token, "<the contents of <home>/token>")
	c.buf.Truncate(start)
	c.buf.WriteString(redacted)

	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	require.NoError(c.t, err)
	defer ws.CloseNow()
	saved, id := c.ws, c.id
	c.ws, c.id = ws, 0
	c.call("session.auth", `{"token":"not-the-daemons-token"}`)
	c.ws, c.id = saved, id
}

// drainChat reads notifications until a terminal agents.chat.event, which
// may have come already, before the answer of the call that ended the run.
func (c *capturer) drainChat() {
	for !c.chatEnded {
		c.read()
	}
	c.chatEnded = false
}

// noteChat marks a terminal agents.chat.event read.
func (c *capturer) noteChat(msg []byte) {
	var note struct {
		Method string `json:"method"`
		Params struct {
			Kind string `json:"kind"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &note) == nil && note.Method == "agents.chat.event" && (note.Params.Kind == "done" || note.Params.Kind == "error") {
		c.chatEnded = true
	}
}
