package spawn

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Codex asks over its app-server: the ask plan runs `codex app-server` on
// stdio, with the operator's -c overrides and no exec-mode flags.
func TestCodexAskPlanRunsTheAppServer(t *testing.T) {
	p, err := Build("/usr/bin/codex", Request{Adapter: agent.Codex, Mode: ModeAsk, Cwd: cwd, Model: "gpt-5", SystemPrompt: "be brief",
		Extras: Extras{Args: []string{"-c", `model_provider="x"`}}})
	require.NoError(t, err)
	assert.Equal(t, &SessionPlan{Protocol: ProtocolCodexApp, Adapter: agent.Codex, thread: &codexAppThreadStart{Cwd: cwd, ApprovalPolicy: "untrusted",
		ApprovalsReviewer: "user", Sandbox: "workspace-write"}}, p.Session, "a saved thread, so that a later turn can resume it")
	assert.Equal(t, &AskPlan{Channel: AskViaSession}, p.Ask)
	assert.Equal(t, []string{"app-server", "-c", `model_provider="x"`, "--listen", "stdio://", "-c", `model="gpt-5"`,
		"-c", `model_instructions_file="` + FileRef("instructions.md") + `"`}, p.Args)
	for _, f := range []string{"exec", "--json", "--sandbox", "-", "never"} {
		assert.NotContains(t, p.Args, f, "the thread sets the sandbox and the approval policy; the prompt goes in turn/start")
	}
	_, err = Build("/usr/bin/codex", Request{Adapter: agent.Codex, Mode: ModeAsk, Cwd: cwd,
		Extras: Extras{Args: []string{"-c", `approvals_reviewer="auto_review"`}}})
	require.Error(t, err, "an operator override of the reviewer would answer card's questions for it")
	for _, m := range []Mode{ModeReadOnly, ModeEdit, ModeBypass} {
		p, err := Build("/usr/bin/codex", Request{Adapter: agent.Codex, Mode: m, Cwd: cwd, AllowBypass: true})
		require.NoError(t, err)
		assert.Nil(t, p.Session, "%s stays codex exec", m)
		assert.Equal(t, "exec", p.Args[0])
	}
}

// An ask-mode thread is saved and resumed by its id with thread/resume,
// with the very policy a new ask thread gets; a request that discards its
// session gets an ephemeral thread. The resume goes in the protocol, not
// on argv.
func TestACodexAskPlanResumesItsThreadWithTheAskPolicy(t *testing.T) {
	ask := codexAppThreadStart{Cwd: cwd, ApprovalPolicy: "untrusted", ApprovalsReviewer: "user", Sandbox: "workspace-write"}
	for _, tc := range []struct {
		name string
		req  Request
		want SessionPlan
	}{
		{"resume", Request{Resume: "th-old"}, SessionPlan{thread: &ask, resume: "th-old"}},
		{"no session", Request{NoSession: true}, SessionPlan{thread: &codexAppThreadStart{Cwd: cwd, ApprovalPolicy: "untrusted", ApprovalsReviewer: "user",
			Sandbox: "workspace-write", Ephemeral: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Adapter, req.Mode, req.Cwd = agent.Codex, ModeAsk, cwd
			p, err := Build("/usr/bin/codex", req)
			require.NoError(t, err)
			tc.want.Protocol, tc.want.Adapter = ProtocolCodexApp, agent.Codex
			assert.Equal(t, &tc.want, p.Session)
			assert.NotContains(t, strings.Join(p.Args, " "), "th-old")
			assert.NotContains(t, p.Args, "resume")
		})
	}
	p, err := BuildWarm("/usr/bin/codex", Request{Adapter: agent.Codex, Mode: ModeAsk, Cwd: cwd, Resume: "th-old"})
	require.NoError(t, err)
	assert.Equal(t, &SessionPlan{Protocol: ProtocolCodexApp, Adapter: agent.Codex, thread: &ask, resume: "th-old"}, p.Session, "a warm agent resumes it alike")
}

// A cold ask-mode turn resumes the thread and its command is still asked.
func TestACodexRunResumingAThreadStillPutsItsCommandToTheApprover(t *testing.T) {
	r := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := codexProtocol.plan("turn")
	p.Session.resume = "th-old"
	res, _, work, err := sessionRun(t, ctx, p, r, Limits{KillGrace: 300 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, "th-old", res.SessionID, "the resumed thread, not a new one")
	require.Len(t, r.asked, 1)
	assert.Equal(t, "command_execution", r.asked[0].Tool)
	assert.FileExists(t, filepath.Join(work, "made.txt"))
	assert.Equal(t, "DONE after accept | text:Please create the file.", res.Answer)
}

// fakeCodexApp is a fake `codex app-server`: raw lines as the real one
// writes them (no "jsonrpc" member, an extra emittedAtMs). Scripts:
//
//	turn      asks about a command; writes made.txt if accepted; streams
//	          its answer; completes the turn; exits when stdin closes.
//	patch     announces a file change, asks about it, says the decision.
//	die       answers until turn/start, then exits 3.
//	silent    starts a grandchild (pid in grandchild.pid), answers nothing.
//	noise     fakeNoise, then as turn.
//	failed    the turn fails with a 401 error.
func fakeCodexApp(script string) int {
	if script == "silent" {
		return fakeSilent()
	}
	if script == "noise" {
		fakeNoise()
		script = "turn"
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	say := func(s string) { fmt.Println(s) }
	note := func(method, params string) {
		say(`{"method":"` + method + `","params":` + params + `,"emittedAtMs":1}`)
	}
	for in.Scan() {
		var m struct {
			ID     *int            `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		_ = json.Unmarshal(in.Bytes(), &m)
		id := 0
		if m.ID != nil {
			id = *m.ID
		}
		switch m.Method {
		case "initialize":
			say(fmt.Sprintf(`{"id":%d,"result":{"userAgent":"fake/0.171.0","platformOs":"linux"}}`, id))
			say("a log line that is not JSON")
		case "thread/start":
			var p struct {
				Cwd, ApprovalPolicy, Sandbox, ApprovalsReviewer string
				Ephemeral                                       bool
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.ApprovalPolicy != "untrusted" || p.Sandbox != "workspace-write" || p.ApprovalsReviewer != "user" || p.Ephemeral {
				say(fmt.Sprintf(`{"id":%d,"error":{"code":-32602,"message":"unexpected thread/start %s"}}`, id, strings.ReplaceAll(string(m.Params), `"`, `'`)))
				continue
			}
			note("warning", `{"threadId":"th-1","message":"Model metadata for `+"`gpt-5`"+` not found."}`)
			say(fmt.Sprintf(`{"id":%d,"result":{"thread":{"id":"th-1","cwd":%q},"model":"gpt-5"}}`, id, p.Cwd))
		case "thread/resume":
			// Only with the ask thread's policy, as thread/start.
			var p struct {
				ThreadID, Cwd, ApprovalPolicy, Sandbox, ApprovalsReviewer string
				ExcludeTurns                                              bool
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.ApprovalPolicy != "untrusted" || p.Sandbox != "workspace-write" || p.ApprovalsReviewer != "user" || !p.ExcludeTurns || p.Cwd == "" {
				say(fmt.Sprintf(`{"id":%d,"error":{"code":-32602,"message":"unexpected thread/resume %s"}}`, id, strings.ReplaceAll(string(m.Params), `"`, `'`)))
				continue
			}
			say(fmt.Sprintf(`{"id":%d,"result":{"thread":{"id":%q,"cwd":%q},"model":"gpt-5"}}`, id, p.ThreadID, p.Cwd))
		case "turn/start":
			var p struct {
				Input []struct{ Type, Text, URL string }
			}
			_ = json.Unmarshal(m.Params, &p)
			if script == "die" {
				fmt.Fprintln(os.Stderr, "fatal: the fake server fell over")
				os.Exit(3)
			}
			say(fmt.Sprintf(`{"id":%d,"result":{"turn":{"id":"tu-1","status":"inProgress"}}}`, id))
			note("turn/started", `{"threadId":"th-1","turn":{"id":"tu-1"}}`)
			if script == "failed" {
				note("error", `{"error":{"message":"unexpected status 401 Unauthorized: Incorrect API key"},"willRetry":false,"threadId":"th-1","turnId":"tu-1"}`)
				note("turn/completed", `{"threadId":"th-1","turn":{"id":"tu-1","status":"failed","error":{"message":"unexpected status 401 Unauthorized: Incorrect API key"}}}`)
				continue
			}
			var said []string
			for _, i := range p.Input {
				said = append(said, i.Type+":"+i.Text+i.URL)
			}
			fakeCodexTurn(script, in, say, note, strings.Join(said, " "))
		}
	}
	return 0
}

func fakeCodexTurn(script string, in *bufio.Scanner, say func(string), note func(string, string), said string) {
	if script == "patch" {
		note("item/started", `{"item":{"type":"fileChange","id":"call_1","changes":[{"path":"/p/added.txt","kind":{"type":"add"},"diff":"hi\n"}],"status":"inProgress"}}`)
		say(`{"method":"item/fileChange/requestApproval","id":0,"params":{"threadId":"th-1","turnId":"tu-1","itemId":"call_1","reason":null,"grantRoot":null}}`)
	} else {
		note("item/started", `{"item":{"type":"commandExecution","id":"call_1","command":"/bin/bash -lc 'echo hello > made.txt'","cwd":"/p","status":"inProgress","commandActions":[{"type":"unknown","command":"echo hello > made.txt"}]}}`)
		say(`{"method":"item/commandExecution/requestApproval","id":0,"params":{"kind":"command","threadId":"th-1","turnId":"tu-1","itemId":"call_1","command":"/bin/bash -lc 'echo hello > made.txt'","cwd":"/p","commandActions":[{"type":"unknown","command":"echo hello > made.txt"}],"availableDecisions":["accept","cancel"]}}`)
	}
	var answer struct {
		ID     *int `json:"id"`
		Result struct {
			Decision string `json:"decision"`
		} `json:"result"`
		Error *json.RawMessage `json:"error"`
	}
	for in.Scan() {
		if json.Unmarshal(in.Bytes(), &answer) == nil && answer.ID != nil && *answer.ID == 0 {
			break
		}
	}
	decision := answer.Result.Decision
	if answer.Error != nil {
		decision = "error " + string(*answer.Error)
	}
	note("serverRequest/resolved", `{"threadId":"th-1","requestId":0}`)
	status, out := "declined", `null`
	if decision == "accept" {
		status, out = "completed", `"made\n"`
		if script != "patch" {
			_ = os.WriteFile("made.txt", []byte("hello\n"), 0o600)
		}
	}
	if script == "patch" {
		note("item/completed", `{"item":{"type":"fileChange","id":"call_1","changes":[{"path":"/p/added.txt","kind":{"type":"add"},"diff":"hi\n"}],"status":"`+status+`"}}`)
	} else {
		note("item/completed", `{"item":{"type":"commandExecution","id":"call_1","command":"/bin/bash -lc 'echo hello > made.txt'","cwd":"/p","status":"`+status+`","aggregatedOutput":`+out+`,"exitCode":0}}`)
	}
	note("thread/tokenUsage/updated", `{"threadId":"th-1","tokenUsage":{"total":{"inputTokens":10,"cachedInputTokens":2,"outputTokens":5}}}`)
	note("item/started", `{"item":{"type":"reasoning","id":"rs_1","summary":[],"content":[]}}`)
	note("item/completed", `{"item":{"type":"reasoning","id":"rs_1","summary":["thought"],"content":[]}}`)
	note("item/started", `{"item":{"type":"agentMessage","id":"msg_1","text":""}}`)
	text, _ := json.Marshal("DONE after " + decision + " | " + said)
	note("item/agentMessage/delta", `{"itemId":"msg_1","delta":`+string(text)+`}`)
	note("item/completed", `{"item":{"type":"agentMessage","id":"msg_1","text":`+string(text)+`}}`)
	note("thread/tokenUsage/updated", `{"threadId":"th-1","tokenUsage":{"total":{"inputTokens":20,"cachedInputTokens":2,"outputTokens":10}}}`)
	note("turn/completed", `{"threadId":"th-1","turn":{"id":"tu-1","status":"completed","error":null}}`)
}

// codexRun runs the fake app-server with script through the real runner,
// as Codex's ask plan would run.
func codexRun(t *testing.T, ctx context.Context, script string, approver Approver, lim Limits, images ...Image) (api.Result, []Event, string, error) {
	p := codexProtocol.plan(script)
	p.Input.Images = images
	return sessionRun(t, ctx, p, approver, lim)
}

func TestACodexTurnPutsTheCommandToTheApproverAndAnswersAcceptOrDecline(t *testing.T) {
	for _, allow := range []bool{true, false} {
		r := &recorder{answer: func(Question) Decision { return Decision{Allow: allow, Message: "no"} }}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, evs, work, err := codexRun(t, ctx, "turn", r, Limits{KillGrace: 300 * time.Millisecond})
		cancel()
		require.NoError(t, err)
		require.Len(t, r.asked, 1)
		q := r.asked[0]
		assert.Equal(t, "command_execution", q.Tool)
		assert.Equal(t, "call_1", q.ToolUseID)
		assert.Equal(t, "command_execution: echo hello > made.txt", q.Summary, "the model's command, not Codex's shell wrapper")
		assert.JSONEq(t, `{"command":"/bin/bash -lc 'echo hello > made.txt'","cwd":"/p"}`, string(q.Input))
		assert.Equal(t, "th-1", res.SessionID)
		assert.Equal(t, api.Usage{InputTokens: 20, OutputTokens: 10, CachedInputTokens: 2}, res.Usage)
		assert.Equal(t, 1, res.ToolCalls)
		assert.Equal(t, 2, res.Turns, "one model call before the command, one after")
		want := []string{api.EventOther, api.EventWarning, api.EventSession, api.EventToolUse, api.EventToolResult, api.EventOther, api.EventText, api.EventUsage}
		assert.Equal(t, want, kinds(evs))
		assert.Equal(t, "a log line that is not JSON", evs[0].Text)
		assert.Equal(t, "Model metadata for `gpt-5` not found.", evs[1].Text, "a warning the run survives")
		assert.Equal(t, Event{Kind: api.EventSession, SessionID: "th-1", Model: "gpt-5"}, evs[2])
		assert.Equal(t, "reasoning", evs[5].Type)
		if allow {
			assert.FileExists(t, filepath.Join(work, "made.txt"))
			assert.Equal(t, "DONE after accept | text:Please create the file.", res.Answer, "the prompt travelled in turn/start")
			assert.Equal(t, Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: "call_1"}, Output: "made\n"}, evs[4])
		} else {
			assert.NoFileExists(t, filepath.Join(work, "made.txt"))
			assert.Equal(t, "DONE after decline | text:Please create the file.", res.Answer, "a deny is decline, never an error")
			assert.Equal(t, Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: "call_1"}, Output: "declined", IsError: true}, evs[4])
		}
		assert.Equal(t, Event{Kind: api.EventText, Text: res.Answer, Delta: true}, evs[6], "streamed once, as a delta")
	}
}

// A file change is asked with the change the item announced before the
// question (the question itself names only the item).
func TestACodexFileChangeIsAskedWithTheChangeItAnnounced(t *testing.T) {
	r := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, evs, _, err := codexRun(t, ctx, "patch", r, Limits{KillGrace: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, r.asked, 1)
	assert.Equal(t, "file_change", r.asked[0].Tool)
	assert.Equal(t, "file_change: add /p/added.txt", r.asked[0].Summary)
	assert.JSONEq(t, `{"changes":[{"path":"/p/added.txt","kind":{"type":"add"},"diff":"hi\n"}]}`, string(r.asked[0].Input))
	assert.Equal(t, "DONE after accept | text:Please create the file.", res.Answer)
	var uses int
	for _, e := range evs {
		if e.Kind == api.EventToolUse {
			uses++
		}
	}
	assert.Equal(t, 1, uses, "the change is announced once")
}

func TestImagesGoInCodexTurnStartAsDataURLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := &recorder{answer: func(Question) Decision { return Decision{} }}
	res, _, _, err := codexRun(t, ctx, "turn", r, Limits{KillGrace: 300 * time.Millisecond}, Image{Name: "a.png", MIME: "image/png", Data: []byte("PNG")})
	require.NoError(t, err)
	assert.Equal(t, "DONE after decline | image:data:image/png;base64,UE5H text:Please create the file.", res.Answer)
}

func TestACodexTurnThatFailsIsTheRunsErrorOfItsKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, evs, _, err := codexRun(t, ctx, "failed", &recorder{}, Limits{KillGrace: 300 * time.Millisecond})
	e := runErr(t, err)
	assert.Equal(t, api.KindAuth, e.Kind)
	assert.Contains(t, e.Message, "401 Unauthorized")
	assert.Contains(t, e.Message, "codex login")
	assert.Equal(t, api.KindAuth, res.Error.Kind)
	assert.Contains(t, kinds(evs), api.EventError)
}
