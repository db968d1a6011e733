package spawn

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/card-dev/card/api"
)

// MCPServerName is the name a client's MCP server (the request's
// mcp_endpoint) has inside the agent: its tools are mcp__client__<tool> in
// Claude Code, client/<tool> in Codex and Copilot.
const MCPServerName = "client"

// CheckMCPEndpoint validates an mcp_endpoint: an absolute http or https URL
// without credentials in it. The URL reaches the agent's argv or a private
// file; a password in it would be one every local user could read in the
// process list.
func CheckMCPEndpoint(adapter, endpoint string) error {
	if endpoint == "" {
		return nil
	}
	if a, ok := Lookup(adapter); ok && a.MCP.Refused != "" {
		return errUnsupported("mcp_endpoint", adapter, a.MCP.Refused+"; send \"\" (or leave it out) to run without one")
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &api.FieldError{Field: "mcp_endpoint", Message: fmt.Sprintf("%q is not an http(s) URL of an MCP server (streamable HTTP), e.g. http://127.0.0.1:8765/mcp", endpoint)}
	}
	if u.User != nil {
		return &api.FieldError{Field: "mcp_endpoint", Message: "must not carry credentials (user:password@): the URL is visible to other processes on this machine"}
	}
	if strings.ContainsAny(endpoint, "\"\\\x00\n\r") {
		return &api.FieldError{Field: "mcp_endpoint", Message: "contains a quote, backslash or control character"}
	}
	return nil
}

// withMCP hands the request's MCP endpoint to the agent through the
// adapter's MCPHandover. Each hand-over was checked against the real CLI
// (connected to a loopback MCP server, it listed the server's tools) and
// is described beside its driver.
func withMCP(p *Plan, h MCPHandover, req Request) error {
	if req.MCPEndpoint == "" {
		return nil
	}
	if err := CheckMCPEndpoint(req.Adapter, req.MCPEndpoint); err != nil {
		return err
	}
	if h.Add == nil {
		return errUnsupported("mcp_endpoint", req.Adapter, "card does not know how to hand this CLI an MCP server")
	}
	h.Add(p, req.MCPEndpoint)
	return nil
}

// mcpConfig is the {"mcpServers": {"client": {"type": "http", "url": …}}}
// file Claude Code and Copilot read, with extra keys in the server entry.
func mcpConfig(endpoint string, extra map[string]any) string {
	server := map[string]any{"type": "http", "url": endpoint}
	for k, v := range extra {
		server[k] = v
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{MCPServerName: server}})
	return string(b)
}
