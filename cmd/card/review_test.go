package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon/daemontest"
)

// card chat --worktree keeps the agent out of the checkout, says what each
// turn changed, and leaves the worktree for card diff, apply, rewind and
// discard once the chat is over.
func TestAChatInAWorktreeIsReviewedWithDiffApplyRewindAndDiscard(t *testing.T) {
	fixture := daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-success.jsonl")
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", fixture)
	claude.TeachWriting(t)
	d := agentDaemon(t, agent.ClaudeCode, claude.Path)
	repo := daemontest.GitRepo(t, "cli")
	var out, errOut bytes.Buffer
	code := run([]string{"chat", "claude-code", "--home", d.Home, "--cwd", repo, "--mode", "edit", "--worktree"},
		strings.NewReader("WRITE one.txt the first\nWRITE two.txt the second\n"), &out, &errOut)
	require.Equal(t, exitOK, code, errOut.String())
	said := errOut.String()
	assert.Contains(t, said, "not in your checkout")
	assert.Contains(t, said, "turn 1 changed 1 files (+1 -0): one.txt")
	assert.Contains(t, said, "turn 2 changed 1 files (+1 -0): two.txt")
	assert.Contains(t, said, "its worktree stays")
	assert.NoFileExists(t, filepath.Join(repo, "one.txt"))
	m := regexp.MustCompile(`session (ses_[0-9A-Z]+) with`).FindStringSubmatch(said)
	require.NotNil(t, m, said)
	id := m[1]

	code, stat, _ := runCLI("diff", id, "--home", d.Home, "--stat")
	require.Equal(t, exitOK, code)
	assert.Regexp(t, `added\s+\+1 -0\s+one.txt\nadded\s+\+1 -0\s+two.txt\n2 files changed, \+2 -0\n`, stat)
	code, patch, _ := runCLI("diff", id, "--home", d.Home, "--turn", "2")
	require.Equal(t, exitOK, code)
	assert.Contains(t, patch, "+++ b/two.txt\n@@ -0,0 +1 @@\n+the second\n")
	assert.NotContains(t, patch, "one.txt")
	code, _, errs := runCLI("diff", id, "--home", d.Home, "--max-bytes", "60")
	require.Equal(t, exitOK, code)
	assert.Contains(t, errs, "cut at 60 bytes; 2 files changed in all")

	code, applied, errs := runCLI("apply", id, "--home", d.Home)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, applied, "applied 2 files to "+repo+", uncommitted")
	b, err := os.ReadFile(filepath.Join(repo, "two.txt"))
	require.NoError(t, err)
	assert.Equal(t, "the second\n", string(b))
	code, _, errs = runCLI("apply", id, "--home", d.Home)
	assert.Equal(t, exitRefused, code, "applying twice conflicts")
	assert.Contains(t, errs, "one.txt (already exists in working directory)")

	code, said2, errs := runCLI("rewind", id, "1", "--home", d.Home)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, said2, "back to turn 1")
	assert.Contains(t, errs, "still remembers")
	code, _, errs = runCLI("rewind", id, "one", "--home", d.Home)
	assert.Equal(t, exitUsage, code, errs)
	code, gone, errs := runCLI("discard", id, "--home", d.Home)
	require.Equal(t, exitOK, code, errs)
	assert.Contains(t, gone, "its worktree and branch are gone")
	assert.Empty(t, daemontest.Git(t, repo, "branch", "--list", "card/*"))
	code, _, errs = runCLI("diff", id, "--home", d.Home)
	assert.Equal(t, exitRefused, code)
	assert.Contains(t, errs, "no worktree any more")
}
