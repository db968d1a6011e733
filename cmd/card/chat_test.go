package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
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

	code, listed, _ := runCLI("runs", "--home", d.Home, "--json")
	require.Equal(t, exitOK, code)
	var runs []store.Run
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

func TestChatAsksTheAgentsQuestionsAndAnswersThemYesOrNo(t *testing.T) {
	d := agentDaemon(t, agent.ClaudeCode, daemontest.AskingClaude(t))
	cwd := t.TempDir()
	in, feed := io.Pipe()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"chat", "claude-code", "--home", d.Home, "--cwd", cwd, "--mode", "ask"}, in, &out, &errOut)
	}()
	fmt.Fprintf(feed, "TOOL Bash {\"command\":\"echo yes > yes.txt\"}\n")
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "allow?") }, 20*time.Second, 10*time.Millisecond, errOut.String())
	fmt.Fprintln(feed, "y")
	require.Eventually(t, func() bool { return strings.Count(errOut.String(), "succeeded") == 1 }, 20*time.Second, 10*time.Millisecond, errOut.String())
	fmt.Fprintf(feed, "TOOL Bash {\"command\":\"echo no > no.txt\"}\n")
	require.Eventually(t, func() bool { return strings.Count(errOut.String(), "allow?") == 2 }, 20*time.Second, 10*time.Millisecond, errOut.String())
	fmt.Fprintln(feed, "n")
	require.NoError(t, feed.Close())
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("card chat did not end at end of input")
	}
	assert.FileExists(t, filepath.Join(cwd, "yes.txt"))
	_, err := os.Stat(filepath.Join(cwd, "no.txt"))
	assert.True(t, os.IsNotExist(err), "a denied call ran")
}
