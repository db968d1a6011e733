package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
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
	var specs []api.ExternalAgentSpec
	require.NoError(t, json.Unmarshal(out.Bytes(), &specs), out.String())
	require.Len(t, specs, 1)
	assert.Equal(t, "codex", specs[0].ID)
	assert.Equal(t, "0.171.0", specs[0].Version)
	require.NotNil(t, specs[0].Health)
	assert.Equal(t, api.StatusReady, specs[0].Health.Status)

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

// A machine with none of the CLIs is told how to install each, by both
// commands that list agents.
func TestDetectWithNothingFoundSaysHowToInstallEach(t *testing.T) {
	for _, a := range agent.All() {
		t.Setenv(a.PinEnv, "")
	}
	t.Setenv("PATH", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	home := filepath.Join(t.TempDir(), "card")
	for _, cmd := range []string{"detect", "health"} {
		code, out, errOut := runCLI(cmd, "--home", home)
		require.Equal(t, exitOK, code, errOut)
		text := words(out)
		assert.Contains(t, text, "No agent CLI found")
		for _, a := range agent.All() {
			assert.Contains(t, text, a.ID+" "+a.Binary+" "+strings.TrimPrefix(a.InstallHint, "install it with "), cmd)
		}
		assert.Contains(t, text, `bin = "/path/to/claude" under [adapters.claude-code] in card.toml`, "how to pin one installed elsewhere")
		assertFits(t, out)
	}
}

// A long reason is wrapped under its agent's row; the table stays within
// 100 columns.
func TestTheDetectTableFitsAHundredColumns(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("very-long-directory-name/", 4), "codex")
	t.Setenv("CAR_CODEX_BIN", long)
	t.Setenv("CAR_CLAUDE_CODE_BIN", "")
	t.Setenv("CAR_GEMINI_BIN", "")
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("HOME", t.TempDir())
	home := filepath.Join(t.TempDir(), "card")
	for _, args := range [][]string{{"detect"}, {"detect", "--health"}, {"health"}} {
		code, out, errOut := runCLI(append(args, "--home", home)...)
		require.Equal(t, exitOK, code, errOut)
		assert.Contains(t, words(out), "pinned by CAR_CODEX_BIN="+long[:20], "%v: the reason is there, wrapped", args)
		assert.Contains(t, words(out), "but that file does not exist", "%v", args)
		assertFits(t, out)
	}
}

// words is out with its wrapping undone.
func words(out string) string { return strings.Join(strings.Fields(out), " ") }

func assertFits(t *testing.T, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		assert.LessOrEqual(t, len([]rune(l)), tableWidth, "%q", l)
	}
}
