// Package permtool serves Claude Code's permission-prompt tool to one run:
// an MCP server (the official Go SDK, streamable HTTP) with one tool,
// "approve", on its own loopback port, which Claude asks about every tool
// call it may not make on its own when started with
// --permission-prompt-tool mcp__card__approve.
//
// Why a listener per run, and why it is safe:
//
//   - It binds 127.0.0.1 on a port the kernel picks, and lives exactly as
//     long as the run: nothing is added to the daemon's own listener, so
//     what an unauthenticated local process or a browser can reach there
//     is unchanged.
//   - Every request must carry the run's own 256-bit secret
//     (Authorization: Bearer, compared in constant time). The secret exists
//     only in the daemon's memory and in the MCP config file card writes
//     0600 inside the run's private 0700 directory; another local user
//     cannot read it, and another run has a different one on a different
//     port, so no other process and no other run can answer for this one.
//   - A browser cannot set that header on a cross-site request without a
//     CORS preflight nobody answers, and a request that carries an Origin
//     at all is refused, as is a Host other than the loopback address and
//     port (DNS rebinding).
//
// The answers are Claude's format: the tool's text content is
// {"behavior":"allow","updatedInput":{…}} or {"behavior":"deny","message":"…"}.
// A malformed answer fails closed in Claude (the call is denied), but this
// package never sends one.
package permtool

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Names Claude is given: the MCP server's name in the config, the tool's,
// and the --permission-prompt-tool value that joins them.
const (
	ServerName = "card"
	ToolName   = "approve"
	PromptTool = "mcp__" + ServerName + "__" + ToolName
)

// path is where the MCP endpoint is served; anything else is 404.
const path = "/mcp"

// Approve decides one tool call: allow, or deny with the message the agent
// is told. ctx ends when Claude stops waiting or the server closes.
type Approve func(ctx context.Context, toolName string, input json.RawMessage, toolUseID string) (allow bool, message string)

// Server is one run's permission-prompt endpoint.
type Server struct {
	url    string
	secret string
	hs     *http.Server
	mcp    *mcp.Server
	ln     net.Listener
	base   context.Context
	stop   context.CancelFunc
	served chan struct{}
	once   sync.Once
}

// question is the tool's input as Claude sends it.
type question struct {
	ToolName  string          `json:"tool_name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
}

var inputSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"tool_name":   map[string]any{"type": "string"},
		"input":       map[string]any{"type": "object"},
		"tool_use_id": map[string]any{"type": "string"},
	},
	"required": []string{"tool_name", "input"},
}

// Start listens on 127.0.0.1 and serves the tool until Close.
func Start(approve Approve) (*Server, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("permission tool: no random secret: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("permission tool: listen on loopback: %w", err)
	}
	base, stop := context.WithCancel(context.Background())
	s := &Server{
		url:    "http://" + ln.Addr().String() + path,
		secret: hex.EncodeToString(secret),
		ln:     ln,
		base:   base,
		stop:   stop,
		served: make(chan struct{}),
	}
	m := mcp.NewServer(&mcp.Implementation{Name: ServerName, Version: "1"}, nil)
	m.AddTool(&mcp.Tool{
		Name:        ToolName,
		Description: "card asks the person at the client whether this tool call may run.",
		InputSchema: inputSchema,
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return s.answer(ctx, approve, req.Params.Arguments), nil
	})
	s.mcp = m
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m }, nil)
	s.hs = &http.Server{Handler: s.gate(ln.Addr().String(), handler), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		_ = s.hs.Serve(ln)
	}()
	return s, nil
}

// answer asks approve and writes its decision in Claude's format. ctx is the
// call's; it also ends when the server closes, so a question never outlives
// the run.
func (s *Server) answer(ctx context.Context, approve Approve, args json.RawMessage) *mcp.CallToolResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()
	var q question
	if err := json.Unmarshal(args, &q); err != nil || q.ToolName == "" {
		return text(deny("card could not read the permission question (no tool_name); the tool call is denied"))
	}
	if len(q.Input) == 0 || string(q.Input) == "null" {
		q.Input = json.RawMessage("{}")
	}
	allow, msg := approve(ctx, q.ToolName, q.Input, q.ToolUseID)
	if !allow {
		return text(deny(msg))
	}
	b, err := json.Marshal(struct {
		Behavior     string          `json:"behavior"`
		UpdatedInput json.RawMessage `json:"updatedInput"`
	}{"allow", q.Input})
	if err != nil {
		return text(deny("card could not encode its answer; the tool call is denied"))
	}
	return text(string(b))
}

func deny(msg string) string {
	if msg == "" {
		msg = "denied"
	}
	b, _ := json.Marshal(struct {
		Behavior string `json:"behavior"`
		Message  string `json:"message"`
	}{"deny", msg})
	return string(b)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// gate refuses, before the MCP handler sees it, every request that is not
// this run's Claude: a wrong or missing secret (401), an Origin (a browser)
// or a Host other than the listener's own address (403), another path (404).
func (s *Server) gate(hostport string, next http.Handler) http.Handler {
	_, port, _ := net.SplitHostPort(hostport)
	hosts := map[string]bool{hostport: true, "localhost:" + port: true}
	want := []byte("Bearer " + s.secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != path:
			http.Error(w, "not found", http.StatusNotFound)
		case subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1:
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		case r.Header.Get("Origin") != "" || !hosts[r.Host]:
			http.Error(w, "forbidden", http.StatusForbidden)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// URL is the endpoint, http://127.0.0.1:PORT/mcp.
func (s *Server) URL() string { return s.url }

// Config is the --mcp-config document naming this server, with its secret.
// It must only ever be written to a private (0600) file. backstop, when
// positive, is the per-server tool timeout Claude applies to one question
// (at least a second, its minimum): card decides at its own approval
// timeout, so this is only a net under a card that never answered.
func (s *Server) Config(backstop time.Duration) []byte {
	entry := map[string]any{
		"type":    "http",
		"url":     s.url,
		"headers": map[string]string{"Authorization": "Bearer " + s.secret},
	}
	if backstop > 0 {
		entry["timeout"] = max(backstop.Milliseconds(), 1000)
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{ServerName: entry}})
	return b
}

// Close ends every pending question (its approve context ends) and the
// listener, and waits for the server to stop.
func (s *Server) Close() {
	s.once.Do(func() {
		// Not Shutdown: Claude holds an event stream open, which never
		// goes idle, and the run is over anyway.
		s.stop()
		_ = s.hs.Close()
		<-s.served
		// A Claude that was killed never ends its MCP session; the
		// session's goroutines would outlive the run.
		for ss := range s.mcp.Sessions() {
			_ = ss.Close()
		}
	})
}
