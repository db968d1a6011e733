package approvals_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/testskip"
)

// TestCaptureSessionApprovalExamples runs ask mode with the real Codex,
// Droid and Pi over a bare WebSocket, answering allow, and writes to
// $CARD_DOCS_CAPTURE_SESSIONS/<cli>.md every frame the client saw as a
// marked example, with the protocol messages between card and the agent
// (<cli>.in.jsonl: card to agent; <cli>.out.jsonl: agent to card), for
// docs/protocol.md. The agent runs behind a wrapper that copies its stdio.
func TestCaptureSessionApprovalExamples(t *testing.T) {
	out := os.Getenv("CARD_DOCS_CAPTURE_SESSIONS")
	if out == "" {
		testskip.Skip(t, testskip.DocsCapture, "set CARD_DOCS_CAPTURE_SESSIONS=DIR (and CARD_E2E=1) to capture the session ask-mode examples")
	}
	for _, c := range sessionCases {
		t.Run(c.cli.id, func(t *testing.T) { captureAsk(t, out, c.cli, "allow") })
	}
}

// captureAsk runs one ask-mode task with cli behind a wrapper that copies its
// stdio into out (<id>.in.jsonl, <id>.out.jsonl), answers every question
// with decision over a bare WebSocket, and writes each frame the client saw
// to out/<id>.md as a marked example.
func captureAsk(t *testing.T, out string, cli agentCLI, decision string) {
	real := standin.CLI(t, cli.bin)
	wrapper := filepath.Join(t.TempDir(), cli.bin)
	in, got := filepath.Join(out, cli.id+".in.jsonl"), filepath.Join(out, cli.id+".out.jsonl")
	require.NoError(t, os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\ntee %q | %q \"$@\" | tee %q\n", in, real, got)), 0o755))
	s, env := cli.serve(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{cli.shell("made-by-" + cli.id + ".txt")}})
	config := "login_shell_path = false\n"
	if cli.adapter != nil {
		home := t.TempDir()
		var buf bytes.Buffer
		require.NoError(t, toml.NewEncoder(&buf).Encode(map[string]any{"login_shell_path": false,
			"adapters": map[string]any{cli.id: cli.adapter(t, s, home)}}))
		config = buf.String()
		env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, env...)
	}
	d := daemontest.Start(t, daemontest.Options{Config: config, Environ: env,
		Agents: map[string]string{cli.id: wrapper}, NoClient: true})
	cwd := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(cwd, 0o755))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws := d.Raw(t)
	ws.SetReadLimit(4 << 20)
	buf, emit, send := exampleWriter(t, ctx, ws)
	send("agents.invoke", "request", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"agents.invoke","params":{"id":%q,"task":"Please create the file.","cwd":%q,"permission_mode":"ask","approval_timeout_secs":120,"stream":true}}`, cli.id, cwd))
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
			send("agents.approve", "response", fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"decision":%q}}`, f.ID, decision))
		case f.Method == "agents.event":
			emit("agents.event", "notification", msg)
		case f.Method == "":
			emit("agents.invoke", "response", msg)
		}
		if f.Method == "agents.event" && (f.Params.Kind == "done" || f.Params.Kind == "error") {
			break
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(out, cli.id+".md"), buf.Bytes(), 0o644))
}
