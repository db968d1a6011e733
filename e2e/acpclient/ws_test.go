package acpclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

// sdkClient is the editor side for coder's ACP Go SDK: it allows every
// question and keeps every update.
type sdkClient struct {
	mu      sync.Mutex
	updates []acpsdk.SessionNotification
	asked   []acpsdk.RequestPermissionRequest
}

func (c *sdkClient) RequestPermission(_ context.Context, p acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.asked = append(c.asked, p)
	c.mu.Unlock()
	for _, o := range p.Options {
		if o.Kind == acpsdk.PermissionOptionKindAllowOnce {
			return acpsdk.RequestPermissionResponse{Outcome: acpsdk.NewRequestPermissionOutcomeSelected(o.OptionId)}, nil
		}
	}
	return acpsdk.RequestPermissionResponse{}, errors.New("no allow_once option")
}

func (c *sdkClient) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	c.mu.Lock()
	c.updates = append(c.updates, n)
	c.mu.Unlock()
	return nil
}

func (c *sdkClient) ReadTextFile(context.Context, acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	return acpsdk.ReadTextFileResponse{}, errors.New("not served")
}
func (c *sdkClient) WriteTextFile(context.Context, acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	return acpsdk.WriteTextFileResponse{}, errors.New("not served")
}
func (c *sdkClient) CreateTerminal(context.Context, acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	return acpsdk.CreateTerminalResponse{}, errors.New("not served")
}
func (c *sdkClient) KillTerminal(context.Context, acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	return acpsdk.KillTerminalResponse{}, errors.New("not served")
}
func (c *sdkClient) TerminalOutput(context.Context, acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	return acpsdk.TerminalOutputResponse{}, errors.New("not served")
}
func (c *sdkClient) ReleaseTerminal(context.Context, acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	return acpsdk.ReleaseTerminalResponse{}, errors.New("not served")
}
func (c *sdkClient) WaitForTerminalExit(context.Context, acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	return acpsdk.WaitForTerminalExitResponse{}, errors.New("not served")
}

// framed adapts a WebSocket (one message per text frame) to the SDK's
// newline-delimited streams.
func framed(ctx context.Context, ws *websocket.Conn) (io.Writer, io.Reader) {
	pr, pw := io.Pipe()
	go func() {
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := pw.Write(append(b, '\n')); err != nil {
				return
			}
		}
	}()
	return &frameWriter{ctx: ctx, ws: ws}, pr
}

type frameWriter struct {
	ctx context.Context
	ws  *websocket.Conn
	mu  sync.Mutex
	buf []byte
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := append([]byte(nil), w.buf[:i]...)
		w.buf = w.buf[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := w.ws.Write(w.ctx, websocket.MessageText, line); err != nil {
			return 0, err
		}
	}
}

func acpURL(rpcURL string) string { return strings.TrimSuffix(rpcURL, "/rpc") + "/acp" }

// connectACP dials url as origin ("" for a native client) and initializes
// an SDK connection over it that serves cl.
func connectACP(t *testing.T, ctx context.Context, url, token, origin string, cl acpsdk.Client) (*acpsdk.ClientSideConnection, acpsdk.InitializeResponse) {
	t.Helper()
	ws, _, err := dialACP(t, url, token, origin)
	require.NoError(t, err)
	w, r := framed(ctx, ws)
	conn := acpsdk.NewClientSideConnection(cl, w, r)
	init, err := conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber})
	require.NoError(t, err)
	return conn, init
}

func dialACP(t *testing.T, url, token, origin string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ws, resp, err := websocket.Dial(daemontest.Context(t), url, &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		ws.SetReadLimit(16 << 20)
		t.Cleanup(func() { _ = ws.CloseNow() })
	}
	return ws, resp, err
}

// TestTheDaemonsACPEndpointServesCoderGoSDK: ACP over the daemon's own
// socket, spoken by an ACP client library from the module proxy, with a
// question asked and allowed; and the gate: no token, an origin without
// the acp class, and an origin with acp but not write.
func TestTheDaemonsACPEndpointServesCoderGoSDK(t *testing.T) {
	cwd := t.TempDir()
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\nallowed_origins = [\"https://page.example\", \"https://acp.example\"]\n" +
			"[origins.\"https://acp.example\"]\ngrants = [\"read\", \"agents\", \"acp\"]\n",
		Agents: map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
	})
	ctx := daemontest.Context(t)
	url := acpURL(d.URL)

	t.Run("a native client runs a turn whose question it allows", func(t *testing.T) {
		cl := &sdkClient{}
		conn, init := connectACP(t, ctx, url, d.Token, "", cl)
		assert.True(t, init.AgentCapabilities.LoadSession)
		sess, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{},
			Meta: map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode}}})
		require.NoError(t, err)
		file := filepath.Join(cwd, "ws.txt")
		res, err := conn.Prompt(ctx, acpsdk.PromptRequest{SessionId: sess.SessionId,
			Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock(`TOOL Bash {"command":"echo hi > ` + file + `"}`)}})
		require.NoError(t, err)
		assert.Equal(t, acpsdk.StopReasonEndTurn, res.StopReason)
		cl.mu.Lock()
		defer cl.mu.Unlock()
		require.Len(t, cl.asked, 1)
		assert.NotEmpty(t, cl.updates)
		_, err = os.Stat(file)
		assert.NoError(t, err, "the allowed call ran")
	})

	t.Run("no token is refused before the upgrade", func(t *testing.T) {
		_, resp, err := dialACP(t, url, "", "")
		require.Error(t, err)
		require.NotNil(t, resp)
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})

	t.Run("an allowed origin without the acp class is refused naming it", func(t *testing.T) {
		_, resp, err := dialACP(t, url, d.Token, "https://page.example")
		require.Error(t, err)
		require.NotNil(t, resp)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		body, _ := io.ReadAll(bufio.NewReader(resp.Body))
		assert.Contains(t, string(body), `needs the "acp" access class`)
		assert.Contains(t, string(body), `[origins."https://page.example"] grants`)
	})

	t.Run("an origin granted acp but not write starts no asking session", func(t *testing.T) {
		conn, _ := connectACP(t, ctx, url, d.Token, "https://acp.example", &sdkClient{})
		_, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{},
			Meta: map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode}}})
		require.Error(t, err)
		var re *acpsdk.RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, -32030, re.Code, "the session's calls are judged by the origin's own classes: %v", err)

		// A read-only session it may start, but not turn into one that
		// edits, asks or bypasses.
		ro, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{},
			Meta: map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode, "permissionMode": "read_only"}}})
		require.NoError(t, err)
		for _, mode := range []string{"edit", "ask", "bypass"} {
			_, err = conn.SetSessionMode(ctx, acpsdk.SetSessionModeRequest{SessionId: ro.SessionId, ModeId: acpsdk.SessionModeId(mode)})
			require.ErrorAs(t, err, &re, mode)
			assert.Equal(t, -32030, re.Code, "set_mode %s from an origin without write: %v", mode, err)
		}
	})
}

// blockingClient never answers a question itself: it waits until the
// question is withdrawn, and notes that it was.
type blockingClient struct {
	sdkClient
	withdrawn chan struct{}
}

func (c *blockingClient) RequestPermission(ctx context.Context, p acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.asked = append(c.asked, p)
	c.mu.Unlock()
	select {
	case <-ctx.Done():
		close(c.withdrawn)
	case <-time.After(30 * time.Second):
	}
	return acpsdk.RequestPermissionResponse{}, errors.New("no answer")
}

// TestTwoEditorsOnOneSessionAreBothAskedAndTheFirstAnswerWins: one ACP
// connection starts a session and prompts; another resumes the same
// session and answers the question; the first is withdrawn.
func TestTwoEditorsOnOneSessionAreBothAskedAndTheFirstAnswerWins(t *testing.T) {
	cwd := t.TempDir()
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
	})
	ctx := daemontest.Context(t)
	url := acpURL(d.URL)
	connect := func(cl acpsdk.Client) *acpsdk.ClientSideConnection {
		conn, _ := connectACP(t, ctx, url, d.Token, "", cl)
		return conn
	}
	first := &blockingClient{withdrawn: make(chan struct{})}
	a := connect(first)
	sess, err := a.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{},
		Meta: map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode}}})
	require.NoError(t, err)
	second := &sdkClient{}
	b := connect(second)
	_, err = b.ResumeSession(ctx, acpsdk.ResumeSessionRequest{SessionId: sess.SessionId, Cwd: cwd})
	require.NoError(t, err)

	file := filepath.Join(cwd, "both.txt")
	res, err := a.Prompt(ctx, acpsdk.PromptRequest{SessionId: sess.SessionId,
		Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock(`TOOL Bash {"command":"echo hi > ` + file + `"}`)}})
	require.NoError(t, err)
	assert.Equal(t, acpsdk.StopReasonEndTurn, res.StopReason)
	_, err = os.Stat(file)
	assert.NoError(t, err, "the second editor's allow ran the call")
	second.mu.Lock()
	assert.Len(t, second.asked, 1, "the editor following the session was asked")
	second.mu.Unlock()
	first.mu.Lock()
	assert.Len(t, first.asked, 1, "the editor that prompted was asked too")
	first.mu.Unlock()
	select {
	case <-first.withdrawn:
	case <-time.After(10 * time.Second):
		t.Fatal("the first editor's question was not withdrawn after the other answered")
	}
	second.mu.Lock()
	defer second.mu.Unlock()
	assert.NotEmpty(t, second.updates, "the follower saw the turn's updates")
}

// TestAPromptWhileATurnRunsIsQueuedAndAnsweredWhenItsOwnTurnEnds: the
// second session/prompt waits in the session's queue; both are answered,
// the second after the first.
func TestAPromptWhileATurnRunsIsQueuedAndAnsweredWhenItsOwnTurnEnds(t *testing.T) {
	cwd := t.TempDir()
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
	})
	ctx := daemontest.Context(t)
	conn, _ := connectACP(t, ctx, acpURL(d.URL), d.Token, "", &sdkClient{})
	sess, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{},
		Meta: map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode}}})
	require.NoError(t, err)
	type ended struct {
		n   int
		at  time.Time
		res acpsdk.PromptResponse
		err error
	}
	done := make(chan ended, 2)
	run := func(n int, cmd string) {
		res, err := conn.Prompt(ctx, acpsdk.PromptRequest{SessionId: sess.SessionId,
			Prompt: []acpsdk.ContentBlock{acpsdk.TextBlock(`TOOL Bash {"command":"` + cmd + `"}`)}})
		done <- ended{n, time.Now(), res, err}
	}
	go run(1, "sleep 1; echo one > "+filepath.Join(cwd, "one.txt"))
	time.Sleep(300 * time.Millisecond)
	go run(2, "echo two > "+filepath.Join(cwd, "two.txt"))
	a, b := <-done, <-done
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	assert.Equal(t, 1, a.n, "the first prompt's turn ends first")
	assert.Equal(t, 2, b.n)
	assert.Equal(t, acpsdk.StopReasonEndTurn, a.res.StopReason)
	assert.Equal(t, acpsdk.StopReasonEndTurn, b.res.StopReason)
	assert.Contains(t, fmt.Sprint(b.res.Meta), "turn:2", "the queued prompt ran as the session's second turn")
}

// modes and models are the current_mode_update and config_option_update
// values an editor received, in order.
func (c *sdkClient) modesAndModels(id acpsdk.SessionId) (modes, models []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.updates {
		if n.SessionId != id {
			continue
		}
		if u := n.Update.CurrentModeUpdate; u != nil {
			modes = append(modes, string(u.CurrentModeId))
		}
		if u := n.Update.ConfigOptionUpdate; u != nil {
			for _, o := range u.ConfigOptions {
				if o.Select != nil && o.Select.Id == "model" {
					models = append(models, string(o.Select.CurrentValue))
				}
			}
		}
	}
	return modes, models
}

// TestAModeOrModelChangedElsewhereReachesEveryEditorOnTheSession: two
// editors on one session over the daemon's /acp; one sets the mode and the
// other hears it; a client of /rpc changes the model and both hear that.
func TestAModeOrModelChangedElsewhereReachesEveryEditorOnTheSession(t *testing.T) {
	cwd := t.TempDir()
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
	})
	ctx := daemontest.Context(t)
	url := acpURL(d.URL)
	connect := func(cl acpsdk.Client) *acpsdk.ClientSideConnection {
		conn, _ := connectACP(t, ctx, url, d.Token, "", cl)
		return conn
	}
	first, second := &sdkClient{}, &sdkClient{}
	a := connect(first)
	sess, err := a.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{},
		Meta: map[string]any{"card": map[string]any{"adapter": agent.ClaudeCode, "permissionMode": "read_only"}}})
	require.NoError(t, err)
	b := connect(second)
	_, err = b.ResumeSession(ctx, acpsdk.ResumeSessionRequest{SessionId: sess.SessionId, Cwd: cwd})
	require.NoError(t, err)

	_, err = a.SetSessionMode(ctx, acpsdk.SetSessionModeRequest{SessionId: sess.SessionId, ModeId: "edit"})
	require.NoError(t, err)
	for name, cl := range map[string]*sdkClient{"the editor that set it": first, "the other editor": second} {
		require.Eventually(t, func() bool { m, _ := cl.modesAndModels(sess.SessionId); return len(m) > 0 }, 10*time.Second, 10*time.Millisecond, name)
	}
	_, err = d.Client.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: string(sess.SessionId), Model: "claude-sonnet-4-5"})
	require.NoError(t, err)
	for name, cl := range map[string]*sdkClient{"first": first, "second": second} {
		require.Eventually(t, func() bool { _, m := cl.modesAndModels(sess.SessionId); return len(m) > 0 }, 10*time.Second, 10*time.Millisecond, name)
		modes, models := cl.modesAndModels(sess.SessionId)
		assert.Equal(t, []string{"edit"}, modes, "%s: one current_mode_update", name)
		assert.Equal(t, []string{"claude-sonnet-4-5"}, models, "%s: one config_option_update, from the /rpc client's change", name)
	}
}
