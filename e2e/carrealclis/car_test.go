package carrealclis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

// wire is a CAR client's view of the daemon: JSON-RPC frames on a bare
// WebSocket, no card client library.
type wire struct {
	t   *testing.T
	ws  *websocket.Conn
	ctx context.Context
	id  int
	// notes are the notifications read while waiting for answers.
	notes []map[string]any
}

func dialWire(t *testing.T, d *daemontest.Daemon) *wire {
	ws := d.Raw(t)
	ws.SetReadLimit(16 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return &wire{t: t, ws: ws, ctx: ctx}
}

type wireError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data"`
}

// call sends one request and returns its result or its error.
func (w *wire) call(method string, params any) (json.RawMessage, *wireError) {
	w.t.Helper()
	w.id++
	frame, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": w.id, "method": method, "params": params})
	require.NoError(w.t, err)
	require.NoError(w.t, w.ws.Write(w.ctx, websocket.MessageText, frame))
	for {
		var msg struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  *wireError      `json:"error"`
		}
		_, b, err := w.ws.Read(w.ctx)
		require.NoError(w.t, err)
		require.NoError(w.t, json.Unmarshal(b, &msg), string(b))
		if msg.Method != "" {
			var note map[string]any
			require.NoError(w.t, json.Unmarshal(b, &note))
			w.notes = append(w.notes, note)
			continue
		}
		if msg.ID != nil && *msg.ID == w.id {
			return msg.Result, msg.Error
		}
	}
}

// ok calls and decodes a result, failing on an error answer.
func (w *wire) ok(method string, params, out any) {
	w.t.Helper()
	res, rerr := w.call(method, params)
	require.Nil(w.t, rerr, "%s: %+v", method, rerr)
	require.NoError(w.t, json.Unmarshal(res, out), string(res))
}

// untilChatEnd reads notifications until a terminal agents.chat.event for
// session.
func (w *wire) untilChatEnd(session string) []map[string]any {
	w.t.Helper()
	var evs []map[string]any
	keep := func(n map[string]any) {
		if p, _ := n["params"].(map[string]any); p != nil && n["method"] == "agents.chat.event" && p["session_id"] == session {
			evs = append(evs, n)
		}
	}
	for _, n := range w.notes {
		keep(n)
	}
	for {
		if len(evs) > 0 {
			p := evs[len(evs)-1]["params"].(map[string]any)
			if p["kind"] == "done" || p["kind"] == "error" {
				return evs
			}
		}
		_, b, err := w.ws.Read(w.ctx)
		require.NoError(w.t, err)
		var n map[string]any
		require.NoError(w.t, json.Unmarshal(b, &n))
		keep(n)
	}
}

func specsByID(t *testing.T, raw json.RawMessage) map[string]api.ExternalAgentSpec {
	var specs []api.ExternalAgentSpec
	require.NoError(t, json.Unmarshal(raw, &specs))
	out := map[string]api.ExternalAgentSpec{}
	for _, s := range specs {
		out[s.ID] = s
	}
	return out
}

// The real Codex CLI, signed in with `codex login --with-api-key` while the
// daemon runs: agents.health_external reads ready with auth_method api_key;
// agents.list_external serves its 30 s health cache, agents.detect_external
// {include_health: true} checks again and reads ready at once; and without
// an id agents.health_external answers for the detected adapters only.
func TestACodexAPIKeySignInReadsReadyThroughTheDaemonAtOnce(t *testing.T) {
	codex := standin.CLI(t, "codex")
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "CAR_CODEX_BIN=" + codex}
	d := startDaemon(t, env, "", nil)
	w := dialWire(t, d)

	var h api.ExternalAgentHealth
	w.ok("agents.health_external", map[string]any{"id": "codex"}, &h)
	assert.Equal(t, api.StatusNotConfigured, h.Status, h.Reason)
	res, rerr := w.call("agents.list_external", map[string]any{"include_health": true})
	require.Nil(t, rerr)
	assert.Equal(t, api.StatusNotConfigured, specsByID(t, res)["codex"].Health.Status)

	login := exec.Command(codex, "login", "--with-api-key")
	login.Env = env
	login.Dir = home
	login.Stdin = strings.NewReader("sk-card-e2e-not-a-real-key\n")
	out, err := login.CombinedOutput()
	require.NoError(t, err, "%s", out)

	res, rerr = w.call("agents.list_external", map[string]any{"include_health": true})
	require.Nil(t, rerr)
	assert.Equal(t, api.StatusNotConfigured, specsByID(t, res)["codex"].Health.Status, "list_external serves the health cache")

	res, rerr = w.call("agents.detect_external", map[string]any{"include_health": true})
	require.Nil(t, rerr)
	spec := specsByID(t, res)["codex"]
	require.NotNil(t, spec.Health)
	assert.Equal(t, api.StatusReady, spec.Health.Status, spec.Health.Reason)
	assert.Equal(t, "api_key", spec.Health.Details["auth_method"])
	assert.Contains(t, spec.Health.Details["auth_source"], "codex login --with-api-key")
	assert.Equal(t, api.AuthAPIKey, spec.AuthKind)
	b, _ := json.Marshal(spec)
	assert.NotContains(t, string(b), "not-a-real-key")
	assert.NotContains(t, string(b), "***", "the masked key stays out")

	w.ok("agents.health_external", map[string]any{"id": "codex"}, &h)
	assert.Equal(t, api.StatusReady, h.Status)

	var all []api.ExternalAgentHealth
	w.ok("agents.health_external", map[string]any{}, &all)
	res, rerr = w.call("agents.detect", map[string]any{})
	require.Nil(t, rerr)
	detected := specsByID(t, res)
	require.Len(t, all, len(detected))
	for _, x := range all {
		assert.Contains(t, detected, x.ID, "health without an id answers for detected adapters only")
	}
}

// A CLI installed into ~/.local/bin while the daemon runs, on a machine
// where that directory did not exist at startup and the login shell is not
// asked, is found on agents.detect_external and runs.
func TestACLIInstalledIntoLocalBinAfterStartIsFoundOnRefresh(t *testing.T) {
	claude := standin.CLI(t, "claude")
	s := standin.NewAnthropic(t, standin.Script{})
	home := daemontest.UserHome(t)
	env := append(s.ClaudeEnv(home, "/usr/bin:/bin"), "PATH=/usr/bin:/bin")
	d := startDaemon(t, env, "", nil)
	w := dialWire(t, d)

	res, rerr := w.call("agents.detect_external", map[string]any{})
	require.Nil(t, rerr)
	require.NotContains(t, specsByID(t, res), "claude-code", "nothing is installed yet")

	// The install: ~/.local/bin appears with a `claude` in it.
	local := filepath.Join(home, ".local", "bin")
	require.NoError(t, os.MkdirAll(local, 0o755))
	real, err := filepath.EvalSymlinks(claude)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(local, "claude"), []byte("#!/bin/sh\nexec "+real+" \"$@\"\n"), 0o755))

	res, rerr = w.call("agents.detect_external", map[string]any{"include_health": true})
	require.Nil(t, rerr)
	spec, ok := specsByID(t, res)["claude-code"]
	require.True(t, ok, "found without a restart: %s", res)
	assert.Equal(t, filepath.Join(local, "claude"), spec.BinaryPath)
	assert.Equal(t, api.SourceWellKnown, spec.Source)
	assert.True(t, spec.Execution.IsRunnable())
	assert.NotEmpty(t, spec.Version)
	assert.Equal(t, api.StatusReady, spec.Health.Status, spec.Health.Reason)

	var result map[string]any
	w.ok("agents.invoke_external", map[string]any{"id": "claude-code", "task": "say pong", "timeout_secs": 120}, &result)
	assert.Equal(t, false, result["is_error"], "%v", result)
	assert.Contains(t, result["answer"], "PONG")
}

// What a CAR client sends to agents.invoke_external, over the wire, with the
// real Claude Code on a stand-in: CAR's result names, session_id as the
// host's routing id, the stream in agents.chat.event, CAR's cancel and
// handshake, and the fields card refuses.
func TestWhatACARClientGetsFromInvokeExternal(t *testing.T) {
	claude := standin.CLI(t, "claude")
	s := standin.NewAnthropic(t, standin.Script{})
	d := startDaemon(t, append(s.ClaudeEnv(t.TempDir(), os.Getenv("PATH")), "CAR_CLAUDE_CODE_BIN="+claude), "", nil)
	w := dialWire(t, d)
	cwd := t.TempDir()

	// The result: CAR's InvokeResult names, plus card's run fields.
	var result map[string]any
	w.ok("agents.invoke_external", map[string]any{"id": "claude-code", "task": "say pong", "cwd": cwd, "max_turns": 2,
		"allowed_tools": []string{"Read"}, "timeout_secs": 120, "mcp_endpoint": ""}, &result)
	for _, k := range []string{"answer", "session_id", "turns", "tool_calls", "duration_ms", "is_error", "run_id", "status"} {
		assert.Contains(t, result, k)
	}
	assert.Equal(t, false, result["is_error"])

	// session_id: the host's routing id, any string, threaded through the
	// answer; the agent's own session is agent_session_id.
	w.ok("agents.invoke_external", map[string]any{"id": "claude-code", "task": "say pong", "cwd": cwd, "session_id": "chat-window-1", "timeout_secs": 120}, &result)
	assert.Equal(t, "chat-window-1", result["session_id"])
	assert.NotEmpty(t, result["agent_session_id"])
	assert.NotEqual(t, "chat-window-1", result["agent_session_id"])

	// The stream: {accepted, session_id} at once, then agents.chat.event
	// notifications carrying that session_id, ending with done.
	var acc map[string]any
	w.ok("agents.invoke_external", map[string]any{"id": "claude-code", "task": "say pong", "cwd": cwd, "stream": true,
		"session_id": "chat-window-2", "timeout_secs": 120}, &acc)
	assert.Equal(t, true, acc["accepted"])
	assert.Equal(t, "chat-window-2", acc["session_id"])
	evs := w.untilChatEnd("chat-window-2")
	for _, n := range evs {
		assert.Equal(t, "agents.chat.event", n["method"])
		p := n["params"].(map[string]any)
		assert.Equal(t, "claude-code", p["agent_id"])
		assert.Contains(t, []string{"token", "tool_call", "done", "error"}, p["kind"])
	}
	last := evs[len(evs)-1]["params"].(map[string]any)
	assert.Equal(t, "done", last["kind"], "%v", last)
	assert.Contains(t, last["text"], "PONG")

	// agents.chat.cancel, session.auth and server.handshake are CAR's.
	var cancelled map[string]any
	w.ok("agents.chat.cancel", map[string]any{"session_id": "chat-window-2"}, &cancelled)
	assert.Equal(t, false, cancelled["cancelled"], "the run had ended")
	var auth, hs map[string]any
	w.ok("session.auth", map[string]any{"token": d.Token}, &auth)
	assert.Equal(t, true, auth["ok"])
	w.ok("server.handshake", map[string]any{"protocol_version": 2}, &hs)
	assert.Equal(t, "1.0", hs["protocol_version"])
	var rerr *wireError

	// CAR's isolation switches and its mini-swe-agent adapter are refused,
	// naming what; a field card does not take is never ignored.
	for _, c := range []struct {
		params map[string]any
		field  string
	}{
		{map[string]any{"id": "claude-code", "task": "x", "isolate_network": true}, "isolate_network"},
		{map[string]any{"id": "claude-code", "task": "x", "isolate_config": true}, "isolate_config"},
		{map[string]any{"id": "mini-swe-agent", "task": "x"}, "id"},
	} {
		_, rerr = w.call("agents.invoke_external", c.params)
		require.NotNil(t, rerr, "%v", c.params)
		assert.Equal(t, -32602, rerr.Code)
		assert.Contains(t, rerr.Message, c.field)
	}
}

// Where a CAR client finds card: not on port 9100 at "/", but at the URL
// daemon.json names, ending in /rpc; and the token goes on the upgrade.
func TestACARClientFindsCardThroughDaemonJSONAndAuthenticatesOnTheUpgrade(t *testing.T) {
	d := startDaemon(t, []string{"HOME=" + t.TempDir()}, "", nil)
	b, err := os.ReadFile(filepath.Join(d.Home, "daemon.json"))
	require.NoError(t, err)
	var disc struct{ URL string }
	require.NoError(t, json.Unmarshal(b, &disc))
	assert.True(t, strings.HasSuffix(disc.URL, "/rpc"), disc.URL)
	assert.Equal(t, d.URL, disc.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root := strings.TrimSuffix(d.URL, "rpc")
	_, resp, err := websocket.Dial(ctx, root, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token}}})
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "CAR's root path is not card's")
	_, resp, err = websocket.Dial(ctx, d.URL, nil)
	require.Error(t, err, "no token, no upgrade: there is no session.auth to send it later")
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// The real Claude Code, Codex and Gemini CLIs, each on its stand-in API,
// streamed through agents.invoke_external as a CAR host asks: the ack and
// every agents.chat.event carry the host's session_id and the adapter as
// agent_id, the tokens carry the answer, and the terminal done says how
// many of the host's three attachments (an image, a text file claiming to
// be one, a path that does not exist) were not sent.
func TestRealAgentsStreamCARsDialectAndSkipWhatTheyCannotSend(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	require.NoError(t, png.Encode(&buf, img))
	dot := filepath.Join(dir, "dot.png")
	require.NoError(t, os.WriteFile(dot, buf.Bytes(), 0o600))
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("not an image\n"), 0o600))
	attachments := []map[string]any{{"path": dot, "media_type": "image/png"}, {"path": notes, "media_type": "image/png"}, {"path": filepath.Join(dir, "missing.png")}}

	cases := []struct {
		adapter, bin string
		setup        func(t *testing.T, bin, answer string) (environ []string, adapterCfg map[string]any)
	}{
		{"claude-code", "claude", func(t *testing.T, bin, answer string) ([]string, map[string]any) {
			s := standin.NewAnthropic(t, standin.Script{Answer: answer})
			return append(s.ClaudeEnv(t.TempDir(), os.Getenv("PATH")), "CAR_CLAUDE_CODE_BIN="+bin), nil
		}},
		{"codex", "codex", func(t *testing.T, bin, answer string) ([]string, map[string]any) {
			s := standin.NewOpenAI(t, standin.Script{Answer: answer})
			args, env := s.CodexExtras()
			return []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "CAR_CODEX_BIN=" + bin, "NO_COLOR=1"},
				map[string]any{"args": args, "env": env}
		}},
		{"gemini", "gemini", func(t *testing.T, bin, answer string) ([]string, map[string]any) {
			s := standin.NewGemini(t, standin.Script{Answer: answer})
			env, err := s.GeminiSetup(t.TempDir(), os.Getenv("PATH"))
			require.NoError(t, err)
			return append(env, "CAR_GEMINI_BIN="+bin), map[string]any{"args": []string{"--skip-trust"}}
		}},
	}
	for _, c := range cases {
		t.Run(c.adapter, func(t *testing.T) {
			bin := standin.CLI(t, c.bin)
			answer := "PONG via card from the " + c.adapter + " stand-in"
			environ, cfg := c.setup(t, bin, answer)
			d := startDaemon(t, environ, c.adapter, cfg)
			w := dialWire(t, d)
			session := "chat-" + c.adapter
			var acc map[string]any
			w.ok("agents.invoke_external", map[string]any{"id": c.adapter, "task": "say pong", "cwd": t.TempDir(), "stream": true,
				"session_id": session, "timeout_secs": 150, "attachments": attachments}, &acc)
			assert.Equal(t, true, acc["accepted"])
			assert.Equal(t, session, acc["session_id"])
			assert.EqualValues(t, 2, acc["dropped_attachments"])
			evs := w.untilChatEnd(session)
			var text strings.Builder
			for _, n := range evs {
				p := n["params"].(map[string]any)
				assert.Equal(t, session, p["session_id"])
				assert.Equal(t, c.adapter, p["agent_id"])
				if p["kind"] == "token" {
					text.WriteString(p["delta"].(string))
				}
			}
			last := evs[len(evs)-1]["params"].(map[string]any)
			require.Equal(t, "done", last["kind"], "%v", last)
			assert.Equal(t, answer, strings.TrimSpace(last["text"].(string)))
			assert.Contains(t, text.String(), answer)
			assert.EqualValues(t, 2, last["dropped_attachments"])
			assert.Contains(t, last["finish_reason"], "2 image(s) skipped")
		})
	}
}
