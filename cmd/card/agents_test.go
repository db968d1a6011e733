package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/detect"
)

func TestDetectWithoutADaemonWorksInProcessAndSaysSo(t *testing.T) {
	t.Setenv("CAR_CODEX_BIN", daemontest.Script(t, "codex", `case "$1" in --version) echo "codex-cli 0.171.0";; login) echo "Logged in using ChatGPT" >&2;; esac`))
	t.Setenv("CAR_CLAUDE_CODE_BIN", "")
	t.Setenv("CAR_GEMINI_BIN", "")
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("HOME", t.TempDir())
	home := filepath.Join(t.TempDir(), "card")
	var out, errOut bytes.Buffer
	code := run([]string{"detect", "--json", "--health", "--home", home}, nil, &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	assert.Contains(t, errOut.String(), "no daemon running for home "+home)
	var specs []detect.ExternalAgentSpec
	require.NoError(t, json.Unmarshal(out.Bytes(), &specs), out.String())
	require.Len(t, specs, 1)
	assert.Equal(t, "codex", specs[0].ID)
	assert.Equal(t, "0.171.0", specs[0].Version)
	require.NotNil(t, specs[0].Health)
	assert.Equal(t, detect.StatusReady, specs[0].Health.Status)

	out.Reset()
	code = run([]string{"detect", "--home", home}, nil, &out, &errOut)
	require.Equal(t, exitOK, code)
	assert.Contains(t, out.String(), "codex")
	assert.Contains(t, out.String(), "0.171.0")
	assert.Contains(t, out.String(), "os_sandbox")
}

func TestHealthOfOneAgentExitsNonZeroWhenItIsNotReady(t *testing.T) {
	t.Setenv("CAR_CODEX_BIN", daemontest.Script(t, "codex", `case "$1" in --version) echo "codex-cli 0.171.0";; login) echo "Not logged in" >&2; exit 1;; esac`))
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("HOME", t.TempDir())
	var out, errOut bytes.Buffer
	code := run([]string{"health", "codex", "--home", filepath.Join(t.TempDir(), "card")}, nil, &out, &errOut)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, out.String(), "not_configured")
}
