// Package guard stops coding agents from invoking each other in a loop.
//
// card is reachable from inside the agents it runs (a Claude Code plugin, a
// Codex skill, an MCP server), so "claude → card → claude → card …" is a loop
// that costs a process, a model session and money per hop, and looks like a
// hang rather than an error. An agent's own subagent limit cannot see across
// the card boundary, so card carries the chain itself.
//
// The chain is an ancestry, not a depth counter: a counter cannot tell
// "claude → codex → gemini" (three legitimate hops) from "claude → codex →
// claude" (a loop). The ancestry catches the indirect cycle A→B→A that a
// single "who invoked me" value would miss, and its length doubles as the
// depth, so there is one variable rather than two that can disagree.
//
// It travels in CAR_INVOKED_BY, a comma-separated list of adapter ids above a
// process. A host that launches card from inside an agent sets it to its own
// adapter id; card refuses to spawn an adapter already in the chain, refuses
// a chain already at the limit, and stamps every agent it spawns with the
// chain plus that agent. A host that reaches a long-lived daemon over its
// socket cannot set the daemon's environment, so it names itself per call
// instead and Seed merges that name into the chain the daemon read once at
// startup.
//
// The core (Check, Seed, Child, Format, ParseAncestry, ParseMaxChain) decides
// over explicit inputs and never reads the environment; FromEnv,
// SpawnBlockReason and ChildAncestry are the only functions that do.
//
// This is a cooperative guard, not a sandbox: it relies on children inheriting
// the environment card sets. A tool that scrubs its environment, or a chain
// that leaves and re-enters through something that does not propagate it,
// defeats it. It is the right tool for the cost-and-hang problem and must not
// be described as a security boundary.
package guard

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// AncestryEnv holds the adapter ids already in the chain above a process,
// comma-separated, outermost first.
const AncestryEnv = "CAR_INVOKED_BY"

// MaxChainEnv overrides DefaultMaxChain.
const MaxChainEnv = "CAR_AGENT_MAX_CHAIN"

// DefaultMaxChain is how many agent hops a chain may hold before card refuses
// another. Three permits genuine delegation (claude → codex → gemini) while
// bounding the blast radius of a chain that fans out without repeating an
// adapter.
const DefaultMaxChain = 3

// Refusal reasons, as reported in Refusal.Reason and on the wire.
const (
	ReasonCycle = "cycle"
	ReasonDepth = "depth"
)

// normalize is the one spelling of an adapter id the guard compares: a host
// that sets CAR_INVOKED_BY=Claude-Code must not slip past on capitalization
// or a stray space.
func normalize(id string) string {
	return strings.ToLower(strings.TrimSpace(id))
}

// ParseAncestry reads a CAR_INVOKED_BY value. Items are trimmed and
// lowercased and empty items dropped, so "a,,b", " A , b " and "a,b" are the
// same chain; the result is never nil-versus-empty sensitive (an empty value
// yields an empty chain). Duplicates are kept: they are evidence of a loop
// that already happened, not noise.
func ParseAncestry(raw string) []string {
	chain := []string{}
	for item := range strings.SplitSeq(raw, ",") {
		if id := normalize(item); id != "" {
			chain = append(chain, id)
		}
	}
	return chain
}

// ParseMaxChain reads a CAR_AGENT_MAX_CHAIN value. Empty, unparsable, zero
// and negative values all fall back to DefaultMaxChain. Zero is treated as a
// mistake rather than read literally as "refuse everything": a typo in a
// shell profile should not silently stop every agent, and an operator who
// wants no agents has plainer ways to say so.
func ParseMaxChain(raw string) int {
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil || n < 1 {
		return DefaultMaxChain
	}
	return n
}

// effectiveMax applies ParseMaxChain's rule to a value that arrived as an
// int, so a zero-valued Snapshot behaves like the default rather than
// refusing every spawn.
func effectiveMax(maxChain int) int {
	if maxChain < 1 {
		return DefaultMaxChain
	}
	return maxChain
}

// Refusal is the guard's answer when spawning Adapter would loop or go too
// deep. It is an error so a caller can return it as is; its fields are what
// the daemon reports as JSON-RPC error data.
type Refusal struct {
	// Adapter is the id that was refused, normalized.
	Adapter string `json:"adapter"`
	// Ancestry is the chain it was judged against (a copy).
	Ancestry []string `json:"ancestry"`
	// MaxChain is the limit in force.
	MaxChain int `json:"max_chain"`
	// Reason is ReasonCycle or ReasonDepth.
	Reason string `json:"reason"`
	// SelfNamed is a cycle made only by the caller's own name for itself
	// (invoked_by), not by the chain in the environment: the advice then
	// is about that name, not about $CAR_INVOKED_BY.
	SelfNamed bool `json:"-"`
}

// Error names what looped and what to do about it, because an operator
// hitting this needs both: the chain, the limit, and the setting that is
// the escape hatch.
func (r *Refusal) Error() string {
	chain := strings.Join(r.Ancestry, " → ")
	if r.Reason == ReasonCycle && r.SelfNamed {
		return fmt.Sprintf("refusing to spawn %q: the caller named itself %s (invoked_by), and an agent that runs "+
			"itself through card would loop. If the caller is not %s, leave invoked_by out or give its own id.",
			r.Adapter, r.Adapter, r.Adapter)
	}
	if r.Reason == ReasonCycle {
		return fmt.Sprintf("refusing to spawn %q: it is already in this invocation chain (%s). "+
			"Spawning it again would loop card and the agent into each other. "+
			"If this chain is intentional, clear or edit $%s in the daemon's environment.",
			r.Adapter, chain, AncestryEnv)
	}
	return fmt.Sprintf("refusing to spawn %q: invocation chain is already %d deep (%s), at the limit of %d. "+
		"Raise $%s in the daemon's environment if this depth is intended.",
		r.Adapter, len(r.Ancestry), chain, r.MaxChain, MaxChainEnv)
}

// Check decides whether adapter may be spawned by a process whose chain is
// ancestry. It returns nil when allowed. A cycle is reported before depth,
// since "this would loop" is the more useful thing to hear. maxChain below 1
// means DefaultMaxChain. Ids compare after trimming and lowercasing on both
// sides, so an ancestry that did not come through ParseAncestry is still
// judged correctly.
func Check(adapter string, ancestry []string, maxChain int) *Refusal {
	target := normalize(adapter)
	maxChain = effectiveMax(maxChain)
	refuse := func(reason string) *Refusal {
		return &Refusal{Adapter: target, Ancestry: slices.Clone(ancestry), MaxChain: maxChain, Reason: reason}
	}
	if slices.ContainsFunc(ancestry, func(id string) bool { return normalize(id) == target }) {
		return refuse(ReasonCycle)
	}
	if len(ancestry) >= maxChain {
		return refuse(ReasonDepth)
	}
	return nil
}

// Seed is the chain a per-call request is judged against: base (what the
// daemon read once at startup) plus invokedBy, the caller's own adapter id.
//
// A blank invokedBy names nothing and yields base unchanged: the guard cannot
// invent a hop it was never told about, and pretending otherwise would refuse
// legitimate first calls. invokedBy is lowercased and not added when already
// present, so a host that both sets CAR_INVOKED_BY and names itself is one
// hop, not two that would eventually refuse it for a depth it never had.
// base is normalized into a new slice and never modified.
func Seed(base []string, invokedBy string) []string {
	chain := make([]string, 0, len(base)+1)
	for _, id := range base {
		if id = normalize(id); id != "" {
			chain = append(chain, id)
		}
	}
	if id := normalize(invokedBy); id != "" && !slices.Contains(chain, id) {
		chain = append(chain, id)
	}
	return chain
}

// Child is the chain a spawned adapter inherits: ancestry plus the adapter.
// Carrying the chain forward is what makes the guard work more than one level
// down. ancestry is never modified (appending to a shared slice would let two
// concurrent spawns write into each other's chains). A blank adapter adds
// nothing.
func Child(ancestry []string, adapter string) []string {
	chain := make([]string, len(ancestry), len(ancestry)+1)
	copy(chain, ancestry)
	if id := normalize(adapter); id != "" {
		chain = append(chain, id)
	}
	return chain
}

// Format renders a chain as a CAR_INVOKED_BY value.
func Format(chain []string) string {
	return strings.Join(chain, ",")
}

// StampEnv returns env (in os.Environ form) with CAR_INVOKED_BY set to child
// and any inherited value removed, so a child never sees two values and picks
// the stale one. Apply it only where an agent is spawned for a task: a
// version or health probe is not a hop, and stamping it would spend the chain
// budget without any agent having run. env is never modified.
func StampEnv(env []string, child []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, AncestryEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, AncestryEnv+"="+Format(child))
}

// Snapshot is the guard's view of the process environment, read once. A
// long-lived daemon takes it at startup and carries it as a value: a server
// that re-read the environment per request would decide from process-global
// state that nothing in the request controls, which is untestable as well as
// misleading.
type Snapshot struct {
	// Ancestry is the chain above this process, parsed from CAR_INVOKED_BY.
	Ancestry []string `json:"ancestry"`
	// MaxChain is the limit, parsed from CAR_AGENT_MAX_CHAIN.
	MaxChain int `json:"max_chain"`
}

// FromEnv reads CAR_INVOKED_BY and CAR_AGENT_MAX_CHAIN. Call it once, at
// startup.
func FromEnv() Snapshot {
	return Snapshot{
		Ancestry: ParseAncestry(os.Getenv(AncestryEnv)),
		MaxChain: ParseMaxChain(os.Getenv(MaxChainEnv)),
	}
}

// Seed is the chain for one request from invokedBy, over this snapshot.
func (s Snapshot) Seed(invokedBy string) []string {
	return Seed(s.Ancestry, invokedBy)
}

// Check judges spawning adapter for a request that named itself invokedBy.
// It returns the refusal (nil when allowed) and the seeded chain, which the
// caller records on the run either way.
func (s Snapshot) Check(adapter, invokedBy string) (*Refusal, []string) {
	seeded := s.Seed(invokedBy)
	r := Check(adapter, seeded, s.MaxChain)
	if r != nil && r.Reason == ReasonCycle {
		target := normalize(adapter)
		r.SelfNamed = !slices.ContainsFunc(s.Ancestry, func(id string) bool { return normalize(id) == target })
	}
	return r, seeded
}

// SpawnBlockReason says why this process, judged by its current environment,
// may not spawn adapter, or "" when it may. For one-shot commands; a daemon
// uses a Snapshot instead. Callers that list agents consult it so a blocked
// adapter is never offered and then refused.
func SpawnBlockReason(adapter string) string {
	env := FromEnv()
	if r := Check(adapter, env.Ancestry, env.MaxChain); r != nil {
		return r.Error()
	}
	return ""
}

// ChildAncestry is the CAR_INVOKED_BY value for a child spawned for adapter by
// this process, judged by its current environment.
func ChildAncestry(adapter string) string {
	return Format(Child(FromEnv().Ancestry, adapter))
}
