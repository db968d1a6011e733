package guard

import (
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envMu serialises the tests that change the process environment. The env is
// process-global; t.Setenv already refuses parallel tests, and the lock keeps
// that true if someone adds t.Parallel to one of these later.
var envMu sync.Mutex

// withEnv sets (or, for nil, unsets) the guard's variables for one test and
// restores the previous values when it ends.
func withEnv(t *testing.T, ancestry, maxChain *string) {
	t.Helper()
	envMu.Lock()
	t.Cleanup(envMu.Unlock)
	for name, v := range map[string]*string{AncestryEnv: ancestry, MaxChainEnv: maxChain} {
		t.Setenv(name, "") // registers the restore of the previous value
		if v == nil {
			require.NoError(t, os.Unsetenv(name))
		} else {
			require.NoError(t, os.Setenv(name, *v))
		}
	}
}

func ptr(s string) *string { return &s }

func TestTheEnvPlumbingIsWiredEndToEnd(t *testing.T) {
	// Proves the wrappers read CAR_INVOKED_BY, not just that the pure logic is
	// right — the wiring is where this would silently fail.
	t.Run("unset", func(t *testing.T) {
		withEnv(t, nil, nil)
		assert.Empty(t, SpawnBlockReason("claude-code"))
		assert.Equal(t, "claude-code", ChildAncestry("claude-code"))
		assert.Equal(t, Snapshot{Ancestry: []string{}, MaxChain: DefaultMaxChain}, FromEnv())
	})
	t.Run("set", func(t *testing.T) {
		withEnv(t, ptr("claude-code"), nil)
		assert.Contains(t, SpawnBlockReason("claude-code"), "already in this invocation chain")
		assert.Empty(t, SpawnBlockReason("codex"))
		// The child carries the chain forward, which is what makes the guard
		// work more than one level down.
		assert.Equal(t, "claude-code,codex", ChildAncestry("codex"))
	})
	t.Run("max chain", func(t *testing.T) {
		withEnv(t, ptr("Claude-Code, codex"), ptr("2"))
		assert.Equal(t, Snapshot{Ancestry: []string{"claude-code", "codex"}, MaxChain: 2}, FromEnv())
		assert.Contains(t, SpawnBlockReason("gemini"), "at the limit of 2")
	})
	t.Run("unparsable max chain", func(t *testing.T) {
		withEnv(t, nil, ptr("lots"))
		assert.Equal(t, DefaultMaxChain, FromEnv().MaxChain)
	})
}

func TestASnapshotDoesNotMoveWhenTheEnvironmentChangesLater(t *testing.T) {
	withEnv(t, ptr("claude-code"), ptr("5"))
	snap := FromEnv()
	require.NoError(t, os.Setenv(AncestryEnv, "codex"))
	require.NoError(t, os.Setenv(MaxChainEnv, "1"))
	refusal, seeded := snap.Check("claude-code", "")
	require.NotNil(t, refusal)
	assert.Equal(t, []string{"claude-code"}, seeded)
	assert.Equal(t, 5, refusal.MaxChain)
	refusal, _ = snap.Check("codex", "")
	assert.Nil(t, refusal)
}

func TestAPerCallCallerNamesItselfOverAnEmptyEnvironment(t *testing.T) {
	withEnv(t, nil, nil)
	snap := FromEnv()
	assert.Empty(t, snap.Seed(""))
	refusal, seeded := snap.Check("claude-code", "Claude-Code")
	assert.Equal(t, []string{"claude-code"}, seeded)
	require.NotNil(t, refusal)
	refusal, _ = snap.Check("codex", "Claude-Code")
	assert.Nil(t, refusal)
}
