package acp

import "encoding/json"

// The methods an agent calls on its client: files and terminals in the
// client's world (an editor's unsaved buffers, its own terminals), and
// questions for the user. A client serves only what it declared.

// ReadTextFileRequest reads a text file, optionally from a 1-based Line
// and for Limit lines.
type ReadTextFileRequest struct {
	SessionID string  `json:"sessionId"`
	Path      string  `json:"path"`
	Line      *uint32 `json:"line,omitempty"`
	Limit     *uint32 `json:"limit,omitempty"`
	Meta      Meta    `json:"_meta,omitempty"`
}

// ReadTextFileResponse is the file's text.
type ReadTextFileResponse struct {
	Content string `json:"content"`
	Meta    Meta   `json:"_meta,omitempty"`
}

// WriteTextFileRequest writes a text file whole.
type WriteTextFileRequest struct {
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Content   string `json:"content"`
	Meta      Meta   `json:"_meta,omitempty"`
}

// CreateTerminalRequest runs a command in a terminal the client owns. The
// output kept is bounded by OutputByteLimit, the oldest cut first.
type CreateTerminalRequest struct {
	SessionID       string        `json:"sessionId"`
	Command         string        `json:"command"`
	Args            []string      `json:"args,omitempty"`
	Env             []EnvVariable `json:"env,omitempty"`
	Cwd             *string       `json:"cwd,omitempty"`
	OutputByteLimit *uint64       `json:"outputByteLimit,omitempty"`
	Meta            Meta          `json:"_meta,omitempty"`
}

// CreateTerminalResponse names the new terminal.
type CreateTerminalResponse struct {
	TerminalID string `json:"terminalId"`
	Meta       Meta   `json:"_meta,omitempty"`
}

// TerminalRef names a terminal of a session: the params of terminal/output,
// terminal/release, terminal/wait_for_exit and terminal/kill.
type TerminalRef struct {
	SessionID  string `json:"sessionId"`
	TerminalID string `json:"terminalId"`
	Meta       Meta   `json:"_meta,omitempty"`
}

type (
	TerminalOutputRequest      = TerminalRef
	ReleaseTerminalRequest     = TerminalRef
	WaitForTerminalExitRequest = TerminalRef
	KillTerminalRequest        = TerminalRef
)

// TerminalOutputResponse is a terminal's output so far, and its exit once
// it has exited.
type TerminalOutputResponse struct {
	Output     string              `json:"output"`
	Truncated  bool                `json:"truncated"`
	ExitStatus *TerminalExitStatus `json:"exitStatus,omitempty"`
	Meta       Meta                `json:"_meta,omitempty"`
}

// TerminalExitStatus is how a command ended: its exit code, or the signal
// that ended it.
type TerminalExitStatus struct {
	ExitCode *uint32 `json:"exitCode,omitempty"`
	Signal   *string `json:"signal,omitempty"`
	Meta     Meta    `json:"_meta,omitempty"`
}

// WaitForTerminalExitResponse is the command's exit.
type WaitForTerminalExitResponse = TerminalExitStatus

// The modes of an elicitation: a form the client shows, or a URL it opens.
const (
	ElicitationForm = "form"
	ElicitationURL  = "url"
)

// CreateElicitationRequest asks the user for structured input: a form
// (RequestedSchema, a restricted JSON Schema) or a URL to visit. It is
// scoped to a session (SessionID, and ToolCallID when a call asks) or to a
// request in flight (RequestID).
type CreateElicitationRequest struct {
	Mode            string          `json:"mode"`
	Message         string          `json:"message"`
	SessionID       string          `json:"sessionId,omitempty"`
	ToolCallID      *string         `json:"toolCallId,omitempty"`
	RequestID       json.RawMessage `json:"requestId,omitempty"`
	RequestedSchema json.RawMessage `json:"requestedSchema,omitempty"`
	ElicitationID   string          `json:"elicitationId,omitempty"`
	URL             string          `json:"url,omitempty"`
	Meta            Meta            `json:"_meta,omitempty"`
}

// The actions that answer an elicitation.
const (
	ElicitationAccept  = "accept"
	ElicitationDecline = "decline"
	ElicitationCancel  = "cancel"
)

// CreateElicitationResponse is the user's answer: accept (with the form's
// Content), decline, or cancel.
type CreateElicitationResponse struct {
	Action  string         `json:"action"`
	Content map[string]any `json:"content,omitempty"`
	Meta    Meta           `json:"_meta,omitempty"`
}

// CompleteElicitationNotification says a URL elicitation has ended.
type CompleteElicitationNotification struct {
	ElicitationID string `json:"elicitationId"`
	Meta          Meta   `json:"_meta,omitempty"`
}
