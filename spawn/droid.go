package spawn

import (
	"fmt"
	"strings"

	"github.com/card-dev/card/agent"
)

// DroidEditRefused is the message of a Droid edit request. Droid's only way
// to let `exec` change files is an autonomy level (--auto low), and every
// level also runs shell commands that write outside the working dir
// (touch, mkdir, mv, cp anywhere that is not a system directory) — more than
// card's edit mode promises, and --auto is a flag card never passes.
const DroidEditRefused = "Droid can only edit through --auto, whose lowest level also lets it run file-writing shell commands outside the working dir; card never passes --auto. Use read_only, or bypass if the operator set allow_bypass = true"

// buildDroid maps the request onto `droid exec`, checked against
// `droid exec --help` of 0.225.2. Droid's boundary is what card does NOT
// pass: `exec` without --auto is read-only by Droid's own rules (reads, git
// reads, no file or system changes), and a blocked action fails instead of
// asking, so a bare `droid exec` neither writes nor stalls.
//
//   - read_only → nothing added: Droid's default autonomy.
//   - edit → refused (DroidEditRefused).
//   - bypass → --skip-permissions-unsafe, only when the operator set
//     allow_bypass: it is exactly "no agent-side protection".
//   - -o stream-json: one JSON event per line. The prompt is stdin.
//   - allowed_tools → --only-tools, which selects among the tools Droid
//     offers and cannot raise the autonomy level; MCP selectors are refused
//     because they would add tools rather than narrow them.
//   - resume in read_only runs over stream-jsonrpc, as ask mode does, with
//     droid.load_session and every question denied (resumeOverRPC): `droid
//     exec -s ID` fetches the session from Factory's API before it reads
//     the local one, and exits 1 printing nothing when it cannot (seen
//     offline with a custom model). A resume that needs what only argv
//     carries (allowed_tools, system_prompt) or bypass keeps -s.
func buildDroid(bin string, req Request) (Plan, error) {
	mode := req.EffectiveMode()
	if mode == ModeEdit {
		return Plan{}, &FieldError{"permission_mode", "edit is not supported by droid: " + DroidEditRefused}
	}
	if err := refuse(agent.Droid,
		refusal{req.MaxTurns > 0, "max_turns", "droid exec has no turn cap; use timeout_secs"},
		refusal{req.SessionID != "", "session_id", "Droid assigns its own session id (reported in the session event); use resume with it"},
		refusal{req.NoSession, "session_id", "droid exec always saves its session; it cannot discard it"},
		refusal{req.SystemPrompt != "" && !req.SystemPromptAppend, "system_prompt", "Droid can append to its system prompt from a file but cannot replace it; send system_prompt with system_prompt_append: true"},
	); err != nil {
		return Plan{}, err
	}
	if mode == ModeAsk {
		return buildDroidAsk(bin, req)
	}
	if resumeOverRPC(req) {
		p, err := buildDroidAsk(bin, req)
		p.Ask = nil // read_only: nobody to ask, every question denied
		return p, err
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := []string{"exec"}
	args = append(args, req.Extras.Args...)
	args = append(args, "-o", "stream-json")
	if mode == ModeBypass {
		args = append(args, "--skip-permissions-unsafe")
	}
	if req.AllowedTools != nil {
		if len(req.AllowedTools) == 0 {
			return Plan{}, errUnsupported("allowed_tools", agent.Droid, "--only-tools cannot select no tools at all; name at least one (for example Read)")
		}
		for _, t := range req.AllowedTools {
			if strings.HasPrefix(strings.ToUpper(t), "MCP:") {
				return Plan{}, &FieldError{"allowed_tools", fmt.Sprintf("%s selects MCP tools, which widens what Droid offers; allowed_tools may only narrow the mode", t)}
			}
		}
		args = append(args, "--only-tools", strings.Join(req.AllowedTools, ","))
	}
	if req.Model != "" {
		args = append(args, "-m", req.Model)
	}
	if req.Effort != "" {
		args = append(args, "-r", req.Effort)
	}
	if req.Resume != "" {
		args = append(args, "-s", req.Resume)
	}
	if req.SystemPrompt != "" {
		args = append(args, "--append-system-prompt-file", p.privateFile("append-system-prompt.md", req.SystemPrompt))
	}
	p.Args = args
	return p, nil
}

// resumeOverRPC says a read_only resume goes over stream-jsonrpc: what
// the request asks for is all that channel takes.
func resumeOverRPC(req Request) bool {
	return req.Resume != "" && req.EffectiveMode() == ModeReadOnly && req.AllowedTools == nil && req.SystemPrompt == ""
}

// droidDriver is Droid's driver: one-shot `droid exec`, and its
// stream-jsonrpc in ask mode.
var droidDriver = Driver{
	StdoutToFile:  true,
	For:           agent.Droid,
	Build:         buildDroid,
	NewParser:     func() Parser { return newDroidParser() },
	CheckExtraArg: noExtraArgCheck,
	MCP:           MCPHandover{Refused: "droid exec 0.225 takes MCP servers only from ~/.factory/mcp.json (there is no flag), and card does not write a person's settings"},
	Session:       SessionDriver{Protocol: ProtocolDroidRPC, New: newDroidClient},
	Caps: CapsDriver{
		NoCost:     "droid reports tokens but no cost, and has no spending cap of its own",
		TokensWhen: TokensTurnEnd, // the completion line's usage
	},
	Warm: WarmDriver{Build: buildDroidWarm},
	// Both channels are `droid exec`, one parser: nothing one takes fails
	// the other. What stream-jsonrpc ignores on argv, the model and the
	// reasoning effort, card carries into droid.initialize_session
	// (buildDroidAsk).
	Channels: Channels{
		OneShot: ArgChannel{Name: "droid exec -o stream-json (one-shot runs)"},
		Session: ArgChannel{Name: "droid exec --input-format stream-jsonrpc (ask runs, sessions and ACP sessions)"},
	},
}
