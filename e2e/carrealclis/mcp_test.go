package carrealclis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

// mcpServer is a loopback MCP server (streamable HTTP) with one tool,
// counting the JSON-RPC methods agents send it.
type mcpServer struct {
	URL string
	mu  sync.Mutex
	got map[string]int
}

func newMCPServer(t *testing.T) *mcpServer {
	t.Helper()
	m := &mcpServer{got: map[string]int{}}
	srv := mcp.NewServer(&mcp.Implementation{Name: "card-e2e-client-tools", Version: "test"}, nil)
	type in struct{}
	mcp.AddTool(srv, &mcp.Tool{Name: "ping", Description: "answers pong"}, func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msgs []struct{ Method string }
			if json.Unmarshal(body, &msgs) != nil {
				var one struct{ Method string }
				_ = json.Unmarshal(body, &one)
				msgs = append(msgs, one)
			}
			m.mu.Lock()
			for _, x := range msgs {
				if x.Method != "" {
					m.got[x.Method]++
				}
			}
			m.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		// The agents leave their sessions open; end them so nothing of the
		// server outlives the test.
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
		hs.Close()
	})
	m.URL = hs.URL + "/mcp"
	return m
}

func (m *mcpServer) count(method string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.got[method]
}

// CAR's mcp_endpoint on agents.invoke_external is handed to the agent as
// an MCP server: each real CLI that can take one for a run connects to it
// and lists its tools, and the run still succeeds.
func TestTheMCPEndpointIsHandedToTheRealCLIs(t *testing.T) {
	cases := []struct {
		adapter, bin string
		setup        func(t *testing.T, bin string) (environ []string, adapterCfg map[string]any)
	}{
		{"claude-code", "claude", func(t *testing.T, bin string) ([]string, map[string]any) {
			s := standin.NewAnthropic(t, standin.Script{})
			return append(s.ClaudeEnv(t.TempDir(), os.Getenv("PATH")), "CAR_CLAUDE_CODE_BIN="+bin), nil
		}},
		{"codex", "codex", func(t *testing.T, bin string) ([]string, map[string]any) {
			s := standin.NewOpenAI(t, standin.Script{})
			args, env := s.CodexExtras()
			return []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "CAR_CODEX_BIN=" + bin, "NO_COLOR=1"},
				map[string]any{"args": args, "env": env}
		}},
		{"copilot", "copilot", func(t *testing.T, bin string) ([]string, map[string]any) {
			s := standin.NewAnthropic(t, standin.Script{})
			return append(s.CopilotEnv(t.TempDir(), os.Getenv("PATH")), "CAR_COPILOT_BIN="+bin), nil
		}},
	}
	for _, c := range cases {
		t.Run(c.adapter, func(t *testing.T) {
			bin := standin.CLI(t, c.bin)
			environ, adapterCfg := c.setup(t, bin)
			d := startDaemon(t, environ, c.adapter, adapterCfg)
			m := newMCPServer(t)
			var res api.InvokeResult
			require.NoError(t, d.Client.Call(daemontest.Context(t), "agents.invoke_external",
				map[string]any{"id": c.adapter, "task": "say pong", "cwd": t.TempDir(), "timeout_secs": 150, "mcp_endpoint": m.URL}, &res))
			assert.False(t, res.IsError, "%+v", res)
			assert.GreaterOrEqual(t, m.count("initialize"), 1, "the agent connected to the client's MCP server")
			assert.GreaterOrEqual(t, m.count("tools/list"), 1, "and listed its tools")
			t.Logf("%s sent the MCP server: %v", c.adapter, m.got)
		})
	}
}

// Claude Code may call the client's MCP tools in every mode card offers it,
// without a question in ask mode: the client named the server, and its
// tools act on the client's side, not on the files the mode guards. The
// stand-in model calls the tool; its result must come back to the model.
func TestClaudeCodeMayCallTheClientsMCPToolsInEveryMode(t *testing.T) {
	bin := standin.CLI(t, "claude")
	for _, mode := range []string{"read_only", "edit", "ask"} {
		t.Run(mode, func(t *testing.T) {
			s := standin.NewAnthropic(t, standin.Script{Answer: "PONG", ToolCalls: []standin.ToolCall{{Name: "mcp__client__ping", Input: map[string]any{}}}})
			d := startDaemon(t, append(s.ClaudeEnv(t.TempDir(), os.Getenv("PATH")), "CAR_CLAUDE_CODE_BIN="+bin), "", nil)
			m := newMCPServer(t)
			var res api.InvokeResult
			require.NoError(t, d.Client.Call(daemontest.Context(t), "agents.invoke_external",
				map[string]any{"id": "claude-code", "task": "call ping", "cwd": t.TempDir(), "permission_mode": mode, "timeout_secs": 150, "mcp_endpoint": m.URL}, &res))
			assert.False(t, res.IsError, "%+v", res)
			assert.Equal(t, 1, m.count("tools/call"), "the tool ran once")
			assert.Contains(t, res.Answer, "is_error=false content=pong", "and the model got its result")
		})
	}
}
