package rpcclient

import "fmt"

// The JSON-RPC 2.0 error codes and the transport's own. An application adds
// its codes on the server's registry, whose table rpc.discover publishes.
const (
	CodeParseError     int64 = -32700
	CodeInvalidRequest int64 = -32600
	CodeMethodNotFound int64 = -32601
	CodeInvalidParams  int64 = -32602
	CodeInternalError  int64 = -32603

	// CodeTooManyRequests and CodeShuttingDown are the transport's refusals:
	// a connection over its in-flight cap, a server that is draining.
	CodeTooManyRequests int64 = -32001
	CodeShuttingDown    int64 = -32002

	// CodeRequestCancelled is the Language Server Protocol's
	// RequestCancelled: the client withdrew the request with $/cancelRequest.
	// It is LSP's number so an editor's JSON-RPC library recognises it.
	CodeRequestCancelled int64 = -32800
)

// Error is a JSON-RPC error a handler returns to choose the code and data the
// client sees. Any other error becomes -32603 with its text, unless the
// registry's error mapper (Registry.MapErrors) turns it into an *Error first.
type Error struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
	// CloseConn is for a server only (rpc's CloseAfter): when set, the
	// connection is closed with this reason once the answer is written.
	// It never goes on the wire, so a client never sees it set.
	CloseConn string `json:"-"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Is reports whether target is an *Error with the same code, so
// errors.Is(err, &rpc.Error{Code: X}) asks "did this fail with X" whatever
// the message and data say: clients are told to match on the code only.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e.Code == t.Code
}

// DiscoverMethod is the method that answers the OpenRPC document.
const DiscoverMethod = "rpc.discover"

// OpenRPCDocument is rpc.discover's result: an OpenRPC 1.x document.
//
// OpenRPC has no object for server-to-client notifications or requests, so
// they are listed in the x-notifications extension, each shaped like a
// method without a result, and the x-server-requests extension, each shaped
// like a method whose params the server sends and whose result the client
// answers.
type OpenRPCDocument struct {
	OpenRPC       string                `json:"openrpc"`
	Info          OpenRPCInfo           `json:"info"`
	Servers       []OpenRPCServer       `json:"servers,omitempty"`
	Methods       []OpenRPCMethod       `json:"methods"`
	Components    OpenRPCComponents     `json:"components"`
	Notifications []OpenRPCNotification `json:"x-notifications,omitempty"`
	// ServerRequests are the requests the server sends a client, which the
	// client answers with a JSON-RPC response (x-server-requests).
	ServerRequests []OpenRPCServerRequest `json:"x-server-requests,omitempty"`
}

// OpenRPCInfo is the document's info object.
type OpenRPCInfo struct {
	Title           string `json:"title"`
	Version         string `json:"version"`
	Description     string `json:"description,omitempty"`
	ProtocolVersion string `json:"x-protocol-version,omitempty"`
}

// OpenRPCServer names the endpoint the document describes.
type OpenRPCServer struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

// OpenRPCMethod is one method object. Params are by name: every params type
// is a JSON object, and the registry refuses positional arrays.
type OpenRPCMethod struct {
	Name           string              `json:"name"`
	Summary        string              `json:"summary"`
	Description    string              `json:"description,omitempty"`
	ParamStructure string              `json:"paramStructure"`
	Params         []ContentDescriptor `json:"params"`
	Result         ContentDescriptor   `json:"result"`
	Errors         []OpenRPCReference  `json:"errors,omitempty"`
	// AliasOf names the method this one is another name for (a name kept
	// for compatibility); its shapes are the target's.
	AliasOf string `json:"x-alias-of,omitempty"`
	// Access is the method's access class: a connection not granted it is
	// refused before the params are read.
	Access string `json:"x-access"`
	// AccessRules raise the class for calls whose params carry a value
	// (permission_mode "edit" needs write): such a call needs x-access and
	// each matching rule's class.
	AccessRules []AccessRule `json:"x-access-rules,omitempty"`
}

// AccessRule is one rule of x-access-rules: a call whose top-level param
// Param has Value (any value but the zero one, when Value is absent) needs
// the class Access as well as the method's own.
type AccessRule struct {
	Param  string `json:"param"`
	Value  any    `json:"value,omitempty"`
	Access string `json:"access"`
}

// OpenRPCNotification is a server-to-client notification in x-notifications.
type OpenRPCNotification struct {
	Name           string              `json:"name"`
	Summary        string              `json:"summary"`
	Description    string              `json:"description,omitempty"`
	ParamStructure string              `json:"paramStructure"`
	Params         []ContentDescriptor `json:"params"`
}

// ContentDescriptor is an OpenRPC content descriptor: a named schema.
type ContentDescriptor struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Schema      any    `json:"schema"`
}

// OpenRPCReference points into components.
type OpenRPCReference struct {
	Ref string `json:"$ref"`
}

// OpenRPCError is an OpenRPC error object, one per row of the registry's
// Codes.
type OpenRPCError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// OpenRPCComponents holds the shared schemas and the error-code table.
type OpenRPCComponents struct {
	Schemas map[string]any          `json:"schemas"`
	Errors  map[string]OpenRPCError `json:"errors"`
}

// OpenRPCServerRequest is a server-to-client request in x-server-requests:
// shaped like a method, with the roles reversed (the server sends the
// params, the client answers with the result).
type OpenRPCServerRequest struct {
	Name           string              `json:"name"`
	Summary        string              `json:"summary"`
	Description    string              `json:"description,omitempty"`
	ParamStructure string              `json:"paramStructure"`
	Params         []ContentDescriptor `json:"params"`
	Result         ContentDescriptor   `json:"result"`
	// Access is the class a connection must hold to be sent the request.
	Access string `json:"x-access"`
}
