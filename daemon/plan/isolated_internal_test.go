package plan

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// The worktrees live in card's home, which no writing run may use: a run
// may use its own worktree there, given by the daemon, and nothing else,
// neither another session's worktree nor the directory that holds them.
func TestAnIsolatedRunMayWriteInItsOwnWorktreeAndNowhereElseInCardsHome(t *testing.T) {
	userHome := t.TempDir()
	cardHome := filepath.Join(userHome, ".local", "state", "card")
	own := filepath.Join(cardHome, "worktrees", "ses_A", "project")
	other := filepath.Join(cardHome, "worktrees", "ses_B", "project")
	for _, d := range []string{filepath.Join(own, "sub"), other} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	policy, err := NewCwdPolicy(nil, userHome, cardHome, nil)
	require.NoError(t, err)
	p := New(Config{Env: map[string]string{"HOME": userHome}, MaxAPIRetries: 3, StallSecs: 300, ApprovalTimeoutSecs: 120}, policy, nil)
	edit := func(cwd string) api.SessionStartParams {
		return api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", PermissionMode: "edit", Cwd: cwd, Isolation: api.IsolationWorktree}}
	}

	turn, err := p.SessionTurn(edit("/the/users/checkout"), "t", nil, Continue{Isolated: Isolated{Top: own, Dir: filepath.Join(own, "sub")}})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(own, "sub"), turn.Run.Cwd, "the turn runs in the worktree, at the cwd's subdirectory")
	assert.Equal(t, filepath.Join(own, "sub"), turn.Run.Plan.Dir)

	for name, iso := range map[string]Isolated{
		"another session's worktree":        {Top: own, Dir: other},
		"the directory holding every one":   {Top: own, Dir: filepath.Join(cardHome, "worktrees")},
		"card's home":                       {Top: own, Dir: cardHome},
		"a worktree allowed as its own top": {Top: filepath.Join(cardHome, "worktrees"), Dir: cardHome},
	} {
		_, err := p.SessionTurn(edit("/x"), "t", nil, Continue{Isolated: iso})
		var refused *CwdRefusedError
		require.ErrorAs(t, err, &refused, name)
		assert.Contains(t, []string{ruleCardHome, ruleHomeDotDir}, refused.Rule, name)
	}
	_, err = p.SessionTurn(edit(filepath.Join(own, "sub")), "t", nil, Continue{})
	var fe *api.FieldError
	require.True(t, errors.As(err, &fe), "an isolated session's turn without its worktree does not run: %v", err)
	assert.Equal(t, "isolation", fe.Field)
	plain := edit(own)
	plain.Isolation = ""
	_, err = p.SessionTurn(plain, "t", nil, Continue{})
	var refused *CwdRefusedError
	require.ErrorAs(t, err, &refused, "a client that names a worktree as its cwd gets no allowance")
	assert.Equal(t, ruleCardHome, refused.Rule)

	_, err = p.Invoke(api.InvokeParams{AgentSettings: api.AgentSettings{ID: "claude-code", Isolation: api.IsolationWorktree, Cwd: userHome}, Task: "t"})
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "isolation", fe.Field, "an invoke whose worktree was not set up is refused, never run in the cwd")
}

func TestIsolationAndBaseAreCheckedNamingTheField(t *testing.T) {
	p := New(Config{Env: map[string]string{"HOME": t.TempDir()}, MaxAPIRetries: 3, StallSecs: 300, ApprovalTimeoutSecs: 120}, CwdPolicy{}, nil)
	for _, c := range []struct {
		isolation, base, field string
	}{
		{"container", "", "isolation"},
		{"", "main", "base"},
		{"worktree", "--output=/tmp/x", "base"},
		{"worktree", "main\n", "base"},
	} {
		_, err := p.Check(api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: t.TempDir(), Isolation: c.isolation, Base: c.base}}, "", nil, Continue{})
		var fe *api.FieldError
		require.True(t, errors.As(err, &fe), "%+v: %v", c, err)
		assert.Equal(t, c.field, fe.Field, "%+v", c)
	}
	_, err := p.Check(api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code", Cwd: t.TempDir(), Isolation: "worktree", Base: "main"}}, "", nil, Continue{})
	assert.NoError(t, err, "a session's settings are judged in its cwd before its worktree is made")
}
