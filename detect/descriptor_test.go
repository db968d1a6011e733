package detect

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/card-dev/card/agent"
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

// An adapter detection has no entry for, or an entry for an adapter that
// does not exist, stops the program when the package initialises.
func TestAMissingOrOrphanedProbeStopsTheProgram(t *testing.T) {
	assert.NotPanics(t, func() { mustJoin(agent.All(), probes) })

	missing := maps.Clone(probes)
	delete(missing, agent.Droid)
	assert.PanicsWithValue(t, `detect: adapter "droid" has no entry in probes (an empty one says it has no health check)`,
		func() { mustJoin(agent.All(), missing) })

	orphan := maps.Clone(probes)
	orphan["cursor"] = probe{}
	assert.PanicsWithValue(t, `detect: probe for "cursor", which is not an agent adapter`, func() { mustJoin(agent.All(), orphan) })

	empty := maps.Clone(probes)
	empty[agent.Pi] = probe{}
	assert.NotPanics(t, func() { mustJoin(agent.All(), empty) })
}

// An empty probe is a supported choice: the adapter is still detected, its
// auth kind is unknown, and its health says card has no check for it.
func TestAnAdapterWithAnEmptyProbeReportsUnknownAuthAndNoHealthCheck(t *testing.T) {
	a, _ := agent.Lookup(agent.Pi)
	desc := Descriptor{Adapter: a}
	d := newTestDetector(t, "", t.TempDir())
	spec := d.baseSpec(desc)
	assert.Equal(t, AuthKindUnknown, spec.AuthKind)
	assert.Equal(t, NotEnforced, spec.ReadOnlyEnforcement)
	h := d.probeHealth(ctx, desc, "/nonexistent/pi")
	assert.Equal(t, StatusUnknown, h.Status)
	assert.Equal(t, "card has no health check for Pi", h.Reason)
}
