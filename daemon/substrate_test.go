package daemon_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/rpc"
)

func rpcErr(t *testing.T, err error) (*rpc.Error, map[string]any) {
	t.Helper()
	var re *rpc.Error
	require.ErrorAs(t, err, &re)
	data := map[string]any{}
	if raw, ok := re.Data.(json.RawMessage); ok && len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &data))
	}
	return re, data
}

func TestSubstrateMethodsRoundTripOnTheLocalHost(t *testing.T) {
	td := startDaemon(t)
	c := td.client(t, rpc.ClientOptions{})
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "sub", "note.txt")

	var info map[string]any
	require.NoError(t, c.Call(ctx, "substrate.info", nil, &info))
	assert.Equal(t, "local", info["name"])
	assert.Equal(t, true, info["local"])
	assert.Equal(t, false, info["read_only"])

	var st map[string]any
	require.NoError(t, c.Call(ctx, "substrate.path_state", map[string]any{"path": file}, &st))
	assert.Equal(t, "missing", st["state"])

	require.NoError(t, c.Call(ctx, "substrate.write_text", map[string]any{"path": file, "content": "hello\n", "create_only": true}, nil))
	var text daemon.ReadTextResult
	require.NoError(t, c.Call(ctx, "substrate.read_text", map[string]any{"path": file}, &text))
	assert.Equal(t, "hello\n", text.Content)

	err := c.Call(ctx, "substrate.write_text", map[string]any{"path": file, "content": "again", "create_only": true}, nil)
	re, _ := rpcErr(t, err)
	assert.Equal(t, daemon.CodeSubstrateFailed, re.Code, "create_only never overwrites")
	assert.Contains(t, re.Message, file)

	bin := filepath.Join(dir, "blob.bin")
	require.NoError(t, c.Call(ctx, "substrate.write_bytes", map[string]any{"path": bin, "content_b64": base64.StdEncoding.EncodeToString([]byte("0123456789"))}, nil))
	var window daemon.BytesResult
	require.NoError(t, c.Call(ctx, "substrate.read_bytes", map[string]any{"path": bin, "offset": 3, "length": 4}, &window))
	got, _ := base64.StdEncoding.DecodeString(window.ContentB64)
	assert.Equal(t, "3456", string(got))
	require.NoError(t, c.Call(ctx, "substrate.read_bytes", map[string]any{"path": bin, "offset": 8}, &window))
	got, _ = base64.StdEncoding.DecodeString(window.ContentB64)
	assert.Equal(t, "89", string(got), "no length reads to the end")

	var out map[string]any
	require.NoError(t, c.Call(ctx, "substrate.run_command", map[string]any{"command": "echo out; echo err >&2; exit 3"}, &out))
	assert.Equal(t, "out\n", out["stdout"])
	assert.Equal(t, "err\n", out["stderr"])
	assert.EqualValues(t, 3, out["exit_code"])

	err = c.Call(ctx, "substrate.run_command", map[string]any{"command": "sleep 30", "timeout_secs": 1}, nil)
	re, data := rpcErr(t, err)
	assert.Equal(t, daemon.CodeSubstrateFailed, re.Code)
	assert.Equal(t, "timeout", data["reason"])
	assert.Contains(t, re.Message, "sleep 30")

	link := filepath.Join(dir, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere"), link))
	require.NoError(t, c.Call(ctx, "substrate.path_state", map[string]any{"path": link}, &st))
	assert.Equal(t, "exists", st["state"], "a dangling symlink exists")
}

func TestSubstrateLocalPTYWorksOverTheWire(t *testing.T) {
	td := startDaemon(t)
	c := td.client(t, rpc.ClientOptions{})
	ctx := context.Background()
	var pty daemon.PTYResult
	require.NoError(t, c.Call(ctx, "substrate.pty_start", map[string]any{"command": "cat"}, &pty))
	require.Greater(t, pty.PID, 0)
	require.NoError(t, c.Call(ctx, "substrate.pty_resize", map[string]any{"pid": pty.PID, "rows": 40, "cols": 100}, nil))
	require.NoError(t, c.Call(ctx, "substrate.pty_input", map[string]any{"pid": pty.PID, "data": "ping-pty\n"}, nil))
	var seen strings.Builder
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(seen.String(), "ping-pty") {
		var r daemon.PTYReadResult
		require.NoError(t, c.Call(ctx, "substrate.pty_read", map[string]any{"pid": pty.PID}, &r))
		seen.WriteString(r.Data)
	}
	assert.Contains(t, seen.String(), "ping-pty")
	require.NoError(t, c.Call(ctx, "substrate.pty_kill", map[string]any{"pid": pty.PID}, nil))
}

func TestReadOnlySubstrateRefusesExecAndWrites(t *testing.T) {
	td := startDaemonWith(t, "[substrate]\nread_only = true\n")
	c := td.client(t, rpc.ClientOptions{})
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "x.txt")
	calls := []struct {
		method string
		params map[string]any
	}{
		{"substrate.run_command", map[string]any{"command": "touch " + file}},
		{"substrate.write_text", map[string]any{"path": file, "content": "x"}},
		{"substrate.write_bytes", map[string]any{"path": file, "content_b64": "eA=="}},
		{"substrate.pty_start", map[string]any{"command": "sh"}},
	}
	for _, call := range calls {
		t.Run(call.method, func(t *testing.T) {
			re, _ := rpcErr(t, c.Call(ctx, call.method, call.params, nil))
			assert.Equal(t, daemon.CodeSubstrateReadOnly, re.Code)
			assert.Contains(t, re.Message, "read_only")
		})
	}
	_, err := os.Stat(file)
	assert.True(t, os.IsNotExist(err), "nothing was written")
	var st map[string]any
	require.NoError(t, c.Call(ctx, "substrate.path_state", map[string]any{"path": file}, &st), "reads still work")
	var info map[string]any
	require.NoError(t, c.Call(ctx, "substrate.info", nil, &info))
	assert.Equal(t, true, info["read_only"])
}

func TestSubstrateBadParamsNameTheField(t *testing.T) {
	td := startDaemon(t)
	c := td.client(t, rpc.ClientOptions{})
	cases := []struct {
		name, method string
		params       any
		field        string
	}{
		{"relative path", "substrate.read_text", map[string]any{"path": "relative/file"}, "path"},
		{"missing path", "substrate.read_text", map[string]any{}, "path"},
		{"misspelt field", "substrate.read_text", map[string]any{"pth": "/x"}, "pth"},
		{"path of the wrong type", "substrate.read_text", map[string]any{"path": 7}, "path"},
		{"negative offset", "substrate.read_bytes", map[string]any{"path": "/etc/hostname", "offset": -1}, "offset"},
		{"bad base64", "substrate.write_bytes", map[string]any{"path": "/tmp/card-never", "content_b64": "***"}, "content_b64"},
		{"empty command", "substrate.run_command", map[string]any{"command": ""}, "command"},
		{"legacy cmd key", "substrate.run_command", map[string]any{"cmd": "ls"}, "cmd"},
		{"pid as a string", "substrate.pty_read", map[string]any{"pid": "12"}, "pid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			re, data := rpcErr(t, c.Call(context.Background(), tc.method, tc.params, nil))
			assert.Equal(t, rpc.CodeInvalidParams, re.Code, re.Message)
			assert.Equal(t, tc.field, data["field"], re.Message)
		})
	}
}
