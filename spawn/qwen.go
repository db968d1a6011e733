package spawn

import (
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Qwen Code (`qwen --acp`), as checked against Qwen Code 0.24.4 with a
// loopback model stand-in:
//
//   - --approval-mode default: Qwen Code asks before every edit and every
//     shell command its classifier does not judge read-only, and card
//     answers by the mode. A new session otherwise starts in "auto" (a
//     model call of its own approves what it judges safe), and auto-edit
//     writes outside the project unasked. The flag holds for sessions it
//     resumes and loads as well as new ones.
//   - bypass → --approval-mode yolo (operator-allowed only).
//   - It is pointed at a provider by its own variables, which the
//     operator gives in card.toml [adapters.qwen-code] env:
//     OPENAI_API_KEY, OPENAI_BASE_URL and OPENAI_MODEL for any endpoint
//     that speaks Chat Completions.
//   - card declares fs and serves Qwen Code's file reads and writes
//     itself, holding the mode on each: a write Qwen Code makes unasked
//     still comes to card.
//   - The session is put in that approval mode again after session/load
//     or session/resume (modes), should a later release forget the flag
//     there.
//   - A cancelled run sends session/cancel first: its shell commands run
//     on a terminal of their own, out of the agent's process group.
//   - Its tokens come in the last message chunk's _meta, not the result.
//   - A model call that answers 429 is retried silently (no update at
//     all, for minutes): the run's deadline and stall watchdog bound it,
//     since Qwen Code has no setting that does.
func buildQwen(bin string, req Request) (Plan, error) {
	if err := acpEveryMode(agent.QwenCode, req,
		refusal{req.Effort != "", "effort", "Qwen Code has no effort flag"},
		refusal{req.SystemPrompt != "", "system_prompt", "Qwen Code takes a system prompt only on its argv (--system-prompt), where every local user can read it"},
	); err != nil {
		return Plan{}, err
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := append([]string{}, req.Extras.Args...)
	approval := "default"
	if req.EffectiveMode() == ModeBypass {
		approval = "yolo"
	}
	args = append(args, "--acp", "--approval-mode", approval)
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
	p.Args = args
	return acpPlan(p, req), nil
}

// qwenDriver is Qwen Code's driver: ACP in every mode.
var qwenDriver = Driver{
	For:   agent.QwenCode,
	Build: buildQwen,
	// Never read: every plan of Qwen Code runs over ACP.
	NewParser:     func() Parser { return nil },
	CheckExtraArg: noExtraArgCheck,
	BypassValues:  map[string]string{"yolo": "Qwen Code's yolo approval mode"},
	MCP:           MCPHandover{Refused: "card hands Qwen Code no MCP server of a client's (its session/new carries none)"},
	Protocols:     map[Protocol]func(Plan) protocol{ProtocolACP: acpClientOf(qwenACP)},
	Caps: CapsDriver{
		NoCost:     "Qwen Code reports tokens but no cost, and has no spending cap of its own",
		TokensWhen: TokensTurnEnd, // the last message chunk's _meta.usage
	},
	Warm: WarmDriver{Build: buildQwen},
	Channels: Channels{
		OneShot: ArgChannel{Name: "qwen --acp (one-shot runs)"},
		Session: ArgChannel{Name: "qwen --acp (sessions and ask runs)"},
	},
}

// qwenACP is Qwen Code's dialect of ACP: it names the tool in a call's
// _meta, and card answers its questions by the session's mode.
var qwenACP = acpDialect{
	toolName:    acpMetaToolName,
	exitFailure: func(ExitInfo) *api.RunError { return nil },
	authHint:    "give Qwen Code a provider in card.toml [adapters.qwen-code] env (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL) or in ~/.qwen/settings.json",
	byMode:      true,
	fs:          true,
	modes:       map[Mode]string{ModeReadOnly: "default", ModeEdit: "default", ModeAsk: "default", ModeBypass: "yolo"},
	cancelFirst: true,
	metaUsage:   acpMetaUsage,
}
