package rpc

import (
	"encoding/json"
	"fmt"

	"github.com/card-dev/card/rpc/rpcclient"
)

// The JSON-RPC 2.0 error codes and the transport's own are defined with
// the client (package rpcclient), which the Go client imports without the
// server; these aliases keep rpc's names.
const (
	CodeParseError       = rpcclient.CodeParseError
	CodeInvalidRequest   = rpcclient.CodeInvalidRequest
	CodeMethodNotFound   = rpcclient.CodeMethodNotFound
	CodeInvalidParams    = rpcclient.CodeInvalidParams
	CodeInternalError    = rpcclient.CodeInternalError
	CodeTooManyRequests  = rpcclient.CodeTooManyRequests
	CodeShuttingDown     = rpcclient.CodeShuttingDown
	CodeRequestCancelled = rpcclient.CodeRequestCancelled
)

// CodeInfo documents one error code for people and for rpc.discover.
type CodeInfo struct {
	Code    int64  `json:"code"`
	Name    string `json:"name"`
	Meaning string `json:"meaning"`
}

// Codes is rpc's own error codes, in table order. Registry.Codes adds the
// application's.
func Codes() []CodeInfo {
	return []CodeInfo{
		{CodeParseError, "parse_error", "The frame is not valid JSON. The answer's id is null."},
		{CodeInvalidRequest, "invalid_request", "The JSON is not a JSON-RPC 2.0 request (wrong jsonrpc, method not a string, params not structured, a member given twice, a binary frame, an empty or oversized batch)."},
		{CodeMethodNotFound, "method_not_found", "No method of that name; rpc.discover lists them."},
		{CodeInvalidParams, "invalid_params", "The params do not fit the method; the message and data.field name the field."},
		{CodeInternalError, "internal_error", "The daemon failed while answering; its log has the detail."},
		{CodeTooManyRequests, "too_many_requests", "This connection already has the maximum number of requests in flight; wait for answers before sending more."},
		{CodeShuttingDown, "shutting_down", "The daemon is shutting down and takes no new work."},
		{CodeRequestCancelled, "request_cancelled", "The client withdrew the request with $/cancelRequest before it was answered."},
	}
}

// Error is a JSON-RPC error (rpcclient.Error): a handler returns one to
// choose the code and data the client sees, and a client gets one back.
type Error = rpcclient.Error

// CloseAfter marks a handler's error as one that ends the connection: the
// client is answered with err, and then the connection is closed with 1008
// (policy violation) and reason. It is for a client that proved it should
// not be connected (it presented a credential that is not the daemon's),
// which must hear why before the socket goes.
func CloseAfter(err error, reason string) error {
	return &closeAfterError{err: err, reason: reason}
}

type closeAfterError struct {
	err    error
	reason string
}

func (e *closeAfterError) Error() string { return e.err.Error() }
func (e *closeAfterError) Unwrap() error { return e.err }

// Errorf builds an *Error with a formatted message and optional data.
func Errorf(code int64, data any, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Data: data}
}

// wireError is the error object as it is written on the wire.
type wireError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func wireOf(e *Error) *wireError {
	w := &wireError{Code: e.Code, Message: e.Message}
	if e.Data != nil {
		if b, err := json.Marshal(e.Data); err == nil {
			w.Data = b
		}
	}
	return w
}
