package acp

import "encoding/json"

// Meta is the _meta object ACP reserves on every message for extensions.
// It is kept as the sender wrote it: its keys are the sender's own, and a
// reader decodes only the ones it knows (Gemini reports tokens there).
type Meta = json.RawMessage

// Implementation names a client or an agent and its version.
type Implementation struct {
	Name    string  `json:"name"`
	Title   *string `json:"title,omitempty"`
	Version string  `json:"version"`
	Meta    Meta    `json:"_meta,omitempty"`
}

// ClientCapabilities is what a client serves the agent. A capability left
// out is one the agent must do without: with no fs and no terminal the
// agent reads, writes and runs commands itself and only asks permission.
type ClientCapabilities struct {
	FS       FileSystemCapabilities     `json:"fs"`
	Terminal bool                       `json:"terminal"`
	Session  *ClientSessionCapabilities `json:"session,omitempty"`
	Auth     *AuthCapabilities          `json:"auth,omitempty"`
	// Elicitation, when set, says the client can put the agent's
	// structured questions to a person.
	Elicitation *ElicitationCapabilities `json:"elicitation,omitempty"`
	Meta        Meta                     `json:"_meta,omitempty"`
}

// FileSystemCapabilities are the fs/* methods a client serves.
type FileSystemCapabilities struct {
	ReadTextFile  bool `json:"readTextFile"`
	WriteTextFile bool `json:"writeTextFile"`
	Meta          Meta `json:"_meta,omitempty"`
}

// ClientSessionCapabilities are the session features a client can show.
type ClientSessionCapabilities struct {
	Compaction    *struct{}                         `json:"compaction,omitempty"`
	ConfigOptions *SessionConfigOptionsCapabilities `json:"configOptions,omitempty"`
	Notices       *struct{}                         `json:"notices,omitempty"`
	Meta          Meta                              `json:"_meta,omitempty"`
}

// SessionConfigOptionsCapabilities says which kinds of config option a
// client can show beyond select (the one every client must).
type SessionConfigOptionsCapabilities struct {
	Boolean *MetaOnly `json:"boolean,omitempty"`
	Meta    Meta      `json:"_meta,omitempty"`
}

// MetaOnly is a capability that is declared by being present; it carries
// nothing but _meta.
type MetaOnly struct {
	Meta Meta `json:"_meta,omitempty"`
}

// AuthCapabilities are the auth flows a client can run for the agent.
type AuthCapabilities struct {
	// Terminal: the client can run an auth method of type terminal.
	Terminal bool `json:"terminal"`
	Meta     Meta `json:"_meta,omitempty"`
}

// ElicitationCapabilities are the elicitation modes a client supports.
type ElicitationCapabilities struct {
	Form *MetaOnly `json:"form,omitempty"`
	URL  *MetaOnly `json:"url,omitempty"`
	Meta Meta      `json:"_meta,omitempty"`
}

// AgentCapabilities is what an agent offers its client.
type AgentCapabilities struct {
	LoadSession         bool                `json:"loadSession"`
	PromptCapabilities  PromptCapabilities  `json:"promptCapabilities"`
	MCPCapabilities     MCPCapabilities     `json:"mcpCapabilities"`
	SessionCapabilities SessionCapabilities `json:"sessionCapabilities"`
	Auth                *AgentAuth          `json:"auth,omitempty"`
	Meta                Meta                `json:"_meta,omitempty"`
}

// PromptCapabilities are the content a prompt may carry beyond text and
// resource links. A client must not send an image to an agent that did
// not declare images: the agent may drop it, and the task runs without
// what it shows.
type PromptCapabilities struct {
	Image           bool `json:"image"`
	Audio           bool `json:"audio"`
	EmbeddedContext bool `json:"embeddedContext"`
	Meta            Meta `json:"_meta,omitempty"`
}

// MCPCapabilities are the MCP transports an agent connects to beyond stdio.
type MCPCapabilities struct {
	HTTP bool `json:"http"`
	SSE  bool `json:"sse"`
	Meta Meta `json:"_meta,omitempty"`
}

// SessionCapabilities are the session methods an agent serves beyond
// new and prompt, each declared by being present.
type SessionCapabilities struct {
	List                  *MetaOnly `json:"list,omitempty"`
	Delete                *MetaOnly `json:"delete,omitempty"`
	AdditionalDirectories *MetaOnly `json:"additionalDirectories,omitempty"`
	Resume                *MetaOnly `json:"resume,omitempty"`
	Close                 *MetaOnly `json:"close,omitempty"`
	Meta                  Meta      `json:"_meta,omitempty"`
}

// AgentAuth are the auth methods an agent serves beyond authenticate.
type AgentAuth struct {
	Logout *MetaOnly `json:"logout,omitempty"`
	Meta   Meta      `json:"_meta,omitempty"`
}

// InitializeRequest opens the connection: the client's version and what
// it serves.
type InitializeRequest struct {
	ProtocolVersion    int                `json:"protocolVersion"`
	ClientCapabilities ClientCapabilities `json:"clientCapabilities"`
	ClientInfo         *Implementation    `json:"clientInfo,omitempty"`
	Meta               Meta               `json:"_meta,omitempty"`
}

// InitializeResponse is the version the agent will speak and what it
// offers. An agent that speaks the client's version answers with it.
type InitializeResponse struct {
	ProtocolVersion   int               `json:"protocolVersion"`
	AgentCapabilities AgentCapabilities `json:"agentCapabilities"`
	AuthMethods       []AuthMethod      `json:"authMethods,omitempty"`
	AgentInfo         *Implementation   `json:"agentInfo,omitempty"`
	Meta              Meta              `json:"_meta,omitempty"`
}

// AuthMethod is one way to sign in. Type is empty for the default kind
// (the agent runs the flow itself when the client calls authenticate),
// and "terminal" for one the client runs in a terminal, with Args and Env.
type AuthMethod struct {
	Type        string            `json:"type,omitempty"`
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description *string           `json:"description,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Meta        Meta              `json:"_meta,omitempty"`
}

// AuthMethodTerminal is the Type of an auth method the client runs in a
// terminal.
const AuthMethodTerminal = "terminal"

// AuthenticateRequest runs one of the agent's auth methods.
type AuthenticateRequest struct {
	MethodID string `json:"methodId"`
	Meta     Meta   `json:"_meta,omitempty"`
}

// AuthenticateResponse, LogoutResponse and the other empty results carry
// nothing but _meta: the answer itself says it worked.
type (
	AuthenticateResponse    = MetaOnly
	LogoutRequest           = MetaOnly
	LogoutResponse          = MetaOnly
	DeleteSessionResponse   = MetaOnly
	CloseSessionResponse    = MetaOnly
	SetSessionModeResponse  = MetaOnly
	WriteTextFileResponse   = MetaOnly
	ReleaseTerminalResponse = MetaOnly
	KillTerminalResponse    = MetaOnly
)

// MCPServer is an MCP server the agent should connect to for the session.
// Type is empty for stdio (Command, Args, Env), "http" or "sse" for a URL
// with Headers. Args, Env and Headers are required by the schema and
// written as empty lists when there are none.
type MCPServer struct {
	Type    string        `json:"type,omitempty"`
	Name    string        `json:"name"`
	Command string        `json:"command,omitempty"`
	Args    []string      `json:"args,omitempty"`
	Env     []EnvVariable `json:"env,omitempty"`
	URL     string        `json:"url,omitempty"`
	Headers []HTTPHeader  `json:"headers,omitempty"`
	Meta    Meta          `json:"_meta,omitempty"`
}

// MarshalJSON writes the fields the server's type requires, empty lists
// included: an agent that validates its input refuses a stdio server
// without args.
func (s MCPServer) MarshalJSON() ([]byte, error) {
	switch s.Type {
	case "http", "sse":
		return json.Marshal(struct {
			Type    string       `json:"type"`
			Name    string       `json:"name"`
			URL     string       `json:"url"`
			Headers []HTTPHeader `json:"headers"`
			Meta    Meta         `json:"_meta,omitempty"`
		}{s.Type, s.Name, s.URL, nonNil(s.Headers), s.Meta})
	default:
		return json.Marshal(struct {
			Name    string        `json:"name"`
			Command string        `json:"command"`
			Args    []string      `json:"args"`
			Env     []EnvVariable `json:"env"`
			Meta    Meta          `json:"_meta,omitempty"`
		}{s.Name, s.Command, nonNil(s.Args), nonNil(s.Env), s.Meta})
	}
}

// EnvVariable is one environment variable for an MCP server or terminal.
type EnvVariable struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Meta  Meta   `json:"_meta,omitempty"`
}

// HTTPHeader is one header for an MCP server over HTTP or SSE.
type HTTPHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Meta  Meta   `json:"_meta,omitempty"`
}

// NewSessionRequest starts a conversation in Cwd (absolute). MCPServers
// is required, so it is written as [] when empty.
type NewSessionRequest struct {
	Cwd                   string      `json:"cwd"`
	AdditionalDirectories []string    `json:"additionalDirectories,omitempty"`
	MCPServers            []MCPServer `json:"mcpServers"`
	Meta                  Meta        `json:"_meta,omitempty"`
}

// MarshalJSON writes mcpServers as [] when there are none: the schema
// requires the field, and null is not a list.
func (r NewSessionRequest) MarshalJSON() ([]byte, error) {
	type plain NewSessionRequest
	p := plain(r)
	p.MCPServers = nonNil(p.MCPServers)
	return json.Marshal(p)
}

// NewSessionResponse is the new session's id and its initial modes and
// options.
type NewSessionResponse struct {
	SessionID     string                `json:"sessionId"`
	Modes         *SessionModeState     `json:"modes,omitempty"`
	ConfigOptions []SessionConfigOption `json:"configOptions,omitempty"`
	// Models is not in the schema: Gemini CLI sends the session's model
	// here, and card reports it as the run's model.
	Models *SessionModels `json:"models,omitempty"`
	Meta   Meta           `json:"_meta,omitempty"`
}

// SessionModels is the model state some agents send with a new session
// (outside the schema).
type SessionModels struct {
	CurrentModelID string `json:"currentModelId"`
}

// LoadSessionRequest reopens a session the agent keeps; the agent replays
// its history as session/update notifications before it answers.
type LoadSessionRequest struct {
	MCPServers            []MCPServer `json:"mcpServers"`
	Cwd                   string      `json:"cwd"`
	AdditionalDirectories []string    `json:"additionalDirectories,omitempty"`
	SessionID             string      `json:"sessionId"`
	Meta                  Meta        `json:"_meta,omitempty"`
}

// MarshalJSON writes mcpServers as [] when there are none.
func (r LoadSessionRequest) MarshalJSON() ([]byte, error) {
	type plain LoadSessionRequest
	p := plain(r)
	p.MCPServers = nonNil(p.MCPServers)
	return json.Marshal(p)
}

// LoadSessionResponse is the reopened session's modes and options.
type LoadSessionResponse struct {
	Modes         *SessionModeState     `json:"modes,omitempty"`
	ConfigOptions []SessionConfigOption `json:"configOptions,omitempty"`
	Meta          Meta                  `json:"_meta,omitempty"`
}

// ResumeSessionRequest reopens a session without replaying its history.
type ResumeSessionRequest struct {
	SessionID             string      `json:"sessionId"`
	Cwd                   string      `json:"cwd"`
	AdditionalDirectories []string    `json:"additionalDirectories,omitempty"`
	MCPServers            []MCPServer `json:"mcpServers,omitempty"`
	Meta                  Meta        `json:"_meta,omitempty"`
}

// ResumeSessionResponse is the resumed session's modes and options.
type ResumeSessionResponse = LoadSessionResponse

// ListSessionsRequest asks for the agent's sessions, optionally in one
// directory, a page at a time.
type ListSessionsRequest struct {
	Cwd    *string `json:"cwd,omitempty"`
	Cursor *string `json:"cursor,omitempty"`
	Meta   Meta    `json:"_meta,omitempty"`
}

// ListSessionsResponse is one page of sessions; NextCursor is nil on the
// last.
type ListSessionsResponse struct {
	Sessions   []SessionInfo `json:"sessions"`
	NextCursor *string       `json:"nextCursor,omitempty"`
	Meta       Meta          `json:"_meta,omitempty"`
}

// MarshalJSON writes sessions as [] when there are none.
func (r ListSessionsResponse) MarshalJSON() ([]byte, error) {
	type plain ListSessionsResponse
	p := plain(r)
	p.Sessions = nonNil(p.Sessions)
	return json.Marshal(p)
}

// SessionInfo describes one session in a list.
type SessionInfo struct {
	SessionID             string   `json:"sessionId"`
	Cwd                   string   `json:"cwd"`
	AdditionalDirectories []string `json:"additionalDirectories,omitempty"`
	Title                 *string  `json:"title,omitempty"`
	UpdatedAt             *string  `json:"updatedAt,omitempty"`
	Meta                  Meta     `json:"_meta,omitempty"`
}

// SessionRef names a session: the params of session/delete, session/close
// and the session/cancel notification.
type SessionRef struct {
	SessionID string `json:"sessionId"`
	Meta      Meta   `json:"_meta,omitempty"`
}

type (
	DeleteSessionRequest = SessionRef
	CloseSessionRequest  = SessionRef
	// CancelNotification ends the session's turn in progress.
	CancelNotification = SessionRef
)

// SessionModeState is a session's current mode and the modes it offers.
type SessionModeState struct {
	CurrentModeID  string        `json:"currentModeId"`
	AvailableModes []SessionMode `json:"availableModes"`
	Meta           Meta          `json:"_meta,omitempty"`
}

// SessionMode is one mode an agent offers (ask, code, plan…).
type SessionMode struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
	Meta        Meta    `json:"_meta,omitempty"`
}

// SetSessionModeRequest switches a session's mode.
type SetSessionModeRequest struct {
	SessionID string `json:"sessionId"`
	ModeID    string `json:"modeId"`
	Meta      Meta   `json:"_meta,omitempty"`
}

// SessionConfigOption is one setting a session offers: a select (Options,
// and CurrentValue a string) or a boolean (CurrentValue a bool).
type SessionConfigOption struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
	// Category is mode, model, model_config, thought_level, or another.
	Category *string `json:"category,omitempty"`
	// Type is "select" or "boolean".
	Type         string `json:"type"`
	CurrentValue any    `json:"currentValue"`
	// Options of a select: a list of options, or of groups of them.
	Options json.RawMessage `json:"options,omitempty"`
	Meta    Meta            `json:"_meta,omitempty"`
}

// SessionConfigSelectOption is one value of a select option.
type SessionConfigSelectOption struct {
	Value       string  `json:"value"`
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
	Meta        Meta    `json:"_meta,omitempty"`
}

// SessionConfigSelectGroup is a named group of a select's values.
type SessionConfigSelectGroup struct {
	Group   string                      `json:"group"`
	Name    string                      `json:"name"`
	Options []SessionConfigSelectOption `json:"options"`
	Meta    Meta                        `json:"_meta,omitempty"`
}

// SetSessionConfigOptionRequest sets one option: Value is the select's
// value id, or a bool with Type "boolean".
type SetSessionConfigOptionRequest struct {
	SessionID string `json:"sessionId"`
	ConfigID  string `json:"configId"`
	Type      string `json:"type,omitempty"`
	Value     any    `json:"value"`
	Meta      Meta   `json:"_meta,omitempty"`
}

// SetSessionConfigOptionResponse is every option after the change (one
// option may change others).
type SetSessionConfigOptionResponse struct {
	ConfigOptions []SessionConfigOption `json:"configOptions"`
	Meta          Meta                  `json:"_meta,omitempty"`
}

// MarshalJSON writes configOptions as [] when there are none.
func (r SetSessionConfigOptionResponse) MarshalJSON() ([]byte, error) {
	type plain SetSessionConfigOptionResponse
	p := plain(r)
	p.ConfigOptions = nonNil(p.ConfigOptions)
	return json.Marshal(p)
}

// PromptRequest is one user turn: its content blocks, in order.
type PromptRequest struct {
	SessionID string         `json:"sessionId"`
	Prompt    []ContentBlock `json:"prompt"`
	Meta      Meta           `json:"_meta,omitempty"`
}

// StopReason is why an agent ended a turn.
type StopReason string

const (
	StopEndTurn         StopReason = "end_turn"
	StopMaxTokens       StopReason = "max_tokens"
	StopMaxTurnRequests StopReason = "max_turn_requests"
	StopRefusal         StopReason = "refusal"
	StopCancelled       StopReason = "cancelled"
)

// PromptResponse ends a turn. Everything the agent said came before it,
// as session/update notifications.
type PromptResponse struct {
	StopReason StopReason `json:"stopReason"`
	// Usage is not in the stable schema (the unstable one has it):
	// Copilot CLI reports the turn's tokens here.
	Usage *PromptUsage `json:"usage,omitempty"`
	Meta  Meta         `json:"_meta,omitempty"`
}

// PromptUsage is a turn's token counts, as the unstable schema has them.
type PromptUsage struct {
	TotalTokens       int64  `json:"totalTokens,omitempty"`
	InputTokens       int64  `json:"inputTokens"`
	OutputTokens      int64  `json:"outputTokens"`
	ThoughtTokens     *int64 `json:"thoughtTokens,omitempty"`
	CachedReadTokens  int64  `json:"cachedReadTokens,omitempty"`
	CachedWriteTokens *int64 `json:"cachedWriteTokens,omitempty"`
}

// CancelRequestNotification gives up on one request still unanswered.
type CancelRequestNotification struct {
	RequestID json.RawMessage `json:"requestId"`
	Meta      Meta            `json:"_meta,omitempty"`
}

// nonNil is s, or an empty list for nil, for the lists the schema
// requires even when they are empty.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
