package daemon

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/spawn"
)

// AgentDeclConfig is an operator's [agents.<id>] table: an agent that
// speaks the Agent Client Protocol on stdio, which card runs with no code
// of its own for it (spawn's generic ACP driver).
type AgentDeclConfig struct {
	// Name is the agent's display name.
	Name string `toml:"name"`
	// Command is the argv that starts it speaking ACP; its first word is
	// found on the search path like a built-in adapter's binary.
	Command []string `toml:"command"`
	// VersionArgs read its version; unset, it is not run to ask.
	VersionArgs []string `toml:"version_args"`
	// Env is added to its environment.
	Env map[string]string `toml:"env"`
}

// declarations are the [agents.<id>] tables as agent declarations, by id.
func (c Config) declarations() []agent.Declaration {
	ids := make([]string, 0, len(c.Agents))
	for id := range c.Agents {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]agent.Declaration, 0, len(ids))
	for _, id := range ids {
		a := c.Agents[id]
		out = append(out, agent.Declaration{ID: id, Name: a.Name, Command: a.Command, VersionArgs: a.VersionArgs, Env: a.Env})
	}
	return out
}

// validateAgents refuses a declaration card would not run as it says,
// naming the key: a built-in id, a bad id, an empty command, a flag card
// owns.
func (c Config) validateAgents() error {
	for _, d := range c.declarations() {
		if err := spawn.CheckDeclaration(d); err != nil {
			return err
		}
	}
	return nil
}

// declared says whether id is an agent the config declares.
func (c Config) declared(id string) bool {
	_, ok := c.Agents[id]
	return ok
}

// declareAgents makes the config's declared agents known to every
// package, once its checks have passed.
func (c Config) declareAgents() error {
	if err := agent.Declare(c.declarations()); err != nil {
		return fmt.Errorf("[agents]: %w", err)
	}
	return nil
}

// DeclareAgents declares, in this process, the agents of the card.toml in
// home (the default home when ""), for a client command that reads an
// agent's facts itself (card acp answers an editor's initialize from
// them), as the daemon does. A config that does not load declares none and
// says why; the daemon refuses the same config at its start.
func DeclareAgents(home string, getenv func(string) string) error {
	if home == "" {
		h, err := DefaultHome(getenv)
		if err != nil {
			return err
		}
		home = h
	}
	cfg, err := LoadConfig(filepath.Join(home, ConfigFileName))
	if err != nil {
		return err
	}
	return cfg.declareAgents()
}
