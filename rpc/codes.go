package rpc

import (
	"encoding/json"
	"fmt"
)

// The JSON-RPC 2.0 error codes, plus card's application codes. This file is
// the one table: docs/protocol.md and rpc.discover are generated from, or
// checked against, Codes(), so a code cannot be added in one place and
// forgotten in the other.
const (
	CodeParseError     int64 = -32700
	CodeInvalidRequest int64 = -32600
	CodeMethodNotFound int64 = -32601
	CodeInvalidParams  int64 = -32602
	CodeInternalError  int64 = -32603

	// Transport-level application codes.
	CodeTooManyRequests int64 = -32001
	CodeShuttingDown    int64 = -32002

	// Agent codes.
	CodeGuardRefused        int64 = -32010
	CodeAgentNotInstalled   int64 = -32011
	CodeAgentUnusable       int64 = -32012
	CodeBypassNotAllowed    int64 = -32013
	CodeTooManyRuns         int64 = -32014
	CodeUnenforcedReadOnly  int64 = -32015
	CodeRunNotFound         int64 = -32016
	CodeSubstrateReadOnly   int64 = -32020
	CodeSubstrateFailed     int64 = -32021
	CodeSubstrateTransport  int64 = -32022
	CodeSubstrateNotSupport int64 = -32023
)

// CodeInfo documents one error code for people and for rpc.discover.
type CodeInfo struct {
	Code    int64  `json:"code"`
	Name    string `json:"name"`
	Meaning string `json:"meaning"`
}

// Codes is every error code card answers with, in table order.
func Codes() []CodeInfo {
	return []CodeInfo{
		{CodeParseError, "parse_error", "The frame is not valid JSON. The answer's id is null."},
		{CodeInvalidRequest, "invalid_request", "The JSON is not a JSON-RPC 2.0 request (wrong jsonrpc, method not a string, params not structured, a binary frame, an empty or oversized batch)."},
		{CodeMethodNotFound, "method_not_found", "No method of that name; rpc.discover lists them."},
		{CodeInvalidParams, "invalid_params", "The params do not fit the method; the message and data.field name the field."},
		{CodeInternalError, "internal_error", "card failed while answering; the daemon log has the detail."},
		{CodeTooManyRequests, "too_many_requests", "This connection already has the maximum number of requests in flight; wait for answers before sending more."},
		{CodeShuttingDown, "shutting_down", "The daemon is shutting down and takes no new work."},
		{CodeGuardRefused, "guard_refused", "The ancestry guard refused the spawn: the adapter is already in the chain (cycle) or the chain is at its limit (depth)."},
		{CodeAgentNotInstalled, "agent_not_installed", "The adapter is known but no binary for it was found."},
		{CodeAgentUnusable, "agent_unusable", "A binary was found but cannot run; data.reason says why."},
		{CodeBypassNotAllowed, "bypass_not_allowed", "permission_mode bypass needs allow_bypass = true in card.toml."},
		{CodeTooManyRuns, "too_many_runs", "The daemon is already running its maximum number of agents (max_concurrent_runs)."},
		{CodeUnenforcedReadOnly, "read_only_not_enforced", "The adapter cannot enforce read_only; the request must acknowledge that explicitly."},
		{CodeRunNotFound, "run_not_found", "No run with that id."},
		{CodeSubstrateReadOnly, "substrate_read_only", "The substrate is read-only ([substrate] read_only = true) and refuses exec and writes."},
		{CodeSubstrateFailed, "substrate_failed", "The substrate operation failed; the message names the path or command."},
		{CodeSubstrateTransport, "substrate_transport", "The MCP bridge behind the substrate could not be reached; retrying later may help."},
		{CodeSubstrateNotSupport, "substrate_not_supported", "The substrate does not offer that operation (for example a PTY)."},
	}
}

// Error is a JSON-RPC error a handler returns to choose the code and data the
// client sees. Any other error becomes -32603 with its text.
type Error struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// Errorf builds an *Error with a formatted message and optional data.
func Errorf(code int64, data any, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Data: data}
}

// FieldError says which request field was wrong and why. Handlers and
// Validate methods return it; the registry turns it into -32602 with
// data.field, so every "bad params" answer names its field the same way.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Message)
}

// InvalidField is a shorthand for a *FieldError.
func InvalidField(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// wireError is the error object as it is written on the wire.
type wireError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) wire() *wireError {
	w := &wireError{Code: e.Code, Message: e.Message}
	if e.Data != nil {
		if b, err := json.Marshal(e.Data); err == nil {
			w.Data = b
		}
	}
	return w
}
