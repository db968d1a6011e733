package spawn

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// The MCP endpoint reaches each CLI that can take one the way it takes one
// server for one run; the person's own MCP settings are left alone.
func TestAnMCPEndpointIsHandedToEachCLIThatTakesOne(t *testing.T) {
	const u = "http://127.0.0.1:8765/mcp"
	file := func(p Plan, name string) string {
		for _, f := range p.Files {
			if f.Path == name {
				return string(f.Content)
			}
		}
		return ""
	}
	p, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: "/w", MCPEndpoint: u})
	require.NoError(t, err)
	assert.Equal(t, []string{"--mcp-config", FileRef("mcp.json"), "--allowedTools", "mcp__client"}, p.Args[len(p.Args)-4:])
	assert.Contains(t, p.Args, "--strict-mcp-config", "only the servers card passes")
	assert.JSONEq(t, `{"mcpServers":{"client":{"type":"http","url":"`+u+`"}}}`, file(p, "mcp.json"))

	for _, req := range []Request{{Adapter: "codex", Cwd: "/w", MCPEndpoint: u}, {Adapter: "codex", Cwd: "/w", MCPEndpoint: u, Resume: "0199-abc"}} {
		p, err = Build("/bin/codex", req)
		require.NoError(t, err)
		assert.Equal(t, []string{"exec", "-c", `mcp_servers.client.url="` + u + `"`}, p.Args[:3], "an exec-level override, before any subcommand")
		assert.Equal(t, "-", p.Args[len(p.Args)-1])
	}

	p, err = Build("/bin/copilot", Request{Adapter: "copilot", Cwd: "/w", MCPEndpoint: u})
	require.NoError(t, err)
	assert.Equal(t, []string{"--additional-mcp-config", "@" + FileRef("mcp.json"), "--allow-tool", "client"}, p.Args[len(p.Args)-4:])
	assert.JSONEq(t, `{"mcpServers":{"client":{"type":"http","url":"`+u+`","tools":["*"]}}}`, file(p, "mcp.json"))

	for _, id := range []string{"claude-code", "codex", "copilot", "gemini", "droid", "pi"} {
		p, err := Build("/bin/x", Request{Adapter: id, Cwd: "/w"})
		if err != nil {
			continue // an adapter's own refusal of an empty request is not this test's business
		}
		assert.NotContains(t, p.Args, "--mcp-config", id)
		assert.NotContains(t, p.Args, "--additional-mcp-config", id)
		for _, a := range p.Args {
			assert.NotContains(t, a, "mcp_servers.", id)
		}
	}
}

func TestAnMCPEndpointIsRefusedNamingWhyWhenTheCLICannotTakeOne(t *testing.T) {
	cases := []struct{ adapter, endpoint, why string }{
		{"gemini", "http://127.0.0.1:1/mcp", "settings files"},
		{"droid", "http://127.0.0.1:1/mcp", "mcp.json"},
		{"pi", "http://127.0.0.1:1/mcp", "no MCP client"},
		{"claude-code", "127.0.0.1:1/mcp", "http(s) URL"},
		{"claude-code", "file:///etc/passwd", "http(s) URL"},
		{"codex", "https://u:p@example.com/mcp", "credentials"},
		{"codex", `http://127.0.0.1:1/"x`, "quote"},
	}
	for _, c := range cases {
		_, err := Build("/bin/x", Request{Adapter: c.adapter, Cwd: "/w", MCPEndpoint: c.endpoint})
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe, "%s %s", c.adapter, c.endpoint)
		assert.Equal(t, "mcp_endpoint", fe.Field)
		assert.Contains(t, fe.Message, c.why)
	}
}
