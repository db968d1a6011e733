package guard

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAFreshProcessMaySpawnAnything(t *testing.T) {
	for _, adapter := range []string{"claude-code", "codex", "gemini", "copilot", "droid", "pi"} {
		assert.Nil(t, Check(adapter, nil, DefaultMaxChain), adapter)
		assert.Nil(t, Check(adapter, []string{}, DefaultMaxChain), adapter)
	}
}

func TestTheDirectCycleIsRefused(t *testing.T) {
	// Claude Code → card → claude: the case this guard exists for.
	r := Check("claude-code", []string{"claude-code"}, DefaultMaxChain)
	require.NotNil(t, r)
	assert.Equal(t, ReasonCycle, r.Reason)
	assert.Contains(t, r.Error(), "already in this invocation chain")
}

func TestTheIndirectCycleIsRefusedToo(t *testing.T) {
	// A→B→A: a single "who invoked me" value would miss this; ancestry does not.
	r := Check("claude-code", []string{"claude-code", "codex"}, DefaultMaxChain)
	require.NotNil(t, r)
	assert.Equal(t, ReasonCycle, r.Reason)
}

func TestAGenuineChainOfDistinctAgentsIsAllowed(t *testing.T) {
	// Why this is ancestry and not a counter: distinct hops are delegation.
	assert.Nil(t, Check("gemini", []string{"claude-code", "codex"}, DefaultMaxChain))
}

func TestTheChainLimitStopsANonRepeatingFanOut(t *testing.T) {
	r := Check("gemini", []string{"claude-code", "codex", "other"}, 3)
	require.NotNil(t, r)
	assert.Equal(t, ReasonDepth, r.Reason)
	assert.Equal(t, 3, r.MaxChain)
	assert.Contains(t, r.Error(), "at the limit of 3")
	assert.Contains(t, r.Error(), MaxChainEnv)
}

func TestACycleIsReportedEvenWhenTheChainIsAlsoAtTheLimit(t *testing.T) {
	r := Check("codex", []string{"claude-code", "codex", "gemini"}, 3)
	require.NotNil(t, r)
	assert.Equal(t, ReasonCycle, r.Reason, "the loop is the more useful thing to hear")
}

func TestAZeroOrNegativeLimitMeansTheDefaultNotRefuseEverything(t *testing.T) {
	for _, maxChain := range []int{0, -1} {
		assert.Nil(t, Check("gemini", []string{"claude-code", "codex"}, maxChain))
		r := Check("gemini", []string{"a", "b", "c"}, maxChain)
		require.NotNil(t, r)
		assert.Equal(t, DefaultMaxChain, r.MaxChain)
	}
}

func TestAncestryParsingToleratesWhitespaceCaseAndEmpties(t *testing.T) {
	cases := []struct {
		raw  string
		want []string
	}{
		{" Claude-Code , ,codex ", []string{"claude-code", "codex"}},
		{"", []string{}},
		{",,,", []string{}},
		{"  ", []string{}},
		{"GEMINI", []string{"gemini"}},
		{"a,a", []string{"a", "a"}},
		{"\tcodex\n", []string{"codex"}},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, ParseAncestry(c.raw), "%q", c.raw)
	}
}

func TestMaxChainParsingFallsBackToTheDefault(t *testing.T) {
	cases := []struct {
		raw  string
		want int
	}{
		{"", DefaultMaxChain},
		{"five", DefaultMaxChain},
		{"0", DefaultMaxChain},
		{"-2", DefaultMaxChain},
		{"2.5", DefaultMaxChain},
		{"5", 5},
		{" 7 ", 7},
		{"1", 1},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, ParseMaxChain(c.raw), "%q", c.raw)
	}
}

func TestAdapterIDsMatchCaseInsensitively(t *testing.T) {
	// A host setting CAR_INVOKED_BY=Claude-Code must not slip past the guard
	// on capitalization: not through parsing, and not through an ancestry
	// handed to Check unparsed (where a case-sensitive compare would let it
	// through).
	assert.NotNil(t, Check("claude-code", ParseAncestry("CLAUDE-CODE"), 3))
	assert.NotNil(t, Check("claude-code", []string{"CLAUDE-CODE"}, 3))
	assert.NotNil(t, Check(" Claude-Code ", []string{"claude-code"}, 3))
}

func TestTheRefusalNamesTheChainAndTheEscapeHatch(t *testing.T) {
	// An operator hitting this needs to know what looped and what to do.
	r := Check("codex", []string{"claude-code", "codex"}, 3)
	require.NotNil(t, r)
	msg := r.Error()
	assert.Contains(t, msg, `"codex"`)
	assert.Contains(t, msg, "claude-code → codex")
	assert.Contains(t, msg, AncestryEnv)
}

func TestTheRefusalIsAnErrorWithWireReadyData(t *testing.T) {
	var err error = Check("codex", []string{"codex"}, 4)
	require.Error(t, err)
	var data map[string]any
	raw, jerr := json.Marshal(err)
	require.NoError(t, jerr)
	require.NoError(t, json.Unmarshal(raw, &data))
	assert.Equal(t, map[string]any{
		"adapter": "codex", "ancestry": []any{"codex"}, "max_chain": float64(4), "reason": "cycle",
	}, data)
}

func TestTheRefusalDoesNotShareTheCallersSlice(t *testing.T) {
	chain := []string{"codex"}
	r := Check("codex", chain, 3)
	require.NotNil(t, r)
	chain[0] = "changed"
	assert.Equal(t, []string{"codex"}, r.Ancestry)
}

func TestTheSeedOverAnExplicitBaseReadsNoEnvironment(t *testing.T) {
	// The daemon's path: FromEnv once at startup, this per request.
	// Deliberately no env lock: if this test ever needs one, Seed has stopped
	// being a function of its arguments.
	cases := []struct {
		name      string
		base      []string
		invokedBy string
		want      []string
	}{
		{"nothing named, nothing above", nil, "", []string{}},
		{"a caller names itself", nil, "Claude-Code", []string{"claude-code"}},
		{"a host that sets the env var and names itself is one hop", []string{"claude-code"}, "claude-code", []string{"claude-code"}},
		{"a different caller is a new hop", []string{"claude-code"}, "codex", []string{"claude-code", "codex"}},
		{"a blank id names nothing rather than an empty hop", []string{"claude-code"}, "  ", []string{"claude-code"}},
		{"an unparsed base is normalized", []string{" Codex ", ""}, "gemini", []string{"codex", "gemini"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Seed(c.base, c.invokedBy))
		})
	}
}

func TestAPerCallCallerIsRefusedACycleThroughTheSeed(t *testing.T) {
	// The daemon case: its own env says nothing, so the chain comes from the
	// request. Without seeding the chain with the caller every hop would
	// look like hop zero.
	snap := Snapshot{MaxChain: DefaultMaxChain}
	refusal, seeded := snap.Check("claude-code", "Claude-Code")
	require.NotNil(t, refusal)
	assert.Equal(t, []string{"claude-code"}, seeded)
	refusal, seeded = snap.Check("codex", "Claude-Code")
	assert.Nil(t, refusal)
	assert.Equal(t, []string{"claude-code"}, seeded)
}

func TestNamingYourselfTwiceIsStillOneHop(t *testing.T) {
	// A host that sets the env var AND sends invoked_by must not burn two hops
	// of the chain budget for one caller.
	snap := Snapshot{Ancestry: []string{"claude-code"}, MaxChain: 2}
	assert.Equal(t, []string{"claude-code"}, snap.Seed("claude-code"))
	refusal, _ := snap.Check("codex", "claude-code")
	assert.Nil(t, refusal, "one hop used of two")
	refusal, _ = snap.Check("droid", "gemini")
	require.NotNil(t, refusal, "a second, different caller does use the budget")
	assert.Equal(t, ReasonDepth, refusal.Reason)
}

func TestSeedAndChildNeverMutateTheirInput(t *testing.T) {
	base := make([]string, 1, 8) // spare capacity is where a careless append would write
	base[0] = "claude-code"
	a := Child(base, "codex")
	b := Child(base, "gemini")
	assert.Equal(t, []string{"claude-code", "codex"}, a)
	assert.Equal(t, []string{"claude-code", "gemini"}, b)
	_ = Seed(base, "pi")
	assert.Equal(t, []string{"claude-code"}, base)
	assert.Equal(t, "claude-code", base[:2][0])
	assert.Empty(t, base[:2][1], "nothing was written past len(base)")
}

func TestTheChildCarriesTheChainForward(t *testing.T) {
	assert.Equal(t, "claude-code,gemini,codex", Format(Child([]string{"claude-code", "gemini"}, "Codex")))
	assert.Equal(t, "codex", Format(Child(nil, "codex")))
	assert.Equal(t, "claude-code", Format(Child([]string{"claude-code"}, " ")), "a blank adapter adds no hop")
}

func TestStampEnvReplacesAnInheritedAncestry(t *testing.T) {
	env := []string{"PATH=/bin", AncestryEnv + "=stale", "HOME=/h", AncestryEnv + "=staler"}
	got := StampEnv(env, []string{"claude-code", "codex"})
	assert.Equal(t, []string{"PATH=/bin", "HOME=/h", AncestryEnv + "=claude-code,codex"}, got)
	assert.Equal(t, AncestryEnv+"=stale", env[1], "input untouched")
	// A variable that merely starts with the same letters is not ours.
	got = StampEnv([]string{AncestryEnv + "_X=keep"}, []string{"pi"})
	assert.Equal(t, []string{AncestryEnv + "_X=keep", AncestryEnv + "=pi"}, got)
}

func TestFormatThenParseIsTheSameChain(t *testing.T) {
	chain := []string{"claude-code", "codex", "gemini"}
	assert.Equal(t, chain, ParseAncestry(Format(chain)))
	assert.True(t, strings.Contains(Format(chain), ","))
}

// A cycle made only by the caller's own name is fixed by that name, not by
// an environment variable the caller never set; one that is in the
// environment's chain still points there.
func TestTheRefusalPointsAtWhatMadeTheCycle(t *testing.T) {
	self, _ := Snapshot{MaxChain: DefaultMaxChain}.Check("claude-code", "claude-code")
	require.NotNil(t, self)
	assert.True(t, self.SelfNamed)
	assert.Contains(t, self.Error(), "the caller named itself claude-code (invoked_by)")
	assert.NotContains(t, self.Error(), AncestryEnv)

	inherited, _ := Snapshot{Ancestry: []string{"claude-code"}, MaxChain: DefaultMaxChain}.Check("claude-code", "claude-code")
	require.NotNil(t, inherited)
	assert.False(t, inherited.SelfNamed)
	assert.Contains(t, inherited.Error(), "$"+AncestryEnv+" in the daemon's environment")
}
