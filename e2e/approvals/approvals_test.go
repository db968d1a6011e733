// Package approvals_test runs ask mode end to end: the real daemon, a real
// agent CLI from npm pointed at a loopback stand-in whose model first calls
// a tool outside read_only (a shell command writing a file in the run's
// cwd) and then answers with text quoting the tool's result, and a client
// answering agents.approve. Allowed, the file exists and the model received
// the tool result; denied, no file and the model received the denial (or,
// for Copilot and Droid, whose turn ends at a denial, no second model call
// at all);
// unanswered, denied at the approval timeout; allow_always, the next call
// of the same tool is not asked. Every decision is in runs.get.
//
// Claude Code asks through card's permission tool; Gemini CLI and Copilot
// CLI through ACP (session/request_permission) on their own stdio; Codex
// through its app-server, Droid through its stream-jsonrpc, and Pi in its
// RPC mode through card's gate extension.
//
// Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1, which turns a missing CLI into a failure); see
// standin.CLI.
package approvals_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/spawn"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// bash is the stand-in model's tool call: a shell command that writes a
// file in the run's working dir, which read_only would never allow.
func bash(file string) standin.ToolCall {
	return standin.ToolCall{Name: "Bash", Input: map[string]any{"command": "echo hello > " + file, "description": "Write a file"}}
}

// agentCLI is one real CLI run in ask mode against its vendor's stand-in.
type agentCLI struct {
	id, bin string
	// serve starts the stand-in and returns the daemon's environment.
	serve func(t *testing.T, script standin.Script) (*standin.Server, []string)
	// adapter, when set, is the CLI's card.toml [adapters.<id>] table for
	// the stand-in (args and env the operator would configure).
	adapter func(t *testing.T, s *standin.Server, home string) map[string]any
	// shell is the CLI's own shell tool writing file.
	shell func(file string) standin.ToolCall
}

var (
	claude = agentCLI{id: agent.ClaudeCode, bin: "claude", shell: bash,
		serve: func(t *testing.T, script standin.Script) (*standin.Server, []string) {
			s := standin.NewAnthropic(t, script)
			return s, s.ClaudeEnv(t.TempDir(), os.Getenv("PATH"))
		}}
	gemini = agentCLI{id: agent.Gemini, bin: "gemini",
		shell: func(file string) standin.ToolCall {
			return standin.ToolCall{Name: "run_shell_command", Input: map[string]any{"command": "echo hello > " + file, "description": "Write a file"}}
		},
		serve: func(t *testing.T, script standin.Script) (*standin.Server, []string) {
			s := standin.NewGemini(t, script)
			env, err := s.GeminiSetup(t.TempDir(), os.Getenv("PATH"))
			require.NoError(t, err)
			return s, env
		}}
	// Copilot runs on the Anthropic stand-in through its BYOK provider.
	copilot = agentCLI{id: agent.Copilot, bin: "copilot",
		shell: func(file string) standin.ToolCall {
			return standin.ToolCall{Name: "bash", Input: map[string]any{"command": "echo hello > " + file, "description": "Write a file"}}
		},
		serve: func(t *testing.T, script standin.Script) (*standin.Server, []string) {
			s := standin.NewAnthropic(t, script)
			return s, s.CopilotEnv(t.TempDir(), os.Getenv("PATH"))
		}}
)

// setup is a daemon running one real CLI against a stand-in with a
// script, and a working dir for the run.
type setup struct {
	cli   agentCLI
	d     *daemontest.Daemon
	model *standin.Server
	cwd   string
}

func start(t *testing.T, script standin.Script) *setup { return startCLI(t, claude, script) }

func startCLI(t *testing.T, c agentCLI, script standin.Script) *setup {
	t.Helper()
	bin := standin.CLI(t, c.bin)
	s, env := c.serve(t, script)
	config := "login_shell_path = false\n"
	if c.adapter != nil {
		home := t.TempDir()
		cfg := map[string]any{"login_shell_path": false, "adapters": map[string]any{c.id: c.adapter(t, s, home)}}
		var buf bytes.Buffer
		require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
		config = buf.String()
		env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}, env...)
	}
	d := daemontest.Start(t, daemontest.Options{
		Config:   config,
		Environ:  env,
		Agents:   map[string]string{c.id: bin},
		NoClient: true,
	})
	cwd := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(cwd, 0o755))
	return &setup{cli: c, d: d, model: s, cwd: cwd}
}

// asker is a client that answers agents.approve with decide (nil: never
// answers, so the daemon withdraws the question at its timeout).
type asker struct {
	c      *client.Client
	events *daemontest.Events

	mu        sync.Mutex
	questions []api.ApproveParams
}

func (s *setup) client(t *testing.T, decide func(api.ApproveParams) *api.ApproveAnswer) *asker {
	t.Helper()
	a := &asker{events: daemontest.NewEvents()}
	a.c = s.d.Dial(t, client.Options{OnEvent: a.events.Add,
		OnApprove: func(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
			a.mu.Lock()
			a.questions = append(a.questions, q)
			a.mu.Unlock()
			if ans := decide(q); ans != nil {
				return *ans, nil
			}
			<-ctx.Done()
			return api.ApproveAnswer{}, ctx.Err()
		}})
	return a
}

func (a *asker) asked() []api.ApproveParams {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]api.ApproveParams(nil), a.questions...)
}

// run starts an ask-mode run, waits for its terminal event and reads its
// record.
func (a *asker) run(t *testing.T, s *setup, approvalTimeout int) (api.AgentEvent, api.RunRecord) {
	t.Helper()
	acc, err := a.c.Stream(daemontest.Context(t), api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: s.cli.id, Cwd: s.cwd, PermissionMode: "ask", ApprovalTimeoutSecs: approvalTimeout, TimeoutSecs: 120},
		Task:          "Please create the file.",
	}, nil)
	require.NoError(t, err)
	evs := a.events.WaitEnd(t, acc.RunID, 150*time.Second)
	last := evs[len(evs)-1]
	rec, err := a.c.Run(daemontest.Context(t), acc.RunID)
	require.NoError(t, err)
	require.NotNil(t, last.Result)
	require.Equal(t, api.EventDone, last.Kind, "status %s, error %+v", last.Status, last.Result.Error)
	return last, rec
}

func decideAll(decision, message string) func(api.ApproveParams) *api.ApproveAnswer {
	return func(api.ApproveParams) *api.ApproveAnswer {
		return &api.ApproveAnswer{Decision: decision, Message: message}
	}
}

func TestAnAllowedBashCallRunsAndTheModelGetsItsResult(t *testing.T) {
	t.Parallel()
	s := start(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{bash("made-by-bash.txt")}})
	a := s.client(t, decideAll("allow", ""))
	last, rec := a.run(t, s, 0)

	assert.FileExists(t, filepath.Join(s.cwd, "made-by-bash.txt"))
	require.Len(t, a.asked(), 1)
	q := a.asked()[0]
	assert.Equal(t, "Bash", q.Tool.Name)
	assert.JSONEq(t, `{"command":"echo hello > made-by-bash.txt","description":"Write a file"}`, string(q.Tool.Input))
	assert.Equal(t, "toolu_standin01", q.Tool.ID)
	assert.Equal(t, "Bash: echo hello > made-by-bash.txt", q.Summary)
	assert.Equal(t, []string{"is_error=false content=(Bash completed with no output)"}, s.model.ToolResults(),
		"the stand-in received the tool's result")
	assert.Contains(t, last.Result.Answer, "is_error=false")

	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "allow", rec.Approvals[0].Decision)
	assert.Equal(t, "client", rec.Approvals[0].By)
	assert.Equal(t, q.RequestID, rec.Approvals[0].RequestID)
}

func TestADeniedBashCallDoesNotRunAndTheModelGetsTheDenial(t *testing.T) {
	t.Parallel()
	s := start(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{bash("denied.txt")}})
	a := s.client(t, decideAll("deny", "Not in this repository, please."))
	last, rec := a.run(t, s, 0)

	assert.NoFileExists(t, filepath.Join(s.cwd, "denied.txt"))
	assert.Equal(t, []string{"is_error=true content=Not in this repository, please."}, s.model.ToolResults(),
		"the stand-in received the denial as the tool's result")
	assert.Contains(t, last.Result.Answer, "Not in this repository, please.")
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "deny", rec.Approvals[0].Decision)
	assert.Equal(t, "client", rec.Approvals[0].By)
	assert.Equal(t, "Not in this repository, please.", rec.Approvals[0].Message)
}

func TestAnUnansweredBashCallIsDeniedAtTheApprovalTimeout(t *testing.T) {
	t.Parallel()
	s := start(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{bash("late.txt")}})
	a := s.client(t, func(api.ApproveParams) *api.ApproveAnswer { return nil })
	began := time.Now()
	_, rec := a.run(t, s, 3)

	assert.GreaterOrEqual(t, time.Since(began), 3*time.Second)
	assert.NoFileExists(t, filepath.Join(s.cwd, "late.txt"))
	results := s.model.ToolResults()
	require.Len(t, results, 1)
	assert.Contains(t, results[0], "is_error=true content=card denied this tool call: nobody answered within 3s")
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "deny", rec.Approvals[0].Decision)
	assert.Equal(t, "timeout", rec.Approvals[0].By)
}

func TestAllowAlwaysLetsTheSecondBashCallRunUnasked(t *testing.T) {
	t.Parallel()
	s := start(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{bash("first.txt"), bash("second.txt")}})
	a := s.client(t, decideAll("allow_always", ""))
	_, rec := a.run(t, s, 0)

	assert.FileExists(t, filepath.Join(s.cwd, "first.txt"))
	assert.FileExists(t, filepath.Join(s.cwd, "second.txt"))
	assert.Len(t, a.asked(), 1, "the second Bash call was not put to the client")
	assert.Len(t, s.model.ToolResults(), 2)
	require.Len(t, rec.Approvals, 2)
	assert.Equal(t, "allow_always", rec.Approvals[0].Decision)
	assert.Equal(t, "client", rec.Approvals[0].By)
	assert.Equal(t, "allow", rec.Approvals[1].Decision)
	assert.Equal(t, "rule", rec.Approvals[1].By)
}

// The read-only boundary runs unasked; a shell command that only reads is
// still asked, since read_only has no shell at all (Claude's own classifier
// would run it unasked: card's ask rules stop that).
func TestReadRunsUnaskedButEvenAReadOnlyShellCommandIsAsked(t *testing.T) {
	t.Parallel()
	s := start(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{
		{Name: "Read", Input: map[string]any{"file_path": "/etc/hostname"}},
		{Name: "Bash", Input: map[string]any{"command": "ls -la", "description": "List files"}},
	}})
	a := s.client(t, decideAll("deny", "no listing"))
	_, rec := a.run(t, s, 0)

	require.Len(t, a.asked(), 1, "only the shell command was asked")
	assert.Equal(t, "Bash", a.asked()[0].Tool.Name)
	results := s.model.ToolResults()
	require.Len(t, results, 2)
	assert.Contains(t, results[0], "is_error=false", "Read ran, also outside the working dir, as in read_only")
	assert.Equal(t, "is_error=true content=no listing", results[1])
	require.Len(t, rec.Approvals, 1)
}

// The ACP adapters: the same three answers, with what each CLI really does
// with them.
type acpCase struct {
	cli agentCLI
	// tool and summary are how the question names the call.
	tool, summary string
	// ran is in the tool result the model got for the allowed call.
	ran string
	// deniedResults are the tool results the stand-in received after a
	// deny; deniedAnswer is in the run's answer.
	deniedResults []string
	deniedAnswer  string
}

var acpCases = []acpCase{
	{cli: gemini, tool: "run_shell_command", summary: "run_shell_command: echo hello > ",
		ran: "is_error=false content=<untrusted_context>\nOutput: (empty)",
		// Gemini tells the model its own words for a denial (ACP has no
		// field for the client's message) and the turn goes on.
		deniedResults: []string{`is_error=true content=Tool "run_shell_command" was canceled by the user.`},
		deniedAnswer:  "was canceled by the user"},
	{cli: copilot, tool: "execute", summary: "execute: echo hello > ",
		ran: "completed with exit code 0",
		// A denial ends Copilot's turn: the model is not called again, so
		// it never hears it; Copilot answers the prompt itself.
		deniedResults: nil,
		deniedAnswer:  "Info: Operation cancelled by user"},
}

func TestAnAllowedShellCommandRunsOverACPAndTheModelGetsItsOutput(t *testing.T) {
	t.Parallel()
	for _, c := range acpCases {
		t.Run(c.cli.id, func(t *testing.T) {
			file := "made-by-" + c.cli.id + ".txt"
			s := startCLI(t, c.cli, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.cli.shell(file)}})
			a := s.client(t, decideAll("allow", ""))
			last, rec := a.run(t, s, 0)

			assert.FileExists(t, filepath.Join(s.cwd, file))
			require.Len(t, a.asked(), 1)
			q := a.asked()[0]
			assert.Equal(t, c.tool, q.Tool.Name)
			assert.Equal(t, c.summary+file, q.Summary)
			assert.NotEmpty(t, q.Tool.ID)
			results := s.model.ToolResults()
			require.Len(t, results, 1, "the stand-in received the tool's result")
			assert.Contains(t, results[0], "is_error=false")
			assert.Contains(t, results[0], c.ran)
			assert.Contains(t, last.Result.Answer, "DONE | tool result was: is_error=false")
			require.Len(t, rec.Approvals, 1)
			assert.Equal(t, "allow", rec.Approvals[0].Decision)
			assert.Equal(t, "client", rec.Approvals[0].By)
			assert.Equal(t, q.RequestID, rec.Approvals[0].RequestID)
		})
	}
}

func TestADeniedShellCommandOverACPDoesNotRun(t *testing.T) {
	t.Parallel()
	for _, c := range acpCases {
		t.Run(c.cli.id, func(t *testing.T) {
			s := startCLI(t, c.cli, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.cli.shell("denied.txt")}})
			a := s.client(t, decideAll("deny", "Not in this repository, please."))
			last, rec := a.run(t, s, 0)

			assert.NoFileExists(t, filepath.Join(s.cwd, "denied.txt"))
			assert.Equal(t, c.deniedResults, s.model.ToolResults())
			assert.Contains(t, last.Result.Answer, c.deniedAnswer)
			require.Len(t, rec.Approvals, 1)
			assert.Equal(t, "deny", rec.Approvals[0].Decision)
			assert.Equal(t, "client", rec.Approvals[0].By)
			assert.Equal(t, "Not in this repository, please.", rec.Approvals[0].Message, "the client's message is in the record")
		})
	}
}

func TestAnUnansweredShellCommandOverACPIsDeniedAtTheApprovalTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range acpCases {
		t.Run(c.cli.id, func(t *testing.T) {
			s := startCLI(t, c.cli, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.cli.shell("late.txt")}})
			a := s.client(t, func(api.ApproveParams) *api.ApproveAnswer { return nil })
			began := time.Now()
			_, rec := a.run(t, s, 3)

			assert.GreaterOrEqual(t, time.Since(began), 3*time.Second)
			assert.NoFileExists(t, filepath.Join(s.cwd, "late.txt"))
			assert.Equal(t, c.deniedResults, s.model.ToolResults())
			require.Len(t, rec.Approvals, 1)
			assert.Equal(t, "deny", rec.Approvals[0].Decision)
			assert.Equal(t, "timeout", rec.Approvals[0].By)
		})
	}
}

// allow_always is card's rule, per tool name: Gemini itself is answered
// allow-once each time, and the second call is decided by the rule.
func TestAllowAlwaysOverACPLetsTheSecondShellCommandRunUnasked(t *testing.T) {
	t.Parallel()
	for _, c := range acpCases {
		t.Run(c.cli.id, func(t *testing.T) {
			s := startCLI(t, c.cli, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.cli.shell("first.txt"), c.cli.shell("second.txt")}})
			a := s.client(t, decideAll("allow_always", ""))
			_, rec := a.run(t, s, 0)

			assert.FileExists(t, filepath.Join(s.cwd, "first.txt"))
			assert.FileExists(t, filepath.Join(s.cwd, "second.txt"))
			assert.Len(t, a.asked(), 1, "the second call was not put to the client")
			assert.Len(t, s.model.ToolResults(), 2)
			require.Len(t, rec.Approvals, 2, "the agent asked card both times: it was answered allow-once")
			assert.Equal(t, "allow_always", rec.Approvals[0].Decision)
			assert.Equal(t, "allow", rec.Approvals[1].Decision)
			assert.Equal(t, "rule", rec.Approvals[1].By)
		})
	}
}

// An ask-mode run over ACP fails with the same error kinds as the CLI's
// one-shot mode: Gemini answers session/prompt with the API's status as
// the error code, Copilot says it in message text and ends the turn.
func TestACPRunsReportAPIErrorsWithTheOneShotKinds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cli    agentCLI
		status int
		kind   string
		says   string
	}{
		{gemini, 401, "auth", "GEMINI_API_KEY"},
		{gemini, 429, "rate_limit", "quota"},
		{copilot, 401, "auth", "HTTP 401"},
		{copilot, 429, "rate_limit", "Last error: 429"},
	} {
		t.Run(c.cli.id+"/"+strconv.Itoa(c.status), func(t *testing.T) {
			s := startCLI(t, c.cli, standin.Script{Status: c.status})
			a := s.client(t, decideAll("allow", ""))
			acc, err := a.c.Stream(daemontest.Context(t), api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: s.cli.id, Cwd: s.cwd, PermissionMode: "ask", TimeoutSecs: 120},
				Task:          "Say PONG.",
			}, nil)
			require.NoError(t, err)
			evs := a.events.WaitEnd(t, acc.RunID, 150*time.Second)
			last := evs[len(evs)-1]
			require.Equal(t, api.EventRunError, last.Kind)
			require.NotNil(t, last.Result.Error)
			assert.Equal(t, c.kind, last.Result.Error.Kind, last.Result.Error.Message)
			assert.Contains(t, last.Result.Error.Message, c.says)
			assert.NotEmpty(t, s.model.ModelCalls(), "the CLI called the stand-in")
		})
	}
}

// What runs unasked in ask mode is each CLI's own read-only set, checked
// here against the real CLIs. Gemini runs its read tools and the shell
// commands its policy engine calls known safe with every path inside the
// workspace (ls -la) without asking; a command reading outside the
// workspace is asked.
func TestGeminiRunsReadsInsideTheWorkspaceUnaskedAndAsksForAReadOutsideIt(t *testing.T) {
	t.Parallel()
	s := startCLI(t, gemini, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{
		{Name: "read_file", Input: map[string]any{"file_path": "existing.txt"}},
		{Name: "run_shell_command", Input: map[string]any{"command": "ls -la", "description": "List files"}},
		{Name: "run_shell_command", Input: map[string]any{"command": "cat /etc/hostname", "description": "Read a file outside"}},
	}})
	require.NoError(t, os.WriteFile(filepath.Join(s.cwd, "existing.txt"), []byte("old\n"), 0o644))
	a := s.client(t, decideAll("deny", "not outside the project"))
	_, rec := a.run(t, s, 0)

	require.Len(t, a.asked(), 1, "only the read outside the workspace was asked")
	assert.Equal(t, "run_shell_command: cat /etc/hostname", a.asked()[0].Summary)
	results := s.model.ToolResults()
	require.Len(t, results, 3)
	assert.Equal(t, "is_error=false content=old\n", results[0], "read_file ran unasked")
	assert.Contains(t, results[1], "is_error=false", "ls -la ran unasked")
	assert.Contains(t, results[1], "existing.txt")
	assert.Equal(t, `is_error=true content=Tool "run_shell_command" was canceled by the user.`, results[2])
	require.Len(t, rec.Approvals, 1)
}

// Copilot runs view inside the working dir unasked and asks for every
// shell command, even one that only lists files.
func TestCopilotRunsViewInTheWorkingDirUnaskedAndAsksForEveryShellCommand(t *testing.T) {
	t.Parallel()
	s := startCLI(t, copilot, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{
		{Name: "view", Input: map[string]any{"path": "existing.txt"}},
		{Name: "bash", Input: map[string]any{"command": "ls -la", "description": "List files"}},
	}})
	require.NoError(t, os.WriteFile(filepath.Join(s.cwd, "existing.txt"), []byte("old\n"), 0o644))
	a := s.client(t, decideAll("deny", "no listing"))
	_, rec := a.run(t, s, 0)

	require.Len(t, a.asked(), 1, "only the shell command was asked")
	assert.Equal(t, "execute: ls -la", a.asked()[0].Summary)
	results := s.model.ToolResults()
	require.Len(t, results, 1, "view's result reached the model; the denied ls ended the turn")
	assert.Contains(t, results[0], "is_error=false")
	assert.Contains(t, results[0], "old")
	require.Len(t, rec.Approvals, 1)
}

// The client's own MCP server (mcp_endpoint) is handed to Copilot in ask
// mode too, and its tools run unasked there, as Claude Code's do: the
// client named the server, and its tools act on the client's side, not on
// the files the mode guards. The stand-in model calls the server's tool;
// its result must come back to the model without a question.
func TestCopilotInAskModeCallsTheClientsMCPToolsUnasked(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := mcp.NewServer(&mcp.Implementation{Name: "card-e2e-client-tools", Version: "test"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "ping", Description: "answers pong"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		calls.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "pong"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		// Copilot leaves its MCP session open; end it so the server can close.
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
		hs.Close()
	})

	// Copilot offers the model an MCP tool as <server>-<tool>.
	s := startCLI(t, copilot, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{{Name: spawn.MCPServerName + "-ping", Input: map[string]any{}}}})
	a := s.client(t, decideAll("deny", "no"))
	acc, err := a.c.Stream(daemontest.Context(t), api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: agent.Copilot, Cwd: s.cwd, PermissionMode: "ask", TimeoutSecs: 120, MCPEndpoint: hs.URL + "/mcp"},
		Task:          "Call ping.",
	}, nil)
	require.NoError(t, err)
	evs := a.events.WaitEnd(t, acc.RunID, 150*time.Second)
	last := evs[len(evs)-1]
	require.Equal(t, api.EventDone, last.Kind, "status %s, error %+v", last.Status, last.Result.Error)

	assert.Empty(t, a.asked(), "the client's MCP tool was not asked")
	assert.Equal(t, int32(1), calls.Load(), "the tool ran once")
	assert.Equal(t, []string{"is_error=false content=pong"}, s.model.ToolResults(), "and the model got its result")
	rec, err := a.c.Run(daemontest.Context(t), acc.RunID)
	require.NoError(t, err)
	assert.Empty(t, rec.Approvals)
}

// An ask-mode run over ACP hands the request's images to the agent inside
// session/prompt, and each CLI delivers them to the model byte for byte.
func TestImagesReachTheModelInAnAskRunOverACP(t *testing.T) {
	t.Parallel()
	var red bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	draw.Draw(img, img.Bounds(), &image.Uniform{C: color.RGBA{R: 255, A: 255}}, image.Point{}, draw.Src)
	require.NoError(t, png.Encode(&red, img))
	for _, c := range acpCases {
		t.Run(c.cli.id, func(t *testing.T) {
			s := startCLI(t, c.cli, standin.Script{Answer: "Red"})
			a := s.client(t, decideAll("deny", ""))
			acc, err := a.c.Stream(daemontest.Context(t), api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: s.cli.id, Cwd: s.cwd, PermissionMode: "ask", TimeoutSecs: 120},
				Task:          "What colour is this image?",
				Attachments:   []api.Attachment{{DataB64: base64.StdEncoding.EncodeToString(red.Bytes()), MimeType: "image/png", Name: "red.png"}},
			}, nil)
			require.NoError(t, err)
			assert.Empty(t, acc.DroppedAttachments)
			evs := a.events.WaitEnd(t, acc.RunID, 150*time.Second)
			last := evs[len(evs)-1]
			require.Equal(t, api.EventDone, last.Kind, "status %s, error %+v", last.Status, last.Result.Error)
			seen := s.model.Images()
			require.NotEmpty(t, seen, "no image reached the model")
			assert.Equal(t, "image/png", seen[0].MIME)
			assert.True(t, bytes.Equal(red.Bytes(), seen[0].Data), "the image arrived changed (%d bytes, sent %d)", len(seen[0].Data), red.Len())
			assert.True(t, s.model.TextContains("What colour is this image?"), "the task reached the model too")
			t.Logf("%s: %d model calls, %d images seen, events %s", c.cli.id, len(s.model.ModelCalls()), len(seen), daemontest.Kinds(evs))
		})
	}
}
