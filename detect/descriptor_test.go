package detect

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Every adapter carries the agent's facts as they are defined, in the
// agent's order.
func TestEveryDescriptorIsTheAgentDefinitionWithItsProbe(t *testing.T) {
	assert.Len(t, registry, len(agent.IDs()))
	for i, a := range agent.All() {
		d := registry[i]
		assert.Equal(t, a, d.Adapter, a.ID)
		assert.NotNil(t, d.Health, a.ID)
		assert.NotNil(t, d.AuthKind, a.ID)
	}
}

// An adapter detection has no probe for, a probe without its auth
// heuristic or health check, two probes for one adapter, or a probe for an
// adapter that does not exist, stops the program when the package
// initialises.
func TestAMissingIncompleteOrOrphanedProbeStopsTheProgram(t *testing.T) {
	assert.NotPanics(t, func() { mustJoin(agent.All(), probes) })
	with := func(id string, change func(*Probe)) []Probe {
		out := slices.Clone(probes)
		for i := range out {
			if out[i].For == id {
				change(&out[i])
			}
		}
		return out
	}
	for _, c := range []struct {
		name   string
		probes []Probe
		panic  string
	}{
		{"no probe", slices.DeleteFunc(slices.Clone(probes), func(p Probe) bool { return p.For == agent.Droid }),
			`detect: adapter "droid" has no probe in probes`},
		{"no auth heuristic", with(agent.Pi, func(p *Probe) { p.AuthKind = nil }), `detect: the probe for "pi" has no AuthKind or no Health`},
		{"no health check", with(agent.Codex, func(p *Probe) { p.Health = nil }), `detect: the probe for "codex" has no AuthKind or no Health`},
		{"two probes for one adapter", append(slices.Clone(probes), geminiProbe), `detect: two probes for "gemini"`},
		{"a probe for no adapter", append(slices.Clone(probes), Probe{For: "cursor"}), `detect: probe for "cursor", which is not an agent adapter`},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.PanicsWithValue(t, c.panic, func() { mustJoin(agent.All(), c.probes) })
		})
	}
}

// The registry refuses a probe without its functions, but detection itself
// does not crash on a descriptor without them: the adapter is still
// detected, its auth kind is unknown, and its health says card has no check.
func TestAnAdapterWithAnEmptyProbeReportsUnknownAuthAndNoHealthCheck(t *testing.T) {
	a, _ := agent.Lookup(agent.Pi)
	desc := Descriptor{Adapter: a}
	d := newTestDetector(t, "", t.TempDir())
	spec := d.baseSpec(desc)
	assert.Equal(t, api.AuthKindUnknown, spec.AuthKind)
	assert.Equal(t, api.NotEnforced, spec.ReadOnlyEnforcement)
	h := d.probeHealth(ctx, desc, "/nonexistent/pi")
	assert.Equal(t, api.StatusUnknown, h.Status)
	assert.Equal(t, "card has no health check for Pi", h.Reason)
}
