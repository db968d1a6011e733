package detect

import (
	"context"
	"fmt"
	"sort"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Descriptor is one adapter as detection sees it: the agent's static facts
// (package agent) joined with detection's own per-adapter Probe.
type Descriptor struct {
	agent.Adapter
	Probe
}

// Probe is what detection does differently per adapter, in one value
// declared in the adapter's own file (detect/adapter_<binary>.go) and listed
// in probes.
type Probe struct {
	// For is the agent id the probe is for (an agent constant).
	For string
	// AuthKind guesses the auth kind from credential-file shape and key
	// presence. It must never copy a credential value anywhere. Required
	// in probes (a bare Descriptor without one reports unknown).
	AuthKind func(in AuthInput) api.AuthKind
	// Health decides the health bucket. It runs the tool's own status
	// command through in.Run where the tool has one. Required in probes
	// (a bare Descriptor without one reports that card has no check).
	Health func(ctx context.Context, in HealthInput) HealthVerdict
	// Package is how the adapter's npm package lays out its command, for
	// reading its version without running it. Nil: only a probe tells.
	Package *npmPackage
}

// AuthInput is what an auth heuristic may look at.
type AuthInput struct {
	Home string
	// Getenv reads the environment the adapter's runs get: the daemon's,
	// with the adapter's card.toml env over it.
	Getenv func(string) string
	GOOS   string
	// Args are the adapter's card.toml args, which every run carries (a
	// Codex model provider chosen there decides how it signs in).
	Args []string
}

// HealthInput is what a health probe may use. Run executes the detected
// binary with args under the health timeout, in its own process group,
// with the environment the adapter's runs get.
type HealthInput struct {
	Binary string
	Home   string
	// Getenv and Args are as in AuthInput: what the adapter's runs see.
	Getenv func(string) string
	Args   []string
	GOOS   string
	Run    func(ctx context.Context, args ...string) ProbeOutput
	// Initialize starts the binary with args and asks it ACP's
	// initialize, for an agent whose health is what ACP says.
	Initialize func(ctx context.Context, args ...string) (*acp.InitializeResponse, ProbeOutput)
	// Now is the detector's clock, for credential expiry checks.
	Now func() int64 // UNIX milliseconds
}

// HealthVerdict is an adapter's answer before the detector stamps id and time.
type HealthVerdict struct {
	Status  api.HealthStatus
	Reason  string
	Details map[string]any
}

// probes is every adapter's probe, one line each; agent's list orders them.
var probes = []Probe{claudeProbe, codexProbe, geminiProbe, copilotProbe, droidProbe, piProbe, openCodeProbe, qwenProbe}

// registry is every adapter in agent's order, with its probe.
var registry = mustJoin(agent.BuiltIn(), probes)

// descriptors is every adapter detection reports: the built-in ones in
// agent's order, then the agents card.toml declares, each with the probe
// every declared agent shares.
func descriptors() []Descriptor {
	out := append([]Descriptor(nil), registry...)
	for _, a := range agent.Declared() {
		out = append(out, Descriptor{Adapter: a, Probe: declaredProbe(a)})
	}
	return out
}

// mustJoin pairs each adapter with its probe. It panics, when the package
// is initialised, on an adapter without a probe or with one missing its
// auth heuristic or health check, and on a probe for an id no adapter has:
// all are programming errors that must not wait for a test.
func mustJoin(adapters []agent.Adapter, probes []Probe) []Descriptor {
	byID := make(map[string]Probe, len(probes))
	for _, p := range probes {
		if _, dup := byID[p.For]; dup {
			panic(fmt.Sprintf("detect: two probes for %q", p.For))
		}
		byID[p.For] = p
	}
	out := make([]Descriptor, 0, len(adapters))
	known := map[string]bool{}
	for _, a := range adapters {
		known[a.ID] = true
		p, ok := byID[a.ID]
		if !ok {
			panic(fmt.Sprintf("detect: adapter %q has no probe in probes", a.ID))
		}
		if p.AuthKind == nil || p.Health == nil {
			panic(fmt.Sprintf("detect: the probe for %q has no AuthKind or no Health", a.ID))
		}
		out = append(out, Descriptor{Adapter: a, Probe: p})
	}
	for id := range byID {
		if !known[id] {
			panic(fmt.Sprintf("detect: probe for %q, which is not an agent adapter", id))
		}
	}
	return out
}

// Lookup returns the descriptor for id.
func Lookup(id string) (Descriptor, bool) {
	for _, d := range descriptors() {
		if d.ID == id {
			return d, true
		}
	}
	return Descriptor{}, false
}

func sortedKnown() []string {
	ids := agent.IDs()
	sort.Strings(ids)
	return ids
}
