package rpc

import (
	"encoding/json"
	"fmt"

	"github.com/card-dev/card/rpc/rpcclient"
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
		{rpcclient.CodeParseError, "parse_error", "The frame is not valid JSON. The answer's id is null."},
		{rpcclient.CodeInvalidRequest, "invalid_request", "The JSON is not a JSON-RPC 2.0 request (wrong jsonrpc, method not a string, params not structured, a member given twice, a binary frame, an empty or oversized batch)."},
		{rpcclient.CodeMethodNotFound, "method_not_found", "No method of that name; rpc.discover lists them."},
		{rpcclient.CodeInvalidParams, "invalid_params", "The params do not fit the method; the message and data.field name the field."},
		{rpcclient.CodeInternalError, "internal_error", "The daemon failed while answering; its log has the detail."},
		{rpcclient.CodeTooManyRequests, "too_many_requests", "This connection already has the maximum number of requests in flight; wait for answers before sending more."},
		{rpcclient.CodeShuttingDown, "shutting_down", "The daemon is shutting down and takes no new work."},
		{rpcclient.CodeRequestCancelled, "request_cancelled", "The client withdrew the request with $/cancelRequest before it was answered."},
	}
}

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
func Errorf(code int64, data any, format string, args ...any) *rpcclient.Error {
	return &rpcclient.Error{Code: code, Message: fmt.Sprintf(format, args...), Data: data}
}

// wireError is the error object as it is written on the wire.
type wireError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func wireOf(e *rpcclient.Error) *wireError {
	w := &wireError{Code: e.Code, Message: e.Message}
	if e.Data != nil {
		if b, err := json.Marshal(e.Data); err == nil {
			w.Data = b
		}
	}
	return w
}
