// Package acpclient drives `card acp` with a client nobody here wrote: the
// official ACP TypeScript SDK's client side, under node's test runner
// (acp.test.mjs), against a `card serve` daemon. The default suite runs a
// Claude Code stand-in that asks card's permission tool as the real CLI
// does; CARD_E2E=1 adds the real CLIs against the model API stand-ins.
// Every frame card sent is then checked against the published ACP schema.
package acpclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/testskip"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// node finds node and this directory's installed SDK, or skips loudly
// (fails under CARD_E2E_REQUIRED=1, as CI sets).
func node(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		testskip.Skip(t, testskip.Gap{Why: "no node on PATH for the ACP SDK client", Enable: "install Node.js 20+", Install: true},
			"SKIPPING the ACP SDK client test: no `node` on PATH")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "@agentclientprotocol", "sdk", "package.json")); err != nil {
		testskip.Skip(t, testskip.Gap{Why: "the ACP SDK client's dependencies not installed", Enable: "npm ci --prefix e2e/acpclient", Install: true},
			"SKIPPING the ACP SDK client test: its dependencies are not installed")
	}
	return bin
}

// runNode runs acp.test.mjs with env and returns its output; the node test
// runner's failures fail t.
func runNode(t *testing.T, nodeBin string, env []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "--test", "--test-reporter=spec", "--test-concurrency=1", "acp.test.mjs")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("node --test acp.test.mjs:\n%s", out)
	require.NoError(t, ctx.Err(), "the node tests did not finish in time")
	require.NoError(t, err, "the ACP SDK client's tests failed")
	return string(out)
}

// checkFrames validates every frame card sent against the schema: the
// whole message as an agent's, and its params or result as the schema's
// type for the method.
func checkFrames(t *testing.T, path string) int {
	t.Helper()
	raw, err := os.ReadFile("../../acp/testdata/schema.json")
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("schema.json", doc))
	compile := func(ref string) *jsonschema.Schema {
		s, err := c.Compile(ref)
		require.NoError(t, err, ref)
		return s
	}
	root := compile("schema.json")
	results := map[string]string{"initialize": "InitializeResponse", "authenticate": "AuthenticateResponse",
		"session/new": "NewSessionResponse", "session/load": "LoadSessionResponse", "session/list": "ListSessionsResponse",
		"session/resume": "ResumeSessionResponse", "session/close": "CloseSessionResponse", "session/prompt": "PromptResponse",
		"session/set_mode": "SetSessionModeResponse", "session/set_config_option": "SetSessionConfigOptionResponse"}
	params := map[string]string{"session/update": "SessionNotification", "session/request_permission": "RequestPermissionRequest",
		"$/cancel_request": "CancelRequestNotification"}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var rec struct {
			From    string  `json:"from"`
			Answers *string `json:"answers"`
			Frame   string  `json:"frame"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		if rec.From == "client" {
			continue
		}
		n++
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(rec.Frame))
		if !assert.NoError(t, err, "card wrote a line that is not JSON: %s", rec.Frame) {
			continue
		}
		assert.NoError(t, root.Validate(inst), "not an ACP message: %s", rec.Frame)
		var m struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(rec.Frame), &m))
		check := func(def string, v json.RawMessage) {
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(v))
			require.NoError(t, err)
			assert.NoError(t, compile("schema.json#/$defs/"+def).Validate(inst), "%s: %s", def, rec.Frame)
		}
		switch {
		case m.Method != "":
			def, ok := params[m.Method]
			assert.True(t, ok, "card sent %s, which an agent does not send here", m.Method)
			if ok {
				check(def, m.Params)
			}
		case m.Error != nil:
			check("Error", m.Error)
		case rec.Answers != nil:
			if def := results[*rec.Answers]; def != "" {
				check(def, m.Result)
			}
		}
	}
	require.NoError(t, sc.Err())
	return n
}

// TestTheACPSDKClientDrivesCardACP is the default suite: `card acp
// claude-code` against a daemon whose Claude Code is the asking stand-in.
// Its task is a script (fakeclaude): TOOL lines are tool calls, which ask
// in ask mode; it answers DONE.
func TestTheACPSDKClientDrivesCardACP(t *testing.T) {
	nodeBin := node(t)
	bin := daemontest.Build(t)
	cwd := t.TempDir()
	p := daemontest.Serve(t, bin, daemontest.Options{
		Config:   "login_shell_path = false\n",
		Agents:   map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
		NoClient: true,
	})
	frames := filepath.Join(t.TempDir(), "frames.jsonl")
	runNode(t, nodeBin, []string{
		"CARD_BIN=" + bin, "CARD_HOME=" + p.Home, "ACP_EMPTY_HOME=" + t.TempDir(),
		"ACP_ADAPTER=" + agent.ClaudeCode, "ACP_CWD=" + cwd, "ACP_FRAMES=" + frames, "ACP_IMAGE=1",
		"ACP_PROMPT_REMEMBER=remember the number 7", "ACP_EXPECT_REMEMBER=DONE",
		"ACP_PROMPT_RECALL=which number", "ACP_EXPECT_RECALL=DONE",
		"ACP_PROMPT_IMAGE=what is in the picture",
		`ACP_PROMPT_TOOL=TOOL Bash {"command":"echo hi > FILE"}`,
		`ACP_PROMPT_LONG=TOOL Bash {"command":"sleep 30; echo late > FILE"}`,
	})
	n := checkFrames(t, frames)
	assert.Greater(t, n, 20, "the suite saw card's frames")
	t.Logf("%d frames card sent, each valid by the ACP v1 schema", n)

	t.Run("a cwd refused for the mode is an error naming cwd", func(t *testing.T) {
		out := acpExchange(t, bin, p.Home, nil,
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[],"_meta":{"card":{"permissionMode":"edit"}}}}`)
		require.Len(t, out, 2, "%v", out)
		t.Logf("session/new in / (edit): %s", out[1])
		var m struct {
			Error *struct {
				Code    int             `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(out[1]), &m))
		require.NotNil(t, m.Error, "refused: %s", out[1])
		assert.Contains(t, m.Error.Message+string(m.Error.Data), "cwd")
	})

	t.Run("set_mode to edit in a cwd edit may not run in is refused naming cwd, and the mode stays", func(t *testing.T) {
		out := acpExchange(t, bin, p.Home, nil,
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[],"_meta":{"card":{"permissionMode":"read_only"}}}}`)
		require.Len(t, out, 2, "%v", out)
		var created struct {
			Result struct {
				SessionID string `json:"sessionId"`
			} `json:"result"`
		}
		require.NoError(t, json.Unmarshal([]byte(out[1]), &created))
		require.NotEmpty(t, created.Result.SessionID, "read_only may run in /: %s", out[1])
		out = acpExchange(t, bin, p.Home, nil,
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"session/resume","params":{"sessionId":"`+created.Result.SessionID+`","cwd":"/","mcpServers":[]}}`,
			`{"jsonrpc":"2.0","id":3,"method":"session/set_mode","params":{"sessionId":"`+created.Result.SessionID+`","modeId":"edit"}}`,
			`{"jsonrpc":"2.0","id":4,"method":"session/set_mode","params":{"sessionId":"`+created.Result.SessionID+`","modeId":"bypass"}}`)
		require.Len(t, out, 4, "%v", out)
		t.Logf("session/set_mode edit in /: %s", out[2])
		t.Logf("session/set_mode bypass in /: %s", out[3])
		for _, answer := range out[2:] {
			assert.Contains(t, answer, `"error":{"code":-32602`)
			assert.Contains(t, answer, `"field":"cwd"`)
		}
		assert.Contains(t, out[1], `"currentModeId":"read_only"`)
	})

	t.Run("card acp started by an agent is judged by the guard", func(t *testing.T) {
		// Claude Code running card acp claude-code would be Claude Code
		// calling itself: its environment carries card's ancestry.
		out := acpExchange(t, bin, p.Home, []string{"CAR_INVOKED_BY=claude-code"},
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"`+cwd+`","mcpServers":[]}}`)
		require.Len(t, out, 2, "%v", out)
		assert.Contains(t, out[1], `"code":-32010`, "a cycle: %s", out[1])
	})
}

// acpExchange runs card acp claude-code with env, sends lines one at a time,
// each after the answer to the one before, and returns card's answers.
func acpExchange(t *testing.T, bin, home string, env []string, lines ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "acp", agent.ClaudeCode, "--home", home)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	var out []string
	for _, l := range lines {
		_, err := io.WriteString(stdin, l+"\n")
		require.NoError(t, err)
		if !sc.Scan() {
			_ = stdin.Close()
			_ = cmd.Wait() // stderr is complete only once the process is gone
			t.Fatalf("no answer to %s; stderr: %s", l, stderr.String())
		}
		out = append(out, sc.Text())
	}
	require.NoError(t, stdin.Close())
	_ = cmd.Wait()
	return out
}
