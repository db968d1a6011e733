package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/proc"
)

// login_shell_path = false drops only the login shell's PATH: a CLI in
// ~/.local/bin is still found.
func TestWithoutTheLoginShellTheWellKnownDirsAreStillSearched(t *testing.T) {
	home := daemontest.UserHome(t)
	local := filepath.Join(home, ".local", "bin")
	require.NoError(t, os.MkdirAll(local, 0o755))
	require.NoError(t, proc.WriteExecutable(filepath.Join(local, "codex"), []byte("#!/bin/sh\necho codex-cli 0.171.0\n")))
	c := daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Environ: []string{"HOME=" + home}}).Client
	specs, err := c.Detect(daemontest.Context(t), api.DetectParams{Refresh: true})
	require.NoError(t, err)
	var found *api.ExternalAgentSpec
	for i := range specs {
		if specs[i].ID == "codex" {
			found = &specs[i]
		}
	}
	require.NotNil(t, found, "%+v", specs)
	assert.Equal(t, filepath.Join(local, "codex"), found.BinaryPath)
	assert.Equal(t, api.SourceWellKnown, found.Source)
}

// A CLI installed after the daemon started, into a well-known dir that did
// not exist then, is found by agents.detect_external (and refresh).
func TestACLIInstalledAfterStartIsFoundOnRefresh(t *testing.T) {
	home := daemontest.UserHome(t)
	c := daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Environ: []string{"HOME=" + home}}).Client
	ctx := daemontest.Context(t)
	has := func(specs []api.ExternalAgentSpec) bool {
		for _, s := range specs {
			if s.ID == "codex" {
				return true
			}
		}
		return false
	}
	specs, err := c.Detect(ctx, api.DetectParams{Refresh: true})
	require.NoError(t, err)
	require.False(t, has(specs))

	local := filepath.Join(home, ".local", "bin") // `npm install -g` with prefix ~/.local
	require.NoError(t, os.MkdirAll(local, 0o755))
	require.NoError(t, proc.WriteExecutable(filepath.Join(local, "codex"), []byte("#!/bin/sh\necho codex-cli 0.171.0\n")))

	specs, err = c.ListExternal(ctx, api.DetectParams{})
	require.NoError(t, err)
	assert.False(t, has(specs), "list_external serves what was detected")
	specs, err = c.DetectExternal(ctx, api.DetectParams{})
	require.NoError(t, err)
	assert.True(t, has(specs), "detect_external finds it without a restart")
}

// A CLI on PATH under a scratch dir is not used, and the "not installed"
// reason says it was seen, where, and how to pin it.
func TestACLISkippedUnderAScratchDirIsNamedInTheReason(t *testing.T) {
	dir := t.TempDir()
	if !strings.HasPrefix(dir, "/tmp/") {
		t.Skipf("temp dir %s is not under /tmp, a default scratch dir", dir)
	}
	bin := filepath.Join(dir, "claude")
	require.NoError(t, proc.WriteExecutable(bin, []byte("#!/bin/sh\necho '2.1.197 (Claude Code)'\n")))
	c := daemontest.Start(t, daemontest.Options{Config: "login_shell_path = false\n", Environ: []string{"PATH=" + dir + ":/usr/bin:/bin"}}).Client
	ctx := daemontest.Context(t)
	_, err := c.Detect(ctx, api.DetectParams{Refresh: true})
	require.NoError(t, err)
	h, err := c.Health(ctx, "claude-code", false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusNotExecutable, h.Status)
	for _, want := range []string{bin, "scratch", "CAR_CLAUDE_CODE_BIN=" + bin, "[adapters.claude-code]"} {
		assert.Contains(t, h.Reason, want)
	}
	_, err = c.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code"}, Task: "say pong"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), bin, "the refusal names the skipped install too")
}
