package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/fakeacp"
)

// An agent card.toml declares is served by `card acp <id>` like a
// built-in one: the command reads the declaration from the home's
// card.toml, and the daemon runs the agent over ACP behind it.
func TestCardACPServesAnAgentCardTomlDeclares(t *testing.T) {
	const id = "fake-cli-acp"
	bin := fakeacp.Install(t, t.TempDir(), "fake-acp")
	t.Cleanup(func() { agent.Forget(id) })
	d := daemontest.Start(t, daemontest.Options{
		Config:  "login_shell_path = false\n[agents." + id + "]\nname = \"Fake ACP\"\ncommand = [\"fake-acp\", \"--acp\"]\n",
		Environ: []string{agent.PinEnvOf(id) + "=" + bin, "HOME=" + t.TempDir()},
	})
	in, feed := io.Pipe()
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run([]string{"acp", id, "--home", d.Home}, in, out, errOut) }()
	t.Cleanup(func() { _ = feed.Close() })
	fmt.Fprintln(feed, acpInitialize)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"id":1`) }, 20*time.Second, 10*time.Millisecond, errOut.String())
	fmt.Fprintf(feed, `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`+"\n", t.TempDir())
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"id":2`) }, 20*time.Second, 10*time.Millisecond, errOut.String())
	var sid string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, `"id":2`) {
			_, rest, ok := strings.Cut(line, `"sessionId":"`)
			require.True(t, ok, line)
			sid, _, _ = strings.Cut(rest, `"`)
		}
	}
	fmt.Fprintf(feed, `{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":%q,"prompt":[{"type":"text","text":"hello"}]}}`+"\n", sid)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"id":3`) }, 30*time.Second, 10*time.Millisecond, out.String()+errOut.String())
	assert.Contains(t, out.String(), "turn 1: hello", "the declared agent's answer reached the editor")
	assert.Contains(t, out.String(), `"stopReason":"end_turn"`)
	require.NoError(t, feed.Close())
	assert.Equal(t, exitOK, exitOf(t, done), errOut.String())
}

// `card detect` with no daemon running detects in this process from the
// home's card.toml, so the agents it declares are listed too, as the
// daemon's agents.detect lists them.
func TestDetectWithoutADaemonListsTheAgentsCardTomlDeclares(t *testing.T) {
	const id = "fake-cli-detect"
	bin := fakeacp.Install(t, t.TempDir(), "fake-acp")
	t.Cleanup(func() { agent.Forget(id) })
	t.Setenv(agent.PinEnvOf(id), bin)
	for _, v := range []string{"CAR_CODEX_BIN", "CAR_CLAUDE_CODE_BIN", "CAR_GEMINI_BIN", "CAR_COPILOT_BIN", "CAR_DROID_BIN", "CAR_PI_BIN"} {
		t.Setenv(v, "")
	}
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("HOME", t.TempDir())
	home := filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.MkdirAll(home, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, "card.toml"),
		[]byte("[agents."+id+"]\nname = \"Fake ACP\"\ncommand = [\"fake-acp\", \"--acp\"]\nversion_args = [\"--version\"]\n"), 0o600))
	var out, errOut bytes.Buffer
	code := run([]string{"detect", "--json", "--home", home}, nil, &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	var specs []api.ExternalAgentSpec
	require.NoError(t, json.Unmarshal(out.Bytes(), &specs), out.String())
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.ID)
		if s.ID == id {
			assert.Equal(t, fakeacp.Version, s.Version)
			assert.Equal(t, api.NotEnforced, s.ReadOnlyEnforcement)
		}
	}
	assert.Contains(t, ids, id)
}
