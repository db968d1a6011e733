package spawn

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// MCPServerName is the name a client's MCP server (the request's
// mcp_endpoint) has inside the agent: its tools are mcp__client__<tool> in
// Claude Code, client/<tool> in Codex and Copilot.
const MCPServerName = "client"

// mcpRefused says, per adapter, why its CLI cannot be handed an HTTP MCP
// server for one run. An adapter not listed here takes one (see withMCP).
var mcpRefused = map[string]string{
	"gemini": "Gemini CLI 0.61 takes MCP servers only from its settings files (there is no flag), and card does not write a person's settings",
	"droid":  "droid exec 0.225 takes MCP servers only from ~/.factory/mcp.json (there is no flag), and card does not write a person's settings",
	"pi":     "Pi has no MCP client",
}

// CheckMCPEndpoint validates an mcp_endpoint: an absolute http or https URL
// without credentials in it. The URL reaches the agent's argv or a private
// file; a password in it would be one every local user could read in the
// process list.
func CheckMCPEndpoint(adapter, endpoint string) error {
	if endpoint == "" {
		return nil
	}
	if why, refused := mcpRefused[adapter]; refused {
		return errUnsupported("mcp_endpoint", adapter, why+"; send \"\" (or leave it out) to run without one")
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &FieldError{"mcp_endpoint", fmt.Sprintf("%q is not an http(s) URL of an MCP server (streamable HTTP), e.g. http://127.0.0.1:8765/mcp", endpoint)}
	}
	if u.User != nil {
		return &FieldError{"mcp_endpoint", "must not carry credentials (user:password@): the URL is visible to other processes on this machine"}
	}
	if strings.ContainsAny(endpoint, "\"\\\x00\n\r") {
		return &FieldError{"mcp_endpoint", "contains a quote, backslash or control character"}
	}
	return nil
}

// withMCP hands the request's MCP endpoint to the agent, in the way its CLI
// takes one server for one run without touching the person's settings.
// Checked against the real CLIs (each connected to a loopback MCP server
// and listed its tools):
//
//   - Claude Code: --mcp-config with a private JSON file ({"mcpServers":
//     {"client": {"type": "http", "url": …}}}), next to the
//     --strict-mcp-config every run carries, and --allowedTools mcp__client
//     so its tools run in the modes whose permission rules would otherwise
//     refuse anything not listed. The client chose the server; its tools
//     are the client's, not a way around the file boundary.
//   - Codex: -c mcp_servers.client.url="…", a command-line override that
//     --ignore-user-config leaves in force.
//   - Copilot: --additional-mcp-config @<private file> with
//     {"mcpServers": {"client": {"type": "http", "url": …, "tools": ["*"]}}},
//     and --allow-tool client.
func withMCP(p *Plan, req Request) error {
	if req.MCPEndpoint == "" {
		return nil
	}
	if err := CheckMCPEndpoint(req.Adapter, req.MCPEndpoint); err != nil {
		return err
	}
	server := map[string]any{"type": "http", "url": req.MCPEndpoint}
	config := func(extra map[string]any) string {
		for k, v := range extra {
			server[k] = v
		}
		b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{MCPServerName: server}})
		return string(b)
	}
	switch req.Adapter {
	case "claude-code":
		p.Args = append(p.Args, "--mcp-config", p.privateFile("mcp.json", config(nil)), "--allowedTools", "mcp__"+MCPServerName)
	case "codex":
		// After "exec", before the subcommand and the prompt: -c is an
		// exec-level option.
		override := "mcp_servers." + MCPServerName + ".url=" + strconv.Quote(req.MCPEndpoint)
		p.Args = append([]string{p.Args[0], "-c", override}, p.Args[1:]...)
	case "copilot":
		p.Args = append(p.Args, "--additional-mcp-config", "@"+p.privateFile("mcp.json", config(map[string]any{"tools": []string{"*"}})), "--allow-tool", MCPServerName)
	default:
		return errUnsupported("mcp_endpoint", req.Adapter, "card does not know how to hand this CLI an MCP server")
	}
	return nil
}
