package substrate

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/card-dev/card/api"
)

// TransportErrorPrefix starts the message of every error that came from the
// substrate's transport (the bridge could not be reached, dropped the
// connection, or did not answer in time) rather than from the task. A caller
// counts infrastructure incidents by this prefix instead of sniffing text; a
// command that ran and failed is a result, and a tool-reported task error
// ("no such file") carries no prefix.
const TransportErrorPrefix = "[substrate-transport] "

// Retry policy of a connection drop.
const (
	// RetryAttempts bounds the tries of one call whose connection dropped.
	RetryAttempts = 3
	// RetryBackoff is multiplied by the attempt number between tries.
	RetryBackoff = 300 * time.Millisecond
	// RunCommandMargin is added to a command's own timeout when waiting for
	// the bridge, so the bridge can report its own timeout result before we
	// give up on the call while the command is still running.
	RunCommandMargin = 30 * time.Second
	// pathStateTimeout bounds the shell presence test of MCP.PathState.
	pathStateTimeout = 5 * time.Second
)

// ToolCaller is the one thing MCP needs from a session: call a bridge tool.
// timeout bounds the wait for this call; zero means the session's default.
// The result is the tool's structured content when it has some (decoded
// JSON: a map, a number...), else its text content flattened to a string. A
// tool that reports failure comes back as a *ToolError.
//
// The SDK-backed implementation is made by ConnectMCP; tests substitute fakes
// to inject transport faults.
type ToolCaller interface {
	CallTool(ctx context.Context, tool string, args map[string]any, timeout time.Duration) (any, error)
}

// ToolError is a failure the bridge tool reported (MCP isError) — the call
// reached the environment and the task failed there.
type ToolError struct {
	Tool    string
	Message string
}

func (e *ToolError) Error() string {
	return fmt.Sprintf("bridge tool %s failed: %s", e.Tool, e.Message)
}

// TransportError is a call that never completed at the bridge: see
// TransportErrorPrefix. Timeout reports a call abandoned after its deadline,
// which is never retried because the command may still be running there.
type TransportError struct {
	Op       string // the bridge tool
	Target   string // the command, path or pty concerned
	Bridge   string
	Attempts int
	Timeout  bool
	Err      error
}

func (e *TransportError) Error() string {
	msg := fmt.Sprintf("%s%s %s on bridge %q: %v", TransportErrorPrefix, e.Op, e.Target, e.Bridge, e.Err)
	if e.Attempts > 1 {
		msg += fmt.Sprintf(" (gave up after %d attempts)", e.Attempts)
	}
	return msg
}

func (e *TransportError) Unwrap() error { return e.Err }

// MCP is an environment reached through an MCP bridge: each substrate method
// is the same-named bridge tool, with the canonical bridge argument names
// (run_command{command,timeout}, read_bytes{path,offset,length},
// write_bytes{path,content_b64}, pty_*{pid,...} with a numeric pid). A
// drift in those names ships a silently broken substrate — the bridge
// rejects every call — so they are pinned by tests.
type MCP struct {
	name   string
	caller ToolCaller
	// pty is whether the bridge serves pty_start (assumed until a tool list
	// says otherwise).
	pty bool

	// backoff is the base of the linear retry backoff; sleep waits it out
	// (replaced in tests to observe the waits without spending them).
	backoff time.Duration
	sleep   func(context.Context, time.Duration) error
}

// NewMCP wraps caller as a substrate named name (e.g. "vm"); the name is a
// label for users and need not match the bridge's server name.
func NewMCP(name string, caller ToolCaller) *MCP {
	return &MCP{name: name, caller: caller, pty: true, backoff: RetryBackoff, sleep: sleepCtx}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *MCP) hasPTY() bool { return m.pty }

func (m *MCP) Name() string                   { return m.name }
func (m *MCP) IsLocal() bool                  { return false }
func (m *MCP) DisplayPath(path string) string { return path }

// fault is how a failed call is treated.
type fault int

const (
	faultTask      fault = iota // the tool failed: neither retried nor tagged
	faultCanceled               // the caller gave up: neither retried nor tagged
	faultDrop                   // the connection dropped: retried, tagged when exhausted
	faultTimeout                // no answer in time: tagged, never retried
	faultTransport              // another transport fault: tagged, not retried
)

// dropSignatures mean the request most likely never reached the bridge, so
// sending it again cannot run a command twice. (Not guaranteed: a drop after
// sending could re-run a command. Accepted, as in the reference, because the
// retry is bounded and a surfaced failure would make the caller re-run it
// anyway.) Timeouts are deliberately absent.
var dropSignatures = []string{
	"fetch failed", "econnrefused", "econnreset", "connection refused",
	"connection reset", "broken pipe", "stream closed", "channel closed",
	"unexpected eof", "closed the connection", "connection closed",
}

// transportSignatures are the wider set of texts the bridges and MCP
// transports emit for environment faults, including timeouts.
var transportSignatures = []string{
	"fetch failed", "connection", "econnrefused", "econnreset", "transport",
	"timed out", "timeout", "socket hang", "broken pipe", "stream closed",
	"channel closed", "unexpected eof",
}

func containsAny(msg string, sigs []string) bool {
	m := strings.ToLower(msg)
	for _, s := range sigs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// classify decides how a failed call is treated. Typed errors are trusted
// first; the signature lists catch what a bridge reports only as text (the
// canonical VM bridge answers isError "fetch failed" when its link drops).
func classify(err error) fault {
	var te *ToolError
	if errors.As(err, &te) {
		// The SDK's own argument validation mentions argument names such
		// as "timeout"; it is the caller's mistake, not the transport's.
		if strings.HasPrefix(te.Message, `validating "arguments"`) {
			return faultTask
		}
		switch {
		case containsAny(te.Message, dropSignatures):
			return faultDrop
		case containsAny(te.Message, []string{"timed out", "timeout"}):
			return faultTimeout
		case containsAny(te.Message, transportSignatures):
			return faultTransport
		}
		return faultTask
	}
	var ce *connectError
	switch {
	case errors.As(err, &ce):
		return faultDrop
	case errors.Is(err, ErrClosed):
		return faultTransport
	case errors.Is(err, context.Canceled):
		return faultCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return faultTimeout
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return faultDrop
	case containsAny(err.Error(), dropSignatures):
		return faultDrop
	case containsAny(err.Error(), []string{"timed out", "timeout"}):
		return faultTimeout
	case containsAny(err.Error(), transportSignatures):
		return faultTransport
	}
	return faultTask
}

// call invokes tool, retrying a connection drop up to RetryAttempts times
// with a backoff that grows per attempt. MCP holds no lock of its own; the
// session's lock (if any) is taken inside each attempt, never across a wait.
func (m *MCP) call(ctx context.Context, tool, target string, args map[string]any, timeout time.Duration) (any, error) {
	for attempt := 1; ; attempt++ {
		v, err := m.caller.CallTool(ctx, tool, args, timeout)
		if err == nil {
			return v, nil
		}
		kind := classify(err)
		if kind == faultDrop && attempt < RetryAttempts {
			if serr := m.sleep(ctx, m.backoff*time.Duration(attempt)); serr != nil {
				return nil, fmt.Errorf("%s %s on bridge %q: %w (while waiting to retry after: %v)", tool, target, m.name, serr, err)
			}
			continue
		}
		switch kind {
		case faultDrop, faultTimeout, faultTransport:
			return nil, &TransportError{Op: tool, Target: target, Bridge: m.name, Attempts: attempt, Timeout: kind == faultTimeout, Err: err}
		default:
			return nil, fmt.Errorf("%s %s on bridge %q: %w", tool, target, m.name, err)
		}
	}
}

// asObject accepts a structured result, or a text result that is a JSON
// object: bridges differ in which they send.
func asObject(v any) (map[string]any, bool) {
	switch t := v.(type) {
	case map[string]any:
		return t, true
	case string:
		s := strings.TrimSpace(t)
		if strings.HasPrefix(s, "{") {
			var obj map[string]any
			if json.Unmarshal([]byte(s), &obj) == nil {
				return obj, true
			}
		}
	}
	return nil, false
}

func stringField(obj map[string]any, keys ...string) (string, bool) {
	for _, k := range keys {
		if s, ok := obj[k].(string); ok {
			return s, true
		}
	}
	return "", false
}

func intField(obj map[string]any, key string) (int, bool) {
	switch n := obj[key].(type) {
	case float64:
		if n == float64(int(n)) {
			return int(n), true
		}
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return int(i), true
		}
	case int:
		return n, true
	case int64:
		return int(n), true
	}
	return 0, false
}

func textOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func (m *MCP) RunCommand(ctx context.Context, cmd string, timeout time.Duration) (api.CommandResult, error) {
	args := map[string]any{"command": cmd}
	var wait time.Duration
	if timeout > 0 {
		args["timeout"] = timeout.Seconds()
		wait = timeout + RunCommandMargin
	}
	v, err := m.call(ctx, "run_command", strconv.Quote(cmd), args, wait)
	if err != nil {
		return api.CommandResult{}, err
	}
	if obj, ok := asObject(v); ok {
		_, hasOut := obj["stdout"]
		_, hasCode := obj["exit_code"]
		if hasOut || hasCode {
			res := api.CommandResult{}
			res.Stdout, _ = stringField(obj, "stdout")
			res.Stderr, _ = stringField(obj, "stderr")
			res.ExitCode, _ = intField(obj, "exit_code")
			return res, nil
		}
	}
	return api.CommandResult{Stdout: textOf(v)}, nil
}

func (m *MCP) ReadText(ctx context.Context, path string) (string, error) {
	v, err := m.call(ctx, "read_text", path, map[string]any{"path": path}, 0)
	if err != nil {
		return "", err
	}
	if obj, ok := v.(map[string]any); ok {
		if s, ok := stringField(obj, "content"); ok {
			return s, nil
		}
	}
	return textOf(v), nil
}

func (m *MCP) WriteText(ctx context.Context, path, content string) error {
	_, err := m.call(ctx, "write_text", path, map[string]any{"path": path, "content": content}, 0)
	return err
}

// shellQuote single-quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// PathState asks the bridge's shell: `[ -e p ] || [ -L p ]` (the -L keeps a
// dangling symlink "exists"). Exit 0 is exists, 1 is missing, anything else —
// or any failure to ask — is unknown.
func (m *MCP) PathState(ctx context.Context, path string) api.PathState {
	q := shellQuote(path)
	res, err := m.RunCommand(ctx, fmt.Sprintf("if [ -e %s ] || [ -L %s ]; then exit 0; else exit 1; fi", q, q), pathStateTimeout)
	switch {
	case err != nil:
		return api.PathState{Status: api.PathUnknown, Reason: fmt.Sprintf("presence check of %s failed: %v", path, err)}
	case res.ExitCode == 0:
		return api.PathState{Status: api.PathExists}
	case res.ExitCode == 1:
		return api.PathState{Status: api.PathMissing}
	default:
		return api.PathState{Status: api.PathUnknown, Reason: fmt.Sprintf("presence check of %s exited %d: %s", path, res.ExitCode, strings.TrimSpace(res.Stderr))}
	}
}

func (m *MCP) ReadBytes(ctx context.Context, path string, offset, length int64) ([]byte, error) {
	if offset < 0 {
		return nil, fmt.Errorf("read_bytes %s: negative offset %d", path, offset)
	}
	args := map[string]any{"path": path}
	if offset > 0 {
		args["offset"] = offset
	}
	if length >= 0 {
		args["length"] = length
	}
	v, err := m.call(ctx, "read_bytes", path, args, 0)
	if err != nil {
		return nil, err
	}
	b64, ok := v.(string)
	if obj, isObj := v.(map[string]any); isObj {
		b64, ok = stringField(obj, "content_b64", "data", "base64")
	}
	if !ok {
		return nil, fmt.Errorf("read_bytes %s on bridge %q: no base64 content in the response: %s", path, m.name, textOf(v))
	}
	out, err := decodeBase64(b64)
	if err != nil {
		return nil, fmt.Errorf("read_bytes %s on bridge %q: invalid base64 in the response: %w", path, m.name, err)
	}
	return out, nil
}

// decodeBase64 accepts standard base64 with or without padding, ignoring
// whitespace (bridges wrap long text blocks).
func decodeBase64(s string) ([]byte, error) {
	clean := strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\n', '\r':
			return -1
		}
		return r
	}, s)
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(clean, "="))
}

func (m *MCP) WriteBytes(ctx context.Context, path string, data []byte) error {
	_, err := m.call(ctx, "write_bytes", path, map[string]any{"path": path, "content_b64": base64.StdEncoding.EncodeToString(data)}, 0)
	return err
}

var pidLine = regexp.MustCompile(`(?m)^\s*pid:\s*(\d+)\s*$`)

func (m *MCP) PTYStart(ctx context.Context, cmd string) (int, error) {
	v, err := m.call(ctx, "pty_start", strconv.Quote(cmd), map[string]any{"command": cmd}, 0)
	if err != nil {
		return 0, err
	}
	if obj, ok := asObject(v); ok {
		if pid, ok := intField(obj, "pid"); ok && pid > 0 {
			return pid, nil
		}
	}
	text := textOf(v)
	if mm := pidLine.FindStringSubmatch(text); mm != nil {
		if pid, err := strconv.Atoi(mm[1]); err == nil && pid > 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("pty_start %q on bridge %q: no pid in the response: %q", cmd, m.name, text)
}

func ptyTarget(pid int) string { return fmt.Sprintf("pty %d", pid) }

func (m *MCP) PTYInput(ctx context.Context, pid int, data string) error {
	_, err := m.call(ctx, "pty_input", ptyTarget(pid), map[string]any{"pid": pid, "data": data}, 0)
	return err
}

func (m *MCP) PTYRead(ctx context.Context, pid int) (string, error) {
	v, err := m.call(ctx, "pty_read", ptyTarget(pid), map[string]any{"pid": pid}, 0)
	if err != nil {
		return "", err
	}
	if obj, ok := v.(map[string]any); ok {
		if s, ok := stringField(obj, "data", "output"); ok {
			return s, nil
		}
	}
	return textOf(v), nil
}

func (m *MCP) PTYResize(ctx context.Context, pid int, rows, cols uint16) error {
	_, err := m.call(ctx, "pty_resize", ptyTarget(pid), map[string]any{"pid": pid, "rows": rows, "cols": cols}, 0)
	return err
}

func (m *MCP) PTYKill(ctx context.Context, pid int) error {
	_, err := m.call(ctx, "pty_kill", ptyTarget(pid), map[string]any{"pid": pid}, 0)
	return err
}
