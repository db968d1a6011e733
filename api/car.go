package api

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CAR's dialect, spoken by agents.invoke_external and the methods beside
// it. A host written against CAR's published daemon protocol sends it: its
// session_id is the host's own routing id for a conversation, not an
// agent's session; a streamed run answers {accepted, session_id} and is
// heard as agents.chat.event notifications; agents.chat.cancel ends it by
// that id; a bad attachment is skipped and counted, not refused; and the
// connection opens with session.auth and server.handshake.

// ChatEventMethod is the notification a streamed agents.invoke_external
// sends, in CAR's shape.
const ChatEventMethod = "agents.chat.event"

// CAR's chat event kinds card sends. Every other event of a run (thinking,
// tool results, retries, usage, the agent's own mid-run errors) has no CAR
// kind; runs.subscribe with the run_id carries them all.
const (
	ChatToken    = "token"
	ChatToolCall = "tool_call"
	ChatDone     = "done"
	ChatError    = "error"
)

// MaxRoutingIDBytes bounds a host's session_id: it is echoed in every event and
// kept per connection, and CAR's own are short ("chat-abc123").
const MaxRoutingIDBytes = 256

// ExternalInvokeParams are agents.invoke_external's params: CAR's fields in
// CAR's meaning, and card's agents.invoke fields beside them.
type ExternalInvokeParams struct {
	// ID is the adapter to run (claude-code, codex, gemini, ...).
	ID string `json:"id"`
	// Task is the prompt. It goes to the agent on stdin, never on argv.
	Task string `json:"task"`
	// Stream answers at once with {accepted, session_id, run_id} and sends
	// agents.chat.event notifications; without it the answer is the
	// finished run.
	Stream bool `json:"stream,omitempty"`
	// SessionID is the host's routing id, threaded through the answer and
	// every event: any printable string of at most 256 bytes; generated
	// (chat-<uuid>) when omitted. It never reaches the agent.
	SessionID string `json:"session_id,omitempty"`
	// Cwd is where the agent runs: an absolute, existing directory; the
	// daemon user's home when omitted (read_only only).
	Cwd          string   `json:"cwd,omitempty"`
	AllowedTools []string `json:"allowed_tools,omitempty"`
	MaxTurns     int      `json:"max_turns,omitempty"`
	// TimeoutSecs defaults to 300 and is clamped to [1, 3600], as CAR
	// documents for its agents.invoke_external (agents.invoke refuses a
	// value outside them instead).
	TimeoutSecs int `json:"timeout_secs,omitempty"`
	// MCPEndpoint is an MCP server (streamable HTTP) for the agent; "" or
	// omitted is none.
	MCPEndpoint string `json:"mcp_endpoint,omitempty"`
	// Attachments are images by path; one card cannot send is skipped and
	// counted in dropped_attachments, and the agent runs with the rest.
	Attachments []ExternalAttachment `json:"attachments,omitempty"`

	// card's fields, as on agents.invoke.
	InvokedBy          string `json:"invoked_by,omitempty"`
	PermissionMode     string `json:"permission_mode,omitempty"`
	Model              string `json:"model,omitempty"`
	Effort             string `json:"effort,omitempty"`
	SystemPrompt       string `json:"system_prompt,omitempty"`
	SystemPromptAppend bool   `json:"system_prompt_append,omitempty"`
	// AgentSessionID asks the agent for a new session with this UUID
	// (agents.invoke's session_id); Resume continues the agent's session
	// (the agent_session_id of an earlier answer); DiscardSession leaves
	// none behind.
	AgentSessionID string `json:"agent_session_id,omitempty"`
	Resume         string `json:"resume,omitempty"`
	DiscardSession bool   `json:"discard_session,omitempty"`
	MaxAPIRetries  *int   `json:"max_api_retries,omitempty"`
	StallSecs      *int   `json:"stall_secs,omitempty"`
	StallKillSecs  *int   `json:"stall_kill_secs,omitempty"`
	// MaxCostUSD and MaxTokens are agents.invoke's max_cost_usd and
	// max_tokens.
	MaxCostUSD                    *float64 `json:"max_cost_usd,omitempty"`
	MaxTokens                     *int64   `json:"max_tokens,omitempty"`
	ApprovalTimeoutSecs           int      `json:"approval_timeout_secs,omitempty"`
	AcknowledgeUnenforcedReadOnly bool     `json:"acknowledge_unenforced_read_only,omitempty"`
	AcknowledgeUnenforcedEdit     bool     `json:"acknowledge_unenforced_edit,omitempty"`
}

// ExternalAttachment is an image attached to agents.invoke_external in CAR's
// shape: an absolute path on this machine, and the type the host thinks it
// is. The bytes decide the type; media_type is only the host's guess.
type ExternalAttachment struct {
	// Path is an absolute path to an image file (PNG, JPEG, GIF or WebP by
	// its bytes), read once when the request arrives.
	Path string `json:"path"`
	// MediaType is advisory: card sends the type the bytes are.
	MediaType string `json:"media_type,omitempty"`
}

// Validate checks the routing id, the one field agents.invoke does not
// have.
func (p *ExternalInvokeParams) Validate() error {
	if p.SessionID == "" {
		return nil
	}
	if len(p.SessionID) > MaxRoutingIDBytes || !utf8.ValidString(p.SessionID) || strings.ContainsFunc(p.SessionID, unicode.IsControl) {
		return InvalidField("session_id", "must be printable text of at most %d bytes (the host's own id for this conversation)", MaxRoutingIDBytes)
	}
	return nil
}

// ExternalInvokeResult is CAR's InvokeResult: the agent's result with the
// host's session_id, the number of attachments not sent, and card's run
// fields beside them.
type ExternalInvokeResult struct {
	Answer string `json:"answer"`
	// SessionID is the host's routing id (the one it sent, or the one
	// generated for it).
	SessionID string `json:"session_id"`
	// AgentSessionID is the agent CLI's own session, for resume; it is the
	// run's session_id in runs.get.
	AgentSessionID string    `json:"agent_session_id,omitempty"`
	Turns          int       `json:"turns"`
	ToolCalls      int       `json:"tool_calls"`
	DurationMs     int64     `json:"duration_ms"`
	CostUSD        *float64  `json:"total_cost_usd,omitempty"`
	Usage          Usage     `json:"usage"`
	IsError        bool      `json:"is_error"`
	Error          *RunError `json:"error,omitempty"`
	// DroppedAttachments counts the attachments the agent was not given
	// (omitted when 0); DroppedAttachmentReasons says which and why.
	DroppedAttachments       int                 `json:"dropped_attachments,omitempty"`
	DroppedAttachmentReasons []DroppedAttachment `json:"dropped_attachment_reasons,omitempty"`
	RunID                    string              `json:"run_id"`
	Adapter                  string              `json:"adapter"`
	Ancestry                 []string            `json:"ancestry"`
	Status                   Status              `json:"status"`
}

// ExternalInvokeAccepted is a streamed agents.invoke_external's answer:
// CAR's {accepted, session_id}, and which run it is.
type ExternalInvokeAccepted struct {
	Accepted  bool     `json:"accepted"`
	SessionID string   `json:"session_id"`
	RunID     string   `json:"run_id"`
	Adapter   string   `json:"adapter"`
	Ancestry  []string `json:"ancestry"`
	// DroppedAttachments is said at once, before any event, and again on
	// the terminal done.
	DroppedAttachments       int                 `json:"dropped_attachments,omitempty"`
	DroppedAttachmentReasons []DroppedAttachment `json:"dropped_attachment_reasons,omitempty"`
}

// ChatEvent is one agents.chat.event: CAR's {session_id, agent_id, kind,
// …}, with card's run_id and seq beside them.
type ChatEvent struct {
	SessionID string `json:"session_id"`
	// AgentID is the adapter the run is of.
	AgentID string `json:"agent_id"`
	Kind    string `json:"kind" jsonschema:"enum=token,enum=tool_call,enum=done,enum=error"`
	// Delta is a token's text.
	Delta string `json:"delta,omitempty"`
	// Tool and Params are a tool_call's tool and its input; Detail is the
	// tool's name again, for hosts that read CAR's older name for it.
	Tool   string          `json:"tool,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Detail string          `json:"detail,omitempty"`
	// FinishReason and Text are done's: how the run finished, and its
	// whole answer.
	FinishReason string  `json:"finish_reason,omitempty"`
	Text         *string `json:"text,omitempty"`
	// DroppedAttachments is on done when some attachments were not sent.
	DroppedAttachments int `json:"dropped_attachments,omitempty"`
	// Error is error's message.
	Error string `json:"error,omitempty"`
	// RunID and Seq are the run and the agents.event this one comes from
	// (runs.subscribe with after_seq replays the run's every event).
	RunID string `json:"run_id"`
	Seq   int64  `json:"seq,omitempty"`
	// Status and Result are on done and error: the run's status and its
	// whole result.
	Status Status                `json:"status,omitempty"`
	Result *ExternalInvokeResult `json:"result,omitempty"`
}

// ChatCancelParams are agents.chat.cancel's params.
type ChatCancelParams struct {
	// SessionID is the session_id of a running agents.invoke_external of
	// this connection.
	SessionID string `json:"session_id"`
}

// Validate requires the session id.
func (p *ChatCancelParams) Validate() error {
	if p.SessionID == "" {
		return InvalidField("session_id", "required: the session_id of the agents.invoke_external to end")
	}
	return nil
}

// ChatCancelResult says what agents.chat.cancel did.
type ChatCancelResult struct {
	SessionID string `json:"session_id"`
	// Cancelled is true when a run was going and this ended it; Reason
	// says why not otherwise.
	Cancelled bool   `json:"cancelled"`
	RunID     string `json:"run_id,omitempty"`
	Status    Status `json:"status,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// SessionAuthParams are session.auth's params: CAR's in-band token.
type SessionAuthParams struct {
	// Token is the daemon's token, the one the connection was opened with.
	Token string `json:"token"`
	// AgentID, HostToken and MemoryNamespace are CAR's other ways in, which
	// card has no counterpart for; each is refused naming why.
	AgentID         string `json:"agent_id,omitempty"`
	HostToken       string `json:"host_token,omitempty"`
	MemoryNamespace string `json:"memory_namespace,omitempty"`
}

// Validate refuses what card cannot honour.
func (p *SessionAuthParams) Validate() error {
	switch {
	case p.HostToken != "":
		return InvalidField("host_token", "card has no host-management role: every connection that holds the daemon's token may call what its access class allows; send token")
	case p.AgentID != "":
		return InvalidField("agent_id", "card supervises no lifecycle agents, so there is no agent identity to bind; send only token")
	case p.MemoryNamespace != "":
		return InvalidField("memory_namespace", "card keeps no memory graph to scope; leave it out")
	case p.Token == "":
		return InvalidField("token", "required: the daemon's token (<home>/token), the one this connection was opened with")
	}
	return nil
}

// SessionAuthResult is CAR's answer on a connection that is authenticated.
type SessionAuthResult struct {
	OK          bool `json:"ok"`
	AuthEnabled bool `json:"auth_enabled"`
}

// HandshakeParams are server.handshake's params.
type HandshakeParams struct {
	// ProtocolVersion is the version the client speaks (CAR's is a number,
	// card's a string), echoed back.
	ProtocolVersion json.RawMessage `json:"protocol_version,omitempty"`
	ClientVersion   string          `json:"client_version,omitempty"`
}

// Validate accepts a number or a string for the version.
func (p *HandshakeParams) Validate() error {
	if v := strings.TrimSpace(string(p.ProtocolVersion)); v != "" {
		var s string
		var n json.Number
		if json.Unmarshal(p.ProtocolVersion, &s) != nil && json.Unmarshal(p.ProtocolVersion, &n) != nil {
			return InvalidField("protocol_version", "must be a number or a string, not %s", v)
		}
	}
	return nil
}

// HandshakeResult is server.handshake's answer: card's protocol version
// and build, and what the client said it speaks.
type HandshakeResult struct {
	ProtocolVersion       string          `json:"protocol_version"`
	ServerVersion         string          `json:"server_version"`
	ClientProtocolVersion json.RawMessage `json:"client_protocol_version,omitempty"`
}
