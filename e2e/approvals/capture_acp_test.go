package approvals_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/testskip"
)

// TestCaptureACPApprovalExamples runs ask mode with the real Gemini CLI
// (answered allow) and Copilot CLI (answered deny) over a bare WebSocket,
// and writes to $CARD_DOCS_CAPTURE_ACP/<cli>.md every frame the client saw
// as a marked example, with the ACP messages between card and the agent
// (<cli>.in.jsonl: card to agent; <cli>.out.jsonl: agent to card), for
// docs/protocol.md. The agent runs behind a wrapper that copies its stdio.
func TestCaptureACPApprovalExamples(t *testing.T) {
	out := os.Getenv("CARD_DOCS_CAPTURE_ACP")
	if out == "" {
		testskip.Skip(t, testskip.DocsCapture, "set CARD_DOCS_CAPTURE_ACP=DIR (and CARD_E2E=1) to capture the ACP ask-mode examples")
	}
	for _, c := range []struct {
		cli      agentCLI
		decision string
	}{{gemini, "allow"}, {copilot, "deny"}} {
		t.Run(c.cli.id, func(t *testing.T) {
			real := standin.CLI(t, c.cli.bin)
			wrapper := filepath.Join(t.TempDir(), c.cli.bin)
			in, got := filepath.Join(out, c.cli.id+".in.jsonl"), filepath.Join(out, c.cli.id+".out.jsonl")
			require.NoError(t, os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\ntee %q | %q \"$@\" | tee %q\n", in, real, got)), 0o755))
			_, env := c.cli.serve(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.cli.shell("made-by-" + c.cli.id + ".txt")}})
			d := daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Environ: env,
				Agents: map[string]string{c.cli.id: wrapper}, NoClient: true})
			cwd := filepath.Join(t.TempDir(), "project")
			require.NoError(t, os.MkdirAll(cwd, 0o755))

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ws := d.Raw(t)
			ws.SetReadLimit(4 << 20)
			buf, emit, send := exampleWriter(t, ctx, ws)
			send("agents.invoke", "request", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"agents.invoke","params":{"id":%q,"task":"Please create the file.","cwd":%q,"permission_mode":"ask","approval_timeout_secs":120,"stream":true}}`, c.cli.id, cwd))
			for {
				_, msg, err := ws.Read(ctx)
				require.NoError(t, err)
				var f struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
					Params struct {
						Kind string `json:"kind"`
					} `json:"params"`
				}
				require.NoError(t, json.Unmarshal(msg, &f))
				switch {
				case f.Method == "agents.approve":
					emit("agents.approve", "request", msg)
					send("agents.approve", "response", fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"decision":%q}}`, f.ID, c.decision))
				case f.Method == "agents.event":
					emit("agents.event", "notification", msg)
				case f.Method == "":
					emit("agents.invoke", "response", msg)
				}
				if f.Method == "agents.event" && (f.Params.Kind == "done" || f.Params.Kind == "error") {
					break
				}
			}
			require.NoError(t, os.WriteFile(filepath.Join(out, c.cli.id+".md"), buf.Bytes(), 0o644))
		})
	}
}
