package acp

import "encoding/json"

// ToolKind is the kind of a tool call. ACP has no tool names: a client
// that must name a call (for an approver, a record) reads the kind, the
// title or the agent's own conventions.
type ToolKind string

const (
	ToolRead       ToolKind = "read"
	ToolEdit       ToolKind = "edit"
	ToolDelete     ToolKind = "delete"
	ToolMove       ToolKind = "move"
	ToolSearch     ToolKind = "search"
	ToolExecute    ToolKind = "execute"
	ToolThink      ToolKind = "think"
	ToolFetch      ToolKind = "fetch"
	ToolSwitchMode ToolKind = "switch_mode"
	ToolOther      ToolKind = "other"
)

// ToolCallStatus is where a tool call is: a call is finished once it is
// completed or failed, and only then has its output.
type ToolCallStatus string

const (
	ToolPending    ToolCallStatus = "pending"
	ToolInProgress ToolCallStatus = "in_progress"
	ToolCompleted  ToolCallStatus = "completed"
	ToolFailed     ToolCallStatus = "failed"
)

// ToolCall is a tool call the agent announces (the tool_call update).
type ToolCall struct {
	ToolCallID string             `json:"toolCallId"`
	Title      string             `json:"title"`
	Name       *string            `json:"name,omitempty"`
	Kind       ToolKind           `json:"kind,omitempty"`
	Status     ToolCallStatus     `json:"status,omitempty"`
	Content    []ToolCallContent  `json:"content,omitempty"`
	Locations  []ToolCallLocation `json:"locations,omitempty"`
	// RawInput and RawOutput are the tool's own input and output, in
	// whatever shape the agent gives them.
	RawInput  json.RawMessage `json:"rawInput,omitempty"`
	RawOutput json.RawMessage `json:"rawOutput,omitempty"`
	Meta      Meta            `json:"_meta,omitempty"`
}

// ToolCallUpdate changes a call announced before (the tool_call_update
// update), and names the call a permission request is about. Every field
// but the id is optional: what is left out is unchanged.
type ToolCallUpdate struct {
	ToolCallID string             `json:"toolCallId"`
	Title      string             `json:"title,omitempty"`
	Name       *string            `json:"name,omitempty"`
	Kind       ToolKind           `json:"kind,omitempty"`
	Status     ToolCallStatus     `json:"status,omitempty"`
	Content    []ToolCallContent  `json:"content,omitempty"`
	Locations  []ToolCallLocation `json:"locations,omitempty"`
	RawInput   json.RawMessage    `json:"rawInput,omitempty"`
	RawOutput  json.RawMessage    `json:"rawOutput,omitempty"`
	Meta       Meta               `json:"_meta,omitempty"`
}

// AsUpdate is the call as an update that sets all of it, for a reader
// that treats announcements and updates alike.
func (c ToolCall) AsUpdate() ToolCallUpdate {
	return ToolCallUpdate(c)
}

// The types of a tool call's content.
const (
	ToolContentContent  = "content"
	ToolContentDiff     = "diff"
	ToolContentTerminal = "terminal"
)

// ToolCallContent is one piece of what a tool call shows: a content block
// (Type "content", Content), a file change (Type "diff", Path, OldText,
// NewText) or a terminal the client runs (Type "terminal", TerminalID).
type ToolCallContent struct {
	Type       string        `json:"type"`
	Content    *ContentBlock `json:"content,omitempty"`
	Path       string        `json:"path,omitempty"`
	OldText    *string       `json:"oldText,omitempty"`
	NewText    string        `json:"newText,omitempty"`
	TerminalID string        `json:"terminalId,omitempty"`
	Meta       Meta          `json:"_meta,omitempty"`
}

// MarshalJSON writes the fields of the content's type, NewText included
// when empty (a diff that empties a file).
func (c ToolCallContent) MarshalJSON() ([]byte, error) {
	switch c.Type {
	case ToolContentContent:
		b := c.Content
		if b == nil {
			b = &ContentBlock{Type: ContentText}
		}
		return json.Marshal(struct {
			Type    string        `json:"type"`
			Content *ContentBlock `json:"content"`
			Meta    Meta          `json:"_meta,omitempty"`
		}{c.Type, b, c.Meta})
	case ToolContentDiff:
		return json.Marshal(struct {
			Type    string  `json:"type"`
			Path    string  `json:"path"`
			OldText *string `json:"oldText,omitempty"`
			NewText string  `json:"newText"`
			Meta    Meta    `json:"_meta,omitempty"`
		}{c.Type, c.Path, c.OldText, c.NewText, c.Meta})
	case ToolContentTerminal:
		return json.Marshal(struct {
			Type       string `json:"type"`
			TerminalID string `json:"terminalId"`
			Meta       Meta   `json:"_meta,omitempty"`
		}{c.Type, c.TerminalID, c.Meta})
	default:
		type plain ToolCallContent
		return json.Marshal(plain(c))
	}
}

// ToolCallLocation is a file (and line) a call works on, for a client to
// follow along.
type ToolCallLocation struct {
	Path string  `json:"path"`
	Line *uint32 `json:"line,omitempty"`
	Meta Meta    `json:"_meta,omitempty"`
}

// PermissionOptionKind is what choosing an option means. The option ids
// are the agent's own (Gemini's proceed_once, Copilot's allow_once), so a
// client picks an option by its kind, never by its id.
type PermissionOptionKind string

const (
	PermissionAllowOnce    PermissionOptionKind = "allow_once"
	PermissionAllowAlways  PermissionOptionKind = "allow_always"
	PermissionRejectOnce   PermissionOptionKind = "reject_once"
	PermissionRejectAlways PermissionOptionKind = "reject_always"
)

// PermissionOption is one answer the agent offers to a permission request.
type PermissionOption struct {
	OptionID string               `json:"optionId"`
	Name     string               `json:"name"`
	Kind     PermissionOptionKind `json:"kind"`
	Meta     Meta                 `json:"_meta,omitempty"`
}

// RequestPermissionRequest asks the client whether a tool call may run.
type RequestPermissionRequest struct {
	SessionID string             `json:"sessionId"`
	ToolCall  ToolCallUpdate     `json:"toolCall"`
	Options   []PermissionOption `json:"options"`
	Meta      Meta               `json:"_meta,omitempty"`
}

// The outcomes of a permission request. A client whose turn was cancelled
// must answer cancelled: the agent reads it as a denial.
const (
	OutcomeSelected  = "selected"
	OutcomeCancelled = "cancelled"
)

// RequestPermissionOutcome is the client's answer: selected with one of
// the offered options, or cancelled.
type RequestPermissionOutcome struct {
	Outcome  string `json:"outcome"`
	OptionID string `json:"optionId,omitempty"`
	Meta     Meta   `json:"_meta,omitempty"`
}

// RequestPermissionResponse answers a permission request.
type RequestPermissionResponse struct {
	Outcome RequestPermissionOutcome `json:"outcome"`
	Meta    Meta                     `json:"_meta,omitempty"`
}

// Selected is the answer that picks option id.
func Selected(optionID string) RequestPermissionResponse {
	return RequestPermissionResponse{Outcome: RequestPermissionOutcome{Outcome: OutcomeSelected, OptionID: optionID}}
}

// Cancelled is the answer that picks no option.
func Cancelled() RequestPermissionResponse {
	return RequestPermissionResponse{Outcome: RequestPermissionOutcome{Outcome: OutcomeCancelled}}
}
