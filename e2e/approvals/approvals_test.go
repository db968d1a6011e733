// Package approvals_test runs ask mode end to end: the real daemon, the real
// Claude Code from npm pointed at a loopback stand-in whose model first
// calls a tool outside read_only (Bash writing a file in the run's cwd) and
// then answers with text quoting the tool's result, and a client answering
// agents.approve. Allowed, the file exists and the model received the tool
// result; denied, no file and the model received the denial; unanswered,
// denied at the approval timeout; allow_always, the next call of the same
// tool is not asked. Every decision is in runs.get.
//
// Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1, which turns a missing CLI into a failure); see
// standin.CLI.
package approvals_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// bash is the stand-in model's tool call: a shell command that writes a
// file in the run's working dir, which read_only would never allow.
func bash(file string) standin.ToolCall {
	return standin.ToolCall{Name: "Bash", Input: map[string]any{"command": "echo hello > " + file, "description": "Write a file"}}
}

// setup is a daemon running the real Claude Code against a stand-in with
// script, and a working dir for the run.
type setup struct {
	d     *daemontest.Daemon
	model *standin.Server
	cwd   string
}

func start(t *testing.T, script standin.Script) *setup {
	t.Helper()
	bin := standin.CLI(t, "claude")
	s := standin.NewAnthropic(t, script)
	d := daemontest.Start(t, daemontest.Options{
		Config:   "login_shell_path = false\n",
		Environ:  s.ClaudeEnv(t.TempDir(), os.Getenv("PATH")),
		Agents:   map[string]string{agent.ClaudeCode: bin},
		NoClient: true,
	})
	cwd := filepath.Join(t.TempDir(), "project")
	require.NoError(t, os.MkdirAll(cwd, 0o755))
	return &setup{d: d, model: s, cwd: cwd}
}

// asker is a client that answers agents.approve with decide (nil: never
// answers, so the daemon withdraws the question at its timeout).
type asker struct {
	c      *client.Client
	events *daemontest.Events

	mu        sync.Mutex
	questions []daemon.ApproveParams
}

func (s *setup) client(t *testing.T, decide func(daemon.ApproveParams) *daemon.ApproveAnswer) *asker {
	t.Helper()
	a := &asker{events: daemontest.NewEvents()}
	a.c = s.d.Dial(t, client.Options{OnEvent: a.events.Add,
		OnApprove: func(ctx context.Context, q daemon.ApproveParams) (daemon.ApproveAnswer, error) {
			a.mu.Lock()
			a.questions = append(a.questions, q)
			a.mu.Unlock()
			if ans := decide(q); ans != nil {
				return *ans, nil
			}
			<-ctx.Done()
			return daemon.ApproveAnswer{}, ctx.Err()
		}})
	return a
}

func (a *asker) asked() []daemon.ApproveParams {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]daemon.ApproveParams(nil), a.questions...)
}

// run starts an ask-mode run, waits for its terminal event and reads its
// record.
func (a *asker) run(t *testing.T, s *setup, approvalTimeout int) (daemon.AgentEvent, daemon.RunRecord) {
	t.Helper()
	acc, err := a.c.Stream(daemontest.Context(t), daemon.InvokeParams{ID: agent.ClaudeCode, Task: "Please create the file.", Cwd: s.cwd,
		PermissionMode: "ask", ApprovalTimeoutSecs: approvalTimeout, TimeoutSecs: 120}, nil)
	require.NoError(t, err)
	evs := a.events.WaitEnd(t, acc.RunID, 150*time.Second)
	last := evs[len(evs)-1]
	rec, err := a.c.Run(daemontest.Context(t), acc.RunID)
	require.NoError(t, err)
	require.NotNil(t, last.Result)
	require.Equal(t, daemon.EventDone, last.Kind, "status %s, error %+v", last.Status, last.Result.Error)
	return last, rec
}

func decideAll(decision, message string) func(daemon.ApproveParams) *daemon.ApproveAnswer {
	return func(daemon.ApproveParams) *daemon.ApproveAnswer {
		return &daemon.ApproveAnswer{Decision: decision, Message: message}
	}
}

func TestAnAllowedBashCallRunsAndTheModelGetsItsResult(t *testing.T) {
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
	s := start(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{bash("late.txt")}})
	a := s.client(t, func(daemon.ApproveParams) *daemon.ApproveAnswer { return nil })
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
