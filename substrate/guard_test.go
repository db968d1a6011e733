package substrate_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/substrate"
)

func TestACreateOnlyWriteCreatesOnlyAConfirmedMissingPath(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	dir := t.TempDir()

	fresh := filepath.Join(dir, "new", "file.txt")
	require.NoError(t, substrate.WriteTextCreateOnly(ctx, l, fresh, "first"))
	got, err := os.ReadFile(fresh)
	require.NoError(t, err)
	assert.Equal(t, "first", string(got))

	err = substrate.WriteTextCreateOnly(ctx, l, fresh, "second")
	require.ErrorIs(t, err, substrate.ErrPathExists)
	assert.Contains(t, err.Error(), fresh)
	got, _ = os.ReadFile(fresh)
	assert.Equal(t, "first", string(got), "an existing file is never overwritten")

	dangling := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone"), dangling))
	require.ErrorIs(t, substrate.WriteTextCreateOnly(ctx, l, dangling, "x"), substrate.ErrPathExists)
	_, err = os.Lstat(filepath.Join(dir, "gone"))
	assert.True(t, os.IsNotExist(err), "the write did not follow the dangling link")
}

// unsure is a substrate that cannot tell whether a path exists and records
// any write that slips through.
type unsure struct {
	bare
	state  api.PathState
	writes []string
}

func (u *unsure) DisplayPath(p string) string { return p }
func (u *unsure) PathState(context.Context, string) api.PathState {
	return u.state
}
func (u *unsure) WriteText(_ context.Context, path, _ string) error {
	u.writes = append(u.writes, path)
	return nil
}

func TestACreateOnlyWriteFailsClosedWhenThePathStateIsUnknown(t *testing.T) {
	u := &unsure{state: api.PathState{Status: api.PathUnknown, Reason: "permission denied"}}
	err := substrate.WriteTextCreateOnly(context.Background(), u, "/vm/file", "x")
	require.ErrorIs(t, err, substrate.ErrPathStateUnknown)
	assert.Contains(t, err.Error(), "/vm/file")
	assert.Contains(t, err.Error(), "permission denied")
	assert.Empty(t, u.writes)

	u.state = api.PathState{Status: api.PathMissing}
	require.NoError(t, substrate.WriteTextCreateOnly(context.Background(), u, "/vm/file", "x"))
	assert.Equal(t, []string{"/vm/file"}, u.writes)
}

func TestReadOnlyRefusesEveryChangeNamingTheOperationTargetAndSetting(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t)
	path := filepath.Join(t.TempDir(), "f.txt")
	require.NoError(t, l.WriteText(ctx, path, "kept"))
	ro := substrate.ReadOnly(l)

	refusals := []struct {
		op, target string
		do         func() error
	}{
		{"run_command", `"rm -rf /tmp/x"`, func() error { _, err := ro.RunCommand(ctx, "rm -rf /tmp/x", time.Second); return err }},
		{"write_text", path, func() error { return ro.WriteText(ctx, path, "changed") }},
		{"write_bytes", path, func() error { return ro.WriteBytes(ctx, path, []byte("changed")) }},
		{"pty_start", `"sh"`, func() error { _, err := ro.PTYStart(ctx, "sh"); return err }},
		{"pty_input", "pty 12", func() error { return ro.PTYInput(ctx, 12, "x") }},
		{"write_text", path, func() error { return substrate.WriteTextCreateOnly(ctx, ro, path+".new", "x") }},
	}
	for _, r := range refusals {
		err := r.do()
		require.ErrorIs(t, err, substrate.ErrReadOnly, r.op)
		assert.Contains(t, err.Error(), r.op)
		assert.Contains(t, err.Error(), r.target)
		assert.Contains(t, err.Error(), "[substrate] read_only = true")
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "kept", string(got))
	_, err = os.Stat(path + ".new")
	assert.True(t, os.IsNotExist(err))

	text, err := ro.ReadText(ctx, path)
	require.NoError(t, err)
	assert.Equal(t, "kept", text)
	b, err := ro.ReadBytes(ctx, path, 1, 2)
	require.NoError(t, err)
	assert.Equal(t, []byte("ep"), b)
	assert.Equal(t, api.PathExists, ro.PathState(ctx, path).Status)
	assert.Equal(t, "local", ro.Name())
	assert.True(t, ro.IsLocal())
}
