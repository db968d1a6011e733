package acp

import (
	"bytes"
	"encoding/json"
	"os"
	"sort"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// schemaFile is the published schema, as the protocol's SDK ships it.
const schemaFile = "testdata/schema.json"

func loadSchema(t *testing.T) (*jsonschema.Compiler, map[string]json.RawMessage) {
	t.Helper()
	raw, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(schemaFile, doc))
	var top struct {
		Defs map[string]json.RawMessage `json:"$defs"`
	}
	require.NoError(t, json.Unmarshal(raw, &top))
	return c, top.Defs
}

// validate checks v, marshalled, against the schema's definition def.
func validate(t *testing.T, c *jsonschema.Compiler, def string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err, def)
	sch, err := c.Compile(schemaFile + "#/$defs/" + def)
	require.NoError(t, err, def)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err, def)
	assert.NoError(t, sch.Validate(inst), "%s: %s", def, b)
}

func TestEveryMethodOfTheSchemaHasAConstantOnTheRightSide(t *testing.T) {
	_, defs := loadSchema(t)
	inSchema := map[string]Side{}
	for name, d := range defs {
		var m struct {
			Method string `json:"x-method"`
			Side   Side   `json:"x-side"`
		}
		require.NoError(t, json.Unmarshal(d, &m), name)
		if m.Method == "" {
			continue
		}
		if s, ok := inSchema[m.Method]; ok {
			require.Equal(t, s, m.Side, "%s is served by two sides in the schema", m.Method)
		}
		inSchema[m.Method] = m.Side
	}
	require.NotEmpty(t, inSchema, "the schema names no methods: is it the right file?")
	assert.Equal(t, inSchema, methods, "the table must list exactly the schema's methods, each with the side that serves it")
	side, ok := SideOf(MethodSessionPrompt)
	assert.True(t, ok)
	assert.Equal(t, SideAgent, side)
	_, ok = SideOf("session/unknown")
	assert.False(t, ok)
}

// messages are the Go types of every request, response and notification
// of the schema, by the schema's name, each filled the way a sender fills
// it (required fields only where a sender may leave the rest out).
func messages() map[string]any {
	str := func(s string) *string { return &s }
	u32 := func(n uint32) *uint32 { return &n }
	u64 := func(n uint64) *uint64 { return &n }
	return map[string]any{
		"InitializeRequest": InitializeRequest{ProtocolVersion: ProtocolVersion},
		"InitializeResponse": InitializeResponse{ProtocolVersion: ProtocolVersion,
			AgentCapabilities: AgentCapabilities{LoadSession: true, PromptCapabilities: PromptCapabilities{Image: true},
				SessionCapabilities: SessionCapabilities{List: &MetaOnly{}, Close: &MetaOnly{}}, Auth: &AgentAuth{Logout: &MetaOnly{}}},
			AuthMethods: []AuthMethod{{ID: "oauth", Name: "Sign in"}, {Type: AuthMethodTerminal, ID: "login", Name: "Log in", Args: []string{"login"}}},
			AgentInfo:   &Implementation{Name: "card", Version: "1.0.0"}},
		"AuthenticateRequest":  AuthenticateRequest{MethodID: "oauth"},
		"AuthenticateResponse": AuthenticateResponse{},
		"LogoutRequest":        LogoutRequest{},
		"LogoutResponse":       LogoutResponse{},
		"NewSessionRequest":    NewSessionRequest{Cwd: "/work"},
		"NewSessionResponse": NewSessionResponse{SessionID: "s1",
			Modes:         &SessionModeState{CurrentModeID: "ask", AvailableModes: []SessionMode{{ID: "ask", Name: "Ask"}}},
			ConfigOptions: []SessionConfigOption{{ID: "model", Name: "Model", Type: "select", CurrentValue: "m1", Options: json.RawMessage(`[{"value":"m1","name":"M1"}]`)}}},
		"LoadSessionRequest":  LoadSessionRequest{Cwd: "/work", SessionID: "s1", MCPServers: []MCPServer{{Name: "fs", Command: "/bin/mcp"}, {Type: "http", Name: "web", URL: "http://127.0.0.1:1/mcp"}}},
		"LoadSessionResponse": LoadSessionResponse{},
		"ListSessionsRequest": ListSessionsRequest{Cwd: str("/work")},
		"ListSessionsResponse": ListSessionsResponse{Sessions: []SessionInfo{{SessionID: "s1", Cwd: "/work", Title: str("t")}},
			NextCursor: str("c2")},
		"DeleteSessionRequest":           DeleteSessionRequest{SessionID: "s1"},
		"DeleteSessionResponse":          DeleteSessionResponse{},
		"ResumeSessionRequest":           ResumeSessionRequest{SessionID: "s1", Cwd: "/work"},
		"ResumeSessionResponse":          ResumeSessionResponse{},
		"CloseSessionRequest":            CloseSessionRequest{SessionID: "s1"},
		"CloseSessionResponse":           CloseSessionResponse{},
		"SetSessionModeRequest":          SetSessionModeRequest{SessionID: "s1", ModeID: "code"},
		"SetSessionModeResponse":         SetSessionModeResponse{},
		"SetSessionConfigOptionRequest":  SetSessionConfigOptionRequest{SessionID: "s1", ConfigID: "model", Value: "m2"},
		"SetSessionConfigOptionResponse": SetSessionConfigOptionResponse{},
		"PromptRequest":                  PromptRequest{SessionID: "s1", Prompt: []ContentBlock{ImageBlock("image/png", []byte{0x89, 'P'}), TextBlock("")}},
		"PromptResponse":                 PromptResponse{StopReason: StopEndTurn},
		"CancelNotification":             CancelNotification{SessionID: "s1"},
		"CancelRequestNotification":      CancelRequestNotification{RequestID: json.RawMessage(`7`)},

		"SessionNotification": SessionNotification{SessionID: "s1", Update: SessionUpdate{Kind: UpdateAgentMessageChunk, Chunk: &ContentChunk{Content: TextBlock("hi")}}},
		"RequestPermissionRequest": RequestPermissionRequest{SessionID: "s1", ToolCall: ToolCallUpdate{ToolCallID: "c1", Kind: ToolExecute},
			Options: []PermissionOption{{OptionID: "ok", Name: "Allow", Kind: PermissionAllowOnce}, {OptionID: "no", Name: "Reject", Kind: PermissionRejectOnce}}},
		"RequestPermissionResponse":   Selected("ok"),
		"ReadTextFileRequest":         ReadTextFileRequest{SessionID: "s1", Path: "/work/a.go", Line: u32(1), Limit: u32(10)},
		"ReadTextFileResponse":        ReadTextFileResponse{},
		"WriteTextFileRequest":        WriteTextFileRequest{SessionID: "s1", Path: "/work/a.go"},
		"WriteTextFileResponse":       WriteTextFileResponse{},
		"CreateTerminalRequest":       CreateTerminalRequest{SessionID: "s1", Command: "go", Args: []string{"test"}, Env: []EnvVariable{{Name: "A", Value: "b"}}, OutputByteLimit: u64(1024)},
		"CreateTerminalResponse":      CreateTerminalResponse{TerminalID: "t1"},
		"TerminalOutputRequest":       TerminalOutputRequest{SessionID: "s1", TerminalID: "t1"},
		"TerminalOutputResponse":      TerminalOutputResponse{Output: "ok", ExitStatus: &TerminalExitStatus{ExitCode: u32(0)}},
		"ReleaseTerminalRequest":      ReleaseTerminalRequest{SessionID: "s1", TerminalID: "t1"},
		"ReleaseTerminalResponse":     ReleaseTerminalResponse{},
		"WaitForTerminalExitRequest":  WaitForTerminalExitRequest{SessionID: "s1", TerminalID: "t1"},
		"WaitForTerminalExitResponse": WaitForTerminalExitResponse{Signal: str("SIGKILL")},
		"KillTerminalRequest":         KillTerminalRequest{SessionID: "s1", TerminalID: "t1"},
		"KillTerminalResponse":        KillTerminalResponse{},
		"CreateElicitationRequest": CreateElicitationRequest{Mode: ElicitationForm, Message: "Which branch?", SessionID: "s1",
			RequestedSchema: json.RawMessage(`{"type":"object","properties":{"branch":{"type":"string"}}}`)},
		"CreateElicitationResponse":       CreateElicitationResponse{Action: ElicitationAccept, Content: map[string]any{"branch": "main"}},
		"CompleteElicitationNotification": CompleteElicitationNotification{ElicitationID: "e1"},
	}
}

func TestEveryMessageTheGoTypesWriteIsValidByTheSchema(t *testing.T) {
	c, defs := loadSchema(t)
	msgs := messages()
	var missing []string
	for name, d := range defs {
		var m struct {
			Method string `json:"x-method"`
		}
		_ = json.Unmarshal(d, &m)
		if _, ok := msgs[name]; m.Method != "" && !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "schema messages with no Go sample here")
	for name, v := range msgs {
		t.Run(name, func(t *testing.T) { validate(t, c, name, v) })
	}
}

func TestEverySessionUpdateKindIsWrittenAsTheSchemaHasIt(t *testing.T) {
	c, _ := loadSchema(t)
	str := func(s string) *string { return &s }
	updates := []SessionUpdate{
		{Kind: UpdateUserMessageChunk, Chunk: &ContentChunk{Content: TextBlock("do it")}},
		{Kind: UpdateAgentMessageChunk, Chunk: &ContentChunk{Content: TextBlock("done"), MessageID: str("m1")}},
		{Kind: UpdateAgentThoughtChunk, Chunk: &ContentChunk{Content: TextBlock("")}},
		{Kind: UpdateToolCall, ToolCall: &ToolCall{ToolCallID: "c1", Title: "", Kind: ToolEdit, Status: ToolPending,
			Content:   []ToolCallContent{{Type: ToolContentDiff, Path: "/work/a", NewText: ""}, {Type: ToolContentContent, Content: &ContentBlock{Type: ContentText, Text: "x"}}, {Type: ToolContentTerminal, TerminalID: "t1"}},
			Locations: []ToolCallLocation{{Path: "/work/a"}}, RawInput: json.RawMessage(`{"path":"/work/a"}`)}},
		{Kind: UpdateToolCallUpdate, ToolCallUpdate: &ToolCallUpdate{ToolCallID: "c1", Status: ToolCompleted, RawOutput: json.RawMessage(`"ok"`)}},
		{Kind: UpdatePlan, Plan: &Plan{Entries: []PlanEntry{}}},
		{Kind: UpdatePlan, Plan: &Plan{Entries: []PlanEntry{{Content: "read", Priority: "high", Status: "pending"}}}},
		{Kind: UpdateAvailableCommands, AvailableCommands: &AvailableCommandsUpdate{AvailableCommands: []AvailableCommand{{Name: "init", Description: ""}}}},
		{Kind: UpdateCurrentMode, CurrentMode: &CurrentModeUpdate{CurrentModeID: "code"}},
		{Kind: UpdateConfigOption, ConfigOption: &ConfigOptionUpdate{ConfigOptions: []SessionConfigOption{{ID: "fast", Name: "Fast", Type: "boolean", CurrentValue: true}}}},
		{Kind: UpdateSessionInfo, SessionInfo: &SessionInfoUpdate{Title: str("Fix the build")}},
		{Kind: UpdateUsage, Usage: &UsageUpdate{Used: 10, Size: 100, Cost: &Cost{Amount: 0.01, Currency: "USD"}}},
		{Kind: UpdateNotice, Notice: &Notice{Severity: "warning", Title: "Slow"}},
		{Kind: UpdateCompaction, Compaction: &CompactionUpdate{CompactionID: "k1", Status: "completed", Summary: []ContentBlock{TextBlock("s")}}},
		{Kind: UpdateCompactionSummary, CompactionSummary: &CompactionSummaryChunk{CompactionID: "k1", Content: TextBlock("s")}},
	}
	seen := map[UpdateKind]bool{}
	for _, u := range updates {
		seen[u.Kind] = true
		validate(t, c, "SessionUpdate", u)
		// And read back as it was written.
		b, err := json.Marshal(u)
		require.NoError(t, err)
		var back SessionUpdate
		require.NoError(t, json.Unmarshal(b, &back))
		back.Raw = nil
		assert.Equal(t, u, back, string(b))
	}
	for _, k := range schemaConsts(t, "SessionUpdate", "sessionUpdate") {
		assert.True(t, seen[UpdateKind(k)], "update kind %q of the schema is not covered", k)
	}
}

func TestEveryContentBlockTypeIsWrittenAsTheSchemaHasIt(t *testing.T) {
	c, _ := loadSchema(t)
	mime, size := "text/plain", int64(3)
	text := "abc"
	blocks := []ContentBlock{
		TextBlock(""),
		ImageBlock("image/png", nil),
		{Type: ContentAudio, Data: "AAAA", MimeType: "audio/wav"},
		{Type: ContentResourceLink, URI: "file:///work/a", Name: "a", MimeType: mime, Size: &size},
		{Type: ContentResource, Resource: &ResourceContents{URI: "file:///work/a", MimeType: &mime, Text: &text}},
		{Type: ContentText, Text: "x", Annotations: &Annotations{Audience: []string{"user"}}},
	}
	seen := map[string]bool{}
	for _, b := range blocks {
		seen[b.Type] = true
		validate(t, c, "ContentBlock", b)
	}
	for _, k := range schemaConsts(t, "ContentBlock", "type") {
		assert.True(t, seen[k], "content type %q of the schema is not covered", k)
	}
}

func TestEveryErrorCodeOfTheSchemaHasAConstant(t *testing.T) {
	_, defs := loadSchema(t)
	var ec struct {
		AnyOf []struct {
			Const *int `json:"const"`
		} `json:"anyOf"`
	}
	require.NoError(t, json.Unmarshal(defs["ErrorCode"], &ec))
	ours := map[int]bool{}
	for _, c := range []ErrorCode{CodeParseError, CodeInvalidRequest, CodeMethodNotFound, CodeInvalidParams, CodeInternalError,
		CodeRequestCancelled, CodeAuthRequired, CodeResourceNotFound} {
		ours[int(c)] = true
	}
	n := 0
	for _, a := range ec.AnyOf {
		if a.Const != nil {
			n++
			assert.True(t, ours[*a.Const], "error code %d of the schema has no constant", *a.Const)
		}
	}
	assert.Equal(t, len(ours), n)
}

func TestEveryEnumOfTheSchemaHasItsConstants(t *testing.T) {
	tests := []struct {
		def  string
		ours []string
	}{
		{"StopReason", []string{string(StopEndTurn), string(StopMaxTokens), string(StopMaxTurnRequests), string(StopRefusal), string(StopCancelled)}},
		{"ToolKind", []string{string(ToolRead), string(ToolEdit), string(ToolDelete), string(ToolMove), string(ToolSearch), string(ToolExecute), string(ToolThink), string(ToolFetch), string(ToolSwitchMode), string(ToolOther)}},
		{"ToolCallStatus", []string{string(ToolPending), string(ToolInProgress), string(ToolCompleted), string(ToolFailed)}},
		{"PermissionOptionKind", []string{string(PermissionAllowOnce), string(PermissionAllowAlways), string(PermissionRejectOnce), string(PermissionRejectAlways)}},
	}
	for _, tt := range tests {
		t.Run(tt.def, func(t *testing.T) {
			assert.ElementsMatch(t, schemaConsts(t, tt.def, ""), tt.ours)
		})
	}
	assert.ElementsMatch(t, schemaConsts(t, "RequestPermissionOutcome", "outcome"), []string{OutcomeSelected, OutcomeCancelled})
	assert.ElementsMatch(t, schemaConsts(t, "ToolCallContent", "type"), []string{ToolContentContent, ToolContentDiff, ToolContentTerminal})
}

// schemaConsts are the const values of a definition's oneOf/anyOf arms:
// of the arm itself when prop is empty, else of its property prop.
func schemaConsts(t *testing.T, def, prop string) []string {
	t.Helper()
	_, defs := loadSchema(t)
	type arm struct {
		Const      *string `json:"const"`
		Properties map[string]struct {
			Const *string `json:"const"`
		} `json:"properties"`
	}
	var d struct {
		OneOf []arm `json:"oneOf"`
		AnyOf []arm `json:"anyOf"`
	}
	require.NoError(t, json.Unmarshal(defs[def], &d), def)
	var out []string
	for _, a := range append(d.OneOf, d.AnyOf...) {
		switch {
		case prop == "" && a.Const != nil:
			out = append(out, *a.Const)
		case prop != "" && a.Properties[prop].Const != nil:
			out = append(out, *a.Properties[prop].Const)
		}
	}
	require.NotEmpty(t, out, def)
	return out
}
