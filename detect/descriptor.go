package detect

import (
	"context"
	"fmt"
	"sort"

	"github.com/card-dev/card/agent"
)

// Descriptor is one adapter as detection sees it: the agent's static facts
// (package agent) joined with detection's own per-adapter probe.
type Descriptor struct {
	agent.Adapter
	probe
}

// probe is what detection does differently per adapter. Each adapter's
// functions live in its adapter_*.go file and are listed in probes.
type probe struct {
	// AuthKind guesses the auth kind from credential-file shape and key
	// presence. It must never copy a credential value anywhere. Nil reports
	// unknown.
	AuthKind func(in AuthInput) AuthKind
	// Health decides the health bucket. It runs the tool's own status
	// command through in.Run where the tool has one. Nil reports that card
	// has no health check for the adapter.
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
	// Now is the detector's clock, for credential expiry checks.
	Now func() int64 // UNIX milliseconds
}

// HealthVerdict is an adapter's answer before the detector stamps id and time.
type HealthVerdict struct {
	Status  HealthStatus
	Reason  string
	Details map[string]any
}

// probes holds every adapter's probe, by agent id. Every adapter must have
// an entry, even an empty one, so that shipping an adapter without a health
// check is a decision written here rather than a line someone forgot.
var probes = map[string]probe{
	agent.ClaudeCode: {AuthKind: claudeAuthKind, Health: claudeHealth, Package: claudePackage},
	agent.Codex:      {AuthKind: codexAuthKind, Health: codexHealth, Package: codexPackage},
	agent.Gemini:     {AuthKind: geminiAuthKind, Health: geminiHealth, Package: geminiPackage},
	agent.Copilot:    {AuthKind: copilotAuthKind, Health: copilotHealth, Package: copilotPackage},
	agent.Droid:      {AuthKind: droidAuthKind, Health: droidHealth, Package: droidPackage},
	agent.Pi:         {AuthKind: piAuthKind, Health: piHealth, Package: piPackage},
}

// registry is every adapter in agent's order, with its probe.
var registry = mustJoin(agent.All(), probes)

// mustJoin pairs each adapter with its probe. It panics, when the package
// is initialised, on an adapter without an entry or an entry for an id no
// adapter has: both are programming errors that must not wait for a test.
func mustJoin(adapters []agent.Adapter, probes map[string]probe) []Descriptor {
	out := make([]Descriptor, 0, len(adapters))
	known := map[string]bool{}
	for _, a := range adapters {
		known[a.ID] = true
		p, ok := probes[a.ID]
		if !ok {
			panic(fmt.Sprintf("detect: adapter %q has no entry in probes (an empty one says it has no health check)", a.ID))
		}
		out = append(out, Descriptor{Adapter: a, probe: p})
	}
	for id := range probes {
		if !known[id] {
			panic(fmt.Sprintf("detect: probe for %q, which is not an agent adapter", id))
		}
	}
	return out
}

// Lookup returns the descriptor for id.
func Lookup(id string) (Descriptor, bool) {
	for _, d := range registry {
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
