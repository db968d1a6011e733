package detect

import (
	"context"
	"sort"
)

// Descriptor is everything detection knows about one agent CLI. Each adapter
// lives in its own adapter_*.go file and is registered in registry below;
// adding an agent is that file plus one line.
type Descriptor struct {
	ID          string
	DisplayName string
	// Binary is the executable name searched for on the search path.
	Binary string
	// PinEnv names the environment variable that pins the binary's path.
	PinEnv string
	// InstallHint is what to tell a person who does not have it.
	InstallHint  string
	Capabilities Capabilities
	ReadOnly     ReadOnlyEnforcement
	// AuthKind guesses the auth kind from credential-file shape and key
	// presence. It must never copy a credential value anywhere.
	AuthKind func(in AuthInput) AuthKind
	// Health decides the health bucket. It runs the tool's own status
	// command through in.Run where the tool has one.
	Health func(ctx context.Context, in HealthInput) HealthVerdict
}

// AuthInput is what an auth heuristic may look at.
type AuthInput struct {
	Home   string
	Getenv func(string) string
	GOOS   string
}

// HealthInput is what a health probe may use. Run executes the detected
// binary with args under the health timeout, in its own process group.
type HealthInput struct {
	Binary string
	Home   string
	Getenv func(string) string
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

// registry is the one list of adapters, in the order detection reports them.
var registry = []Descriptor{
	claudeCodeAdapter,
	codexAdapter,
	geminiAdapter,
	copilotAdapter,
	droidAdapter,
	piAdapter,
}

// Known returns every adapter id, in registry order.
func Known() []string {
	ids := make([]string, len(registry))
	for i, d := range registry {
		ids[i] = d.ID
	}
	return ids
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
	ids := Known()
	sort.Strings(ids)
	return ids
}
