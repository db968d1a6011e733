package carclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/daemontest"
)

// What follows is a CAR host's client: JSON-RPC 2.0 over one WebSocket,
// agents.chat.event notifications routed by session_id. Its types are
// CAR's, as its documents give them.

// carError is a JSON-RPC error object.
type carError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

func (e *carError) Error() string { return fmt.Sprintf("%d %s", e.Code, e.Message) }

// externalAgentSpec is CAR's ExternalAgentSpec.
type externalAgentSpec struct {
	ID           string          `json:"id"`
	DisplayName  string          `json:"display_name"`
	BinaryPath   string          `json:"binary_path"`
	Version      *string         `json:"version"`
	AuthKind     string          `json:"auth_kind"`
	Capabilities json.RawMessage `json:"capabilities"`
	DetectedAt   json.RawMessage `json:"detected_at"`
	Health       *externalHealth `json:"health"`
	Execution    *struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	} `json:"execution"`
}

// externalHealth is CAR's ExternalAgentHealth.
type externalHealth struct {
	ID        string          `json:"id"`
	Status    string          `json:"status"`
	Details   json.RawMessage `json:"details"`
	Reason    string          `json:"reason"`
	CheckedAt json.RawMessage `json:"checked_at"`
}

// invokeResult is CAR's InvokeResult.
type invokeResult struct {
	Answer             string          `json:"answer"`
	SessionID          *string         `json:"session_id"`
	Turns              int             `json:"turns"`
	ToolCalls          int             `json:"tool_calls"`
	DurationMs         int64           `json:"duration_ms"`
	TotalCostUSD       *float64        `json:"total_cost_usd"`
	DroppedAttachments json.RawMessage `json:"dropped_attachments"`
	IsError            bool            `json:"is_error"`
	Error              json.RawMessage `json:"error"`
}

// accepted is a streamed invoke's ack.
type accepted struct {
	Accepted  bool   `json:"accepted"`
	SessionID string `json:"session_id"`
}

// chatEvent is an agents.chat.event's params.
type chatEvent struct {
	SessionID          string          `json:"session_id"`
	AgentID            string          `json:"agent_id"`
	Kind               string          `json:"kind"`
	Delta              *string         `json:"delta"`
	Tool               string          `json:"tool"`
	Params             json.RawMessage `json:"params"`
	Detail             string          `json:"detail"`
	FinishReason       *string         `json:"finish_reason"`
	Text               *string         `json:"text"`
	DroppedAttachments json.RawMessage `json:"dropped_attachments"`
	Error              *string         `json:"error"`
}

func (e chatEvent) terminal() bool { return e.Kind == "done" || e.Kind == "error" }

// host is one connection of a CAR host.
type host struct {
	t  *testing.T
	ws *websocket.Conn

	mu      sync.Mutex
	id      int
	waiting map[int]chan frame
	events  map[string][]chatEvent // by session_id
	other   []string               // notifications of other methods
	changed chan struct{}
	closed  error
	done    chan struct{}
}

type frame struct {
	Result json.RawMessage `json:"result"`
	Error  *carError       `json:"error"`
}

// connect opens a connection as CAR's documents say (a URL, then
// session.auth and server.handshake), with the one change a host makes for
// card: the token on the upgrade, in the Authorization header.
func connect(t *testing.T, url, token string) *host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	require.NoError(t, err)
	ws.SetReadLimit(16 << 20)
	h := &host{t: t, ws: ws, waiting: map[int]chan frame{}, events: map[string][]chatEvent{}, changed: make(chan struct{}), done: make(chan struct{})}
	go h.read()
	t.Cleanup(func() { ws.CloseNow(); <-h.done })
	return h
}

func (h *host) read() {
	defer close(h.done)
	for {
		_, b, err := h.ws.Read(context.Background())
		if err != nil {
			h.mu.Lock()
			h.closed = err
			h.signal()
			for _, c := range h.waiting {
				close(c)
			}
			h.waiting = map[int]chan frame{}
			h.mu.Unlock()
			return
		}
		var msg struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			frame
		}
		if json.Unmarshal(b, &msg) != nil {
			continue
		}
		h.mu.Lock()
		switch {
		case msg.Method == "agents.chat.event":
			var ev chatEvent
			if json.Unmarshal(msg.Params, &ev) == nil {
				h.events[ev.SessionID] = append(h.events[ev.SessionID], ev)
			}
			h.signal()
		case msg.Method != "":
			h.other = append(h.other, msg.Method)
		case msg.ID != nil:
			if c, ok := h.waiting[*msg.ID]; ok {
				c <- msg.frame
				delete(h.waiting, *msg.ID)
			}
		}
		h.mu.Unlock()
	}
}

func (h *host) signal() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// call sends a request and waits for its answer; a closed connection is a
// *carError with code 0.
func (h *host) call(method string, params any) (json.RawMessage, *carError) {
	h.t.Helper()
	h.mu.Lock()
	h.id++
	id := h.id
	c := make(chan frame, 1)
	h.waiting[id] = c
	h.mu.Unlock()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	require.NoError(h.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, &carError{Message: "write: " + err.Error()}
	}
	select {
	case f, ok := <-c:
		if !ok {
			return nil, &carError{Message: "connection closed"}
		}
		return f.Result, f.Error
	case <-ctx.Done():
		h.t.Fatalf("%s: no answer in a minute", method)
		return nil, nil
	}
}

// ok calls and decodes a successful answer.
func (h *host) ok(method string, params, out any) {
	h.t.Helper()
	res, rerr := h.call(method, params)
	require.Nil(h.t, rerr, "%s: %v", method, rerr)
	require.NoError(h.t, json.Unmarshal(res, out), "%s: %s", method, res)
}

// until waits for session's terminal event and returns all its events.
func (h *host) until(session string) []chatEvent {
	h.t.Helper()
	deadline := time.After(time.Minute)
	for {
		h.mu.Lock()
		evs := append([]chatEvent(nil), h.events[session]...)
		changed, closed := h.changed, h.closed
		h.mu.Unlock()
		if n := len(evs); n > 0 && evs[n-1].terminal() {
			return evs
		}
		if closed != nil {
			h.t.Fatalf("connection closed before session %s ended: %v (events %+v)", session, closed, evs)
		}
		select {
		case <-changed:
		case <-deadline:
			h.t.Fatalf("session %s did not end in a minute (events %+v)", session, evs)
		}
	}
}

// closedWith waits for the daemon to close the connection and returns the
// close status.
func (h *host) closedWith() websocket.StatusCode {
	h.t.Helper()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Fatal("the connection is still open")
	}
	return websocket.CloseStatus(h.closed)
}

// card is the daemon under test, with fake Claude Code, Codex and Gemini
// CLIs that replay real captured streams.
type card struct {
	*daemontest.Daemon
	agents map[string]daemontest.Replay
	home   string // the daemon user's HOME
}

var replays = []struct{ id, bin, version, fixture string }{
	{"claude-code", "claude", "2.1.197 (Claude Code)", "spawn/testdata/claude-stream-partial-thinking-tool.jsonl"},
	{"codex", "codex", "codex-cli 0.171.0", "spawn/testdata/codex-exec-json-success.jsonl"},
	{"gemini", "gemini", "0.61.0", "spawn/testdata/gemini-stream-success.jsonl"},
}

func startCard(t *testing.T, toml string) *card {
	t.Helper()
	c := &card{agents: map[string]daemontest.Replay{}, home: t.TempDir()}
	pins := map[string]string{}
	for _, r := range replays {
		c.agents[r.id] = daemontest.ReplayAgent(t, r.bin, r.version, daemontest.RepoFile(t, r.fixture))
		pins[r.id] = c.agents[r.id].Path
	}
	c.Daemon = daemontest.Start(t, daemontest.Options{
		Config:   "login_shell_path = false\n" + toml,
		Agents:   pins,
		Environ:  []string{"HOME=" + c.home},
		NoClient: true,
	})
	return c
}

// host connects and does what a CAR host does first.
func (c *card) host(t *testing.T) *host {
	t.Helper()
	h := connect(t, c.URL, c.Token)
	var auth struct {
		OK          bool `json:"ok"`
		AuthEnabled bool `json:"auth_enabled"`
	}
	h.ok("session.auth", map[string]any{"token": c.Token}, &auth)
	require.True(t, auth.OK)
	var hs map[string]any
	h.ok("server.handshake", map[string]any{"protocol_version": 2, "client_version": "0.48.0"}, &hs)
	return h
}

// isNumber reports whether raw is a JSON number, and its value.
func isNumber(raw json.RawMessage) (float64, bool) {
	var n float64
	if len(raw) == 0 || json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	return n, true
}

// pngFile writes a 1×1 PNG.
func pngFile(t *testing.T, dir, name string) string {
	t.Helper()
	png := []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0x0d, 'I', 'H', 'D', 'R', 0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0x1f, 0x15, 0xc4, 0x89,
		0, 0, 0, 0x0d, 'I', 'D', 'A', 'T', 0x78, 0x9c, 0x63, 0, 1, 0, 0, 5, 0, 1, 0x0d, 0x0a, 0x2d, 0xb4, 0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82}
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, png, 0o600))
	return p
}
