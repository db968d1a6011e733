package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

func TestSubstrateMethodsRoundTripOnTheLocalHost(t *testing.T) {
	c := daemontest.Start(t, daemontest.Options{}).Client
	ctx := daemontest.Context(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "sub", "note.txt")

	info, err := c.SubstrateInfo(ctx)
	require.NoError(t, err)
	assert.Equal(t, "local", info.Name)
	assert.True(t, info.Local)
	assert.False(t, info.ReadOnly)

	st, err := c.SubstratePathState(ctx, file)
	require.NoError(t, err)
	assert.Equal(t, api.PathMissing, st.Status)

	_, err = c.SubstrateWriteText(ctx, api.WriteTextParams{Path: file, Content: "hello\n", CreateOnly: true})
	require.NoError(t, err)
	text, err := c.SubstrateReadText(ctx, file)
	require.NoError(t, err)
	assert.Equal(t, "hello\n", text)

	_, err = c.SubstrateWriteText(ctx, api.WriteTextParams{Path: file, Content: "again", CreateOnly: true})
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeSubstrateFailed, re.Code, "create_only never overwrites")
	assert.Contains(t, re.Message, file)

	bin := filepath.Join(dir, "blob.bin")
	_, err = c.SubstrateWriteBytes(ctx, bin, []byte("0123456789"))
	require.NoError(t, err)
	four := int64(4)
	got, err := c.SubstrateReadBytes(ctx, api.ReadBytesParams{Path: bin, Offset: 3, Length: &four})
	require.NoError(t, err)
	assert.Equal(t, "3456", string(got))
	got, err = c.SubstrateReadBytes(ctx, api.ReadBytesParams{Path: bin, Offset: 8})
	require.NoError(t, err)
	assert.Equal(t, "89", string(got), "no length reads to the end")

	out, err := c.SubstrateRunCommand(ctx, "echo out; echo err >&2; exit 3", 0)
	require.NoError(t, err)
	assert.Equal(t, api.CommandResult{Stdout: "out\n", Stderr: "err\n", ExitCode: 3}, out)

	_, err = c.SubstrateRunCommand(ctx, "sleep 30", time.Second)
	re = rpcCode(t, err)
	assert.Equal(t, daemon.CodeSubstrateFailed, re.Code)
	assert.Equal(t, "timeout", errData(t, re)["reason"])
	assert.Contains(t, re.Message, "sleep 30")

	link := filepath.Join(dir, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere"), link))
	st, err = c.SubstratePathState(ctx, link)
	require.NoError(t, err)
	assert.Equal(t, api.PathExists, st.Status, "a dangling symlink exists")
}

func TestSubstrateLocalPTYWorksOverTheWire(t *testing.T) {
	c := daemontest.Start(t, daemontest.Options{}).Client
	ctx := daemontest.Context(t)
	pid, err := c.SubstratePTYStart(ctx, "cat")
	require.NoError(t, err)
	require.Greater(t, pid, 0)
	require.NoError(t, c.SubstratePTYResize(ctx, pid, 40, 100))
	require.NoError(t, c.SubstratePTYInput(ctx, pid, "ping-pty\n"))
	var seen strings.Builder
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(seen.String(), "ping-pty") {
		data, err := c.SubstratePTYRead(ctx, pid)
		require.NoError(t, err)
		seen.WriteString(data)
	}
	assert.Contains(t, seen.String(), "ping-pty")
	require.NoError(t, c.SubstratePTYKill(ctx, pid))
}

func TestReadOnlySubstrateRefusesExecAndWrites(t *testing.T) {
	c := daemontest.Start(t, daemontest.Options{Config: "[substrate]\nread_only = true\n"}).Client
	ctx := daemontest.Context(t)
	file := filepath.Join(t.TempDir(), "x.txt")
	calls := []struct {
		method string
		call   func() error
	}{
		{"substrate.run_command", func() error { _, err := c.SubstrateRunCommand(ctx, "touch "+file, 0); return err }},
		{"substrate.write_text", func() error {
			_, err := c.SubstrateWriteText(ctx, api.WriteTextParams{Path: file, Content: "x"})
			return err
		}},
		{"substrate.write_bytes", func() error { _, err := c.SubstrateWriteBytes(ctx, file, []byte("x")); return err }},
		{"substrate.pty_start", func() error { _, err := c.SubstratePTYStart(ctx, "sh"); return err }},
	}
	for _, call := range calls {
		t.Run(call.method, func(t *testing.T) {
			re := rpcCode(t, call.call())
			assert.Equal(t, daemon.CodeSubstrateReadOnly, re.Code)
			assert.Contains(t, re.Message, "read_only")
		})
	}
	_, err := os.Stat(file)
	assert.True(t, os.IsNotExist(err), "nothing was written")
	_, err = c.SubstratePathState(ctx, file)
	require.NoError(t, err, "reads still work")
	info, err := c.SubstrateInfo(ctx)
	require.NoError(t, err)
	assert.True(t, info.ReadOnly)
}

func TestSubstrateBadParamsNameTheField(t *testing.T) {
	c := daemontest.Start(t, daemontest.Options{}).Client
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
			// Params no typed call would send, as they are.
			re := rpcCode(t, c.Call(daemontest.Context(t), tc.method, tc.params, nil))
			assert.Equal(t, rpcclient.CodeInvalidParams, re.Code, re.Message)
			assert.Equal(t, tc.field, errData(t, re)["field"], re.Message)
		})
	}
}
