// Package fakeclaude is a stand-in for Claude Code in tests that need an
// agent which asks: it speaks Claude's stream-json on stdout and, for every
// tool call outside --allowedTools, asks the permission-prompt tool named by
// --permission-prompt-tool through the server --mcp-config names, exactly as
// Claude Code 2.1.197 does (an MCP tools/call with {tool_name, input,
// tool_use_id}, answered by {"behavior":"allow"|"deny",…} as text). The
// end-to-end tests prove the same flow with the real CLI; this lets the
// daemon's, the docs' and the example client's tests run it in
// milliseconds and without Node.
//
// The task (stdin) is a script, one step per line:
//
//	TOOL <name> <json input>   call a tool: Bash runs input.command with sh in
//	                           the working dir, Write writes input.file_path;
//	                           any other tool just succeeds
//	anything else              ignored
//
// After the steps it answers "DONE" followed by each tool result, one per
// line, so a test can read what the agent was told.
//
// A test binary becomes the fake by calling Main from TestMain when
// EnvVar is set; Install writes the executable wrapper that sets it.
package fakeclaude

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/card-dev/card/internal/proc"
)

// EnvVar makes a test binary act as the fake (see Install).
const EnvVar = "CARD_TEST_FAKE_CLAUDE"

// Version is what --version prints: the release the real flow was checked on.
const Version = "2.1.197 (Claude Code)"

const sessionID = "5b1f9a52-0000-4000-8000-00000000fa4e"

// Install writes an executable named claude into dir that runs the current
// test binary as the fake, and returns its path. The test binary's TestMain
// must call Main when EnvVar is set.
func Install(t testing.TB, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("fakeclaude: find the test binary: %v", err)
	}
	path := filepath.Join(dir, "claude")
	// A -race test binary sleeps a second before it exits (GORACE's
	// atexit_sleep_ms), which every run and probe would pay.
	script := fmt.Sprintf("#!/bin/sh\nGORACE=atexit_sleep_ms=0 %s=1 exec %q \"$@\"\n", EnvVar, self)
	if err := proc.WriteExecutable(path, []byte(script)); err != nil {
		t.Fatalf("fakeclaude: %v", err)
	}
	return path
}

// Main runs the fake with the process's arguments and streams, and returns
// the exit status.
func Main() int { return run(os.Args[1:], os.Stdin, os.Stdout) }

type flags struct {
	mcpConfig, promptTool string
	allowed               map[string]bool
}

func parse(args []string) flags {
	f := flags{allowed: map[string]bool{}}
	for i := 0; i < len(args); i++ {
		next := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch args[i] {
		case "--mcp-config":
			f.mcpConfig = next()
		case "--permission-prompt-tool":
			f.promptTool = next()
		case "--allowedTools":
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				f.allowed[args[i+1]] = true
				i++
			}
		}
	}
	return f
}

func run(args []string, stdin io.Reader, stdout io.Writer) int {
	if len(args) > 0 && args[0] == "--version" {
		fmt.Fprintln(stdout, Version)
		return 0
	}
	if len(args) > 0 && args[0] == "auth" {
		fmt.Fprintln(stdout, `{"loggedIn": true, "authMethod": "api_key", "apiProvider": "firstParty", "apiKeySource": "ANTHROPIC_API_KEY"}`)
		return 0
	}
	f := parse(args)
	task, _ := io.ReadAll(stdin)
	out := json.NewEncoder(stdout)
	cwd, _ := os.Getwd()
	_ = out.Encode(map[string]any{"type": "system", "subtype": "init", "cwd": cwd, "session_id": sessionID,
		"tools": []string{"Bash", "Read", "Write"}, "model": "claude-fake", "permissionMode": "default"})

	var asker *asker
	if f.promptTool != "" {
		var err error
		if asker, err = dial(f.mcpConfig, f.promptTool); err != nil {
			fmt.Fprintln(os.Stderr, "fakeclaude:", err)
			return 1
		}
		defer asker.close()
	}
	var results []string
	n := 0
	sc := bufio.NewScanner(strings.NewReader(string(task)))
	for sc.Scan() {
		name, input, ok := step(sc.Text())
		if !ok {
			continue
		}
		n++
		id := fmt.Sprintf("toolu_fake%02d", n)
		_ = out.Encode(map[string]any{"type": "assistant", "session_id": sessionID, "message": map[string]any{
			"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}}}})
		result, isErr := call(f, asker, name, input, id)
		results = append(results, result)
		_ = out.Encode(map[string]any{"type": "user", "session_id": sessionID, "message": map[string]any{
			"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": result, "is_error": isErr}}}})
	}
	answer := strings.Join(append([]string{"DONE"}, results...), "\n")
	_ = out.Encode(map[string]any{"type": "assistant", "session_id": sessionID, "message": map[string]any{
		"role": "assistant", "content": []any{map[string]any{"type": "text", "text": answer}}}})
	_ = out.Encode(map[string]any{"type": "result", "subtype": "success", "is_error": false, "duration_ms": 5,
		"num_turns": n + 1, "result": answer, "session_id": sessionID, "total_cost_usd": 0,
		"usage": map[string]any{"input_tokens": 1, "output_tokens": 1}})
	return 0
}

// step reads "TOOL <name> <json>".
func step(line string) (string, json.RawMessage, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "TOOL ")
	if !ok {
		return "", nil, false
	}
	name, input, _ := strings.Cut(strings.TrimSpace(rest), " ")
	if strings.TrimSpace(input) == "" {
		input = "{}"
	}
	if !json.Valid([]byte(input)) {
		return "", nil, false
	}
	return name, json.RawMessage(input), true
}

// call asks (unless the tool is allowed outright) and runs the tool. It
// returns what the agent is told.
func call(f flags, a *asker, name string, input json.RawMessage, id string) (string, bool) {
	if !f.allowed[name] {
		if a == nil {
			return "Permission to use " + name + " has been denied.", true
		}
		allow, msg := a.ask(name, input, id)
		if !allow {
			return msg, true
		}
	}
	var in struct {
		Command  string `json:"command"`
		FilePath string `json:"file_path"`
		Content  string `json:"content"`
	}
	_ = json.Unmarshal(input, &in)
	switch name {
	case "Bash":
		out, err := exec.Command("sh", "-c", in.Command).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%s%v", out, err), true
		}
		if len(out) == 0 {
			return "(Bash completed with no output)", false
		}
		return strings.TrimSpace(string(out)), false
	case "Write":
		if err := os.WriteFile(in.FilePath, []byte(in.Content), 0o644); err != nil {
			return err.Error(), true
		}
		return "File created successfully at: " + in.FilePath, false
	}
	return name + " ran", false
}

// asker is the connection to the permission-prompt tool.
type asker struct {
	cs   *mcp.ClientSession
	tool string
}

type headerTransport struct {
	header map[string]string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.header {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func dial(configPath, promptTool string) (*asker, error) {
	parts := strings.SplitN(promptTool, "__", 3)
	if len(parts) != 3 || parts[0] != "mcp" {
		return nil, fmt.Errorf("--permission-prompt-tool %q is not mcp__<server>__<tool>", promptTool)
	}
	b, err := os.ReadFile(configPath)
	if err != nil {
		return nil, fmt.Errorf("--mcp-config: %w", err)
	}
	var cfg struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("--mcp-config: %w", err)
	}
	srv, ok := cfg.MCPServers[parts[1]]
	if !ok || srv.Type != "http" {
		return nil, fmt.Errorf("--mcp-config has no http server %q", parts[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "claude-code", Version: "2.1.197"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headerTransport{header: srv.Headers}}}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to the permission tool: %w", err)
	}
	return &asker{cs: cs, tool: parts[2]}, nil
}

// ask calls the permission tool and reads its answer the way Claude does:
// anything but a well-formed allow or deny denies.
func (a *asker) ask(name string, input json.RawMessage, id string) (bool, string) {
	res, err := a.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: a.tool,
		Arguments: map[string]any{"tool_name": name, "input": input, "tool_use_id": id}})
	if err != nil {
		return false, "Error calling tool (" + name + "): " + err.Error()
	}
	if len(res.Content) != 1 {
		return false, "Error calling tool (" + name + "): the permission tool gave no answer"
	}
	t, _ := res.Content[0].(*mcp.TextContent)
	var ans struct {
		Behavior     string          `json:"behavior"`
		Message      *string         `json:"message"`
		UpdatedInput json.RawMessage `json:"updatedInput"`
	}
	if t == nil || json.Unmarshal([]byte(t.Text), &ans) != nil {
		return false, "Error calling tool (" + name + "): the permission answer is not JSON"
	}
	switch {
	case ans.Behavior == "allow" && len(ans.UpdatedInput) > 0:
		return true, ""
	case ans.Behavior == "deny" && ans.Message != nil:
		return false, *ans.Message
	}
	return false, "Error calling tool (" + name + "): the permission answer is malformed: " + t.Text
}

func (a *asker) close() { _ = a.cs.Close() }
