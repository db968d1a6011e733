package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// Ids and their order are wire facts: clients invoke by id, and detection
// reports adapters in this order.
func TestTheAdaptersAndTheirOrderAreTheShippedOnes(t *testing.T) {
	assert.Equal(t, []string{"claude-code", "codex", "gemini", "copilot", "droid", "pi", "opencode", "qwen-code"}, IDs())
	all := All()
	require.Len(t, all, len(IDs()))
	for i, a := range all {
		assert.Equal(t, IDs()[i], a.ID)
		assert.NoError(t, a.check())
		assert.NotEmpty(t, a.OwnedFlags, "%s: a builder that sets flags from the mode owns them", a.ID)
	}
}

func TestEveryAdapterSaysHowItsReadOnlyModeIsEnforced(t *testing.T) {
	want := map[string]api.ReadOnlyEnforcement{
		ClaudeCode: api.EnforcedByAllowlist, Codex: api.EnforcedByOSSandbox, Gemini: api.EnforcedByAgentDefault,
		Copilot: api.EnforcedByAllowlist, Droid: api.EnforcedByAgentDefault, Pi: api.NotEnforced,
		OpenCode: api.EnforcedByAllowlist, QwenCode: api.EnforcedByAgentDefault,
	}
	for _, id := range IDs() {
		a, ok := Lookup(id)
		require.True(t, ok, id)
		assert.Equal(t, want[id], a.ReadOnly, id)
	}
	for e, wire := range map[api.ReadOnlyEnforcement]string{api.EnforcedByOSSandbox: "os_sandbox", api.EnforcedByAllowlist: "allowlist", api.EnforcedByAgentDefault: "agent_default", api.NotEnforced: "not_enforced"} {
		assert.Equal(t, wire, string(e))
		assert.True(t, e.Valid(), wire)
	}
	assert.False(t, api.ReadOnlyEnforcement("").Valid())
	assert.False(t, api.ReadOnlyEnforcement("sandbox").Valid())
}

func TestAnUnknownIDIsNotFound(t *testing.T) {
	_, ok := Lookup("cursor")
	assert.False(t, ok)
	_, ok = Lookup("Codex")
	assert.False(t, ok, "ids are exact")
}

// A caller that edits what it was handed must not change the definition
// every other caller reads.
func TestCallersGetCopiesOfTheOwnedFlags(t *testing.T) {
	a, _ := Lookup(Codex)
	a.OwnedFlags[0] = "--changed"
	all := All()
	all[1].OwnedFlags[1] = "--changed"
	again, _ := Lookup(Codex)
	assert.Equal(t, "--sandbox", again.OwnedFlags[0])
	assert.Equal(t, "-s", again.OwnedFlags[1])
}

func TestAnIncompleteOrRepeatedDefinitionStopsTheProgram(t *testing.T) {
	noPin := pi
	noPin.PinEnv = ""
	assert.PanicsWithValue(t, `agent: adapter "pi" has no PinEnv`, func() { mustValid([]Adapter{claudeCode, noPin}) })

	badRO := codex
	badRO.ReadOnly = "sandbox"
	assert.PanicsWithValue(t, `agent: adapter "codex" has read-only enforcement "sandbox", not one of the four kinds`,
		func() { mustValid([]Adapter{badRO}) })

	assert.PanicsWithValue(t, "agent: adapter defined twice: codex", func() { mustValid([]Adapter{codex, gemini, codex}) })
	assert.NotPanics(t, func() { mustValid([]Adapter{claudeCode, codex, gemini, copilot, droid, pi}) })
}

// Claude Code (its permission tool), Gemini CLI and Copilot CLI (ACP) and
// Codex (its app-server), Droid (stream-jsonrpc), Pi (RPC mode with card's gate),
// OpenCode and Qwen Code (ACP) can ask today; every other adapter says why not, and the definition check
// refuses one that claims both or neither.
func TestEachAdapterEitherAsksOrSaysWhyItCannot(t *testing.T) {
	asks := map[string]bool{ClaudeCode: true, Gemini: true, Copilot: true, Codex: true, Droid: true, Pi: true, OpenCode: true, QwenCode: true}
	for _, a := range All() {
		if asks[a.ID] {
			assert.True(t, a.Capabilities.Ask, a.ID)
			assert.Empty(t, a.NoAsk, a.ID)
			continue
		}
		assert.False(t, a.Capabilities.Ask, a.ID)
		assert.Contains(t, a.NoAsk, "card does not", "%s: the reason names what is missing", a.ID)
	}
	both := claudeCode
	both.NoAsk = "no"
	assert.PanicsWithValue(t, `agent: adapter "claude-code" must either ask (Capabilities.Ask) or say why it cannot (NoAsk), not both or neither`,
		func() { mustValid([]Adapter{both}) })
	neither := pi
	neither.Capabilities.Ask = false
	assert.Panics(t, func() { mustValid([]Adapter{neither}) })
}

// Droid is the one adapter whose headless mode cannot carry an image; it
// says why, and the definition check refuses one that claims both or neither.
func TestEachAdapterEitherTakesImagesOrSaysWhyItCannot(t *testing.T) {
	for _, a := range All() {
		if a.ID == Droid {
			assert.False(t, a.Capabilities.Images, a.ID)
			assert.Contains(t, a.NoImages, "stream-jsonrpc", "%s: the reason names the mode that could", a.ID)
			continue
		}
		assert.True(t, a.Capabilities.Images, a.ID)
		assert.Empty(t, a.NoImages, a.ID)
	}
	both := claudeCode
	both.NoImages = "no"
	assert.PanicsWithValue(t, `agent: adapter "claude-code" must either take images (Capabilities.Images) or say why it cannot (NoImages), not both or neither`,
		func() { mustValid([]Adapter{both}) })
	neither := droid
	neither.NoImages = ""
	assert.Panics(t, func() { mustValid([]Adapter{neither}) })
}

// The thought levels an editor is offered are levels card validates and
// hands to the CLI; Gemini CLI, which has no effort flag, offers none.
func TestEveryAdaptersEffortsAreCardsEffortLevels(t *testing.T) {
	for _, a := range All() {
		for _, e := range a.Efforts {
			assert.Contains(t, effortsAll, e, a.ID)
		}
	}
	g, _ := Lookup(Gemini)
	assert.Empty(t, g.Efforts)
	c, _ := Lookup(ClaudeCode)
	assert.Equal(t, effortsAll, c.Efforts)
}
