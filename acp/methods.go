package acp

// ProtocolVersion is the protocol version this package speaks. An agent
// answers initialize with the version it will speak; a client that cannot
// speak that one must close the connection rather than guess.
const ProtocolVersion = 1

// The methods a client calls on an agent, and the notification it sends.
const (
	MethodInitialize             = "initialize"
	MethodAuthenticate           = "authenticate"
	MethodLogout                 = "logout"
	MethodSessionNew             = "session/new"
	MethodSessionLoad            = "session/load"
	MethodSessionList            = "session/list"
	MethodSessionDelete          = "session/delete"
	MethodSessionResume          = "session/resume"
	MethodSessionClose           = "session/close"
	MethodSessionSetMode         = "session/set_mode"
	MethodSessionSetConfigOption = "session/set_config_option"
	MethodSessionPrompt          = "session/prompt"
	// MethodSessionCancel is a notification: the agent ends the turn and
	// answers session/prompt with the cancelled stop reason.
	MethodSessionCancel = "session/cancel"
)

// The methods an agent calls on a client, and the notifications it sends.
// A client serves fs/* and terminal/* only if it declared the capability
// in initialize; an agent must not call what was not declared.
const (
	MethodSessionUpdate            = "session/update"
	MethodSessionRequestPermission = "session/request_permission"
	MethodFSReadTextFile           = "fs/read_text_file"
	MethodFSWriteTextFile          = "fs/write_text_file"
	MethodTerminalCreate           = "terminal/create"
	MethodTerminalOutput           = "terminal/output"
	MethodTerminalRelease          = "terminal/release"
	MethodTerminalWaitForExit      = "terminal/wait_for_exit"
	MethodTerminalKill             = "terminal/kill"
	MethodElicitationCreate        = "elicitation/create"
	// MethodElicitationComplete is a notification that a URL elicitation
	// has ended.
	MethodElicitationComplete = "elicitation/complete"
)

// MethodCancelRequest is the protocol-level notification either side may
// send to give up on one of its own requests still unanswered.
const MethodCancelRequest = "$/cancel_request"

// Side says which end of the connection serves a method.
type Side string

const (
	// SideAgent methods are served by the agent (the client calls them).
	SideAgent Side = "agent"
	// SideClient methods are served by the client (the agent calls them).
	SideClient Side = "client"
	// SideProtocol methods are served by either end.
	SideProtocol Side = "protocol"
)

// SideOf is the side that serves method, and false for a method that is
// not ACP's: a router refuses a message sent the wrong way (an agent
// calling session/prompt on its client) by the table, instead of by a
// switch that forgets one.
func SideOf(method string) (Side, bool) {
	s, ok := methods[method]
	return s, ok
}

// methods is every method and notification, with the side that serves it.
var methods = map[string]Side{
	MethodInitialize:             SideAgent,
	MethodAuthenticate:           SideAgent,
	MethodLogout:                 SideAgent,
	MethodSessionNew:             SideAgent,
	MethodSessionLoad:            SideAgent,
	MethodSessionList:            SideAgent,
	MethodSessionDelete:          SideAgent,
	MethodSessionResume:          SideAgent,
	MethodSessionClose:           SideAgent,
	MethodSessionSetMode:         SideAgent,
	MethodSessionSetConfigOption: SideAgent,
	MethodSessionPrompt:          SideAgent,
	MethodSessionCancel:          SideAgent,

	MethodSessionUpdate:            SideClient,
	MethodSessionRequestPermission: SideClient,
	MethodFSReadTextFile:           SideClient,
	MethodFSWriteTextFile:          SideClient,
	MethodTerminalCreate:           SideClient,
	MethodTerminalOutput:           SideClient,
	MethodTerminalRelease:          SideClient,
	MethodTerminalWaitForExit:      SideClient,
	MethodTerminalKill:             SideClient,
	MethodElicitationCreate:        SideClient,
	MethodElicitationComplete:      SideClient,

	MethodCancelRequest: SideProtocol,
}

// ErrorCode is a JSON-RPC error code as ACP uses it: the JSON-RPC 2.0
// codes plus ACP's own. Other codes are allowed on the wire (Gemini sends
// the model API's HTTP status), so a reader must not refuse an unknown one.
type ErrorCode int

const (
	CodeParseError     ErrorCode = -32700
	CodeInvalidRequest ErrorCode = -32600
	CodeMethodNotFound ErrorCode = -32601
	CodeInvalidParams  ErrorCode = -32602
	CodeInternalError  ErrorCode = -32603
	// CodeRequestCancelled answers a request its sender cancelled with
	// $/cancel_request.
	CodeRequestCancelled ErrorCode = -32800
	// CodeAuthRequired is "authenticate first": the agent refuses a
	// session until the client has run one of its auth methods.
	CodeAuthRequired ErrorCode = -32000
	// CodeResourceNotFound is a session, file or terminal that does not
	// exist.
	CodeResourceNotFound ErrorCode = -32002
)
