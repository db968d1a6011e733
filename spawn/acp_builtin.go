package spawn

import (
	"encoding/json"

	"github.com/card-dev/card/acp"
)

// A built-in adapter on card's generic ACP path is an agent card runs over
// ACP in every mode, as it runs a declared one (acp_declared.go): card
// answers the agent's session/request_permission by the session's mode
// (acpModeAnswer), and asks the client only in ask mode. What such an
// adapter adds is only what its CLI needs to ask at all, and how it is
// pointed at a provider; each has its argv and env in its own file.

// acpEveryMode refuses what no ACP agent takes from card, for an adapter
// whose every plan is ACP: a tool list (the mode's answers are the
// boundary), a turn cap, an effort, a CLI session id card would name.
func acpEveryMode(adapter string, req Request, more ...refusal) error {
	why := "it runs over ACP in every mode, where card's answers to its questions are the boundary"
	return refuse(adapter, append([]refusal{
		{req.AllowedTools != nil, "allowed_tools", why + "; pick the permission mode"},
		{req.MaxTurns > 0, "max_turns", "ACP has no turn cap; use timeout_secs"},
		{req.NoSession, "session_id", "an ACP agent keeps its sessions itself; card cannot discard one"},
		{req.SessionID != "", "session_id", "over ACP the agent names the session (session/new) and reports it in the session event"},
	}, more...)...)
}

// acpPlan finishes the plan of an adapter run over ACP in every mode: the
// ask channel in ask mode, the images as prompt blocks, and the session to
// continue inside the protocol (session/load), never on argv.
func acpPlan(p Plan, req Request) Plan {
	mode := req.EffectiveMode()
	if mode == ModeAsk {
		p.Ask = &AskPlan{Channel: AskViaSession}
	}
	p.Input = Input{Images: req.Images}
	p.Session = &SessionPlan{Protocol: ProtocolACP, Adapter: req.Adapter, resume: req.Resume, mode: mode}
	return p
}

// acpMetaToolName is the tool name an agent puts in a call's _meta
// (Qwen Code's toolName), else the call's kind.
func acpMetaToolName(c acp.ToolCallUpdate) string {
	var m struct {
		ToolName string `json:"toolName"`
	}
	if len(c.Meta) > 0 && json.Unmarshal(c.Meta, &m) == nil && m.ToolName != "" {
		return m.ToolName
	}
	return string(c.Kind)
}
