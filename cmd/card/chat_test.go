package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

func TestChatRunsEachLineAsATurnOfOneConversationAndClosesAtEndOfInput(t *testing.T) {
	fixture := daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-success.jsonl")
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", fixture)
	d := agentDaemon(t, agent.ClaudeCode, claude.Path)
	var out, errOut bytes.Buffer
	code := run([]string{"chat", "claude-code", "--home", d.Home, "--cwd", t.TempDir()},
		strings.NewReader("turn one\n\nturn two\n"), &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	assert.Equal(t, "PONG from the anthropic stand-in\nPONG from the anthropic stand-in\n", out.String())
	assert.Contains(t, errOut.String(), "closed")
	assert.NotContains(t, errOut.String(), "own session id", "a chat names one session: card's")
	ids := regexp.MustCompile(`ses_[0-9A-Z]+`).FindAllString(errOut.String(), -1)
	require.NotEmpty(t, ids)
	for _, id := range ids {
		assert.Equal(t, ids[0], id, "every session id printed is the chat's")
	}

	code, listed, _ := runCLI("runs", "--home", d.Home, "--json")
	require.Equal(t, exitOK, code)
	var runs []api.Run
	require.NoError(t, json.Unmarshal([]byte(listed), &runs))
	require.Len(t, runs, 2, "the empty line is no turn")
	slices.Reverse(runs)
	for i, r := range runs {
		assert.Equal(t, i+1, r.SessionTurn)
		assert.Equal(t, runs[0].CardSessionID, r.CardSessionID)
	}
	args, stdin := claude.Received(t, runs[1].RunID)
	assert.Equal(t, "turn two", stdin)
	assert.Contains(t, args, "--resume", "turn two continues turn one's conversation")
}

// signedInDaemon is a daemon whose Claude Code is the asking fake with an
// API key in the daemon's environment, so its sign-in check passes.
func signedInDaemon(t *testing.T, environ ...string) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, daemontest.Options{
		Config:   "login_shell_path = false\n",
		Agents:   map[string]string{agent.ClaudeCode: daemontest.AskingClaude(t)},
		Environ:  environ,
		Logger:   zap.NewNop(),
		NoClient: true,
	})
}

// chatFeed types lines into a running card chat; a chat that has ended
// fails the test with what it printed instead of blocking the write.
type chatFeed struct {
	t      *testing.T
	w      *io.PipeWriter
	done   chan int
	errOut *syncBuffer
}

func (c chatFeed) line(s string) {
	c.t.Helper()
	wrote := make(chan error, 1)
	go func() { _, err := fmt.Fprintln(c.w, s); wrote <- err }()
	select {
	case err := <-wrote:
		require.NoError(c.t, err)
	case code := <-c.done:
		c.t.Fatalf("card chat ended (exit %d) before reading %q: %s", code, s, c.errOut.String())
	case <-time.After(20 * time.Second):
		c.t.Fatalf("card chat did not read %q: %s", s, c.errOut.String())
	}
}

func startChat(t *testing.T, args ...string) (chatFeed, *syncBuffer) {
	in, feed := io.Pipe()
	t.Cleanup(func() { in.Close() })
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(append([]string{"chat"}, args...), in, &out, &errOut) }()
	return chatFeed{t: t, w: feed, done: done, errOut: &errOut}, &errOut
}

func TestChatAsksTheAgentsQuestionsAndAnswersThemYesOrNo(t *testing.T) {
	d := signedInDaemon(t, "ANTHROPIC_API_KEY=sk-test")
	cwd := t.TempDir()
	feed, errOut := startChat(t, "claude-code", "--home", d.Home, "--cwd", cwd, "--mode", "ask")
	feed.line(`TOOL Bash {"command":"echo yes > yes.txt"}`)
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "allow?") }, 20*time.Second, 10*time.Millisecond, errOut.String())
	feed.line("y")
	require.Eventually(t, func() bool { return strings.Count(errOut.String(), "succeeded") == 1 }, 20*time.Second, 10*time.Millisecond, errOut.String())
	feed.line(`TOOL Bash {"command":"echo no > no.txt"}`)
	require.Eventually(t, func() bool { return strings.Count(errOut.String(), "allow?") == 2 }, 20*time.Second, 10*time.Millisecond, errOut.String())
	feed.line("n")
	require.NoError(t, feed.w.Close())
	select {
	case code := <-feed.done:
		assert.Equal(t, exitOK, code, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("card chat did not end at end of input")
	}
	assert.FileExists(t, filepath.Join(cwd, "yes.txt"))
	_, err := os.Stat(filepath.Join(cwd, "no.txt"))
	assert.True(t, os.IsNotExist(err), "a denied call ran")
}

// A chat with an agent whose sign-in check says no would only fail at its
// first prompt, after the person typed it: it is refused before a session
// starts, with the check's reason, unless the person says to go on.
func TestChatRefusesAnAgentWhoseSignInCheckSaysItIsSignedOut(t *testing.T) {
	d := signedInDaemon(t) // no API key anywhere: the fake's status says so
	feed, errOut := startChat(t, "claude-code", "--home", d.Home, "--cwd", t.TempDir())
	select {
	case code := <-feed.done:
		assert.Equal(t, exitRefused, code)
	case <-time.After(30 * time.Second):
		t.Fatal("card chat started a session with a signed-out agent")
	}
	assert.Contains(t, errOut.String(), "claude-code is not ready (not_configured)")
	assert.Contains(t, errOut.String(), "ANTHROPIC_API_KEY", "the reason says how to sign in")
	assert.Contains(t, errOut.String(), "--skip-health-check")
	code, listed, _ := runCLI("runs", "--home", d.Home, "--json")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "[]\n", listed, "nothing ran")

	feed, errOut = startChat(t, "claude-code", "--home", d.Home, "--cwd", t.TempDir(), "--skip-health-check")
	require.NoError(t, feed.w.Close())
	select {
	case code := <-feed.done:
		assert.Equal(t, exitOK, code, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("card chat --skip-health-check did not end at end of input")
	}
	assert.Contains(t, errOut.String(), "card: session ses_", "the session started")
}
