package acp

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goTypes are the Go types by the schema definition they carry. A type
// that flattens a union (ContentBlock for every block type) is compared
// with the properties of every arm.
var goTypes = map[string]any{
	"Implementation": Implementation{}, "ClientCapabilities": ClientCapabilities{}, "FileSystemCapabilities": FileSystemCapabilities{},
	"ClientSessionCapabilities": ClientSessionCapabilities{}, "SessionConfigOptionsCapabilities": SessionConfigOptionsCapabilities{},
	"AuthCapabilities": AuthCapabilities{}, "ElicitationCapabilities": ElicitationCapabilities{}, "AgentCapabilities": AgentCapabilities{},
	"PromptCapabilities": PromptCapabilities{}, "McpCapabilities": MCPCapabilities{}, "SessionCapabilities": SessionCapabilities{},
	"AgentAuthCapabilities": AgentAuth{}, "InitializeRequest": InitializeRequest{}, "InitializeResponse": InitializeResponse{},
	"AuthMethod": AuthMethod{}, "AuthenticateRequest": AuthenticateRequest{}, "AuthenticateResponse": AuthenticateResponse{},
	"McpServer": MCPServer{}, "EnvVariable": EnvVariable{}, "HttpHeader": HTTPHeader{},
	"NewSessionRequest": NewSessionRequest{}, "NewSessionResponse": NewSessionResponse{},
	"LoadSessionRequest": LoadSessionRequest{}, "LoadSessionResponse": LoadSessionResponse{},
	"ResumeSessionRequest": ResumeSessionRequest{}, "ResumeSessionResponse": ResumeSessionResponse{},
	"ListSessionsRequest": ListSessionsRequest{}, "ListSessionsResponse": ListSessionsResponse{}, "SessionInfo": SessionInfo{},
	"DeleteSessionRequest": DeleteSessionRequest{}, "CloseSessionRequest": CloseSessionRequest{}, "CancelNotification": CancelNotification{},
	"SessionModeState": SessionModeState{}, "SessionMode": SessionMode{}, "SetSessionModeRequest": SetSessionModeRequest{},
	"SessionConfigOption": SessionConfigOption{}, "SessionConfigSelectOption": SessionConfigSelectOption{},
	"SessionConfigSelectGroup": SessionConfigSelectGroup{}, "SetSessionConfigOptionRequest": SetSessionConfigOptionRequest{},
	"SetSessionConfigOptionResponse": SetSessionConfigOptionResponse{}, "PromptRequest": PromptRequest{},
	"PromptResponse": PromptResponse{}, "CancelRequestNotification": CancelRequestNotification{},
	"ContentBlock": ContentBlock{}, "EmbeddedResourceResource": ResourceContents{}, "Annotations": Annotations{},
	"ToolCall": ToolCall{}, "ToolCallUpdate": ToolCallUpdate{}, "ToolCallContent": ToolCallContent{}, "ToolCallLocation": ToolCallLocation{},
	"PermissionOption": PermissionOption{}, "RequestPermissionRequest": RequestPermissionRequest{},
	"RequestPermissionOutcome": RequestPermissionOutcome{}, "RequestPermissionResponse": RequestPermissionResponse{},
	"SessionNotification": SessionNotification{}, "ContentChunk": ContentChunk{}, "Plan": Plan{}, "PlanEntry": PlanEntry{},
	"AvailableCommandsUpdate": AvailableCommandsUpdate{}, "AvailableCommand": AvailableCommand{},
	"CurrentModeUpdate": CurrentModeUpdate{}, "ConfigOptionUpdate": ConfigOptionUpdate{}, "SessionInfoUpdate": SessionInfoUpdate{},
	"UsageUpdate": UsageUpdate{}, "Cost": Cost{}, "Notice": Notice{}, "CompactionUpdate": CompactionUpdate{},
	"CompactionSummaryChunk": CompactionSummaryChunk{},
	"ReadTextFileRequest":    ReadTextFileRequest{}, "ReadTextFileResponse": ReadTextFileResponse{},
	"WriteTextFileRequest": WriteTextFileRequest{}, "CreateTerminalRequest": CreateTerminalRequest{},
	"CreateTerminalResponse": CreateTerminalResponse{}, "TerminalOutputRequest": TerminalOutputRequest{},
	"TerminalOutputResponse": TerminalOutputResponse{}, "TerminalExitStatus": TerminalExitStatus{},
	"WaitForTerminalExitResponse": WaitForTerminalExitResponse{},
	"CreateElicitationRequest":    CreateElicitationRequest{}, "CreateElicitationResponse": CreateElicitationResponse{},
	"CompleteElicitationNotification": CompleteElicitationNotification{}, "Error": Error{},
	"KillTerminalRequest": KillTerminalRequest{}, "ReleaseTerminalRequest": ReleaseTerminalRequest{},
	"WaitForTerminalExitRequest": WaitForTerminalExitRequest{},

	// The capabilities declared by being present, and the empty results.
	"LogoutCapabilities": MetaOnly{}, "BooleanConfigOptionCapabilities": MetaOnly{}, "ElicitationFormCapabilities": MetaOnly{},
	"ElicitationUrlCapabilities": MetaOnly{}, "SessionAdditionalDirectoriesCapabilities": MetaOnly{},
	"SessionCloseCapabilities": MetaOnly{}, "SessionDeleteCapabilities": MetaOnly{}, "SessionListCapabilities": MetaOnly{},
	"SessionResumeCapabilities": MetaOnly{}, "LogoutRequest": LogoutRequest{}, "LogoutResponse": LogoutResponse{},
	"CloseSessionResponse": CloseSessionResponse{}, "DeleteSessionResponse": DeleteSessionResponse{},
	"SetSessionModeResponse": SetSessionModeResponse{}, "WriteTextFileResponse": WriteTextFileResponse{},
	"ReleaseTerminalResponse": ReleaseTerminalResponse{}, "KillTerminalResponse": KillTerminalResponse{},
	// The form an elicitation asks for (ElicitationSchema and its property
	// schemas) stays raw JSON in CreateElicitationRequest.RequestedSchema:
	// a client renders it, it does not build one.
}

// outsideTheSchema are the fields kept because an agent sends them where
// the stable schema has none (see each field's comment).
var outsideTheSchema = map[string][]string{
	"NewSessionResponse": {"models"},
	"PromptResponse":     {"usage"},
}

// Every field the schema defines is one a Go type can carry, and every
// field of a Go type is the schema's: a field missed, misspelt or invented
// from memory fails here by name.
func TestTheGoTypesHaveExactlyTheSchemasFields(t *testing.T) {
	_, defs := loadSchema(t)
	for def, v := range goTypes {
		t.Run(def, func(t *testing.T) {
			raw, ok := defs[def]
			require.True(t, ok, "the schema has no %s", def)
			want := map[string]bool{}
			schemaProps(t, defs, raw, want, 0)
			for _, f := range outsideTheSchema[def] {
				want[f] = true
			}
			assert.Equal(t, sorted(want), sorted(jsonFields(reflect.TypeOf(v))))
		})
	}
}

// schemaProps collects a definition's properties, through $ref, allOf,
// anyOf and oneOf (the arms of a union a Go type flattens).
func schemaProps(t *testing.T, defs map[string]json.RawMessage, raw json.RawMessage, into map[string]bool, depth int) {
	require.Less(t, depth, 12, "the schema nests deeper than a message type does")
	var d struct {
		Ref        string                     `json:"$ref"`
		Properties map[string]json.RawMessage `json:"properties"`
		AllOf      []json.RawMessage          `json:"allOf"`
		AnyOf      []json.RawMessage          `json:"anyOf"`
		OneOf      []json.RawMessage          `json:"oneOf"`
	}
	if json.Unmarshal(raw, &d) != nil {
		return
	}
	if name, ok := strings.CutPrefix(d.Ref, "#/$defs/"); ok {
		// A reference here is an arm of the union (a property's own type
		// is never walked: properties are collected by name).
		schemaProps(t, defs, defs[name], into, depth+1)
		return
	}
	for p := range d.Properties {
		into[p] = true
	}
	for _, arms := range [][]json.RawMessage{d.AllOf, d.AnyOf, d.OneOf} {
		for _, a := range arms {
			schemaProps(t, defs, a, into, depth+1)
		}
	}
}

func jsonFields(rt reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range rt.NumField() {
		f := rt.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			for k := range jsonFields(f.Type) {
				out[k] = true
			}
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = true
	}
	return out
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
