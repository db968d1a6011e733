package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// askDaemon is a daemon whose Claude Code is the stand-in that asks card's
// permission tool exactly as the real one does.
type askDaemon struct {
	*daemontest.Daemon
	cwd string
}

func startAskDaemon(t *testing.T, toml string) *askDaemon {
	t.Helper()
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n" + toml,
		Agents: map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
	})
	return &askDaemon{Daemon: d, cwd: t.TempDir()}
}

// asker is a client that answers agents.approve from a script (nil: never
// answers, so the daemon withdraws the question) and keeps what it was
// asked and the run's events.
type asker struct {
	events *daemontest.Events
	answer func(q api.ApproveParams) api.ApproveAnswer
	// got receives each question as it arrives.
	got chan api.ApproveParams

	mu        sync.Mutex
	questions []api.ApproveParams
	withdrawn int
}

func newAsker(answer func(api.ApproveParams) api.ApproveAnswer) *asker {
	return &asker{events: daemontest.NewEvents(), answer: answer, got: make(chan api.ApproveParams, 16)}
}

func (a *asker) options() client.Options {
	return client.Options{OnEvent: a.events.Add, OnApprove: func(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
		a.mu.Lock()
		a.questions = append(a.questions, q)
		a.mu.Unlock()
		a.got <- q
		if a.answer == nil {
			<-ctx.Done()
			a.mu.Lock()
			a.withdrawn++
			a.mu.Unlock()
			return api.ApproveAnswer{}, ctx.Err()
		}
		return a.answer(q), nil
	}}
}

func (a *asker) seen() []api.ApproveParams {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]api.ApproveParams(nil), a.questions...)
}

func (a *asker) next(t *testing.T) api.ApproveParams {
	t.Helper()
	select {
	case q := <-a.got:
		return q
	case <-time.After(10 * time.Second):
		t.Fatal("no agents.approve arrived")
		return api.ApproveParams{}
	}
}

func answer(decision, message string) func(api.ApproveParams) api.ApproveAnswer {
	return func(api.ApproveParams) api.ApproveAnswer {
		return api.ApproveAnswer{Decision: decision, Message: message}
	}
}

func bashWrites(file string) string {
	return fmt.Sprintf(`TOOL Bash {"command":"echo hello > %s"}`, file)
}

// ask is an ask-mode run of task in the daemon's working directory.
func (ad *askDaemon) ask(task string) api.InvokeParams {
	return api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "ask"}, Task: task}
}

// startAsk streams p on a new client of a.
func (ad *askDaemon) startAsk(t *testing.T, a *asker, p api.InvokeParams) (*client.Client, string) {
	t.Helper()
	c := ad.Dial(t, a.options())
	acc, err := c.Stream(daemontest.Context(t), p, nil)
	require.NoError(t, err)
	return c, acc.RunID
}

func record(t *testing.T, c *client.Client, id string) api.RunRecord {
	t.Helper()
	r, err := c.Run(daemontest.Context(t), id)
	require.NoError(t, err)
	return r
}

func TestAnAllowedToolCallRunsAndIsRecorded(t *testing.T) {
	ad := startAskDaemon(t, "")
	a := newAsker(answer("allow", ""))
	c, id := ad.startAsk(t, a, ad.ask(bashWrites("made.txt")))
	evs := a.events.WaitEnd(t, id, 20*time.Second)
	last := evs[len(evs)-1]
	require.Equal(t, api.EventDone, last.Kind, "%+v", last.Result)
	assert.FileExists(t, filepath.Join(ad.cwd, "made.txt"))

	qs := a.seen()
	require.Len(t, qs, 1)
	q := qs[0]
	assert.Equal(t, id, q.RunID)
	assert.Equal(t, "apr_1", q.RequestID)
	assert.Equal(t, "claude-code", q.Adapter)
	assert.Equal(t, "Bash", q.Tool.Name)
	assert.JSONEq(t, `{"command":"echo hello > made.txt"}`, string(q.Tool.Input))
	assert.Equal(t, "toolu_fake01", q.Tool.ID, "the same id as the run's tool_use event")
	assert.Equal(t, "Bash: echo hello > made.txt", q.Summary)
	assert.WithinDuration(t, time.Now().Add(120*time.Second), q.ExpiresAt, 30*time.Second, "card.toml's default of 120 s")

	// The agent's tool_use line and its question race (stdout is read on
	// its own); the question, its decision and the tool's result do not.
	at := map[string]int{}
	for i, ev := range evs {
		at[ev.Kind] = i + 1
	}
	for _, k := range []string{"tool_use", "approval_requested", "approval_decided", "tool_result", "done"} {
		require.NotZero(t, at[k], "no %s event: %s", k, daemontest.Kinds(evs))
	}
	assert.Less(t, at["approval_requested"], at["approval_decided"])
	assert.Less(t, at["approval_decided"], at["tool_result"])
	assert.Less(t, at["tool_use"], at["tool_result"])
	decided := evs[at["approval_decided"]-1]
	require.NotNil(t, decided.Approval)
	assert.Equal(t, "allow", decided.Approval.Decision)
	assert.Equal(t, "client", decided.Approval.By)

	rec := record(t, c, id)
	assert.Equal(t, "ask", rec.PermissionMode)
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "apr_1", rec.Approvals[0].RequestID)
	assert.Equal(t, "Bash", rec.Approvals[0].Tool.Name)
	assert.Equal(t, "allow", rec.Approvals[0].Decision)
	assert.Equal(t, "client", rec.Approvals[0].By)
	assert.NotNil(t, rec.Approvals[0].RequestedAt)
	assert.NotNil(t, rec.Approvals[0].DecidedAt)
}

func TestADeniedToolCallDoesNotRunAndTheAgentIsToldWhy(t *testing.T) {
	ad := startAskDaemon(t, "")
	a := newAsker(answer("deny", "not on my machine"))
	c, id := ad.startAsk(t, a, ad.ask(bashWrites("denied.txt")))
	evs := a.events.WaitEnd(t, id, 20*time.Second)
	last := evs[len(evs)-1]
	require.Equal(t, api.EventDone, last.Kind)
	assert.NoFileExists(t, filepath.Join(ad.cwd, "denied.txt"))
	assert.Contains(t, last.Result.Answer, "not on my machine", "the agent received the denial")
	rec := record(t, c, id)
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "deny", rec.Approvals[0].Decision)
	assert.Equal(t, "not on my machine", rec.Approvals[0].Message)
}

func TestAQuestionNobodyAnswersIsDeniedAtTheApprovalTimeout(t *testing.T) {
	ad := startAskDaemon(t, "")
	a := newAsker(nil)
	start := time.Now()
	p := ad.ask(bashWrites("late.txt"))
	p.ApprovalTimeoutSecs = 1
	c, id := ad.startAsk(t, a, p)
	evs := a.events.WaitEnd(t, id, 20*time.Second)
	assert.GreaterOrEqual(t, time.Since(start), time.Second)
	assert.NoFileExists(t, filepath.Join(ad.cwd, "late.txt"))
	assert.Contains(t, evs[len(evs)-1].Result.Answer, "nobody answered within 1s")
	rec := record(t, c, id)
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "timeout", rec.Approvals[0].By)
	assert.Equal(t, "deny", rec.Approvals[0].Decision)
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.withdrawn == 1
	}, 5*time.Second, 10*time.Millisecond, "the client's question was withdrawn with $/cancelRequest")
}

func TestAllowAlwaysLetsTheSameToolRunUnaskedForTheRestOfTheRun(t *testing.T) {
	ad := startAskDaemon(t, "")
	a := newAsker(answer("allow_always", ""))
	c, id := ad.startAsk(t, a, ad.ask(bashWrites("one.txt")+"\n"+bashWrites("two.txt")))
	a.events.WaitEnd(t, id, 20*time.Second)
	assert.FileExists(t, filepath.Join(ad.cwd, "one.txt"))
	assert.FileExists(t, filepath.Join(ad.cwd, "two.txt"))
	assert.Len(t, a.seen(), 1, "the second Bash call was not asked")
	rec := record(t, c, id)
	require.Len(t, rec.Approvals, 2)
	assert.Equal(t, "allow_always", rec.Approvals[0].Decision)
	assert.Equal(t, "client", rec.Approvals[0].By)
	assert.Equal(t, "allow", rec.Approvals[1].Decision)
	assert.Equal(t, "rule", rec.Approvals[1].By)
}

// A client that serves no requests answers agents.approve with -32601:
// nobody can answer, so the call is denied at once rather than at the
// timeout.
func TestAClientThatCannotAnswerGetsItsRunsCallsDeniedAtOnce(t *testing.T) {
	ad := startAskDaemon(t, "")
	evs := daemontest.NewEvents()
	c := ad.Dial(t, client.Options{OnEvent: evs.Add})
	acc, err := c.Stream(daemontest.Context(t), ad.ask(bashWrites("x.txt")), nil)
	require.NoError(t, err)
	got := evs.WaitEnd(t, acc.RunID, 10*time.Second)
	assert.Contains(t, got[len(got)-1].Result.Answer, "no client could answer")
	rec := record(t, c, acc.RunID)
	require.Len(t, rec.Approvals, 1)
	assert.Equal(t, "no_client", rec.Approvals[0].By)
}

// When the starting connection goes away, a connection that follows the
// run is asked instead, and only it may answer.
func TestWhenTheStarterLeavesAFollowerIsAskedAndAnswers(t *testing.T) {
	ad := startAskDaemon(t, "")
	starter := newAsker(nil)
	sc, id := ad.startAsk(t, starter, ad.ask(bashWrites("follower.txt")))
	q := starter.next(t)

	follower := newAsker(nil)
	fc := ad.Dial(t, follower.options())
	sub, err := fc.Subscribe(daemontest.Context(t), id, 0, nil)
	require.NoError(t, err)
	assert.True(t, sub.Live)
	time.Sleep(100 * time.Millisecond)
	assert.Empty(t, follower.seen(), "the starter is still connected")

	// A connection that neither started nor follows the run may not answer.
	stranger := ad.Dial(t, client.Options{})
	_, err = stranger.ApprovalDecide(daemontest.Context(t), api.DecideParams{RunID: id, RequestID: q.RequestID, Decision: "allow"})
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeApprovalNotAsked, re.Code)
	assert.Contains(t, re.Message, "runs.subscribe")

	require.NoError(t, sc.Close())
	fq := follower.next(t)
	assert.Equal(t, q.RequestID, fq.RequestID, "the waiting question goes on to the follower")
	res, err := fc.ApprovalDecide(daemontest.Context(t), api.DecideParams{RunID: id, RequestID: fq.RequestID, Decision: "allow"})
	require.NoError(t, err)
	assert.Equal(t, api.DecideResult{RunID: id, RequestID: "apr_1", Decision: "allow", By: "client"}, res)
	follower.events.WaitEnd(t, id, 20*time.Second)
	assert.FileExists(t, filepath.Join(ad.cwd, "follower.txt"))

	_, err = fc.ApprovalDecide(daemontest.Context(t), api.DecideParams{RunID: id, RequestID: "apr_1", Decision: "deny"})
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeApprovalClosed, re.Code, "the run has ended: %s", re.Message)
}

// Every bad answer is a clear error and changes nothing: the question stays
// open and a good answer still decides it.
func TestBadAnswersAreClearErrorsAndLeaveTheRunAsItWas(t *testing.T) {
	ad := startAskDaemon(t, "")
	a := newAsker(answer("maybe", "")) // answered, but not with a decision
	c, id := ad.startAsk(t, a, ad.ask(bashWrites("bad.txt")))
	q := a.next(t)
	decide := func(p api.DecideParams) error {
		_, err := c.ApprovalDecide(daemontest.Context(t), p)
		return err
	}
	cases := []struct {
		name  string
		p     api.DecideParams
		code  int64
		field string
	}{
		{"unknown run", api.DecideParams{RunID: "run_nope", RequestID: q.RequestID, Decision: "allow"}, daemon.CodeRunNotFound, ""},
		{"unknown request", api.DecideParams{RunID: id, RequestID: "apr_99", Decision: "allow"}, daemon.CodeApprovalNotFound, ""},
		{"not a decision", api.DecideParams{RunID: id, RequestID: q.RequestID, Decision: "maybe"}, rpcclient.CodeInvalidParams, "decision"},
		{"no request id", api.DecideParams{RunID: id, Decision: "allow"}, rpcclient.CodeInvalidParams, "request_id"},
	}
	for _, tc := range cases {
		re := rpcCode(t, decide(tc.p))
		assert.Equal(t, tc.code, re.Code, "%s: %s", tc.name, re.Message)
		if tc.field != "" {
			assert.Equal(t, tc.field, errData(t, re)["field"], tc.name)
		}
	}
	time.Sleep(100 * time.Millisecond)
	for _, ev := range a.events.Of(id) {
		assert.NotEqual(t, "approval_decided", ev.Kind, "no bad answer decided the question")
	}

	require.NoError(t, decide(api.DecideParams{RunID: id, RequestID: q.RequestID, Decision: "deny", Message: "fixed"}))
	evs := a.events.WaitEnd(t, id, 20*time.Second)
	assert.Contains(t, evs[len(evs)-1].Result.Answer, "fixed")
	re := rpcCode(t, decide(api.DecideParams{RunID: id, RequestID: q.RequestID, Decision: "allow"}))
	assert.Equal(t, daemon.CodeApprovalClosed, re.Code)
	assert.NoFileExists(t, filepath.Join(ad.cwd, "bad.txt"))
}

func TestAskModeIsCheckedLikeEditAndRefusedWhereTheAgentCannotAsk(t *testing.T) {
	ad := startAskDaemon(t, "")
	c := ad.Client
	withTimeout := func(p api.InvokeParams, secs int) api.InvokeParams { p.ApprovalTimeoutSecs = secs; return p }
	cases := []struct {
		name  string
		p     api.InvokeParams
		field string
		has   string
	}{
		{"no cwd", api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", PermissionMode: "ask"}, Task: "x"}, "cwd", "ask"},
		{"a timeout outside ask", api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: ad.cwd, ApprovalTimeoutSecs: 5}, Task: "x"}, "approval_timeout_secs", "only to permission_mode ask"},
		{"a timeout out of range", withTimeout(ad.ask("x"), 4000), "approval_timeout_secs", "3600"},
		{"gemini resumes nothing in ask", api.InvokeParams{AgentSettings: api.AgentSettings{ID: "gemini", Cwd: ad.cwd, PermissionMode: "ask"}, Task: "x", Resume: "r1"}, "resume", "loses a session"},
		{"droid takes no system prompt in ask", api.InvokeParams{AgentSettings: api.AgentSettings{ID: "droid", Cwd: ad.cwd, PermissionMode: "ask", SystemPrompt: "be brief", SystemPromptAppend: true}, Task: "x"}, "system_prompt", "in ask mode"},
		{"pi names only tools ask mode offers", api.InvokeParams{AgentSettings: api.AgentSettings{ID: "pi", Cwd: ad.cwd, PermissionMode: "ask", AllowedTools: []string{"web"}}, Task: "x"}, "allowed_tools", "ask mode"},
	}
	for _, tc := range cases {
		_, err := c.Invoke(daemontest.Context(t), tc.p)
		re := rpcCode(t, err)
		assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, tc.name)
		assert.Equal(t, tc.field, errData(t, re)["field"], tc.name)
		assert.Contains(t, re.Message, tc.has, tc.name)
	}
}

// agents.detect tells a client which adapters can ask, and it is exactly
// the set whose ask request is not refused.
func TestDetectSaysWhichAdaptersCanAsk(t *testing.T) {
	ad := startAskDaemon(t, "")
	var list []struct {
		ID           string `json:"id"`
		Capabilities struct {
			Ask *bool `json:"ask"`
		} `json:"capabilities"`
	}
	require.NoError(t, ad.Client.Call(daemontest.Context(t), "agents.detect", nil, &list))
	require.NotEmpty(t, list)
	for _, a := range list {
		require.NotNil(t, a.Capabilities.Ask, "%s: ask is always reported", a.ID)
		_, err := ad.Client.Invoke(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: a.ID, Cwd: ad.cwd, PermissionMode: "ask", TimeoutSecs: 5}, Task: "x"})
		refusedAsk := false
		if err != nil {
			re := rpcCode(t, err)
			refusedAsk = re.Code == rpcclient.CodeInvalidParams && errData(t, re)["field"] == "permission_mode"
		}
		assert.Equal(t, *a.Capabilities.Ask, !refusedAsk, "%s: detect says ask=%v, invoke refused it: %v", a.ID, *a.Capabilities.Ask, err)
	}
}

func TestApprovalTimeoutComesFromCardTOMLAndIsBounded(t *testing.T) {
	ad := startAskDaemon(t, "approval_timeout_secs = 7\n")
	a := newAsker(answer("deny", ""))
	_, id := ad.startAsk(t, a, ad.ask(bashWrites("t.txt")))
	q := a.next(t)
	assert.WithinDuration(t, time.Now().Add(7*time.Second), q.ExpiresAt, 3*time.Second)
	a.events.WaitEnd(t, id, 20*time.Second)

	for _, bad := range []string{"approval_timeout_secs = 0\n", "approval_timeout_secs = 3601\n"} {
		_, err := daemon.ParseConfig("card.toml", bad)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "approval_timeout_secs")
	}
}

// The permission tool's config holds the run's secret: it is a private
// file that is gone when the run ends, and never on the agent's argv.
func TestThePermissionToolsSecretStaysInAPrivateFileThatIsRemovedAfterTheRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the agent's argv from /proc")
	}
	ad := startAskDaemon(t, "")
	a := newAsker(answer("allow", ""))
	// The agent's own shell reads its parent's (the agent's) argv, and the
	// config file's mode while the run lives.
	cmd := `tr '\0' '\n' < /proc/$PPID/cmdline > argv.txt; f=$(sed -n '/^--mcp-config$/{n;p;}' argv.txt); stat -c %a "$f" > mode.txt; echo "$f" > path.txt`
	input, err := json.Marshal(map[string]string{"command": cmd})
	require.NoError(t, err)
	_, id := ad.startAsk(t, a, ad.ask("TOOL Bash "+string(input)))
	a.events.WaitEnd(t, id, 20*time.Second)
	argv, err := os.ReadFile(filepath.Join(ad.cwd, "argv.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(argv), "--permission-prompt-tool\nmcp__card__approve\n")
	assert.NotContains(t, string(argv), "Bearer", "the secret is not on argv")
	mode, err := os.ReadFile(filepath.Join(ad.cwd, "mode.txt"))
	require.NoError(t, err)
	assert.Equal(t, "600", strings.TrimSpace(string(mode)))
	path, err := os.ReadFile(filepath.Join(ad.cwd, "path.txt"))
	require.NoError(t, err)
	cfgPath := strings.TrimSpace(string(path))
	require.True(t, filepath.IsAbs(cfgPath), cfgPath)
	assert.NoFileExists(t, cfgPath, "removed with the run's private directory")
}
