package agentside

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/rpc/rpcclient"
)

func initialize(e *editor) acp.InitializeResponse {
	var r acp.InitializeResponse
	e.ok(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: 1}, &r)
	return r
}

func newSession(e *editor, adapter string) string {
	var r acp.NewSessionResponse
	e.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work/project", Meta: meta(adapter)}, &r)
	require.NotEmpty(e.t, r.SessionID)
	return r.SessionID
}

func prompt(e *editor, id, text string) acp.PromptResponse {
	var r acp.PromptResponse
	e.ok(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock(text)}}, &r)
	return r
}

func TestInitializeTellsEachAdaptersCapabilitiesTruthfully(t *testing.T) {
	for _, tc := range []struct {
		adapter    string
		image, mcp bool
	}{
		{"claude-code", true, true},
		{"droid", false, true},
		{"pi", true, false},
		{"", false, false}, // per session: what every installed adapter takes
	} {
		t.Run("adapter "+tc.adapter, func(t *testing.T) {
			e := newEditor(t, Config{Adapter: tc.adapter}, newFake())
			r := initialize(e)
			assert.Equal(t, 1, r.ProtocolVersion)
			c := r.AgentCapabilities
			assert.True(t, c.LoadSession)
			assert.Equal(t, tc.image, c.PromptCapabilities.Image)
			assert.Equal(t, tc.mcp, c.MCPCapabilities.HTTP)
			assert.False(t, c.MCPCapabilities.SSE, "card runs no SSE server")
			assert.False(t, c.PromptCapabilities.Audio)
			assert.True(t, c.PromptCapabilities.EmbeddedContext)
			assert.NotNil(t, c.SessionCapabilities.List)
			assert.NotNil(t, c.SessionCapabilities.Resume)
			assert.NotNil(t, c.SessionCapabilities.Close)
			assert.Nil(t, c.SessionCapabilities.Delete, "card keeps history; it does not delete sessions over ACP")
			require.NotEmpty(t, r.AuthMethods)
			if tc.adapter == "" {
				assert.Contains(t, string(c.Meta), `"droid":{"image":false`)
			}
		})
	}
}

func TestInitializeForAnAdapterNotInstalledSaysHowToInstallIt(t *testing.T) {
	e := newEditor(t, Config{Adapter: "codex"}, newFake())
	err := e.fail(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: 1})
	assert.Equal(t, CodeAdapterUnavailable, err.Code)
	assert.Contains(t, err.Message, "npm install -g @openai/codex")

	e2 := newEditor(t, Config{Adapter: "nope"}, newFake())
	err = e2.fail(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: 1})
	assert.Equal(t, CodeAdapterUnavailable, err.Code)
	assert.Contains(t, err.Message, "claude-code, codex")
}

// An editor, and the ACP registry's check of an agent, decide from
// initialize whether card is an agent at all; with no daemon it still
// answers, from the adapter's own facts, and what needs the daemon says how
// to start one.
func TestWithNoDaemonInitializeAnswersAndEverythingElseSaysHowToStartOne(t *testing.T) {
	e := newEditor(t, Config{Adapter: "droid"}, nil)
	e.srv.SetUnavailable(errors.New("no daemon running for home /h: start it with `card serve`"))
	r := initialize(e)
	assert.Equal(t, 1, r.ProtocolVersion)
	assert.False(t, r.AgentCapabilities.PromptCapabilities.Image, "droid takes no image, daemon or not")
	assert.True(t, r.AgentCapabilities.MCPCapabilities.HTTP)
	require.NotNil(t, r.AgentInfo.Title)
	assert.Equal(t, "card: Factory Droid", *r.AgentInfo.Title)
	require.Len(t, r.AuthMethods, 1)
	assert.Equal(t, "agent", r.AuthMethods[0].Type)
	assert.Equal(t, "droid", r.AuthMethods[0].ID)

	for _, m := range []struct {
		method string
		params any
	}{
		{acp.MethodAuthenticate, acp.AuthenticateRequest{MethodID: "droid"}},
		{acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work"}},
		{acp.MethodSessionList, acp.ListSessionsRequest{}},
	} {
		err := e.fail(m.method, m.params)
		assert.Equal(t, CodeNoDaemon, err.Code, m.method)
		assert.Contains(t, err.Message, "card serve", m.method)
	}

	unknown := newEditor(t, Config{Adapter: "nope"}, nil)
	unknown.srv.SetUnavailable(errors.New("no daemon running"))
	err := unknown.fail(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: 1})
	assert.Equal(t, CodeAdapterUnavailable, err.Code)
	assert.Contains(t, err.Message, "claude-code, codex")
}

// The ACP registry lists an agent only when each of its auth methods says
// its type; card's is the agent kind (authenticate checks the CLI's own
// sign-in), with the daemon and without it.
func TestEveryAuthMethodSaysItsType(t *testing.T) {
	for _, tc := range []struct {
		name    string
		adapter string
		daemon  bool
	}{
		{"one adapter", "claude-code", true},
		{"every adapter", "", true},
		{"one adapter, no daemon", "codex", false},
		{"every adapter, no daemon", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *editor
			if tc.daemon {
				e = newEditor(t, Config{Adapter: tc.adapter}, newFake())
			} else {
				e = newEditor(t, Config{Adapter: tc.adapter}, nil)
				e.srv.SetUnavailable(errors.New("no daemon running"))
			}
			r := initialize(e)
			require.NotEmpty(t, r.AuthMethods)
			for _, m := range r.AuthMethods {
				assert.Equal(t, "agent", m.Type, m.ID)
			}
		})
	}
}

func TestAuthenticateReportsTheCLIsOwnSignIn(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	e.ok(acp.MethodAuthenticate, acp.AuthenticateRequest{MethodID: "claude-code"}, nil)

	be.health = api.ExternalAgentHealth{Status: api.StatusNotConfigured, Reason: "no credentials found"}
	err := e.fail(acp.MethodAuthenticate, acp.AuthenticateRequest{MethodID: "claude-code"})
	assert.Equal(t, acp.CodeAuthRequired, err.Code)
	assert.Contains(t, err.Message, "no credentials found")
	assert.Contains(t, err.Message, "sign in with `claude` itself")

	err = e.fail(acp.MethodAuthenticate, acp.AuthenticateRequest{MethodID: "codex"})
	assert.Equal(t, acp.CodeInvalidParams, err.Code)
}

func TestSessionNewStartsACardSessionForTheAdapterItNames(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{}, be)
	initialize(e)

	err := e.fail(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "work", Meta: meta("claude-code")})
	assert.Contains(t, err.Message, "cwd: must be an absolute path")

	var r acp.NewSessionResponse
	e.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work", Meta: json.RawMessage(`{"card":{"adapter":"claude-code","model":"m1","effort":"high"}}`)}, &r)
	assert.Equal(t, "ses_1", r.SessionID)
	require.NotNil(t, r.Modes)
	assert.Equal(t, "ask", r.Modes.CurrentModeID, "an editor's session asks before it changes anything, unless it says otherwise")
	require.Len(t, be.started, 1)
	assert.Equal(t, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: "/work", PermissionMode: "ask", Model: "m1", Effort: "high"}}, be.started[0])

	fixed := newEditor(t, Config{Adapter: "pi"}, be)
	err = fixed.fail(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work", Meta: meta("claude-code")})
	assert.Contains(t, err.Message, "runs pi only")
	fixed.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work"}, &r)
	assert.Equal(t, "pi", be.started[1].ID)
}

func TestARefusedStartKeepsTheDaemonsCodeAndMessage(t *testing.T) {
	be := newFake()
	be.startErr = &rpcclient.Error{Code: -32012, Message: "cwd refused: /etc is outside the allowed roots for mode edit", Data: map[string]any{"field": "cwd"}}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	err := e.fail(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/etc"})
	assert.Equal(t, acp.ErrorCode(-32012), err.Code)
	assert.Contains(t, err.Message, "cwd refused")
	assert.JSONEq(t, `{"field":"cwd"}`, string(err.Data))

	be.health = api.ExternalAgentHealth{Status: api.StatusExpired, Reason: "the login expired"}
	err = e.fail(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/etc"})
	assert.Equal(t, acp.ErrorCode(-32012), err.Code, "health's guess at the sign-in never replaces the daemon's own refusal")
}

func TestMCPServersCardCannotHandOverAreNamedInTheError(t *testing.T) {
	httpSrv := acp.MCPServer{Type: "http", Name: "web", URL: "http://127.0.0.1:9/mcp"}
	stdio := acp.MCPServer{Name: "fs", Command: "/bin/mcp-fs"}
	for _, tc := range []struct {
		name     string
		adapter  string
		servers  []acp.MCPServer
		drop     bool
		endpoint string
		refused  string
	}{
		{"one http server becomes the endpoint", "claude-code", []acp.MCPServer{httpSrv}, false, httpSrv.URL, ""},
		{"a stdio server is refused by name", "claude-code", []acp.MCPServer{httpSrv, stdio}, false, "", "fs (stdio"},
		{"a second http server is refused", "claude-code", []acp.MCPServer{httpSrv, {Type: "http", Name: "two", URL: "http://x/"}}, false, "", "two (http: card hands over one"},
		{"headers cannot be handed over", "claude-code", []acp.MCPServer{{Type: "http", Name: "h", URL: "http://x/", Headers: []acp.HTTPHeader{{Name: "A", Value: "b"}}}}, false, "", "h (http: card hands over a URL only"},
		{"a CLI without MCP takes none", "pi", []acp.MCPServer{httpSrv}, false, "", "Pi takes no MCP endpoint"},
		{"dropping is the editor's explicit choice", "claude-code", []acp.MCPServer{stdio, httpSrv}, true, httpSrv.URL, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newFake()
			e := newEditor(t, Config{Adapter: tc.adapter}, be)
			m := json.RawMessage(`{"card":{"dropMcpServers":` + map[bool]string{true: "true", false: "false"}[tc.drop] + `}}`)
			req := acp.NewSessionRequest{Cwd: "/work", MCPServers: tc.servers, Meta: m}
			if tc.refused != "" {
				err := e.fail(acp.MethodSessionNew, req)
				assert.Equal(t, acp.CodeInvalidParams, err.Code)
				assert.Contains(t, err.Message, tc.refused)
				assert.Empty(t, be.started)
				return
			}
			e.ok(acp.MethodSessionNew, req, nil)
			assert.Equal(t, tc.endpoint, be.started[0].MCPEndpoint)
		})
	}
}

func TestAPromptStreamsTheTurnAsUpdatesAndEndsIt(t *testing.T) {
	be := newFake()
	be.script = func(_ *fakeSession, _ api.SessionPromptParams) []api.AgentEvent {
		return []api.AgentEvent{
			{Event: api.Event{Kind: api.EventSession, SessionID: "cli-1"}},
			{Event: api.Event{Kind: api.EventThinking, Text: "let me look", Delta: true}},
			{Event: api.Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "Bash", ID: "t1", Input: json.RawMessage(`{"command":"ls -la"}`)}}},
			{Event: api.Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: "t1"}, Output: "a.go\nb.go"}},
			{Event: api.Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "Edit", ID: "t2",
				Input: json.RawMessage(`{"file_path":"/work/a.go","old_string":"x","new_string":"y"}`)}}},
			{Event: api.Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: "t2"}, Output: "no such string", IsError: true}},
			{Event: api.Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "TodoWrite", ID: "t3",
				Input: json.RawMessage(`{"todos":[{"content":"read","status":"completed"},{"content":"fix","status":"in_progress"},{"content":"test","status":"pending"}]}`)}}},
			{Event: api.Event{Kind: api.EventText, Text: "Hel", Delta: true}},
			{Event: api.Event{Kind: api.EventText, Text: "lo", Delta: true}},
			{Event: api.Event{Kind: api.EventUsage, Usage: &api.Usage{InputTokens: 100, CachedInputTokens: 20, OutputTokens: 7}}},
			{Event: api.Event{Kind: api.EventWarning, Text: "model metadata not found"}},
		}
	}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	r := prompt(e, id, "list the files")
	assert.Equal(t, acp.StopEndTurn, r.StopReason)
	assert.Contains(t, string(r.Meta), `"runId":"run_1_1"`)
	assert.Equal(t, []acp.UpdateKind{acp.UpdateAgentThoughtChunk, acp.UpdateToolCall, acp.UpdateToolCallUpdate,
		acp.UpdateToolCall, acp.UpdateToolCallUpdate, acp.UpdateToolCall, acp.UpdatePlan,
		acp.UpdateAgentMessageChunk, acp.UpdateAgentMessageChunk, acp.UpdateUsage,
		acp.UpdateToolCallUpdate, acp.UpdateUsage}, e.kinds(id),
		"every event in order, the warning left out for a client that shows no notices, the open todo call failed at the end")

	calls := e.updatesOf(id, acp.UpdateToolCall)
	bash := calls[0].ToolCall
	assert.Equal(t, acp.ToolExecute, bash.Kind)
	assert.Equal(t, "Bash: ls -la", bash.Title)
	assert.Equal(t, acp.ToolInProgress, bash.Status)
	edit := calls[1].ToolCall
	assert.Equal(t, acp.ToolEdit, edit.Kind)
	assert.Equal(t, []acp.ToolCallLocation{{Path: "/work/a.go"}}, edit.Locations)
	require.Len(t, edit.Content, 1)
	assert.Equal(t, "diff", edit.Content[0].Type)
	assert.Equal(t, "y", edit.Content[0].NewText)
	assert.Equal(t, acp.ToolThink, calls[2].ToolCall.Kind)

	results := e.updatesOf(id, acp.UpdateToolCallUpdate)
	assert.Equal(t, acp.ToolCompleted, results[0].ToolCallUpdate.Status)
	assert.Equal(t, "a.go\nb.go", results[0].ToolCallUpdate.Content[0].Content.Text)
	assert.Equal(t, acp.ToolFailed, results[1].ToolCallUpdate.Status)

	plan := e.updatesOf(id, acp.UpdatePlan)[0].Plan
	assert.Equal(t, []acp.PlanEntry{{Content: "read", Priority: "medium", Status: "completed"},
		{Content: "fix", Priority: "medium", Status: "in_progress"}, {Content: "test", Priority: "medium", Status: "pending"}}, plan.Entries)

	msgs := e.updatesOf(id, acp.UpdateAgentMessageChunk)
	assert.Equal(t, "Hel", msgs[0].Chunk.Content.Text)
	usage := e.updatesOf(id, acp.UpdateUsage)
	assert.Equal(t, uint64(127), usage[0].Usage.Used)
	require.NotNil(t, usage[1].Usage.Cost)
	assert.Equal(t, 0.01, usage[1].Usage.Cost.Amount)
	assert.Empty(t, e.kinds("other"))
	assert.Len(t, e.updatesOf(id, acp.UpdateUserMessageChunk), 0, "the editor's own prompt is not echoed back")
}

func TestAWarningIsANoticeForAClientThatShowsThem(t *testing.T) {
	be := newFake()
	be.script = func(*fakeSession, api.SessionPromptParams) []api.AgentEvent {
		return []api.AgentEvent{{Event: api.Event{Kind: api.EventWarning, Text: "model metadata not found"}}}
	}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	e.ok(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: 1,
		ClientCapabilities: acp.ClientCapabilities{Session: &acp.ClientSessionCapabilities{Notices: &struct{}{}}}}, nil)
	id := newSession(e, "")
	prompt(e, id, "hi")
	n := e.updatesOf(id, acp.UpdateNotice)
	require.Len(t, n, 1)
	assert.Equal(t, "warning", n[0].Notice.Severity)
}

// An editor asks for an isolated session in _meta.card; it learns where
// the agent works, and each turn's changes as a notice, since the files it
// shows are the checkout's.
func TestAnIsolatedSessionIsAskedInMetaAndItsChangesAreNotices(t *testing.T) {
	be := newFake()
	be.script = func(*fakeSession, api.SessionPromptParams) []api.AgentEvent {
		return []api.AgentEvent{{Event: api.Event{Kind: api.EventChanges}, Changes: &api.TurnChanges{Turn: 1, Commit: strings.Repeat("b", 40),
			Files: []api.FileChange{{Path: "main.go", Status: "modified", Added: 2, Deleted: 1}}, Added: 2, Deleted: 1}}}
	}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	e.ok(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: 1,
		ClientCapabilities: acp.ClientCapabilities{Session: &acp.ClientSessionCapabilities{Notices: &struct{}{}}}}, nil)
	var r acp.NewSessionResponse
	e.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work/project",
		Meta: json.RawMessage(`{"card":{"permissionMode":"edit","isolation":"worktree","base":"main"}}`)}, &r)
	require.Len(t, be.started, 1)
	assert.Equal(t, api.IsolationWorktree, be.started[0].Isolation)
	assert.Equal(t, "main", be.started[0].Base)
	var said struct {
		Card struct {
			Worktree api.SessionWorktree `json:"worktree"`
		} `json:"card"`
	}
	require.NoError(t, json.Unmarshal(r.Meta, &said))
	assert.Equal(t, "card/"+r.SessionID, said.Card.Worktree.Branch)
	assert.Equal(t, "/work/project", said.Card.Worktree.Repo)

	prompt(e, r.SessionID, "fix it")
	n := e.updatesOf(r.SessionID, acp.UpdateNotice)
	require.Len(t, n, 1)
	assert.Equal(t, "info", n[0].Notice.Severity)
	assert.Equal(t, "Turn 1 changed 1 files (+2 -1)", n[0].Notice.Title)
	require.NotNil(t, n[0].Notice.Description)
	assert.Contains(t, *n[0].Notice.Description, "main.go")

	var plain acp.NewSessionResponse
	e.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work/project", Meta: meta("claude-code")}, &plain)
	assert.Empty(t, plain.Meta, "a session in its cwd says nothing of a worktree")
}

func TestPromptContentBecomesTheTaskAndAttachments(t *testing.T) {
	text := "package main"
	png := acp.ImageBlock("image/png", []byte{0x89, 'P', 'N', 'G'})
	blob, mime, pdf := "AAAA", "image/png", "application/pdf"
	for _, tc := range []struct {
		name   string
		blocks []acp.ContentBlock
		images bool
		task   string
		atts   int
		err    string
	}{
		{"text", []acp.ContentBlock{acp.TextBlock("fix it")}, true, "fix it", 0, ""},
		{"an image is an attachment", []acp.ContentBlock{acp.TextBlock("what is this"), png}, true, "what is this", 1, ""},
		{"an image from a file", []acp.ContentBlock{acp.TextBlock("x"), {Type: "image", MimeType: "image/png", URI: "file:///tmp/a.png"}}, true, "x", 1, ""},
		{"an image for an adapter without images is refused", []acp.ContentBlock{png}, false, "", 0, "takes no images"},
		{"a resource link is named", []acp.ContentBlock{acp.TextBlock("see"), {Type: "resource_link", Name: "main.go", URI: "file:///w/main.go"}}, true,
			"see\n\n[main.go](file:///w/main.go)", 0, ""},
		{"an embedded text resource is inlined", []acp.ContentBlock{{Type: "resource", Resource: &acp.ResourceContents{URI: "file:///w/main.go", Text: &text}}}, true,
			"Contents of file:///w/main.go:\n```\npackage main\n```", 0, ""},
		{"an embedded image is an attachment", []acp.ContentBlock{acp.TextBlock("x"), {Type: "resource", Resource: &acp.ResourceContents{URI: "file:///a.png", Blob: &blob, MimeType: &mime}}}, true, "x", 1, ""},
		{"an embedded binary is refused", []acp.ContentBlock{{Type: "resource", Resource: &acp.ResourceContents{URI: "file:///a.pdf", Blob: &blob, MimeType: &pdf}}}, true, "", 0, "is binary"},
		{"audio is refused", []acp.ContentBlock{{Type: "audio", Data: "AAAA", MimeType: "audio/wav"}}, true, "", 0, `"audio"`},
		{"bad base64 is refused", []acp.ContentBlock{{Type: "image", Data: "!!", MimeType: "image/png"}}, true, "", 0, "base64"},
		{"an empty prompt is refused", []acp.ContentBlock{acp.TextBlock("  ")}, true, "", 0, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, atts, err := promptContent(tc.blocks, tc.images)
			if tc.err != "" {
				require.NotNil(t, err)
				assert.Contains(t, err.Message, tc.err)
				return
			}
			require.Nil(t, err)
			assert.Equal(t, tc.task, task)
			assert.Len(t, atts, tc.atts)
		})
	}
}

func TestAnImagePromptReachesTheTurnAsAnAttachment(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	var r acp.PromptResponse
	e.ok(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("what colour"),
		acp.ImageBlock("image/png", []byte{1, 2, 3})}}, &r)
	require.Len(t, be.prompts, 1)
	assert.Equal(t, []api.Attachment{{DataB64: "AQID", MimeType: "image/png"}}, be.prompts[0].Attachments)
}

func approvalScript(tool string) func(*fakeSession, api.SessionPromptParams) []api.AgentEvent {
	n := 0
	return func(*fakeSession, api.SessionPromptParams) []api.AgentEvent {
		n++
		id := "t" + string(rune('0'+n))
		return []api.AgentEvent{
			{Event: api.Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: tool, ID: id, Input: json.RawMessage(`{"command":"rm -rf build"}`)}}},
			{Event: api.Event{Kind: api.EventApprovalRequested, Tool: &api.Tool{Name: tool, ID: id, Input: json.RawMessage(`{"command":"rm -rf build"}`)}},
				Approval: &api.Approval{RequestID: "q" + id, Summary: "Run rm -rf build"}},
		}
	}
}

func TestAQuestionIsAskedAsRequestPermissionAndTheAnswerDecides(t *testing.T) {
	for _, tc := range []struct {
		option   string
		decision string
	}{
		{optAllow, api.DecisionAllow},
		{optAllowAlways, api.DecisionAllowAlways},
		{optReject, api.DecisionDeny},
		{optRejectAlway, api.DecisionDeny},
	} {
		t.Run(tc.option, func(t *testing.T) {
			be := newFake()
			be.script = approvalScript("Bash")
			e := newEditor(t, Config{Adapter: "claude-code"}, be)
			e.onPermission = func(q acp.RequestPermissionRequest) acp.RequestPermissionResponse { return acp.Selected(tc.option) }
			initialize(e)
			id := newSession(e, "")
			assert.Equal(t, acp.StopEndTurn, prompt(e, id, "clean").StopReason)
			require.Len(t, e.asked, 1)
			q := e.asked[0]
			assert.Equal(t, "t1", q.ToolCall.ToolCallID)
			assert.Equal(t, "Run rm -rf build", q.ToolCall.Title)
			assert.Equal(t, acp.ToolExecute, q.ToolCall.Kind)
			kinds := []acp.PermissionOptionKind{}
			for _, o := range q.Options {
				kinds = append(kinds, o.Kind)
			}
			assert.Equal(t, []acp.PermissionOptionKind{acp.PermissionAllowOnce, acp.PermissionAllowAlways, acp.PermissionRejectOnce, acp.PermissionRejectAlways}, kinds)
			require.Len(t, be.decided, 1)
			assert.Equal(t, tc.decision, be.decided[0].Decision)
			assert.Equal(t, "qt1", be.decided[0].RequestID)

			// A second turn: an "always" answer holds for the session, so
			// the editor is not asked again.
			prompt(e, id, "again")
			always := tc.option == optAllowAlways || tc.option == optRejectAlway
			if always {
				assert.Len(t, e.asked, 1)
			} else {
				assert.Len(t, e.asked, 2)
			}
			require.Len(t, be.decided, 2)
			assert.Equal(t, tc.decision, be.decided[1].Decision)
		})
	}
}

// decidedElsewhere starts a turn whose question the editor never
// answers and has another client answer it once the editor was asked. It
// returns the prompt's answer to come and the questions put to the editor.
func decidedElsewhere(t *testing.T, e *editor, be *fakeBackend) (done chan acp.Message, asked chan struct{}) {
	t.Helper()
	asked = make(chan struct{}, 2)
	e.onPermission = func(acp.RequestPermissionRequest) acp.RequestPermissionResponse {
		asked <- struct{}{}
		return acp.RequestPermissionResponse{} // never answers
	}
	initialize(e)
	id := newSession(e, "")
	done = e.start(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("x")}})
	<-asked
	_, err := be.ApprovalDecide(t.Context(), api.DecideParams{RequestID: "qt1", Decision: api.DecisionAllow})
	require.NoError(t, err)
	return done, asked
}

func TestAQuestionAnsweredByAnotherClientIsWithdrawnFromTheEditor(t *testing.T) {
	be := newFake()
	be.script = approvalScript("Bash")
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	done, _ := decidedElsewhere(t, e, be)
	m := <-done
	require.Nil(t, m.Error)
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.withdrawn) == 1
	}, 5*time.Second, 10*time.Millisecond, "the editor's question is withdrawn with $/cancel_request")
	assert.Len(t, be.decided, 1, "only the other client's answer was given")
}

// The daemon's agents.approve and the turn's events come by different
// paths, so the question can come as agents.approve after the event that
// says another client decided it: it is not put to the editor again.
func TestAQuestionDecidedElsewhereIsNotPutAgainWhenTheDaemonsAskComesLate(t *testing.T) {
	be := newFake()
	be.script = approvalScript("Bash")
	be.hold = make(chan struct{})
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	done, asked := decidedElsewhere(t, e, be)
	require.Eventually(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.withdrawn) == 1
	}, 5*time.Second, 10*time.Millisecond, "the editor's question is withdrawn")
	// The turn still runs; the daemon's own question arrives only now.
	actx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := e.srv.Approve(actx, api.ApproveParams{RunID: "run_1_1", RequestID: "qt1", Tool: api.ToolCall{Name: "Bash", ID: "t1"}})
	require.ErrorContains(t, err, "answered by another client", "a question another client decided is not answered again")
	close(be.hold)
	require.Nil(t, (<-done).Error)
	assert.Empty(t, asked, "asked once")
	assert.Len(t, be.decided, 1, "only the other client's answer was given")
}

func TestAQuestionTheDaemonAsksThisConnectionIsPutOnceAndAnsweredInReply(t *testing.T) {
	be := newFake()
	be.script = approvalScript("Bash")
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	release := make(chan struct{})
	e.onPermission = func(acp.RequestPermissionRequest) acp.RequestPermissionResponse {
		<-release
		return acp.Selected(optAllow)
	}
	initialize(e)
	id := newSession(e, "")
	done := e.start(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("x")}})
	require.Eventually(t, func() bool { e.mu.Lock(); defer e.mu.Unlock(); return len(e.asked) == 1 }, 5*time.Second, 5*time.Millisecond)
	answer := make(chan api.ApproveAnswer, 1)
	go func() {
		a, err := e.srv.Approve(t.Context(), api.ApproveParams{RunID: "run_1_1", RequestID: "qt1", Tool: api.ToolCall{Name: "Bash", ID: "t1"}})
		assert.NoError(t, err)
		answer <- a
	}()
	time.Sleep(50 * time.Millisecond)
	close(release)
	assert.Equal(t, api.DecisionAllow, (<-answer).Decision)
	// The daemon's question was answered in reply; the fake's turn still
	// waits for a decision, given here as the daemon would record it.
	be.mu.Lock()
	ch := be.sessions[id].waiting["qt1"]
	be.mu.Unlock()
	if ch != nil {
		ch <- api.DecisionAllow
	}
	<-done
	assert.Len(t, e.asked, 1, "asked once, though it came both as a question and as an event")
	assert.Empty(t, be.decided, "an answer given in reply is not given twice")
}

func TestSessionCancelEndsTheTurnWithStopReasonCancelled(t *testing.T) {
	be := newFake()
	be.hold = make(chan struct{})
	be.script = func(*fakeSession, api.SessionPromptParams) []api.AgentEvent {
		return []api.AgentEvent{{Event: api.Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "Bash", ID: "t1", Input: json.RawMessage(`{"command":"sleep 100"}`)}}}}
	}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	done := e.start(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("wait")}})
	require.Eventually(t, func() bool { return len(e.updatesOf(id, acp.UpdateToolCall)) == 1 }, 5*time.Second, 5*time.Millisecond)
	e.notify(acp.MethodSessionCancel, acp.CancelNotification{SessionID: id})
	m := <-done
	require.Nil(t, m.Error)
	var r acp.PromptResponse
	require.NoError(t, json.Unmarshal(m.Result, &r))
	assert.Equal(t, acp.StopCancelled, r.StopReason)
	assert.Equal(t, []api.SessionCancelParams{{SessionID: id, ClearQueue: true}}, be.cancels)
	ups := e.updatesOf(id, acp.UpdateToolCallUpdate)
	require.Len(t, ups, 1)
	assert.Equal(t, acp.ToolFailed, ups[0].ToolCallUpdate.Status, "the call the cancel cut short is failed before the answer")
}

func TestCancellingThePromptRequestCancelsTheTurn(t *testing.T) {
	be := newFake()
	be.hold = make(chan struct{})
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	done := e.start(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("wait")}})
	require.Eventually(t, func() bool { return len(e.updatesOf(id, acp.UpdateAgentMessageChunk)) == 1 }, 5*time.Second, 5*time.Millisecond)
	e.notify(acp.MethodCancelRequest, acp.CancelRequestNotification{RequestID: json.RawMessage(`3`)})
	m := <-done
	require.NotNil(t, m.Error)
	assert.Equal(t, acp.CodeRequestCancelled, m.Error.Code)
	assert.Len(t, be.cancels, 1)
}

func TestASecondTurnRunsInTheSameSession(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	prompt(e, id, "remember 7")
	prompt(e, id, "what number")
	require.Len(t, be.prompts, 2)
	assert.Equal(t, id, be.prompts[1].SessionID, "both turns are turns of one card session, which keeps the conversation")
	assert.Len(t, be.started, 1)
}

func TestATurnThatFailsAnswersThePromptWithTheReason(t *testing.T) {
	be := newFake()
	be.script = func(fs *fakeSession, _ api.SessionPromptParams) []api.AgentEvent { return nil }
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	// The fake ends every turn well; this one ends with an auth error.
	be.mu.Lock()
	fs := be.sessions[id]
	be.mu.Unlock()
	ch := e.start(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("x")}})
	_ = fs
	m := <-ch
	require.Nil(t, m.Error)

	end := endOf(api.SessionEvent{Turn: 2, Event: api.AgentEvent{RunID: "r", Event: api.Event{Kind: api.EventRunError}, Status: api.StatusFailed,
		Result: &api.InvokeResult{Result: api.Result{Error: &api.RunError{Kind: api.KindAuth, Message: "401 from the API: sign in again"}}}}}, false)
	require.NotNil(t, end.err)
	assert.Equal(t, acp.CodeAuthRequired, end.err.Code)
	assert.Contains(t, end.err.Message, "sign in again")
	end = endOf(api.SessionEvent{Event: api.AgentEvent{Event: api.Event{Kind: api.EventRunError}, Status: api.StatusFailed,
		Result: &api.InvokeResult{Result: api.Result{Error: &api.RunError{Kind: api.KindMaxTurns}}}}}, false)
	assert.Equal(t, acp.StopMaxTurnRequests, end.stop)
}

func TestLoadReplaysTheSessionsHistoryBeforeItAnswers(t *testing.T) {
	be := newFake()
	be.script = func(*fakeSession, api.SessionPromptParams) []api.AgentEvent {
		return []api.AgentEvent{{Event: api.Event{Kind: api.EventText, Text: "seven", Delta: true}}}
	}
	first := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(first)
	id := newSession(first, "")
	prompt(first, id, "remember 7")
	prompt(first, id, "say it")

	// A new connection (the editor restarted) loads the session.
	second := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(second)
	second.ok(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: id, Cwd: "/work/project"}, nil)
	got := []string{}
	second.mu.Lock()
	for _, u := range second.updates {
		if u.Update.Chunk != nil {
			got = append(got, string(u.Update.Kind)+":"+u.Update.Chunk.Content.Text)
		}
	}
	second.mu.Unlock()
	assert.Equal(t, []string{"user_message_chunk:remember 7", "agent_message_chunk:seven", "user_message_chunk:say it", "agent_message_chunk:seven"}, got,
		"the whole conversation, in order, before the load's answer")

	// With afterSeq only what came after is replayed.
	third := newEditor(t, Config{Adapter: "claude-code"}, be)
	third.ok(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: id, Cwd: "/w", Meta: json.RawMessage(`{"card":{"afterSeq":2}}`)}, nil)
	assert.Equal(t, []acp.UpdateKind{acp.UpdateUserMessageChunk, acp.UpdateAgentMessageChunk, acp.UpdateUsage}, third.kinds(id))

	err := third.fail(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: "ses_404", Cwd: "/w"})
	assert.Equal(t, acp.CodeResourceNotFound, err.Code)

	// A prompt on the loaded session continues it.
	second.clearUpdates()
	prompt(second, id, "once more")
	assert.Equal(t, []acp.UpdateKind{acp.UpdateAgentMessageChunk, acp.UpdateUsage}, second.kinds(id))
}

func TestEveryUpdateCarriesItsSeqSoAReconnectingClientKnowsWhereItWas(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	prompt(e, id, "x")
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NotEmpty(t, e.updates)
	assert.JSONEq(t, `{"card":{"seq":1,"turn":1,"runId":"run_1_1"}}`, string(e.updates[0].Meta))
}

func TestListResumeCloseAndTheFixedSettings(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	var list acp.ListSessionsResponse
	e.ok(acp.MethodSessionList, acp.ListSessionsRequest{}, &list)
	require.Len(t, list.Sessions, 1)
	assert.Equal(t, id, list.Sessions[0].SessionID)
	assert.Equal(t, "/work/project", list.Sessions[0].Cwd)
	other := "/elsewhere"
	e.ok(acp.MethodSessionList, acp.ListSessionsRequest{Cwd: &other}, &list)
	assert.Empty(t, list.Sessions)

	fresh := newEditor(t, Config{Adapter: "claude-code"}, be)
	var res acp.ResumeSessionResponse
	fresh.ok(acp.MethodSessionResume, acp.ResumeSessionRequest{SessionID: id, Cwd: "/work/project"}, &res)
	assert.Equal(t, "ask", res.Modes.CurrentModeID)
	assert.Equal(t, acp.StopEndTurn, prompt(fresh, id, "hi").StopReason)
	assert.Empty(t, fresh.updatesOf(id, acp.UpdateUserMessageChunk), "resume replays nothing")

	fresh.ok(acp.MethodSessionClose, acp.CloseSessionRequest{SessionID: id}, nil)
	err := fresh.fail(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("x")}})
	assert.Equal(t, acp.CodeResourceNotFound, err.Code)
	err = fresh.fail(acp.MethodSessionClose, acp.CloseSessionRequest{SessionID: "ses_404"})
	assert.Equal(t, acp.ErrorCode(-32043), err.Code)
}

func TestMethodsCardDoesNotServeAreMethodNotFound(t *testing.T) {
	e := newEditor(t, Config{Adapter: "claude-code"}, newFake())
	for _, m := range []string{"session/delete", "logout", "fs/read_text_file", "session/unknown"} {
		err := e.fail(m, map[string]any{})
		assert.Equal(t, acp.CodeMethodNotFound, err.Code, m)
	}
	err := e.fail(acp.MethodSessionNew, json.RawMessage(`{"cwd":5}`))
	assert.Equal(t, acp.CodeInvalidParams, err.Code)
}

func TestALineThatIsNoMessageIsAnsweredWithAParseError(t *testing.T) {
	e := newEditor(t, Config{Adapter: "claude-code"}, newFake())
	e.p.in <- []byte(`not json`)
	initialize(e)
	e.mu.Lock()
	defer e.mu.Unlock()
	assert.True(t, strings.Contains(string(e.frames[0]), `-32700`), "%s", e.frames[0])
}

func TestAQuestionAnsweredInReplyIsNotAskedAgainWhenItsEventFollows(t *testing.T) {
	be := newFake()
	be.hold = make(chan struct{})
	be.script = func(*fakeSession, api.SessionPromptParams) []api.AgentEvent {
		return []api.AgentEvent{{Event: api.Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "Bash", ID: "t1", Input: json.RawMessage(`{"command":"ls"}`)}}}}
	}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	done := e.start(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: id, Prompt: []acp.ContentBlock{acp.TextBlock("x")}})
	require.Eventually(t, func() bool { return len(e.updatesOf(id, acp.UpdateToolCall)) == 1 }, 5*time.Second, 5*time.Millisecond)
	a, err := e.srv.Approve(t.Context(), api.ApproveParams{RunID: "run_1_1", RequestID: "q1", Tool: api.ToolCall{Name: "Bash", ID: "t1"}})
	require.NoError(t, err)
	assert.Equal(t, api.DecisionAllow, a.Decision)
	be.mu.Lock()
	fs := be.sessions[id]
	be.mu.Unlock()
	be.emit(fs, 1, api.AgentEvent{RunID: "run_1_1", Event: api.Event{Kind: api.EventApprovalRequested, Tool: &api.Tool{Name: "Bash", ID: "t1"}},
		Approval: &api.Approval{RequestID: "q1"}})
	close(be.hold)
	require.Nil(t, (<-done).Error)
	e.mu.Lock()
	defer e.mu.Unlock()
	assert.Len(t, e.asked, 1, "the event of a question already answered asks nothing")
	assert.Empty(t, be.decided)
}

func TestASessionNamesTheAgentItRunsUnder(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code", InvokedBy: "codex"}, be)
	newSession(e, "")
	assert.Equal(t, "codex", be.started[0].InvokedBy, "the guard judges the session with the chain it runs under")
}

func TestALoadFromTheMiddleOfATurnDoesNotEchoItsPromptAgain(t *testing.T) {
	be := newFake()
	be.script = func(*fakeSession, api.SessionPromptParams) []api.AgentEvent {
		return []api.AgentEvent{{Event: api.Event{Kind: api.EventText, Text: "a", Delta: true}}, {Event: api.Event{Kind: api.EventSession, SessionID: "x"}}}
	}
	first := newEditor(t, Config{Adapter: "claude-code"}, be)
	id := newSession(first, "")
	prompt(first, id, "hello")
	// The client saw seq 1 (the text); seq 2 maps to no update.
	second := newEditor(t, Config{Adapter: "claude-code"}, be)
	second.ok(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: id, Cwd: "/w", Meta: json.RawMessage(`{"card":{"afterSeq":1}}`)}, nil)
	assert.Equal(t, []acp.UpdateKind{acp.UpdateUsage}, second.kinds(id), "the rest of the turn, and not its prompt again")
}

// The ACP page's captured frames are ACP messages by the published schema:
// an example that drifted from what card sends fails here.
func TestTheACPPagesCapturedFramesAreValidACPMessages(t *testing.T) {
	raw, err := os.ReadFile("../../docs/protocol/acp.md")
	require.NoError(t, err)
	root, err := schemaCompiler(t).Compile("schema.json")
	require.NoError(t, err)
	n := 0
	in := false
	for i, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "```jsonl"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case in:
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
			require.NoError(t, err, "docs/protocol/acp.md:%d", i+1)
			assert.NoError(t, root.Validate(inst), "docs/protocol/acp.md:%d: %s", i+1, line)
			n++
		}
	}
	assert.GreaterOrEqual(t, n, 20, "the page shows a real exchange")
}

func TestSetModeChangesTheCardSessionsModeFromTheNextTurnAndTellsTheEditor(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	assert.Equal(t, acp.StopEndTurn, prompt(e, id, "one").StopReason)

	// The current mode is no change: nothing is configured.
	e.ok(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: id, ModeID: "ask"}, nil)
	assert.Empty(t, be.configured)
	var res acp.SetSessionModeResponse
	e.ok(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: id, ModeID: "edit"}, &res)
	require.Equal(t, []api.SessionConfigureParams{{SessionID: id, PermissionMode: "edit"}}, be.configured)
	assert.JSONEq(t, `{"card":{"appliesFromTurn":2}}`, string(res.Meta))
	require.Eventually(t, func() bool { return len(e.updatesOf(id, acp.UpdateCurrentMode)) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, "edit", e.updatesOf(id, acp.UpdateCurrentMode)[0].CurrentMode.CurrentModeID)

	// A reopened session shows the new mode.
	fresh := newEditor(t, Config{Adapter: "claude-code"}, be)
	var rr acp.ResumeSessionResponse
	fresh.ok(acp.MethodSessionResume, acp.ResumeSessionRequest{SessionID: id, Cwd: "/work/project"}, &rr)
	assert.Equal(t, "edit", rr.Modes.CurrentModeID)

	err := e.fail(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: id, ModeID: "yolo"})
	assert.Contains(t, err.Message, "not \"yolo\"")
	// card's refusal (a cwd the mode may not run in) reaches the editor as
	// card said it, and the mode stays.
	be.configureErr = &rpcclient.Error{Code: -32602, Message: "invalid params: cwd: \"/\" is the root of the filesystem",
		Data: json.RawMessage(`{"field":"cwd","rule":"root"}`)}
	err = e.fail(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: id, ModeID: "bypass"})
	assert.Equal(t, acp.CodeInvalidParams, err.Code)
	assert.JSONEq(t, `{"field":"cwd","rule":"root"}`, string(err.Data))
	assert.Len(t, e.updatesOf(id, acp.UpdateCurrentMode), 1, "a refused change was announced")
	e.ok(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: id, ModeID: "edit"}, nil)
	assert.Len(t, be.configured, 1, "the mode it has is no change")
	err = e.fail(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: "ses_404", ModeID: "edit"})
	assert.Equal(t, acp.CodeResourceNotFound, err.Code)
}

func TestConfigOptionsTellTheModelAndTheThoughtLevelTheAdapterTakes(t *testing.T) {
	be := newFake()
	be.specs = append(be.specs, api.ExternalAgentSpec{ID: "gemini", DisplayName: "Gemini CLI", BinaryPath: "/bin/gemini"})
	e := newEditor(t, Config{}, be)
	initialize(e)
	var r acp.NewSessionResponse
	e.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work", Meta: json.RawMessage(`{"card":{"adapter":"claude-code","model":"m1"}}`)}, &r)
	require.Len(t, r.ConfigOptions, 4, "with no agent fixed, the agent is an option too")
	assert.Equal(t, "isolation", r.ConfigOptions[3].ID, "and where it works, last")
	assert.Equal(t, "agent", r.ConfigOptions[0].ID)
	model, effort := r.ConfigOptions[1], r.ConfigOptions[2]
	assert.Equal(t, "model", model.ID)
	assert.Equal(t, "model", *model.Category)
	assert.Equal(t, "m1", model.CurrentValue)
	assert.JSONEq(t, `[{"value":"default","name":"Default","description":"Claude Code chooses (card passes no flag)"},{"value":"m1","name":"m1"}]`, string(model.Options))
	assert.Equal(t, "effort", effort.ID)
	assert.Equal(t, "thought_level", *effort.Category)
	assert.Equal(t, "default", effort.CurrentValue)
	assert.Contains(t, string(effort.Options), `"value":"max"`)

	var g acp.NewSessionResponse
	e.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work", Meta: json.RawMessage(`{"card":{"adapter":"gemini"}}`)}, &g)
	require.Len(t, g.ConfigOptions, 3, "Gemini CLI takes no effort: no thought level is offered")
	assert.Equal(t, []string{"agent", "model", "isolation"}, []string{g.ConfigOptions[0].ID, g.ConfigOptions[1].ID, g.ConfigOptions[2].ID})
	err := e.fail(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: g.SessionID, ConfigID: "effort", Value: "high"})
	assert.Equal(t, "configId", errField(t, err))

	var set acp.SetSessionConfigOptionResponse
	e.ok(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "model", Value: "m2"}, &set)
	assert.Equal(t, api.SessionConfigureParams{SessionID: r.SessionID, Model: "m2"}, be.configured[0])
	require.Len(t, set.ConfigOptions, 4)
	assert.Equal(t, "m2", set.ConfigOptions[1].CurrentValue)
	e.ok(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "effort", Value: "high"}, &set)
	assert.Equal(t, "high", set.ConfigOptions[2].CurrentValue)
	e.ok(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "model", Value: "default"}, &set)
	assert.Equal(t, "default", set.ConfigOptions[1].CurrentValue)
	require.Eventually(t, func() bool { return len(e.updatesOf(r.SessionID, acp.UpdateConfigOption)) == 3 }, 5*time.Second, 5*time.Millisecond)
	last := e.updatesOf(r.SessionID, acp.UpdateConfigOption)[2]
	assert.Equal(t, "high", last.ConfigOption.ConfigOptions[2].CurrentValue)

	for _, tc := range []struct {
		req   acp.SetSessionConfigOptionRequest
		field string
	}{
		{acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "fast", Value: "on"}, "configId"},
		{acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "effort", Value: "huge"}, "value"},
		{acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "model", Type: "boolean", Value: true}, "value"},
		{acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "model", Value: ""}, "value"},
	} {
		err := e.fail(acp.MethodSessionSetConfigOption, tc.req)
		assert.Equal(t, tc.field, errField(t, err), "%+v", tc.req)
	}
	assert.Len(t, be.configured, 3, "a refused option reached card")
}

func errField(t *testing.T, err *acp.Error) string {
	t.Helper()
	var d struct {
		Field string `json:"field"`
	}
	require.NoError(t, json.Unmarshal(err.Data, &d))
	return d.Field
}

func TestTheSlashCommandsACLIListsReachTheEditorOnceLessThoseCardDoesNotOffer(t *testing.T) {
	be := newFake()
	cmds := []api.SlashCommand{{Name: "compact"}, {Name: "heapdump"}, {Name: "review", Description: "Review a pull request", InputHint: "[pr]"}}
	be.script = func(_ *fakeSession, p api.SessionPromptParams) []api.AgentEvent {
		list := cmds
		if p.Task == "changed" {
			list = cmds[:1]
		}
		return []api.AgentEvent{{Event: api.Event{Kind: api.EventSession, SessionID: "cli-1", Commands: list}},
			{Event: api.Event{Kind: api.EventText, Text: "ok"}}}
	}
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	assert.Empty(t, e.updatesOf(id, acp.UpdateAvailableCommands), "nothing is known before the first turn")
	prompt(e, id, "one")
	prompt(e, id, "two")
	ups := e.updatesOf(id, acp.UpdateAvailableCommands)
	require.Len(t, ups, 1, "the same list twice is sent once")
	got := ups[0].AvailableCommands.AvailableCommands
	require.Len(t, got, 2, "heapdump is not offered")
	assert.Equal(t, "compact", got[0].Name)
	assert.Nil(t, got[0].Input)
	assert.Equal(t, "review", got[1].Name)
	assert.Equal(t, "Review a pull request", got[1].Description)
	require.NotNil(t, got[1].Input)
	assert.Equal(t, "[pr]", got[1].Input.Hint)
	prompt(e, id, "changed")
	ups = e.updatesOf(id, acp.UpdateAvailableCommands)
	require.Len(t, ups, 2, "a changed list is sent again")
	assert.Len(t, ups[1].AvailableCommands.AvailableCommands, 1)
}

func TestAChangeOfTheSessionsSettingsReachesEveryEditorFollowingIt(t *testing.T) {
	be := newFake()
	a := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(a)
	id := newSession(a, "")
	prompt(a, id, "one")
	b := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(b)
	b.ok(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: id, Cwd: "/work/project"}, nil)
	b.clearUpdates()

	// One editor sets the mode: the other hears it, and the one that set
	// it hears it once (its answer and the stream's event say the same).
	a.ok(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: id, ModeID: "edit"}, nil)
	for _, e := range []*editor{a, b} {
		require.Eventually(t, func() bool { return len(e.updatesOf(id, acp.UpdateCurrentMode)) == 1 }, 5*time.Second, 5*time.Millisecond)
		assert.Equal(t, "edit", e.updatesOf(id, acp.UpdateCurrentMode)[0].CurrentMode.CurrentModeID)
	}

	// A client of /rpc changes the model: both editors get the options as
	// they now are, and neither a mode update.
	_, err := be.ConfigureSession(t.Context(), api.SessionConfigureParams{SessionID: id, Model: "m9"})
	require.NoError(t, err)
	for _, e := range []*editor{a, b} {
		require.Eventually(t, func() bool { return len(e.updatesOf(id, acp.UpdateConfigOption)) == 1 }, 5*time.Second, 5*time.Millisecond)
		assert.Equal(t, "m9", e.updatesOf(id, acp.UpdateConfigOption)[0].ConfigOption.ConfigOptions[0].CurrentValue)
		assert.Len(t, e.updatesOf(id, acp.UpdateCurrentMode), 1)
	}
	// The editor's next answer shows the option as the other client set it.
	var set acp.SetSessionConfigOptionResponse
	b.ok(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: id, ConfigID: "effort", Value: "high"}, &set)
	assert.Equal(t, "m9", set.ConfigOptions[0].CurrentValue)
	assert.Equal(t, "high", set.ConfigOptions[1].CurrentValue)

	// A load replays the history without its old changes: its answer has
	// the settings as they are.
	c := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(c)
	var lr acp.LoadSessionResponse
	c.ok(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: id, Cwd: "/work/project"}, &lr)
	assert.Equal(t, "edit", lr.Modes.CurrentModeID)
	assert.Empty(t, c.updatesOf(id, acp.UpdateCurrentMode))
	assert.Empty(t, c.updatesOf(id, acp.UpdateConfigOption))
}

func TestAnOlderSettingsEventDoesNotUndoANewerAnswer(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{Adapter: "claude-code"}, be)
	initialize(e)
	id := newSession(e, "")
	st := e.srv.session(id)
	require.NotNil(t, st)
	mode, _ := st.configured(api.Session{PermissionMode: "edit"}, 5)
	assert.True(t, mode)
	st.reconfigured(api.SessionEvent{SessionID: id, Seq: 4}, api.SessionConfigured{PermissionMode: "ask"})
	st.mu.Lock()
	assert.Equal(t, "edit", st.mode, "the event at seq 4 is older than what the answer at seq 5 said")
	st.mu.Unlock()
	st.reconfigured(api.SessionEvent{SessionID: id, Seq: 6}, api.SessionConfigured{PermissionMode: "bypass"})
	require.Eventually(t, func() bool { return len(e.updatesOf(id, acp.UpdateCurrentMode)) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, "bypass", e.updatesOf(id, acp.UpdateCurrentMode)[0].CurrentMode.CurrentModeID)
}

// When the editor goes (its end of the connection closes), the warm agents
// of the sessions it had open are ended through sessions.release, once its
// requests are over, instead of holding their CLIs for idle_secs; the
// sessions themselves are not closed, so the next editor can load them. A
// session the editor closed is not released again.
func TestWhenTheEditorGoesItsSessionsWarmAgentsEndAndTheSessionsStayOpen(t *testing.T) {
	be := newFake()
	e := newEditor(t, Config{}, be)
	initialize(e)
	kept := newSession(e, "claude-code")
	closed := newSession(e, "claude-code")
	prompt(e, kept, "hello")
	e.ok(acp.MethodSessionClose, acp.CloseSessionRequest{SessionID: closed}, nil)
	be.mu.Lock()
	assert.Empty(t, be.released, "released while the editor was still there")
	be.mu.Unlock()

	e.p.once.Do(func() { close(e.p.done) })
	select {
	case err := <-e.served:
		e.served <- err // for the cleanup's wait
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop when the editor went")
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	assert.Equal(t, []string{kept}, be.released)
	assert.NotEqual(t, api.SessionClosed, be.sessions[kept].sess.State, "the session was closed, not only its warm agent ended")
}

// With no agent fixed for the connection (card acp with no adapter), a
// session the editor starts without naming one gets the first installed
// agent that can run and is signed in, and the editor may pick another
// with the agent option until the first prompt; after it, card refuses.
func TestWithNoAgentFixedASessionPicksItsAgentUntilItsFirstPrompt(t *testing.T) {
	be := newFake()
	be.healthOf = map[string]api.HealthStatus{"claude-code": api.StatusNotConfigured}
	e := newEditor(t, Config{}, be)
	initialize(e)
	var r acp.NewSessionResponse
	e.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work"}, &r)
	require.Len(t, be.started, 1)
	assert.Equal(t, "droid", be.started[0].ID, "claude-code is not signed in, so the first ready agent, in card's order")
	agentOpt := r.ConfigOptions[0]
	assert.Equal(t, "agent", agentOpt.ID)
	assert.Equal(t, "droid", agentOpt.CurrentValue)
	assert.JSONEq(t, `[{"value":"claude-code","name":"Claude Code"},{"value":"droid","name":"Factory Droid"},{"value":"pi","name":"Pi"}]`, string(agentOpt.Options))

	var set acp.SetSessionConfigOptionResponse
	e.ok(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "agent", Value: "pi"}, &set)
	assert.Equal(t, api.SessionConfigureParams{SessionID: r.SessionID, ID: "pi"}, be.configured[0])
	assert.Equal(t, "pi", set.ConfigOptions[0].CurrentValue)
	err := e.fail(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "agent", Value: "gemini"})
	assert.Equal(t, "value", errField(t, err), "an agent that is not installed here is not offered")

	prompt(e, r.SessionID, "hello")
	err = e.fail(acp.MethodSessionSetConfigOption, acp.SetSessionConfigOptionRequest{SessionID: r.SessionID, ConfigID: "agent", Value: "claude-code"})
	assert.Contains(t, err.Message, "taken a turn")

	fixed := newEditor(t, Config{Adapter: "pi"}, be)
	initialize(fixed)
	fixed.ok(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "/work"}, &r)
	for _, o := range r.ConfigOptions {
		assert.NotEqual(t, "agent", o.ID, "an agent fixed on the command line offers no choice")
	}
}
