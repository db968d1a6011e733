package substrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

type recordedCall struct {
	tool    string
	args    map[string]any
	timeout time.Duration
}

// mockBridge plays the reference's mock session: an in-memory file map, a
// structured run_command result and flattened text for everything else.
type mockBridge struct {
	mu    sync.Mutex
	calls []recordedCall
	files map[string]string
}

func newMockBridge() *mockBridge { return &mockBridge{files: map[string]string{}} }

func (b *mockBridge) CallTool(_ context.Context, tool string, args map[string]any, timeout time.Duration) (any, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, recordedCall{tool: tool, args: args, timeout: timeout})
	switch tool {
	case "write_text":
		b.files[args["path"].(string)] = args["content"].(string)
		return "ok", nil
	case "read_text":
		c, ok := b.files[args["path"].(string)]
		if !ok {
			return nil, &ToolError{Tool: tool, Message: "not found"}
		}
		return c, nil
	case "run_command":
		return map[string]any{"stdout": "from-vm", "stderr": "", "exit_code": float64(0)}, nil
	case "read_bytes":
		return "aGk=", nil // base64("hi"), flattened to text as the canonical bridge does
	case "pty_start":
		return "pid: 4242\ncols: 80\nrows: 24", nil
	case "pty_read":
		return "pty-out", nil
	case "write_bytes", "pty_input", "pty_resize", "pty_kill":
		return "ok", nil
	}
	return nil, &ToolError{Tool: tool, Message: "unknown tool " + tool}
}

func (b *mockBridge) recorded() []recordedCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]recordedCall(nil), b.calls...)
}

func (b *mockBridge) byTool(t *testing.T, tool string) recordedCall {
	t.Helper()
	for _, c := range b.recorded() {
		if c.tool == tool {
			return c
		}
	}
	t.Fatalf("no %s call recorded", tool)
	return recordedCall{}
}

func TestMCPRoutesEachMethodToTheSameNamedBridgeTool(t *testing.T) {
	ctx := context.Background()
	bridge := newMockBridge()
	sub := NewMCP("vm", bridge)
	assert.Equal(t, "vm", sub.Name())
	assert.False(t, sub.IsLocal())

	require.NoError(t, sub.WriteText(ctx, "/tmp/a.txt", "vm-content"))
	got, err := sub.ReadText(ctx, "/tmp/a.txt")
	require.NoError(t, err)
	assert.Equal(t, "vm-content", got)
	out, err := sub.RunCommand(ctx, "ls", 0)
	require.NoError(t, err)
	assert.Equal(t, api.CommandResult{Stdout: "from-vm", ExitCode: 0}, out)

	var names []string
	for _, c := range bridge.recorded() {
		names = append(names, c.tool)
	}
	assert.Equal(t, []string{"write_text", "read_text", "run_command"}, names)
}

// A drift in argument names ships a silently broken substrate: the bridge
// rejects every call with -32602. This pins every tool's exact keys, and that
// the legacy names (cmd, timeout_s, len, id, data outside pty_input) are gone.
func TestMCPSendsTheCanonicalBridgeArgumentNamesWithANumericPid(t *testing.T) {
	ctx := context.Background()
	bridge := newMockBridge()
	sub := NewMCP("vm", bridge)

	_, err := sub.RunCommand(ctx, "ls", 5*time.Second)
	require.NoError(t, err)
	b, err := sub.ReadBytes(ctx, "/f", 2, 4)
	require.NoError(t, err)
	assert.Equal(t, []byte("hi"), b)
	require.NoError(t, sub.WriteText(ctx, "/f", "x"))
	_, err = sub.ReadText(ctx, "/f")
	require.NoError(t, err)
	require.NoError(t, sub.WriteBytes(ctx, "/f", []byte("hi")))
	pid, err := sub.PTYStart(ctx, "bash")
	require.NoError(t, err)
	assert.Equal(t, 4242, pid)
	require.NoError(t, sub.PTYInput(ctx, pid, "echo\n"))
	out, err := sub.PTYRead(ctx, pid)
	require.NoError(t, err)
	assert.Equal(t, "pty-out", out)
	require.NoError(t, sub.PTYResize(ctx, pid, 40, 100))
	require.NoError(t, sub.PTYKill(ctx, pid))

	want := map[string]map[string]any{
		"run_command": {"command": "ls", "timeout": 5.0},
		"read_bytes":  {"path": "/f", "offset": int64(2), "length": int64(4)},
		"write_text":  {"path": "/f", "content": "x"},
		"read_text":   {"path": "/f"},
		"write_bytes": {"path": "/f", "content_b64": "aGk="},
		"pty_start":   {"command": "bash"},
		"pty_input":   {"pid": 4242, "data": "echo\n"},
		"pty_read":    {"pid": 4242},
		"pty_resize":  {"pid": 4242, "rows": uint16(40), "cols": uint16(100)},
		"pty_kill":    {"pid": 4242},
	}
	for tool, args := range want {
		assert.Equal(t, args, bridge.byTool(t, tool).args, tool)
	}
	for _, c := range bridge.recorded() {
		for _, legacy := range []string{"cmd", "timeout_s", "len", "id"} {
			assert.NotContains(t, c.args, legacy, "%s must not send legacy %q", c.tool, legacy)
		}
		if c.tool != "pty_input" {
			assert.NotContains(t, c.args, "data", "%s must not send legacy `data`", c.tool)
		}
		if pid, ok := c.args["pid"]; ok {
			assert.IsType(t, 0, pid, "%s must send a numeric pid", c.tool)
		}
	}
}

func TestMCPReadBytesOmitsAnAbsentWindow(t *testing.T) {
	bridge := newMockBridge()
	_, err := NewMCP("vm", bridge).ReadBytes(context.Background(), "/f", 0, ToEnd)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"path": "/f"}, bridge.byTool(t, "read_bytes").args)
}

func TestMCPRunCommandWaitsItsOwnTimeoutPlusMarginElseTheSessionDefault(t *testing.T) {
	ctx := context.Background()
	bridge := newMockBridge()
	sub := NewMCP("vm", bridge)

	_, err := sub.RunCommand(ctx, "echo hi", 120*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 150*time.Second, bridge.recorded()[0].timeout)

	_, err = sub.RunCommand(ctx, "echo hi", 0)
	require.NoError(t, err)
	assert.Zero(t, bridge.recorded()[1].timeout, "no declared timeout: the session default applies")
	assert.NotContains(t, bridge.recorded()[1].args, "timeout")

	_, _ = sub.ReadText(ctx, "/p")
	assert.Zero(t, bridge.recorded()[2].timeout, "other calls use the session default")
}

// flaky fails with err until attempt succeedAt, recording the waits between.
type flaky struct {
	mu        sync.Mutex
	err       error
	succeedAt int
	attempts  int
}

func (f *flaky) CallTool(context.Context, string, map[string]any, time.Duration) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.attempts >= f.succeedAt {
		return map[string]any{"stdout": "ok", "stderr": "", "exit_code": float64(0)}, nil
	}
	return nil, f.err
}

func newFlaky(err error, succeedAt int) (*MCP, *flaky, *[]time.Duration) {
	f := &flaky{err: err, succeedAt: succeedAt}
	m := NewMCP("vm", f)
	var waits []time.Duration
	m.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	return m, f, &waits
}

const never = 1 << 30

func TestATransientConnectionDropIsRetriedAndRecovers(t *testing.T) {
	sub, f, waits := newFlaky(errors.New("fetch failed"), 2)
	out, err := sub.RunCommand(context.Background(), "echo hi", 0)
	require.NoError(t, err)
	assert.Equal(t, "ok", out.Stdout)
	assert.Equal(t, 2, f.attempts, "retried once, then succeeded")
	assert.Equal(t, []time.Duration{RetryBackoff}, *waits)
}

func TestAPersistentConnectionDropIsExhaustedAndTaggedWithAGrowingBackoff(t *testing.T) {
	sub, f, waits := newFlaky(errors.New("fetch failed"), never)
	_, err := sub.RunCommand(context.Background(), "echo hi", 0)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), TransportErrorPrefix), err.Error())
	assert.Contains(t, err.Error(), `"echo hi"`, "the error names the command")
	assert.Equal(t, RetryAttempts, f.attempts)
	assert.Equal(t, []time.Duration{RetryBackoff, 2 * RetryBackoff}, *waits, "backoff grows per attempt")
	var te *TransportError
	require.ErrorAs(t, err, &te)
	assert.False(t, te.Timeout)
}

func TestATimeoutIsNotRetriedButIsTagged(t *testing.T) {
	for _, e := range []error{
		errors.New("MCP request 'tools/call' timed out"),
		fmt.Errorf("no answer within 1s: %w", context.DeadlineExceeded),
	} {
		sub, f, waits := newFlaky(e, never)
		_, err := sub.RunCommand(context.Background(), "echo hi", 0)
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), TransportErrorPrefix), err.Error())
		assert.Equal(t, 1, f.attempts, "a timed-out command may still be running: never retried")
		assert.Empty(t, *waits)
		var te *TransportError
		require.ErrorAs(t, err, &te)
		assert.True(t, te.Timeout)
	}
}

func TestATaskErrorIsNeitherRetriedNorTagged(t *testing.T) {
	for _, e := range []error{
		errors.New("no such file"),
		&ToolError{Tool: "run_command", Message: "cat: /nope: No such file or directory"},
		// The SDK's schema rejection names the argument; "timeout" in it is
		// not a transport fault.
		&ToolError{Tool: "run_command", Message: `validating "arguments": unexpected additional properties ["timeout_s"]`},
	} {
		sub, f, _ := newFlaky(e, never)
		_, err := sub.RunCommand(context.Background(), "cat /nope", 0)
		require.Error(t, err)
		assert.False(t, strings.HasPrefix(err.Error(), TransportErrorPrefix), err.Error())
		assert.Contains(t, err.Error(), `"cat /nope"`)
		assert.Equal(t, 1, f.attempts, "task errors are not retried: %v", e)
	}
}

func TestTypedConnectionDropsAreRetriedLikeTheirSignatures(t *testing.T) {
	for _, e := range []error{
		fmt.Errorf("%w: calling \"tools/call\": server is closing: EOF", mcp.ErrConnectionClosed),
		fmt.Errorf("write: %w", syscall.EPIPE),
		&ToolError{Tool: "run_command", Message: "fetch failed"},
	} {
		sub, f, _ := newFlaky(e, 3)
		_, err := sub.RunCommand(context.Background(), "true", 0)
		require.NoError(t, err, "%v", e)
		assert.Equal(t, 3, f.attempts)
	}
}

func TestACallerThatGaveUpIsNeitherRetriedNorTagged(t *testing.T) {
	sub, f, _ := newFlaky(context.Canceled, never)
	_, err := sub.RunCommand(context.Background(), "true", 0)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, strings.HasPrefix(err.Error(), TransportErrorPrefix))
	assert.Equal(t, 1, f.attempts)
}

func TestTheRetryWaitEndsWithTheCaller(t *testing.T) {
	f := &flaky{err: errors.New("connection reset by peer"), succeedAt: never}
	sub := NewMCP("vm", f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := sub.RunCommand(ctx, "true", 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), RetryBackoff, "the backoff must not outlive the caller")
	assert.Equal(t, 1, f.attempts)
}

// fixed answers every call with one value.
type fixed struct {
	v   any
	err error
}

func (f fixed) CallTool(context.Context, string, map[string]any, time.Duration) (any, error) {
	return f.v, f.err
}

func TestMCPAcceptsFlattenedAndStructuredResponses(t *testing.T) {
	ctx := context.Background()
	runs := []struct {
		name string
		v    any
		want api.CommandResult
	}{
		{"structured", map[string]any{"stdout": "a", "stderr": "b", "exit_code": float64(3)}, api.CommandResult{Stdout: "a", Stderr: "b", ExitCode: 3}},
		{"flattened text", "plain output", api.CommandResult{Stdout: "plain output"}},
		{"JSON object as text", `{"stdout":"a","exit_code":2}`, api.CommandResult{Stdout: "a", ExitCode: 2}},
	}
	for _, tc := range runs {
		got, err := NewMCP("vm", fixed{v: tc.v}).RunCommand(ctx, "x", 0)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}

	pids := []struct {
		name string
		v    any
		want int
		ok   bool
	}{
		{"structured", map[string]any{"pid": float64(77)}, 77, true},
		{"pid line", "cols: 80\npid: 4242\nrows: 24", 4242, true},
		{"JSON text", `{"pid": 9}`, 9, true},
		{"no pid", "started", 0, false},
		{"non-numeric pid", "pid: abc", 0, false},
	}
	for _, tc := range pids {
		pid, err := NewMCP("vm", fixed{v: tc.v}).PTYStart(ctx, "bash")
		if tc.ok {
			require.NoError(t, err, tc.name)
			assert.Equal(t, tc.want, pid, tc.name)
		} else {
			require.Error(t, err, tc.name)
			assert.Contains(t, err.Error(), `"bash"`)
		}
	}

	for _, v := range []any{"aGk=", "aGk", map[string]any{"content_b64": "aGk="}, map[string]any{"data": "aGk="}} {
		b, err := NewMCP("vm", fixed{v: v}).ReadBytes(ctx, "/f", 0, ToEnd)
		require.NoError(t, err, "%v", v)
		assert.Equal(t, []byte("hi"), b)
	}
	_, err := NewMCP("vm", fixed{v: "!!!"}).ReadBytes(ctx, "/f", 0, ToEnd)
	require.ErrorContains(t, err, "/f")

	txt, err := NewMCP("vm", fixed{v: map[string]any{"content": "c"}}).ReadText(ctx, "/f")
	require.NoError(t, err)
	assert.Equal(t, "c", txt)
}

// cmdRecorder answers run_command with a chosen exit code and keeps the command.
type cmdRecorder struct {
	exit int
	err  error
	cmd  string
}

func (c *cmdRecorder) CallTool(_ context.Context, _ string, args map[string]any, _ time.Duration) (any, error) {
	c.cmd, _ = args["command"].(string)
	if c.err != nil {
		return nil, c.err
	}
	return map[string]any{"stdout": "", "stderr": "boom", "exit_code": float64(c.exit)}, nil
}

func TestMCPPathStateRunsAQuotedShellTestAndMapsItsExitCode(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		exit int
		err  error
		want api.PathStatus
	}{
		{0, nil, api.PathExists},
		{1, nil, api.PathMissing},
		{2, nil, api.PathUnknown},
		{0, errors.New("fetch failed"), api.PathUnknown},
	}
	for _, tc := range cases {
		rec := &cmdRecorder{exit: tc.exit, err: tc.err}
		m := NewMCP("vm", rec)
		m.sleep = func(context.Context, time.Duration) error { return nil }
		st := m.PathState(ctx, "/it's here")
		assert.Equal(t, tc.want, st.Status, "exit %d err %v", tc.exit, tc.err)
		assert.Equal(t, `if [ -e '/it'\''s here' ] || [ -L '/it'\''s here' ]; then exit 0; else exit 1; fi`, rec.cmd)
		if tc.want == api.PathUnknown {
			assert.Contains(t, st.Reason, "/it's here")
		}
	}
}

func TestShellQuoteSurvivesTheShell(t *testing.T) {
	l := NewLocal(proc.EnvMap(os.Environ()))
	for _, s := range []string{"plain", "it's", `a"b`, "$HOME `x`", "'", ""} {
		out, err := l.RunCommand(context.Background(), "printf %s "+shellQuote(s), 5*time.Second)
		require.NoError(t, err)
		assert.Equal(t, s, out.Stdout)
	}
}

func TestOnlyNotFoundProvesAPathMissing(t *testing.T) {
	cases := []struct {
		err  error
		want api.PathStatus
	}{
		{nil, api.PathExists},
		{syscall.ENOENT, api.PathMissing},
		{syscall.EACCES, api.PathUnknown},
		{syscall.ENOTDIR, api.PathUnknown},
		{syscall.ELOOP, api.PathUnknown},
	}
	for _, tc := range cases {
		st := pathStateFromLstat("/p", tc.err)
		assert.Equal(t, tc.want, st.Status, "%v", tc.err)
		if tc.want == api.PathUnknown {
			assert.Contains(t, st.Reason, "/p")
		}
	}
}

func TestCappedOutputKeepsTheHeadAndSaysWhatItDropped(t *testing.T) {
	b := &proc.Capped{Head: 4}
	_, _ = b.Write([]byte("abcdef"))
	_, _ = b.Write([]byte("gh"))
	assert.True(t, strings.HasPrefix(cappedText(b, 4), "abcd\n"))
	assert.Contains(t, cappedText(b, 4), "4 bytes dropped after the first 4")
	small := &proc.Capped{Head: 4}
	_, _ = small.Write([]byte("ab"))
	assert.Equal(t, "ab", cappedText(small, 4), "nothing dropped, no marker")
}

func TestAFailedReconnectIsRetriedAndAClosedSubstrateIsTagged(t *testing.T) {
	sub, f, _ := newFlaky(&connectError{errors.New("connect to bridge \"vm\": calling \"initialize\": EOF")}, 2)
	_, err := sub.RunCommand(context.Background(), "true", 0)
	require.NoError(t, err)
	assert.Equal(t, 2, f.attempts, "the request never left: safe to retry")

	sub, f, _ = newFlaky(fmt.Errorf("bridge \"vm\": %w", ErrClosed), never)
	_, err = sub.RunCommand(context.Background(), "true", 0)
	require.ErrorIs(t, err, ErrClosed)
	assert.True(t, strings.HasPrefix(err.Error(), TransportErrorPrefix))
	assert.Equal(t, 1, f.attempts)
}
