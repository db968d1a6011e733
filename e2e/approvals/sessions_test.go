package approvals_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/e2e/standin"
)

// The adapters that ask inside their own session protocol other than ACP:
// Codex (app-server), Droid (stream-jsonrpc) and Pi (RPC mode with card's
// extension). Each runs against a stand-in whose model first calls the
// CLI's shell tool to write a file in the cwd, then answers with text
// quoting the tool result it got.

var codex = agentCLI{id: agent.Codex, bin: "codex",
	shell: func(file string) standin.ToolCall {
		return standin.ToolCall{Name: "exec_command", Input: map[string]any{"cmd": "echo hello > " + file}}
	},
	serve: func(t *testing.T, script standin.Script) (*standin.Server, []string) {
		return standin.NewOpenAI(t, script), []string{"NO_COLOR=1"}
	},
	adapter: func(t *testing.T, s *standin.Server, home string) map[string]any {
		args, env := s.CodexExtras()
		return map[string]any{"args": args, "env": env}
	}}

// Droid runs on the Anthropic stand-in through a custom model in its own
// settings under HOME, selected by -m in card.toml's args.
var droid = agentCLI{id: agent.Droid, bin: "droid",
	shell: func(file string) standin.ToolCall {
		return standin.ToolCall{Name: "Execute", Input: map[string]any{"command": "echo hello > " + file,
			"summary": "Write a file", "riskLevel": "low", "riskLevelReason": "writes one file in the project"}}
	},
	serve: func(t *testing.T, script standin.Script) (*standin.Server, []string) {
		return standin.NewAnthropic(t, script), []string{"NO_COLOR=1"}
	},
	adapter: func(t *testing.T, s *standin.Server, home string) map[string]any {
		env, args, err := s.DroidSetup(home, os.Getenv("PATH"))
		require.NoError(t, err)
		return map[string]any{"args": args, "env": standin.AdapterEnv(env)}
	}}

// Pi runs on the Anthropic stand-in through a custom provider in its own
// config under HOME, selected by --provider and --model in card.toml.
var pi = agentCLI{id: agent.Pi, bin: "pi",
	shell: func(file string) standin.ToolCall {
		return standin.ToolCall{Name: "bash", Input: map[string]any{"command": "echo hello > " + file}}
	},
	serve: func(t *testing.T, script standin.Script) (*standin.Server, []string) {
		return standin.NewAnthropic(t, script), []string{"NO_COLOR=1"}
	},
	adapter: func(t *testing.T, s *standin.Server, home string) map[string]any {
		env, args, err := s.PiSetup(home, os.Getenv("PATH"))
		require.NoError(t, err)
		return map[string]any{"args": args, "env": standin.AdapterEnv(env)}
	}}

// sessionCase is one session adapter and what its real CLI does with each
// answer.
type sessionCase struct {
	cli agentCLI
	// tool and summary are how the question names the call.
	tool, summary string
	// ran is in the tool result the model got for the allowed call.
	ran string
	// denied is in the tool result the model got after a deny; empty when
	// a deny ends the CLI's turn with no second model call.
	denied string
	// deniedAnswer is in the run's answer after a deny.
	deniedAnswer string
	// deniedResult is in the run's tool_result event of the denied call:
	// what the agent recorded for it.
	deniedResult string
}

var (
	// Codex is answered "decline": the command does not run, the model is
	// told it was rejected, and the turn goes on.
	codexCase = sessionCase{cli: codex, tool: "command_execution", summary: "command_execution: echo hello > ",
		ran: "Process exited with code 0", denied: "rejected by user", deniedAnswer: "rejected by user"}
	// Droid is answered "cancel": the command does not run, Droid records
	// it as cancelled by the user and ends the turn without calling the
	// model again.
	droidCase = sessionCase{cli: droid, tool: "Execute", summary: "Execute: echo hello > ",
		ran: "Process exited with code 0", deniedResult: "Tool execution cancelled by user"}
	// Pi's gate (card's extension) blocks a denied call: the model is
	// given the gate's reason as the call's error result, and the turn
	// goes on.
	piCase = sessionCase{cli: pi, tool: "bash", summary: "bash: echo hello > ",
		ran: "(no output)", denied: "The user denied this tool call.", deniedAnswer: "The user denied this tool call.",
		deniedResult: "The user denied this tool call."}
)

// Each session adapter's cases run as one top-level test per adapter, so
// one adapter's runs can be picked by name (-run Droid).
func TestCodexAsksInItsAppServerSession(t *testing.T)     { sessionAsks(t, codexCase) }
func TestDroidAsksInItsStreamJSONRPCSession(t *testing.T) { sessionAsks(t, droidCase) }
func TestPiAsksThroughCardsGateInRPCMode(t *testing.T)    { sessionAsks(t, piCase) }

// sessionCases are every session adapter's cases, for the capture of the
// protocol examples.
var sessionCases = []sessionCase{codexCase, droidCase, piCase}

func sessionAsks(t *testing.T, c sessionCase) {
	t.Parallel()
	t.Run("an allowed shell command runs and the model gets its output", func(t *testing.T) { allowedInSession(t, c) })
	t.Run("a denied shell command does not run", func(t *testing.T) { deniedInSession(t, c) })
	t.Run("an unanswered shell command is denied at the approval timeout", func(t *testing.T) { unansweredInSession(t, c) })
}

func allowedInSession(t *testing.T, c sessionCase) {
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
	assert.Contains(t, results[0], c.ran)
	assert.Contains(t, last.Result.Answer, "DONE | tool result was:")
	assert.Contains(t, last.Result.Answer, c.ran)
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "allow", rec.Approvals[0].Decision)
	assert.Equal(t, "client", rec.Approvals[0].By)
	assert.Equal(t, q.RequestID, rec.Approvals[0].RequestID)
	t.Logf("%s: tool result %q; answer %q", c.cli.id, results[0], last.Result.Answer)
}

func deniedInSession(t *testing.T, c sessionCase) {
	s := startCLI(t, c.cli, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.cli.shell("denied.txt")}})
	a := s.client(t, decideAll("deny", "Not in this repository, please."))
	last, rec := a.run(t, s, 0)

	assert.NoFileExists(t, filepath.Join(s.cwd, "denied.txt"))
	results := s.model.ToolResults()
	if c.denied == "" {
		assert.Empty(t, results, "the deny ended the turn: no second model call")
	} else {
		require.Len(t, results, 1, "the model was called again with the denial")
		assert.Contains(t, results[0], c.denied)
	}
	assert.Contains(t, last.Result.Answer, c.deniedAnswer)
	if c.deniedResult != "" {
		var outputs []string
		for _, e := range a.events.Of(last.RunID) {
			if e.Kind == api.EventToolResult {
				outputs = append(outputs, e.Output)
			}
		}
		require.Len(t, outputs, 1)
		assert.Contains(t, outputs[0], c.deniedResult)
	}
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "deny", rec.Approvals[0].Decision)
	assert.Equal(t, "client", rec.Approvals[0].By)
	assert.Equal(t, "Not in this repository, please.", rec.Approvals[0].Message, "the client's message is in the record")
	t.Logf("%s: tool results %q; answer %q", c.cli.id, results, last.Result.Answer)
}

func unansweredInSession(t *testing.T, c sessionCase) {
	s := startCLI(t, c.cli, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.cli.shell("late.txt")}})
	a := s.client(t, func(api.ApproveParams) *api.ApproveAnswer { return nil })
	began := time.Now()
	_, rec := a.run(t, s, 3)

	assert.GreaterOrEqual(t, time.Since(began), 3*time.Second)
	assert.NoFileExists(t, filepath.Join(s.cwd, "late.txt"))
	results := s.model.ToolResults()
	if c.denied == "" {
		assert.Empty(t, results)
	} else {
		require.Len(t, results, 1)
		assert.Contains(t, results[0], c.denied)
	}
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "deny", rec.Approvals[0].Decision)
	assert.Equal(t, "timeout", rec.Approvals[0].By)
}

// Codex under approvalPolicy untrusted asks for every command, even one
// that only lists the working dir: nothing runs unasked.
func TestCodexAsksEvenForACommandThatOnlyReads(t *testing.T) {
	t.Parallel()
	s := startCLI(t, codex, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{
		{Name: "exec_command", Input: map[string]any{"cmd": "ls -la"}},
		{Name: "exec_command", Input: map[string]any{"cmd": "cat existing.txt"}},
	}})
	require.NoError(t, os.WriteFile(filepath.Join(s.cwd, "existing.txt"), []byte("old\n"), 0o644))
	a := s.client(t, decideAll("deny", "no"))
	_, rec := a.run(t, s, 0)

	require.Len(t, a.asked(), 2, "both reading commands were asked")
	assert.Equal(t, "command_execution: ls -la", a.asked()[0].Summary)
	assert.Equal(t, "command_execution: cat existing.txt", a.asked()[1].Summary)
	require.Len(t, rec.Approvals, 2)
	for _, r := range s.model.ToolResults() {
		assert.NotContains(t, r, "old", "the denied cat did not run")
	}
}

// An approved Codex command can run outside Codex's sandbox, so in ask
// mode the question is the whole boundary, as it is for Claude Code's Bash.
// Each case writes outside the working dir, in a directory workspace-write
// never makes writable (not a temp dir), and the client allows it.
//
//   - A command the model sends with sandbox_permissions "require_escalated"
//     runs unsandboxed from its first attempt: the file is written, always.
//   - A plain command runs first inside the sandbox. When Codex reads the
//     failure as a sandbox denial it runs it again unsandboxed without a
//     second question, but that reading is a timing guess (it waits a few
//     milliseconds for the output, then looks for words such as "Read-only
//     file system"), so either the file is written or the model is told the
//     sandbox refused. Both were seen with 0.171.0 on different machines;
//     what never happens is a second question or any other outcome.
//
// docs/agents/codex.md says so, and this holds it to what Codex does.
func TestAnApprovedCodexCommandCanRunOutsideCodexsSandbox(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		escalated bool
	}{
		{"escalated by the model: written on the first attempt", true},
		{"plain: written by Codex's retry or refused by the sandbox", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wd, err := os.Getwd()
			require.NoError(t, err)
			dir, err := os.MkdirTemp(wd, ".outside-")
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(dir) })
			outside := filepath.Join(dir, "outside.txt")
			write := "echo hello > " + outside
			call := map[string]any{"cmd": write}
			if c.escalated {
				call["sandbox_permissions"] = "require_escalated"
				call["justification"] = "Write the greeting where you asked for it?"
			}
			s := startCLI(t, codex, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{
				{Name: "exec_command", Input: map[string]any{"cmd": "echo hello > inside.txt"}},
				{Name: "exec_command", Input: call},
			}})
			a := s.client(t, decideAll("allow", ""))
			_, rec := a.run(t, s, 0)

			require.Len(t, a.asked(), 2, "both commands were asked, and a retry outside the sandbox asked nothing more")
			assert.Equal(t, "command_execution: "+write, a.asked()[1].Summary, "the question showed the command whole")
			require.Len(t, rec.Approvals, 2)
			assert.FileExists(t, filepath.Join(s.cwd, "inside.txt"))
			results := s.model.ToolResults()
			require.Len(t, results, 2)
			t.Logf("tool results: %q", results)
			if c.escalated {
				assert.FileExists(t, outside, "the approved, escalated write outside the working dir ran: no sandbox stood in its way")
				return
			}
			if _, err := os.Stat(outside); err == nil {
				t.Log("Codex read the sandbox's refusal as a denial and ran the command again outside it")
				return
			}
			assert.Contains(t, results[1], "Read-only file system",
				"the file was not written, so the sandbox refused it and the model was told so")
		})
	}
}
