package agent

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/card-dev/card/api"
)

// Declaration is an agent an operator declares in card.toml
// ([agents.<id>]): a CLI that speaks the Agent Client Protocol on its
// stdio, which card runs with no code of its own for it. card is the ACP
// client, so everything it holds for such an agent is what ACP lets a
// client hold: the permission requests it answers, the turn's deadline,
// cancel and budget. What the agent does without asking, card cannot see.
type Declaration struct {
	ID   string
	Name string
	// Command is the argv that starts the agent speaking ACP; Command[0]
	// is looked for on the search path like a built-in adapter's binary.
	Command []string
	// VersionArgs read the version (run as Command[0] VersionArgs...);
	// nil: the version is the one the agent gives in initialize.
	VersionArgs []string
	// Env is added to the agent's environment.
	Env map[string]string
}

// declaredID is what a declared id may be: it is a wire id, a table key in
// card.toml and part of a pin variable's name, so it stays plain.
var declaredID = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// Check refuses a declaration that cannot be run as it says, naming the
// key at fault. The flags card refuses on any agent's command line are
// spawn's to check (spawn.CheckDeclaration), since spawn owns that list.
func (d Declaration) Check() error {
	key := "[agents." + d.ID + "]"
	switch {
	case !declaredID.MatchString(d.ID):
		return fmt.Errorf("[agents.%s]: %q is not an agent id card takes: lower-case letters, digits and '-', starting with a letter, at most 40", d.ID, d.ID)
	case isBuiltIn(d.ID):
		return fmt.Errorf("%s: %q is a built-in adapter; a declared agent may not shadow it (pick another id; [adapters.%s] tunes the built-in one)", key, d.ID, d.ID)
	case strings.TrimSpace(d.Name) == "":
		return fmt.Errorf("%s name: empty; give the agent a display name", key)
	case len(d.Command) == 0 || strings.TrimSpace(d.Command[0]) == "":
		return fmt.Errorf("%s command: empty; give the argv that starts the agent speaking ACP on stdio, e.g. [\"my-agent\", \"--acp\"]", key)
	case strings.ContainsAny(d.Command[0], " \t"):
		return fmt.Errorf("%s command[0]: %q is not one program name; split the argv into its words", key, d.Command[0])
	}
	for k := range d.Env {
		if strings.HasPrefix(k, "CAR_") || k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%s env: key %q is not allowed (CAR_* belongs to the agent-loop guard)", key, k)
		}
	}
	return nil
}

// PinEnvOf is the variable that pins a declared agent's binary, as
// CAR_<ID>_BIN pins a built-in one.
func PinEnvOf(id string) string {
	return "CARD_AGENT_" + strings.ToUpper(strings.ReplaceAll(id, "-", "_")) + "_BIN"
}

// adapterOf is the facts card holds for a declared agent. Its read-only
// mode is not enforced: card refuses what the agent asks about, but an
// agent may read, write or run commands without asking, and nothing in
// ACP lets a client tell.
func (d Declaration) adapterOf() Adapter {
	bin := d.Command[0]
	return Adapter{
		ID: d.ID, DisplayName: d.Name, Binary: bin, PinEnv: PinEnvOf(d.ID),
		InstallHint: fmt.Sprintf("install `%s` so it is on the daemon's search path (declared in card.toml [agents.%s])", bin, d.ID),
		Capabilities: api.Capabilities{
			ToolUse: true, MCP: false, Hooks: false, Sessions: true, Streaming: true, Images: true, Ask: true,
		},
		ReadOnly: api.NotEnforced,
		// Nor is edit: card refuses what the agent asks to write outside
		// the cwd, but sees no write it was not asked about.
		EditUnenforced: true,
		OwnedFlags:     []string{},
		Declared:       d.clone(),
	}
}

func (d Declaration) clone() *Declaration {
	d.Command = slices.Clone(d.Command)
	d.VersionArgs = slices.Clone(d.VersionArgs)
	env := make(map[string]string, len(d.Env))
	for k, v := range d.Env {
		env[k] = v
	}
	d.Env = env
	return &d
}

func isBuiltIn(id string) bool {
	for _, a := range adapters {
		if a.ID == id {
			return true
		}
	}
	return false
}

// declared are the agents card.toml declares, by id. A daemon declares its
// agents once, at start, before it serves; tests that start several
// daemons in one process give each declared agent its own id.
var (
	declaredMu sync.RWMutex
	declared   = map[string]Adapter{}
)

// Declare adds the operator's agents to the list every package reads,
// after checking each; the same id declared again replaces the earlier
// one. Nothing is added when one is refused.
func Declare(ds []Declaration) error {
	out := make([]Adapter, 0, len(ds))
	for _, d := range ds {
		if err := d.Check(); err != nil {
			return err
		}
		out = append(out, d.adapterOf())
	}
	declaredMu.Lock()
	defer declaredMu.Unlock()
	for _, a := range out {
		declared[a.ID] = a
	}
	return nil
}

// Declared returns the declared agents, sorted by id.
func Declared() []Adapter {
	declaredMu.RLock()
	defer declaredMu.RUnlock()
	out := make([]Adapter, 0, len(declared))
	for _, a := range declared {
		out = append(out, a.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func lookupDeclared(id string) (Adapter, bool) {
	declaredMu.RLock()
	defer declaredMu.RUnlock()
	a, ok := declared[id]
	if ok {
		a = a.clone()
	}
	return a, ok
}

// Forget takes a declared agent out of the list again: for a test that
// declared one, so the tests after it in the same process see the list
// they expect.
func Forget(id string) {
	declaredMu.Lock()
	defer declaredMu.Unlock()
	delete(declared, id)
}
