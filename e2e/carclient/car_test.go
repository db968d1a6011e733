package carclient_test

import (
	"context"
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

	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/proc"
)

const adapters = "claude-code codex gemini"

// session.auth with the token is answered as CAR answers it, and
// server.handshake answers; a wrong token is refused as CAR refuses it, and
// the connection is closed.
func TestACARHostAuthenticatesAndNegotiatesAsItsDocumentsSay(t *testing.T) {
	c := startCard(t, "")
	h := connect(t, c.URL, c.Token)
	var auth map[string]any
	h.ok("session.auth", map[string]any{"token": c.Token}, &auth)
	assert.Equal(t, true, auth["ok"])
	assert.Equal(t, true, auth["auth_enabled"])

	var hs map[string]any
	h.ok("server.handshake", map[string]any{"protocol_version": 2, "client_version": "0.48.0"}, &hs)
	assert.Contains(t, hs, "protocol_version")
	assert.Contains(t, hs, "server_version")
	assert.EqualValues(t, 2, hs["client_protocol_version"])
	// Documented difference: the version is card's own, not CAR's 2.
	assert.Equal(t, "1.0", hs["protocol_version"])

	wrong := connect(t, c.URL, c.Token)
	_, rerr := wrong.call("session.auth", map[string]any{"token": strings.Repeat("x", 43)})
	require.NotNil(t, rerr)
	assert.Equal(t, -32603, rerr.Code)
	assert.True(t, strings.HasPrefix(rerr.Message, "auth failed: token mismatch"), rerr.Message)
	assert.Equal(t, websocket.StatusPolicyViolation, wrong.closedWith())
	assert.NotContains(t, rerr.Message, c.Token)

	// The connection that authenticated is unaffected.
	h.ok("server.handshake", map[string]any{"protocol_version": 2}, &hs)
}

// Documented difference: the token goes on the upgrade. A host that opens
// the socket bare, to send session.auth as its first frame, is refused at
// the upgrade (401): card never opens an unauthenticated socket.
func TestAnInBandOnlyHostIsRefusedAtTheUpgrade(t *testing.T) {
	c := startCard(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, c.URL, nil)
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// Documented difference: CAR's other session.auth forms (a lifecycle
// agent's agent_id, the host-management host_token, a memory_namespace)
// have nothing in card to bind to, and are refused naming the field.
func TestSessionAuthRefusesWhatCardHasNoCounterpartFor(t *testing.T) {
	c := startCard(t, "")
	h := connect(t, c.URL, c.Token)
	for _, p := range []map[string]any{
		{"token": c.Token, "agent_id": "milo"},
		{"host_token": c.Token},
		{"token": c.Token, "memory_namespace": "myapp-1"},
	} {
		_, rerr := h.call("session.auth", p)
		require.NotNil(t, rerr, "%v", p)
		assert.Equal(t, -32602, rerr.Code, "%v", p)
		for k := range p {
			if k != "token" {
				assert.Contains(t, string(rerr.Data), k)
			}
		}
	}
}

// agents.list_external, agents.detect_external and agents.health_external
// answer CAR's shapes.
func TestListDetectAndHealthAnswerCARsShapes(t *testing.T) {
	c := startCard(t, "")
	h := c.host(t)
	for _, method := range []string{"agents.list_external", "agents.detect_external"} {
		for _, withHealth := range []bool{false, true} {
			var specs []externalAgentSpec
			h.ok(method, map[string]any{"include_health": withHealth}, &specs)
			got := map[string]externalAgentSpec{}
			for _, s := range specs {
				got[s.ID] = s
			}
			for _, id := range strings.Fields(adapters) {
				s, ok := got[id]
				require.True(t, ok, "%s has no %s: %+v", method, id, specs)
				assert.NotEmpty(t, s.DisplayName)
				assert.Equal(t, c.agents[id].Path, s.BinaryPath)
				assert.NotEmpty(t, s.AuthKind)
				assert.NotEmpty(t, s.Capabilities)
				assert.NotEmpty(t, s.DetectedAt)
				require.NotNil(t, s.Execution, "%s %s", method, id)
				assert.Equal(t, "runnable", s.Execution.State)
				if withHealth {
					require.NotNil(t, s.Health, "%s include_health %s", method, id)
					assert.NotEmpty(t, s.Health.Status)
				} else {
					assert.Nil(t, s.Health, "%s without include_health %s", method, id)
				}
			}
		}
	}
	statuses := map[string]bool{"ready": true, "not_configured": true, "expired": true, "network_error": true, "not_executable": true, "unknown": true}
	var one externalHealth
	h.ok("agents.health_external", map[string]any{"id": "codex", "force": true}, &one)
	assert.Equal(t, "codex", one.ID)
	assert.True(t, statuses[one.Status], one.Status)
	assert.NotEmpty(t, one.Details)
	assert.NotEmpty(t, one.CheckedAt)
	var all []externalHealth
	h.ok("agents.health_external", map[string]any{}, &all)
	assert.Len(t, all, 3)
	for _, x := range all {
		assert.True(t, statuses[x.Status], "%s: %s", x.ID, x.Status)
	}
}

// A non-streamed invoke of each adapter answers CAR's InvokeResult, its
// session_id the host's own routing id, "chat-abc123" as in CAR's examples;
// and one is generated when the host sends none.
func TestInvokeExternalAnswersCARsInvokeResultWithTheHostsSessionID(t *testing.T) {
	c := startCard(t, "")
	h := c.host(t)
	cwd := t.TempDir()
	for _, id := range strings.Fields(adapters) {
		var res invokeResult
		h.ok("agents.invoke_external", map[string]any{"id": id, "task": "say pong", "session_id": "chat-abc123", "cwd": cwd, "timeout_secs": 60}, &res)
		assert.False(t, res.IsError, "%s: %s", id, res.Error)
		assert.NotEmpty(t, res.Answer, id)
		require.NotNil(t, res.SessionID, id)
		assert.Equal(t, "chat-abc123", *res.SessionID, id)
		assert.Positive(t, res.Turns, id)
		assert.GreaterOrEqual(t, res.DurationMs, int64(0), id)
		assert.Empty(t, res.DroppedAttachments, "%s: omitted when 0", id)
	}
	var res invokeResult
	h.ok("agents.invoke_external", map[string]any{"id": "codex", "task": "say pong", "cwd": cwd}, &res)
	require.NotNil(t, res.SessionID)
	assert.NotEmpty(t, *res.SessionID, "generated when omitted")

	var acc accepted
	h.ok("agents.invoke_external", map[string]any{"id": "codex", "task": "say pong", "cwd": cwd, "stream": true}, &acc)
	assert.True(t, acc.Accepted)
	require.NotEmpty(t, acc.SessionID, "generated when omitted")
	evs := h.until(acc.SessionID)
	assert.Equal(t, "done", evs[len(evs)-1].Kind)
}

// CAR-shaped attachments: {path, media_type?}. An image is sent; a path
// that is not an image by its bytes (whatever media_type says) and a path
// that does not exist are skipped; the agent still runs, and
// dropped_attachments is their number.
func TestBadAttachmentsAreSkippedAndCountedAndTheAgentStillRuns(t *testing.T) {
	c := startCard(t, "")
	h := c.host(t)
	dir := t.TempDir()
	img := pngFile(t, dir, "dot.png")
	secret := filepath.Join(dir, "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte("password=hunter2\n"), 0o600))
	attachments := []map[string]any{
		{"path": img, "media_type": "image/png"},
		{"path": secret, "media_type": "image/png"},
		{"path": filepath.Join(dir, "missing.png")},
	}
	for _, id := range strings.Fields(adapters) {
		var res invokeResult
		h.ok("agents.invoke_external", map[string]any{"id": id, "task": "describe the image", "cwd": dir, "attachments": attachments}, &res)
		assert.False(t, res.IsError, "%s: the agent runs: %s", id, res.Error)
		assert.NotEmpty(t, res.Answer, id)
		n, ok := isNumber(res.DroppedAttachments)
		require.True(t, ok, "%s: dropped_attachments is a number: %s", id, res.DroppedAttachments)
		assert.Equal(t, 2.0, n, id)
	}
	// What Claude Code was given: the image, never the text file's bytes.
	_, stdin := c.agents["claude-code"].Received(t, lastRun(t, h, "claude-code"))
	assert.Contains(t, stdin, `"type":"image"`)
	assert.NotContains(t, stdin, "hunter2")
	assert.Equal(t, 1, strings.Count(stdin, `"type":"image"`))

	// Streamed: the ack and the terminal done both say how many.
	var acc map[string]any
	h.ok("agents.invoke_external", map[string]any{"id": "claude-code", "task": "describe the image", "cwd": dir, "stream": true,
		"session_id": "chat-images", "attachments": attachments}, &acc)
	evs := h.until("chat-images")
	done := evs[len(evs)-1]
	require.Equal(t, "done", done.Kind)
	n, ok := isNumber(done.DroppedAttachments)
	require.True(t, ok, "done carries dropped_attachments: %s", done.DroppedAttachments)
	assert.Equal(t, 2.0, n)
	require.NotNil(t, done.FinishReason)
	assert.Contains(t, *done.FinishReason, "2 image(s) skipped")
}

// Documented difference: the size cap is card's [attachments] max_bytes
// (20 MiB unless configured; CAR skips over 32 MB), and at most
// [attachments] max_count (10) are sent; past either, an attachment is
// skipped and counted like any other.
func TestAttachmentsOverCardsCapsAreSkippedAndCounted(t *testing.T) {
	c := startCard(t, "")
	h := c.host(t)
	dir := t.TempDir()
	big := filepath.Join(dir, "big.png")
	f, err := os.Create(big)
	require.NoError(t, err)
	_, err = f.Write([]byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'})
	require.NoError(t, err)
	require.NoError(t, f.Truncate(20<<20+1)) // sparse: nothing is written
	require.NoError(t, f.Close())
	list := []map[string]any{{"path": big}}
	for i := 0; i < 11; i++ {
		list = append(list, map[string]any{"path": pngFile(t, dir, fmt.Sprintf("img%d.png", i))})
	}
	raw, rerr := h.call("agents.invoke_external", map[string]any{"id": "claude-code", "task": "describe", "cwd": dir, "attachments": list})
	require.Nil(t, rerr)
	var res invokeResult
	require.NoError(t, json.Unmarshal(raw, &res))
	assert.False(t, res.IsError)
	n, ok := isNumber(res.DroppedAttachments)
	require.True(t, ok)
	assert.Equal(t, 3.0, n, "the one over 20 MiB and the two past the tenth attachment")
	// card's reasons travel beside CAR's count.
	var reasons struct {
		Reasons []struct {
			Index  int    `json:"index"`
			Reason string `json:"reason"`
		} `json:"dropped_attachment_reasons"`
	}
	require.NoError(t, json.Unmarshal(raw, &reasons))
	require.Len(t, reasons.Reasons, 3)
	assert.Equal(t, 0, reasons.Reasons[0].Index)
	assert.Contains(t, reasons.Reasons[0].Reason, "max_bytes")
	assert.Equal(t, []int{10, 11}, []int{reasons.Reasons[1].Index, reasons.Reasons[2].Index})
	assert.Contains(t, reasons.Reasons[1].Reason, "max_count")
}

// A streamed invoke of each adapter: the ack is {accepted: true,
// session_id}, then agents.chat.event notifications carrying that
// session_id and the adapter as agent_id: token (delta), tool_call (tool,
// params) and a terminal done (finish_reason, text), of CAR's kinds only.
func TestStreamedInvokeSpeaksAgentsChatEvent(t *testing.T) {
	c := startCard(t, "")
	h := c.host(t)
	cwd := t.TempDir()
	kinds := map[string]bool{"token": true, "tool_call": true, "done": true, "error": true}
	for _, id := range strings.Fields(adapters) {
		session := "chat-" + id
		var acc accepted
		h.ok("agents.invoke_external", map[string]any{"id": id, "task": "say pong", "cwd": cwd, "stream": true, "session_id": session}, &acc)
		assert.True(t, acc.Accepted, id)
		assert.Equal(t, session, acc.SessionID, id)
		evs := h.until(session)
		var text strings.Builder
		for i, ev := range evs {
			assert.Equal(t, session, ev.SessionID, "%s event %d", id, i)
			assert.Equal(t, id, ev.AgentID, "%s event %d", id, i)
			assert.True(t, kinds[ev.Kind], "%s: kind %q is not one of CAR's", id, ev.Kind)
			if ev.Kind == "token" {
				require.NotNil(t, ev.Delta, "%s token", id)
				text.WriteString(*ev.Delta)
			}
			if i < len(evs)-1 {
				assert.False(t, ev.terminal(), "%s: a terminal event before the end", id)
			}
		}
		done := evs[len(evs)-1]
		require.Equal(t, "done", done.Kind, "%s: %+v", id, done)
		require.NotNil(t, done.FinishReason, id)
		assert.NotEmpty(t, *done.FinishReason, id)
		require.NotNil(t, done.Text, id)
		assert.NotEmpty(t, *done.Text, id)
		assert.Contains(t, text.String(), *done.Text, "%s: the tokens carry the answer", id)
		assert.Empty(t, done.DroppedAttachments, "%s: none dropped, none said", id)
		if id == "claude-code" {
			var calls []chatEvent
			for _, ev := range evs {
				if ev.Kind == "tool_call" {
					calls = append(calls, ev)
				}
			}
			require.Len(t, calls, 1, "the fixture's one tool call")
			assert.Equal(t, "Read", calls[0].Tool)
			assert.Equal(t, "Read", calls[0].Detail, "the legacy name")
			var params map[string]any
			require.NoError(t, json.Unmarshal(calls[0].Params, &params))
			assert.Equal(t, "/home/user/project/README.md", params["file_path"])
		}
	}
	assert.Empty(t, h.other, "no notification of another dialect reaches a CAR host")
}

// A run that fails ends its stream with a terminal error event carrying
// error, and no done.
func TestAFailedStreamedRunEndsWithATerminalError(t *testing.T) {
	c := startCard(t, "")
	h := c.host(t)
	var acc accepted
	h.ok("agents.invoke_external", map[string]any{"id": "claude-code", "task": "FAIL now", "cwd": t.TempDir(), "stream": true, "session_id": "chat-fail"}, &acc)
	evs := h.until("chat-fail")
	last := evs[len(evs)-1]
	require.Equal(t, "error", last.Kind)
	require.NotNil(t, last.Error)
	assert.NotEmpty(t, *last.Error)
	for _, ev := range evs {
		assert.NotEqual(t, "done", ev.Kind)
	}

	// Documented difference: a non-streamed failure's error is an object
	// ({kind, message, …}), not a string.
	raw, rerr := h.call("agents.invoke_external", map[string]any{"id": "claude-code", "task": "FAIL now", "cwd": t.TempDir()})
	require.Nil(t, rerr)
	var res invokeResult
	require.NoError(t, json.Unmarshal(raw, &res))
	assert.True(t, res.IsError)
	var failure struct{ Kind, Message string }
	require.NoError(t, json.Unmarshal(res.Error, &failure), "error is an object: %s", res.Error)
	assert.NotEmpty(t, failure.Message)
}

// agents.chat.cancel {session_id} ends the streamed run: the agent's
// process and the process it started are gone, and the stream ends with a
// terminal event.
func TestChatCancelEndsTheRunAndItsProcessGroup(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	claude := daemontest.Script(t, "claude", `case "$1" in
--version) echo "2.1.197 (Claude Code)"; exit 0;;
auth) exit 1;;
esac
cat >/dev/null
echo '{"type":"system","subtype":"init","session_id":"942c07c4-8230-4293-9685-338fbcab211c","tools":[],"model":"m"}'
sleep 60 &
echo "$$ $!" > '`+pids+`'
wait`)
	c := &card{home: t.TempDir()}
	c.Daemon = daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Agents: map[string]string{"claude-code": claude},
		Environ: []string{"HOME=" + c.home}, NoClient: true})
	h := c.host(t)
	var acc accepted
	h.ok("agents.invoke_external", map[string]any{"id": "claude-code", "task": "think for a long time", "cwd": t.TempDir(), "stream": true, "session_id": "chat-long"}, &acc)
	var agent, grandchild int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pids)
		if err != nil {
			return false
		}
		_, err = fmt.Sscanf(string(b), "%d %d", &agent, &grandchild)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond)
	require.True(t, proc.Alive(agent) && proc.Alive(grandchild))

	start := time.Now()
	var res map[string]any
	h.ok("agents.chat.cancel", map[string]any{"session_id": "chat-long"}, &res)
	assert.Equal(t, true, res["cancelled"], "%v", res)
	assert.Less(t, time.Since(start), 3*time.Second, "ended within the kill grace")
	require.Eventually(t, func() bool { return !proc.Alive(agent) && !proc.Alive(grandchild) }, 5*time.Second, 20*time.Millisecond,
		"the agent (%d) and its grandchild (%d) are gone", agent, grandchild)
	evs := h.until("chat-long")
	assert.Equal(t, "error", evs[len(evs)-1].Kind)
	require.NotNil(t, evs[len(evs)-1].Error)
	assert.Contains(t, *evs[len(evs)-1].Error, "cancelled")

	// Cancel is best-effort: again, nothing is running under that id.
	h.ok("agents.chat.cancel", map[string]any{"session_id": "chat-long"}, &res)
	assert.Equal(t, false, res["cancelled"])
}

// Documented differences held from a CAR host's side: allowed_tools and
// max_turns for Codex and Gemini (their CLIs have no such control) are
// refused naming the field; allowed_tools: [] for Claude Code denies every
// tool, as CAR says; cwd defaults to the daemon user's home, not the
// daemon's working directory.
func TestTheFieldsCardCannotHonourAreRefusedAsDocumented(t *testing.T) {
	c := startCard(t, "")
	h := c.host(t)
	cwd := t.TempDir()
	for _, id := range []string{"codex", "gemini"} {
		for field, value := range map[string]any{"allowed_tools": []string{}, "max_turns": 3} {
			_, rerr := h.call("agents.invoke_external", map[string]any{"id": id, "task": "say pong", "cwd": cwd, field: value})
			require.NotNil(t, rerr, "%s %s", id, field)
			assert.Equal(t, -32602, rerr.Code)
			assert.Contains(t, string(rerr.Data), field, "%s %s", id, field)
		}
	}

	var res struct {
		invokeResult
		RunID string `json:"run_id"`
	}
	h.ok("agents.invoke_external", map[string]any{"id": "claude-code", "task": "say pong", "cwd": cwd, "allowed_tools": []string{}}, &res)
	assert.False(t, res.IsError)
	args, _ := c.agents["claude-code"].Received(t, res.RunID)
	i := indexOf(args, "--tools")
	require.GreaterOrEqual(t, i, 0, "%q", args)
	assert.Equal(t, "", args[i+1], "no tool is offered: %q", args)

	h.ok("agents.invoke_external", map[string]any{"id": "codex", "task": "say pong"}, &res)
	assert.False(t, res.IsError)
	var run struct {
		Cwd string `json:"cwd"`
	}
	h.ok("runs.get", map[string]any{"run_id": res.RunID}, &run)
	home, err := filepath.EvalSymlinks(c.home)
	require.NoError(t, err)
	assert.Equal(t, home, run.Cwd, "no cwd: the daemon user's home")
	_, rerr := h.call("agents.invoke_external", map[string]any{"id": "codex", "task": "fix it", "permission_mode": "edit"})
	require.NotNil(t, rerr, "a run that may change files names where")
	assert.Equal(t, -32602, rerr.Code)
	assert.Contains(t, string(rerr.Data), "cwd")
}

func indexOf(xs []string, x string) int {
	for i, s := range xs {
		if s == x {
			return i
		}
	}
	return -1
}

// lastRun is the newest run of adapter, from card's history.
func lastRun(t *testing.T, h *host, adapter string) string {
	t.Helper()
	var runs []struct {
		RunID string `json:"run_id"`
	}
	h.ok("runs.list", map[string]any{"adapter": adapter, "limit": 1}, &runs)
	require.Len(t, runs, 1)
	return runs[0].RunID
}
