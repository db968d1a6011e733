package spawn

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// OpenCode (`opencode acp`), as checked against OpenCode 1.18.33 with a
// loopback model stand-in. Left to itself it asks about almost nothing:
// its built-in agents allow every tool but a write outside the project,
// so its shell runs unasked in both of its own modes (build and plan).
// card makes it ask about everything, and answers by the mode:
//
//   - OPENCODE_CONFIG_CONTENT carries a permission table that sets every
//     permission OpenCode knows to "ask", at the top level and for each
//     agent a session can reach (build, plan, and the general and explore
//     subagents a task call starts): an agent's own table is merged over
//     the top level one, so one left out keeps its allows. Any config the
//     operator gives in [adapters.opencode] env OPENCODE_CONFIG_CONTENT
//     (a provider, a model) is kept, with card's table over it.
//   - OPENCODE_PERMISSION repeats the table: OpenCode merges it last, so
//     one inherited from the daemon's environment cannot widen it.
//   - OPENCODE_DISABLE_PROJECT_CONFIG: a repository's opencode.json is
//     not read (its agent.build.permission would beat card's table).
//   - --pure: no external plugins, whose JavaScript (a repository's
//     .opencode/plugin included) runs inside OpenCode whatever card
//     answers. Its internal plugins stay.
//   - OPENCODE_SERVER_PASSWORD, fresh per process: `opencode acp` serves
//     its whole HTTP API on 127.0.0.1 for its own ACP layer, and without a
//     password any local process could prompt the session or run commands
//     through it, past every answer card gives.
//   - No fs capability: OpenCode writes an approved edit itself and then
//     sends fs/write_text_file as a courtesy, so serving it would write
//     twice and hold nothing.
//   - A cancelled run sends session/cancel before its group is ended:
//     OpenCode starts each shell command in a session of its own, which
//     outlives a kill of the agent's group and ends on cancel.
func buildOpenCode(bin string, req Request) (Plan, error) {
	if err := acpEveryMode(agent.OpenCode, req,
		refusal{req.Effort != "", "effort", "OpenCode takes its reasoning effort from the model's variant in its config, not from card"},
		refusal{req.SystemPrompt != "", "system_prompt", "OpenCode takes its instructions from its config and AGENTS.md, and card keeps a repository's config out of its runs"},
	); err != nil {
		return Plan{}, err
	}
	cfg, err := openCodeConfig(req.Extras.Env["OPENCODE_CONFIG_CONTENT"], req.Model)
	if err != nil {
		return Plan{}, err
	}
	perm, _ := json.Marshal(openCodeAskAll())
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	p.Env["OPENCODE_CONFIG_CONTENT"] = cfg
	p.Env["OPENCODE_PERMISSION"] = string(perm)
	p.Env["OPENCODE_DISABLE_PROJECT_CONFIG"] = "1"
	p.Env["OPENCODE_DISABLE_AUTOUPDATE"] = "1"
	p.Env["OPENCODE_SERVER_PASSWORD"] = serverPassword()
	p.Args = append(append([]string{"acp"}, req.Extras.Args...), "--pure")
	return acpPlan(p, req), nil
}

// openCodePermissions are the permissions OpenCode 1.18.33 checks (its
// tools' and its own: external_directory for a path outside the project,
// doom_loop for a call repeated over and over).
var openCodePermissions = []string{"read", "edit", "glob", "grep", "list", "bash", "task", "external_directory",
	"todowrite", "todoread", "webfetch", "websearch", "codesearch", "lsp", "skill", "doom_loop"}

// openCodeAgents are the agents a session card opens can run: its
// primary agents, and the subagents a task call starts.
var openCodeAgents = []string{"build", "plan", "general", "explore"}

// openCodeAskAll is the permission table under which OpenCode asks about
// every call.
func openCodeAskAll() map[string]any {
	t := map[string]any{"*": "ask"}
	for _, k := range openCodePermissions {
		t[k] = "ask"
	}
	return t
}

// openCodeConfig is the operator's OPENCODE_CONFIG_CONTENT (a JSON object,
// or nothing) with card's permission table over it, the request's model,
// and sharing off.
func openCodeConfig(operator, model string) (string, error) {
	cfg := map[string]any{}
	if operator != "" {
		if err := json.Unmarshal([]byte(operator), &cfg); err != nil || cfg == nil {
			return "", fmt.Errorf("card.toml [adapters.opencode] env OPENCODE_CONFIG_CONTENT is not a JSON object (%v); give OpenCode's config as one JSON object", err)
		}
	}
	cfg["permission"] = openCodeAskAll()
	agents, _ := cfg["agent"].(map[string]any)
	if agents == nil {
		agents = map[string]any{}
	}
	for _, name := range openCodeAgents {
		a, _ := agents[name].(map[string]any)
		if a == nil {
			a = map[string]any{}
		}
		a["permission"] = openCodeAskAll()
		agents[name] = a
	}
	cfg["agent"] = agents
	// /share would upload the conversation to a public link.
	cfg["share"] = "disabled"
	cfg["autoupdate"] = false
	if model != "" {
		cfg["model"] = model
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("spawn: OpenCode's config does not encode: %w", err)
	}
	return string(b), nil
}

// serverPassword is a fresh secret for one process's loopback API.
func serverPassword() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic("spawn: no randomness for OpenCode's server password: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// openCodeDriver is OpenCode's driver: ACP in every mode.
var openCodeDriver = Driver{
	For:   agent.OpenCode,
	Build: buildOpenCode,
	// Never read: every plan of OpenCode runs over ACP.
	NewParser:     func() Parser { return nil },
	CheckExtraArg: noExtraArgCheck,
	MCP:           MCPHandover{Refused: "card hands OpenCode no MCP server of a client's (its session/new carries none)"},
	Protocols:     map[Protocol]func(Plan) protocol{ProtocolACP: acpClientOf(openCodeACP)},
	Caps: CapsDriver{
		// Its usage_update carries the session's cost so far, for a model
		// whose price it knows (models.dev, or cost in its config).
		CostReported: true,
		TokensWhen:   TokensTurnEnd, // the prompt result's usage
	},
	Warm: WarmDriver{Build: buildOpenCode},
	Channels: Channels{
		OneShot: ArgChannel{Name: "opencode acp (one-shot runs)"},
		Session: ArgChannel{Name: "opencode acp (sessions and ask runs)"},
	},
}

// openCodeACP is OpenCode's dialect of ACP: it names a call by its kind,
// and card answers its questions by the session's mode.
var openCodeACP = acpDialect{
	toolName:    func(c acp.ToolCallUpdate) string { return string(c.Kind) },
	exitFailure: func(ExitInfo) *api.RunError { return nil },
	authHint:    "sign OpenCode in as the daemon's user (`opencode auth login`), or give it a provider in card.toml [adapters.opencode] env (OPENCODE_CONFIG_CONTENT, or the provider's key variable)",
	byMode:      true,
	cancelFirst: true,
}
