// Package agent defines, once, every coding-agent CLI card knows: its id,
// display name, binary, pin variable, install hint, capabilities, how its
// read-only mode is enforced and the flags card owns on its command line.
//
// Detection (detect) and spawning (spawn) both read these facts and neither
// repeats them. A fact kept in two places can drift, and this drift would be
// dangerous: a host would show a person one read-only boundary while card ran
// another. With one definition there is nothing to keep in step.
//
// The package is a leaf of plain data over the standard library, so detect
// and spawn can both import it without importing each other. What an adapter
// does stays with the package that does it, keyed by the ids in adapters.go: detect
// holds each adapter's auth heuristic and health probe, spawn its argv
// builder and output parser. Both join their table to All() when the program
// starts and panic there if an adapter lacks its part or a part names no
// adapter, so an incomplete adapter never reaches a test run, let alone a user.
//
// The name is chosen to read well at the call site: agent.Lookup(agent.Codex),
// agent.IDs(), agent.NotEnforced.
package agent

import (
	"fmt"
	"slices"

	"github.com/card-dev/card/api"
)

// Adapter is every static fact about one agent CLI.
type Adapter struct {
	// ID is the wire id (claude-code, codex, ...).
	ID          string
	DisplayName string
	// Binary is the executable name searched for on the search path.
	Binary string
	// PinEnv names the environment variable that pins the binary's path.
	PinEnv string
	// InstallHint is what to tell a person who does not have it.
	InstallHint  string
	Capabilities api.Capabilities
	// ReadOnly is how the read_only mode the builder maps is enforced; it is
	// disclosed to clients, and not_enforced must be acknowledged per run.
	ReadOnly api.ReadOnlyEnforcement
	// EditUnenforced says card cannot hold the edit mode: the agent may
	// write without asking, so card sees only the writes it is asked
	// about. Disclosed, and acknowledged per run, as an unenforced
	// read_only is.
	EditUnenforced bool
	// OwnedFlags are the flags card's builder sets from the permission mode.
	// Operator extras in card.toml may not set them: one set there would
	// fight the mapping, and for some it would widen the boundary.
	OwnedFlags []string
	// NoAsk says why permission_mode ask is refused, for an adapter whose
	// Capabilities.Ask is false; the refusal carries it to the client.
	NoAsk string
	// NoImages says why the adapter's attachments are dropped (or, with
	// require_attachments, the request refused), for an adapter whose
	// Capabilities.Images is false.
	NoImages string
	// Efforts are the reasoning-effort levels the CLI takes from card
	// (spawn maps them onto its flag); nil when it has no effort setting.
	// An editor is offered these as the session's thought levels.
	Efforts []string
	// Declared is the operator's declaration of an agent card runs over
	// ACP with no code of its own (card.toml [agents.<id>]); nil for a
	// built-in adapter.
	Declared *Declaration
}

// effortsAll are card's effort levels where the CLI takes every one.
var effortsAll = []string{"low", "medium", "high", "xhigh", "max"}

// mustValid panics on a definition with a missing fact or a repeated id, so
// an incomplete adapter stops the program at start-up.
func mustValid(list []Adapter) []Adapter {
	seen := map[string]bool{}
	for _, a := range list {
		if err := a.check(); err != nil {
			panic("agent: " + err.Error())
		}
		if seen[a.ID] {
			panic("agent: adapter defined twice: " + a.ID)
		}
		seen[a.ID] = true
	}
	return list
}

func (a Adapter) check() error {
	for _, f := range []struct{ name, v string }{
		{"ID", a.ID}, {"DisplayName", a.DisplayName}, {"Binary", a.Binary}, {"PinEnv", a.PinEnv}, {"InstallHint", a.InstallHint},
	} {
		if f.v == "" {
			return fmt.Errorf("adapter %q has no %s", a.ID, f.name)
		}
	}
	if a.Capabilities.Ask == (a.NoAsk != "") {
		return fmt.Errorf("adapter %q must either ask (Capabilities.Ask) or say why it cannot (NoAsk), not both or neither", a.ID)
	}
	if a.Capabilities.Images == (a.NoImages != "") {
		return fmt.Errorf("adapter %q must either take images (Capabilities.Images) or say why it cannot (NoImages), not both or neither", a.ID)
	}
	if !a.ReadOnly.Valid() {
		return fmt.Errorf("adapter %q has read-only enforcement %q, not one of the four kinds", a.ID, a.ReadOnly)
	}
	return nil
}

// All returns every adapter, in registry order, then the declared agents
// by id. The slices are copies: nothing a caller does changes the
// definitions.
func All() []Adapter {
	out := make([]Adapter, len(adapters))
	for i, a := range adapters {
		out[i] = a.clone()
	}
	return append(out, Declared()...)
}

// BuiltIn returns the built-in adapters only, in registry order.
func BuiltIn() []Adapter { return All()[:len(adapters)] }

// IDs returns every adapter id, in registry order, then the declared ones.
func IDs() []string {
	all := All()
	ids := make([]string, len(all))
	for i, a := range all {
		ids[i] = a.ID
	}
	return ids
}

// Lookup returns the adapter with id, built-in or declared.
func Lookup(id string) (Adapter, bool) {
	for _, a := range adapters {
		if a.ID == id {
			return a.clone(), true
		}
	}
	return lookupDeclared(id)
}

func (a Adapter) clone() Adapter {
	a.OwnedFlags = slices.Clone(a.OwnedFlags)
	if a.Declared != nil {
		a.Declared = a.Declared.clone()
	}
	return a
}
