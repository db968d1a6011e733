package approvals_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/testskip"
)

// TestCaptureApprovalExamples runs ask mode with the real Claude Code over a
// bare WebSocket and writes every frame as a marked example to
// $CARD_DOCS_CAPTURE, for docs/protocol.md.
func TestCaptureApprovalExamples(t *testing.T) {
	out := os.Getenv("CARD_DOCS_CAPTURE")
	if out == "" {
		testskip.Skip(t, testskip.DocsCapture, "set CARD_DOCS_CAPTURE=FILE (and CARD_E2E=1) to capture the ask-mode examples")
	}
	s := start(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{bash("made-by-bash.txt")}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws := s.d.Raw(t)
	ws.SetReadLimit(4 << 20)
	buf, emit, send := exampleWriter(t, ctx, ws)
	type frame struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Kind      string `json:"kind"`
			RequestID string `json:"request_id"`
			RunID     string `json:"run_id"`
		} `json:"params"`
		Result struct {
			RunID string `json:"run_id"`
		} `json:"result"`
	}
	// read records frames until until says stop, and returns the last.
	read := func(label string, until func(frame) bool) frame {
		for {
			_, msg, err := ws.Read(ctx)
			require.NoError(t, err)
			var f frame
			require.NoError(t, json.Unmarshal(msg, &f))
			switch {
			case f.Method == "agents.event" && strings.HasPrefix(f.Params.Kind, "approval"):
				emit("agents.event", "notification", msg)
			case f.Method == "agents.approve":
				emit("agents.approve", "request", msg)
			case f.Method == "":
				emit(label, "response", msg)
			}
			if until(f) {
				return f
			}
		}
	}
	isID := func(id string) func(frame) bool { return func(f frame) bool { return string(f.ID) == id } }
	task := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"agents.invoke","params":{"id":"claude-code","task":"Please create the file.","cwd":%q,"permission_mode":"ask","approval_timeout_secs":120,"stream":true}}`, s.cwd)

	// A run answered with a response to agents.approve.
	send("agents.invoke", "request", task)
	acc := read("agents.invoke", isID("1"))
	q := read("", func(f frame) bool { return f.Method == "agents.approve" })
	send("agents.approve", "response", fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"decision":"allow"}}`, q.ID))
	read("", func(f frame) bool { return f.Method == "agents.event" && f.Params.Kind == "done" })
	send("runs.get", "request", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"runs.get","params":{"run_id":%q}}`, acc.Result.RunID))
	read("runs.get", isID("2"))
	send("agents.approval_decide", "request", fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"agents.approval_decide","params":{"run_id":%q,"request_id":%q,"decision":"deny"}}`,
		acc.Result.RunID, q.Params.RequestID))
	read("agents.approval_decide", isID("3"))

	// A run answered with agents.approval_decide, after a client error
	// response and a bad decision.
	require.NoError(t, os.Remove(s.cwd+"/made-by-bash.txt"))
	send("agents.invoke", "request", strings.Replace(task, `"id":1`, `"id":4`, 1))
	acc = read("agents.invoke", isID("4"))
	q = read("", func(f frame) bool { return f.Method == "agents.approve" })
	send("agents.approval_decide", "request", fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"agents.approval_decide","params":{"run_id":%q,"request_id":"apr_7","decision":"allow"}}`, acc.Result.RunID))
	read("agents.approval_decide", isID("5"))
	send("agents.approval_decide", "request", fmt.Sprintf(`{"jsonrpc":"2.0","id":6,"method":"agents.approval_decide","params":{"run_id":%q,"request_id":%q,"decision":"yes"}}`, acc.Result.RunID, q.Params.RequestID))
	read("agents.approval_decide", isID("6"))
	send("agents.approval_decide", "request", fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"agents.approval_decide","params":{"run_id":%q,"request_id":%q,"decision":"deny","message":"Not in this repository, please."}}`, acc.Result.RunID, q.Params.RequestID))
	read("agents.approval_decide", isID("7"))
	read("", func(f frame) bool { return f.Method == "agents.event" && f.Params.Kind == "done" })

	// A run nobody answers: at the timeout the server withdraws its
	// request with $/cancelRequest.
	send("agents.invoke", "request", strings.Replace(strings.Replace(task, `"id":1`, `"id":8`, 1), `"approval_timeout_secs":120`, `"approval_timeout_secs":2`, 1))
	read("agents.invoke", isID("8"))
	read("", func(f frame) bool { return f.Method == "agents.approve" })
	for {
		_, msg, err := ws.Read(ctx)
		require.NoError(t, err)
		if bytes.Contains(msg, []byte(`"$/cancelRequest"`)) {
			fmt.Fprintf(buf, "<!-- raw: cancel -->\n```json\n%s\n```\n\n", msg)
		}
		if bytes.Contains(msg, []byte(`"approval_decided"`)) {
			emit("agents.event", "notification", msg)
		}
		if bytes.Contains(msg, []byte(`"kind":"done"`)) {
			break
		}
	}
	require.NoError(t, os.WriteFile(out, buf.Bytes(), 0o644))
}

// exampleWriter collects frames as marked examples for docs/protocol.md:
// emit records one, send records and sends one on ws.
func exampleWriter(t *testing.T, ctx context.Context, ws *websocket.Conn) (buf *bytes.Buffer, emit func(method, kind string, raw []byte), send func(method, kind, frame string)) {
	buf = &bytes.Buffer{}
	emit = func(method, kind string, raw []byte) {
		var b bytes.Buffer
		require.NoError(t, json.Indent(&b, raw, "", "  "))
		fmt.Fprintf(buf, "<!-- example: %s %s -->\n```json\n%s\n```\n\n", method, kind, b.String())
	}
	send = func(method, kind, frame string) {
		emit(method, kind, []byte(frame))
		require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(frame)))
	}
	return buf, emit, send
}
