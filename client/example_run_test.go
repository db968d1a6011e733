package client_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon/daemontest"
)

// The examples dial the daemon of $CARD_HOME, as a program would, so they
// have no fixed output to check; these tests run each against a test
// daemon with stand-in agents and check what it printed, so an example
// that stops working fails here instead of misleading a reader.

// runExample runs example in the working dir cwd with $CARD_HOME at home,
// and gives what it printed.
func runExample(t *testing.T, home, cwd string, example func()) string {
	t.Helper()
	t.Setenv("CARD_HOME", home)
	t.Chdir(cwd)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	func() {
		defer func() { os.Stdout = saved }()
		example()
	}()
	require.NoError(t, w.Close())
	s := <-out
	require.NoError(t, r.Close())
	t.Logf("the example printed:\n%s", s)
	assert.NotContains(t, s, "error:")
	return s
}

func TestTheDetectExampleListsTheAgentsTheDaemonFound(t *testing.T) {
	d := startDaemon(t, daemontest.Options{NoClient: true})
	out := runExample(t, d.Home, t.TempDir(), ExampleClient_Detect)
	assert.Contains(t, out, agent.ClaudeCode+" 2.1.197 at ")
}

func TestTheStreamExamplePrintsTheRunsTextAsItComes(t *testing.T) {
	d := startDaemon(t, daemontest.Options{NoClient: true})
	out := runExample(t, d.Home, t.TempDir(), ExampleClient_Stream)
	assert.Equal(t, "PONG from fake anthropic\nrun succeeded\n", out)
}

func TestTheApprovalExampleDeniesTheShellAndAllowsTheWrite(t *testing.T) {
	// The stand-in's task is a script of tool calls; the example's task is
	// written for a person, so a wrapper hands the stand-in the script
	// instead (after reading the prompt, as the real CLI does).
	cwd := t.TempDir()
	note := filepath.Join(cwd, "notes.txt")
	script := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf("TOOL Write {\"file_path\":%q,\"content\":\"hi\\n\"}\nTOOL Bash {\"command\":\"echo shell > %s\"}\n", note, note)), 0o600))
	claude := daemontest.Script(t, "claude", fmt.Sprintf("cat >/dev/null\nexec %q \"$@\" < %q\n", daemontest.AskingClaude(t), script))
	d := daemontest.Start(t, daemontest.Options{NoClient: true, Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: claude}})
	out := runExample(t, d.Home, cwd, ExampleOptions_onApprove)
	assert.Equal(t, 2, strings.Count(out, "claude-code asks: "), "one question per tool call")
	assert.True(t, strings.HasSuffix(out, "run succeeded\n"))
	b, err := os.ReadFile(note)
	require.NoError(t, err, "the allowed Write ran")
	assert.Equal(t, "hi\n", string(b), "and the denied shell command after it did not")
}
