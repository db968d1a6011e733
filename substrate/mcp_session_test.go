package substrate_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/substrate"
	"github.com/card-dev/card/substrate/internal/bridgetest"
)

// connectInMemory serves a test bridge over the SDK's in-memory transport
// pair and connects an MCP substrate to it.
func connectInMemory(t *testing.T, env substrate.Substrate, timeout time.Duration) (*substrate.MCP, *bridgetest.Bridge) {
	t.Helper()
	ctx := context.Background()
	b := bridgetest.New(env)
	clientT, serverT := mcp.NewInMemoryTransports()
	ss, err := b.Server.Connect(ctx, serverT, nil)
	require.NoError(t, err)
	dialed := false
	m, closer, err := substrate.ConnectMCP(ctx, "vm", func() (mcp.Transport, error) {
		if dialed {
			return nil, errors.New("the in-memory transport cannot be redialed")
		}
		dialed = true
		return clientT, nil
	}, timeout)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, closer.Close())
		_ = ss.Wait()
	})
	return m, b
}

func TestMCPOverARealSessionRoundTripsFilesCommandsAndPathState(t *testing.T) {
	ctx := context.Background()
	m, _ := connectInMemory(t, newLocal(t), 10*time.Second)
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "hello.txt")

	require.NoError(t, m.WriteText(ctx, path, "hello world"))
	got, err := m.ReadText(ctx, path)
	require.NoError(t, err)
	assert.Equal(t, "hello world", got)

	win, err := m.ReadBytes(ctx, path, 6, 5)
	require.NoError(t, err)
	assert.Equal(t, []byte("world"), win)
	all, err := m.ReadBytes(ctx, path, 0, substrate.ToEnd)
	require.NoError(t, err)
	assert.Equal(t, []byte("hello world"), all)

	require.NoError(t, m.WriteBytes(ctx, path, []byte{0, 1, 2, 255}))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, []byte{0, 1, 2, 255}, raw)

	out, err := m.RunCommand(ctx, "echo out; echo err >&2; exit 5", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, api.CommandResult{Stdout: "out\n", Stderr: "err\n", ExitCode: 5}, out)

	dangling := filepath.Join(dir, "it's a link")
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone"), dangling))
	assert.Equal(t, api.PathExists, m.PathState(ctx, path).Status)
	assert.Equal(t, api.PathMissing, m.PathState(ctx, filepath.Join(dir, "nope")).Status)
	assert.Equal(t, api.PathExists, m.PathState(ctx, dangling).Status, "a dangling symlink exists over MCP too")

	fresh := filepath.Join(dir, "fresh.txt")
	require.NoError(t, substrate.WriteTextCreateOnly(ctx, m, fresh, "new"))
	require.ErrorIs(t, substrate.WriteTextCreateOnly(ctx, m, fresh, "again"), substrate.ErrPathExists)
}

func TestMCPOverARealSessionDrivesTheBridgePTY(t *testing.T) {
	ctx := context.Background()
	m, _ := connectInMemory(t, newLocal(t), 10*time.Second)
	pid, err := m.PTYStart(ctx, "sh")
	require.NoError(t, err)
	require.NoError(t, m.PTYInput(ctx, pid, "echo via-$((1+1))\n"))
	readUntil(t, m, pid, "via-2")
	require.NoError(t, m.PTYResize(ctx, pid, 30, 90))
	require.NoError(t, m.PTYKill(ctx, pid))
	_, err = m.PTYRead(ctx, pid)
	require.ErrorContains(t, err, "no open pty")
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestTheBridgeReceivesExactlyTheCanonicalArgumentNames(t *testing.T) {
	ctx := context.Background()
	m, b := connectInMemory(t, newLocal(t), 10*time.Second)
	path := filepath.Join(t.TempDir(), "f")

	require.NoError(t, m.WriteText(ctx, path, "abcdef"))
	_, err := m.ReadText(ctx, path)
	require.NoError(t, err)
	_, err = m.ReadBytes(ctx, path, 2, 3)
	require.NoError(t, err)
	require.NoError(t, m.WriteBytes(ctx, path, []byte("hi")))
	_, err = m.RunCommand(ctx, "true", 5*time.Second)
	require.NoError(t, err)
	pid, err := m.PTYStart(ctx, "cat")
	require.NoError(t, err)
	require.NoError(t, m.PTYInput(ctx, pid, "x\n"))
	_, err = m.PTYRead(ctx, pid)
	require.NoError(t, err)
	require.NoError(t, m.PTYResize(ctx, pid, 40, 100))
	require.NoError(t, m.PTYKill(ctx, pid))

	want := map[string][]string{
		"write_text":  {"content", "path"},
		"read_text":   {"path"},
		"read_bytes":  {"length", "offset", "path"},
		"write_bytes": {"content_b64", "path"},
		"run_command": {"command", "timeout"},
		"pty_start":   {"command"},
		"pty_input":   {"data", "pid"},
		"pty_read":    {"pid"},
		"pty_resize":  {"cols", "pid", "rows"},
		"pty_kill":    {"pid"},
	}
	seen := map[string]bool{}
	for _, c := range b.Calls() {
		seen[c.Tool] = true
		args := c.Keys()
		assert.Equal(t, want[c.Tool], keysOf(args), c.Tool)
		if pid, ok := args["pid"]; ok {
			assert.IsType(t, float64(0), pid, "%s: pid must be a JSON number", c.Tool)
		}
	}
	assert.Len(t, seen, len(want), "every tool was exercised")
}

// The bridge's schemas are the real contract: a client sending legacy names
// is refused, which is why the substrate must never send them.
func TestTheTestBridgeRejectsLegacyArgumentNames(t *testing.T) {
	ctx := context.Background()
	b := bridgetest.New(newLocal(t))
	clientT, serverT := mcp.NewInMemoryTransports()
	ss, err := b.Server.Connect(ctx, serverT, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "probe", Version: "test"}, nil).Connect(ctx, clientT, nil)
	require.NoError(t, err)
	defer func() { _ = cs.Close(); _ = ss.Wait() }()

	bad := []struct {
		tool string
		args map[string]any
	}{
		{"run_command", map[string]any{"cmd": "ls"}},
		{"run_command", map[string]any{"command": "ls", "timeout_s": 5}},
		{"read_bytes", map[string]any{"path": "/etc/hostname", "len": 4}},
		{"write_bytes", map[string]any{"path": "/tmp/x", "data": "aGk="}},
		{"pty_read", map[string]any{"id": "1"}},
		{"pty_read", map[string]any{"pid": "4242"}},
		{"pty_kill", map[string]any{"pid": 1.5}},
	}
	for _, tc := range bad {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		require.NoError(t, err)
		assert.True(t, res.IsError, "%s %v must be rejected", tc.tool, tc.args)
	}
	assert.Empty(t, b.Calls(), "no rejected call reached a handler")
}

func TestATaskErrorFromARealBridgeNamesThePathAndIsNotTagged(t *testing.T) {
	ctx := context.Background()
	m, b := connectInMemory(t, newLocal(t), 10*time.Second)
	missing := filepath.Join(t.TempDir(), "missing.txt")
	_, err := m.ReadText(ctx, missing)
	require.Error(t, err)
	assert.False(t, strings.HasPrefix(err.Error(), substrate.TransportErrorPrefix), err.Error())
	assert.Contains(t, err.Error(), missing)
	var te *substrate.ToolError
	require.ErrorAs(t, err, &te)
	assert.Len(t, b.Calls(), 1, "not retried")
}

func TestARealSessionTimeoutIsTaggedAndNotRetried(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	l.KillGrace = 100 * time.Millisecond
	m, b := connectInMemory(t, l, 300*time.Millisecond)
	start := time.Now()
	_, err := m.RunCommand(ctx, "sleep 5", 0)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), substrate.TransportErrorPrefix), err.Error())
	assert.Contains(t, err.Error(), `"sleep 5"`)
	var te *substrate.TransportError
	require.ErrorAs(t, err, &te)
	assert.True(t, te.Timeout)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Len(t, b.Calls(), 1, "a timed-out command may still run: never sent twice")
}

// noExitSleep stops a -race build of the re-executed bridge from sleeping a
// second at exit, which would otherwise dominate the stdio tests.
const noExitSleep = "atexit_sleep_ms=0"

func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return exe
}

func TestOpenReachesAStdioBridgeSubprocess(t *testing.T) {
	ctx := context.Background()
	s, closer, err := substrate.Open(ctx, substrate.Config{MCP: &substrate.MCPConfig{
		Name:    "vm",
		Command: []string{testBinary(t), "-test.run=^$"},
		Env:     map[string]string{bridgeEnv: "1", "GORACE": noExitSleep},
		Timeout: 10 * time.Second,
	}}, startupEnv())
	require.NoError(t, err)
	defer func() { require.NoError(t, closer.Close()) }()
	assert.Equal(t, "vm", s.Name())
	assert.False(t, s.IsLocal())

	out, err := s.RunCommand(ctx, "echo $((6*7)); echo $"+bridgeEnv, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "42\n1\n", out.Stdout, "the configured env reaches the bridge")

	path := filepath.Join(t.TempDir(), "x.txt")
	require.NoError(t, s.WriteText(ctx, path, "over stdio"))
	got, err := s.ReadText(ctx, path)
	require.NoError(t, err)
	assert.Equal(t, "over stdio", got)
	assert.Equal(t, api.PathExists, s.PathState(ctx, path).Status)
}

func TestACrashedStdioBridgeIsRestartedAndTheDroppedCallRetried(t *testing.T) {
	ctx := context.Background()
	s, closer, err := substrate.Open(ctx, substrate.Config{MCP: &substrate.MCPConfig{
		Command: []string{testBinary(t), "-test.run=^$"},
		Env:     map[string]string{bridgeEnv: "1", dieEnv: "2", "GORACE": noExitSleep},
		Timeout: 10 * time.Second,
	}}, startupEnv())
	require.NoError(t, err)
	defer func() { require.NoError(t, closer.Close()) }()

	out, err := s.RunCommand(ctx, "echo first", 0)
	require.NoError(t, err)
	assert.Equal(t, "first\n", out.Stdout)
	// The bridge dies on this call without answering; the substrate sees the
	// connection close, starts a new bridge and sends the call again.
	out, err = s.RunCommand(ctx, "echo second", 0)
	require.NoError(t, err)
	assert.Equal(t, "second\n", out.Stdout)
}

func TestOpenReachesAStreamableHTTPBridge(t *testing.T) {
	ctx := context.Background()
	b := bridgetest.New(newLocal(t))
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return b.Server }, nil))
	defer srv.Close()

	s, closer, err := substrate.Open(ctx, substrate.Config{MCP: &substrate.MCPConfig{Name: "remote", URL: srv.URL}}, startupEnv())
	require.NoError(t, err)
	out, err := s.RunCommand(ctx, "echo http", 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "http\n", out.Stdout)
	require.NoError(t, closer.Close())
}

func TestOpenWithoutABridgeIsLocalAndHonoursReadOnly(t *testing.T) {
	ctx := context.Background()
	s, closer, err := substrate.Open(ctx, substrate.Config{}, startupEnv())
	require.NoError(t, err)
	defer closer.Close()
	assert.Equal(t, "local", s.Name())
	out, err := s.RunCommand(ctx, "echo ok", 0)
	require.NoError(t, err)
	assert.Equal(t, "ok\n", out.Stdout)

	ro, roCloser, err := substrate.Open(ctx, substrate.Config{ReadOnly: true}, startupEnv())
	require.NoError(t, err)
	defer roCloser.Close()
	_, err = ro.RunCommand(ctx, "echo ok", 0)
	require.ErrorIs(t, err, substrate.ErrReadOnly)
}

func TestOpenExplainsABadBridgeConfiguration(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		cfg  substrate.MCPConfig
		want string
	}{
		{substrate.MCPConfig{Name: "vm"}, "sets neither command nor url"},
		{substrate.MCPConfig{Command: []string{"x"}, URL: "http://127.0.0.1:1/mcp"}, "sets both command and url"},
		{substrate.MCPConfig{Command: []string{"/no/such/bridge-binary"}}, `"/no/such/bridge-binary" not found`},
		{substrate.MCPConfig{URL: "ftp://host/x"}, "not an http(s) URL"},
		{substrate.MCPConfig{Command: []string{"/bin/sh", "-c", "echo broken bridge >&2; exit 1"}, Timeout: 5 * time.Second}, "broken bridge"},
	}
	for _, tc := range cases {
		cfg := tc.cfg
		_, closer, err := substrate.Open(ctx, substrate.Config{MCP: &cfg}, startupEnv())
		require.ErrorContains(t, err, tc.want)
		assert.Nil(t, closer)
	}
}

var _ io.Closer = (*substrate.Local)(nil)

func TestDescribeReportsNameLocalityPTYAndReadOnly(t *testing.T) {
	m, _ := connectInMemory(t, newLocal(t), 10*time.Second)
	assert.Equal(t, api.SubstrateInfo{Name: "vm", PTY: true}, substrate.Describe(m), "the bridge lists pty_start")
	assert.Equal(t, api.SubstrateInfo{Name: "local", Local: true, PTY: true}, substrate.Describe(newLocal(t)))
	assert.Equal(t, api.SubstrateInfo{Name: "local", Local: true, ReadOnly: true}, substrate.Describe(substrate.ReadOnly(newLocal(t))))
	assert.False(t, substrate.Describe(bare{Substrate: newLocal(t)}).PTY, "a substrate without its own PTY has none")
}

func TestABridgeWithoutPtyStartIsDescribedWithoutAPTY(t *testing.T) {
	ctx := context.Background()
	b := bridgetest.New(newLocal(t))
	b.Server.RemoveTools("pty_start")
	clientT, serverT := mcp.NewInMemoryTransports()
	ss, err := b.Server.Connect(ctx, serverT, nil)
	require.NoError(t, err)
	m, closer, err := substrate.ConnectMCP(ctx, "vm", func() (mcp.Transport, error) { return clientT, nil }, 5*time.Second)
	require.NoError(t, err)
	defer func() { _ = closer.Close(); _ = ss.Wait() }()
	assert.False(t, substrate.Describe(m).PTY)
}

func TestACallAfterCloseIsRefusedAsATransportFault(t *testing.T) {
	ctx := context.Background()
	b := bridgetest.New(newLocal(t))
	clientT, serverT := mcp.NewInMemoryTransports()
	ss, err := b.Server.Connect(ctx, serverT, nil)
	require.NoError(t, err)
	m, closer, err := substrate.ConnectMCP(ctx, "vm", func() (mcp.Transport, error) { return clientT, nil }, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, closer.Close())
	_ = ss.Wait()
	_, err = m.ReadText(ctx, "/etc/hostname")
	require.ErrorIs(t, err, substrate.ErrClosed)
	assert.Contains(t, err.Error(), "/etc/hostname")
}

func TestABridgeThatKeepsDyingIsGivenUpOnAfterThreeAttemptsAndTagged(t *testing.T) {
	ctx := context.Background()
	s, closer, err := substrate.Open(ctx, substrate.Config{MCP: &substrate.MCPConfig{
		Name:    "vm",
		Command: []string{testBinary(t), "-test.run=^$"},
		Env:     map[string]string{bridgeEnv: "1", dieEnv: "1", "GORACE": noExitSleep},
		Timeout: 10 * time.Second,
	}}, startupEnv())
	require.NoError(t, err)
	defer func() { require.NoError(t, closer.Close()) }()
	_, err = s.RunCommand(ctx, "echo never", 0)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), substrate.TransportErrorPrefix), err.Error())
	assert.Contains(t, err.Error(), `"echo never"`)
	assert.Contains(t, err.Error(), "gave up after 3 attempts")
}

func TestAStdioBridgeGetsTheStrippedStartupEnvironment(t *testing.T) {
	ctx := context.Background()
	envFile := filepath.Join(t.TempDir(), "bridge.env")
	startup := withDaemonOnly()
	t.Setenv("CARD_TEST_LIVE_ONLY", "1")
	for k, v := range daemonOnly {
		t.Setenv(k, v)
	}
	s, closer, err := substrate.Open(ctx, substrate.Config{MCP: &substrate.MCPConfig{
		Name: "vm",
		// The bridge records its own environment, then becomes the test
		// bridge (exec keeps the process and its environment).
		Command: []string{"sh", "-c", `env > "$0"; exec "$1" -test.run='^$'`, envFile, testBinary(t)},
		Env:     map[string]string{bridgeEnv: "1", "GORACE": noExitSleep},
		Timeout: 10 * time.Second,
	}}, startup)
	require.NoError(t, err)
	defer func() { require.NoError(t, closer.Close()) }()
	_, err = s.RunCommand(ctx, "true", 10*time.Second)
	require.NoError(t, err)

	b, err := os.ReadFile(envFile)
	require.NoError(t, err)
	assertStripped(t, string(b))
	assert.Contains(t, string(b), bridgeEnv+"=1\n", "the configured env is added")
}
