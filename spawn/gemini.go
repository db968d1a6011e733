package spawn

import (
	"fmt"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// geminiApprovalMode maps card's mode onto `gemini --approval-mode`
// (choices in 0.61.0: default, auto_edit, yolo, plan).
//
//   - read_only → plan: Gemini's own read-only mode.
//   - edit → auto_edit: edit tools are auto-approved; shell still needs an
//     approval that headless cannot give, so it is refused.
//   - bypass → yolo (operator-allowed only).
//   - ask → default, over ACP (buildGeminiAsk).
func geminiApprovalMode(m Mode) string {
	return modeValue(m, "plan", "auto_edit", "yolo")
}

// buildGemini runs Gemini headless: stdin not a terminal and no -p makes it
// read the whole prompt from stdin (checked against 0.61.0), so the prompt
// never reaches argv.
//
// Workspace trust: card does NOT pass --skip-trust. Trusting a folder makes
// Gemini load that folder's .gemini/settings.json, MCP servers and hooks —
// code a cloned repository chose. In an untrusted folder Gemini exits 55 and
// the parser reports `untrusted_workspace` with what to do: trust the folder
// once in interactive `gemini`, or have the operator opt in for every run
// with args = ["--skip-trust"] (or env GEMINI_CLI_TRUST_WORKSPACE = "true")
// in card.toml [adapters.gemini]. An untrusted folder would also silently
// downgrade plan to default, so refusing is the honest outcome.
func buildGemini(bin string, req Request) (Plan, error) {
	mode := req.EffectiveMode()
	if err := refuse(agent.Gemini,
		refusal{req.AllowedTools != nil, "allowed_tools", "Gemini's --allowed-tools auto-approves tools (it widens, never narrows); its boundary is the approval mode"},
		refusal{req.MaxTurns > 0, "max_turns", "the turn cap is the model.maxSessionTurns setting, not a flag; use timeout_secs"},
		refusal{req.Effort != "", "effort", "Gemini CLI has no effort flag"},
		refusal{req.NoSession, "session_id", "Gemini CLI always records its session; it cannot discard it"},
		refusal{req.SystemPromptAppend, "system_prompt", "Gemini can replace its system prompt from a file (GEMINI_SYSTEM_MD) but not append to it"},
	); err != nil {
		return Plan{}, err
	}
	if mode == ModeAsk {
		return buildGeminiAsk(bin, req)
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := append([]string{}, req.Extras.Args...)
	args = append(args, "--output-format", "stream-json", "--approval-mode", geminiApprovalMode(mode))
	args = withValue(args, "--model", req.Model)
	switch {
	case req.SessionID != "":
		args = append(args, "--session-id", req.SessionID)
	case req.Resume != "":
		args = append(args, "--resume", req.Resume)
	}
	if req.SystemPrompt != "" {
		p.Env["GEMINI_SYSTEM_MD"] = p.privateFile("system.md", req.SystemPrompt)
	}
	if len(req.Images) > 0 {
		// An @path in the prompt attaches a file, but only one inside the
		// workspace: outside it the reference is dropped without a word.
		// The private directory joins the workspace for this run.
		args = append(args, "--include-directories", DirRef())
		p.Input = Input{Format: InputAtFiles, Files: p.imageFiles(req.Images)}
	}
	p.Args = args
	return p, nil
}

// geminiDriver is Gemini CLI's driver: one-shot with the prompt on stdin, and ACP in
// ask mode.
var geminiDriver = Driver{
	StdoutToFile:  true,
	For:           agent.Gemini,
	Build:         buildGemini,
	NewParser:     func() Parser { return newGeminiParser() },
	CheckExtraArg: noExtraArgCheck,
	BypassValues:  map[string]string{"yolo": "Gemini's yolo mode"},
	MCP:           MCPHandover{Refused: "Gemini CLI 0.61 takes MCP servers only from its settings files (there is no flag), and card does not write a person's settings"},
	Protocols:     map[Protocol]func(Plan) protocol{ProtocolACP: acpClientOf(geminiACP)},
	Caps: CapsDriver{
		NoCost:     "gemini reports tokens but no cost, and has no spending cap of its own",
		TokensWhen: TokensTurnEnd, // the result line's stats
	},
	Warm: WarmDriver{Build: buildGeminiWarm},
	Channels: Channels{
		OneShot: ArgChannel{Name: "gemini with the prompt on stdin (one-shot runs)"},
		Session: ArgChannel{Name: "gemini --acp (ask runs, sessions and ACP sessions)", Refused: map[string]string{
			"-r":       geminiNoLoad,
			"--resume": geminiNoLoad,
		}},
	},
}

// buildGeminiWarm keeps Gemini warm over ACP (acp_client.go), a new
// session only: its session/load loses the session it loads
// (geminiNoLoad), so a cold turn continues a Gemini conversation one-shot,
// with --resume, and in ask mode not at all.
func buildGeminiWarm(bin string, req Request) (Plan, error) {
	if req.Resume != "" {
		return Plan{}, errUnsupported("resume", agent.Gemini, geminiNoLoad+"; resume in a one-shot turn")
	}
	return buildACPWarm(bin, req)
}

// Gemini CLI in ask mode, as checked against Gemini CLI 0.61.0 with a
// loopback model stand-in:
//
//   - --acp: Gemini speaks the Agent Client Protocol on its stdio and asks
//     about a tool call with session/request_permission. Its one-shot mode
//     cannot ask: it denies whatever it would ask about.
//   - --approval-mode default: the mode that asks. plan offers no shell or
//     write tools at all, auto_edit runs edits unasked, yolo runs
//     everything.
//   - What runs unasked is Gemini's own read-only set (read_file,
//     list_directory, glob, grep_search, google_web_search, its subagents)
//     plus the shell commands its policy engine classifies as known safe
//     with every path inside the workspace (ls, cat of a file in the
//     working dir): it turns an ask into an allow for those whatever the
//     policy says, so card cannot make them ask. They read only the
//     working dir, which read_only also reads. Every other shell command,
//     write_file, replace, web_fetch and activate_skill is asked.
//   - No --skip-trust, as in every mode; in ACP an untrusted folder does
//     not stop the run, and Gemini then ignores the folder's own settings.
func buildGeminiAsk(bin string, req Request) (Plan, error) {
	if err := refuse(agent.Gemini,
		refusal{req.SessionID != "", "session_id", "in ask mode Gemini runs over ACP, where the agent names the session (session/new) and reports it in the session event"},
		refusal{req.Resume != "", "resume", geminiNoLoad + "; resume in read_only or edit mode, which continue it one-shot with --resume"},
	); err != nil {
		return Plan{}, err
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := append([]string{}, req.Extras.Args...)
	args = append(args, "--acp", "--approval-mode", "default")
	args = withValue(args, "--model", req.Model)
	if req.SystemPrompt != "" {
		p.Env["GEMINI_SYSTEM_MD"] = p.privateFile("system.md", req.SystemPrompt)
	}
	// Images travel in session/prompt as image blocks, not as files.
	p.Input = Input{Images: req.Images}
	p.Args = args
	p.Ask = &AskPlan{Channel: AskViaSession}
	p.Session = &SessionPlan{Protocol: ProtocolACP, Adapter: agent.Gemini}
	return p, nil
}

// geminiNoLoad is why no ACP run of Gemini continues a session. Seen with
// Gemini CLI 0.61.0 against a stand-in, though it declares loadSession:
// session/load starts a new recording of the session before it reads the
// saved one, in a file named by the minute and the session's short id. In
// the minute the session was saved that is the saved file itself, and the
// new recording's first record replaces its history with nothing ("No
// previous sessions found for this project."). In a later minute the load
// works, but leaves a file of the same short id with nothing resumable in
// it, and Gemini's start-up clean-up (general.sessionRetention, on by
// default) then deletes every file of that short id, the saved session
// with it, on the next start that is not that session's own. `--resume
// <id>` at an ACP start records into the saved file the same way.
const geminiNoLoad = "Gemini CLI's ACP mode loses a session it loads (session/load overwrites the saved history in the minute it was saved, and later leaves a file that makes Gemini's next start delete it)"

// geminiACP is Gemini's dialect of ACP. It names the tool in front of
// each call id; its fatal exit codes are those of its one-shot mode.
var geminiACP = acpDialect{
	toolName: func(c acp.ToolCallUpdate) string {
		if m := idToolName.FindStringSubmatch(c.ToolCallID); m != nil {
			return m[1]
		}
		return string(c.Kind)
	},
	exitFailure: func(exit ExitInfo) *api.RunError {
		k, ok := geminiExitKinds[exit.Code]
		if !ok {
			return nil
		}
		return failure(k.kind, clip(fmt.Sprintf("gemini exited %d: %s — %s", exit.Code, lastLine(exit.StderrTail), k.hint), 2048))
	},
	authHint: geminiExitKinds[41].hint,
	unlisted: geminiUnlisted,
}

// geminiUnlisted are the commands Gemini CLI 0.61.0 lists over ACP (each
// subcommand by its whole name: "memory show", "extensions install", …)
// that card does not pass on. They run inside the CLI, not as tool calls,
// so no permission mode of the session judges them; these change the
// CLI's own extensions, outside the session's directory (install fetches
// a repository from the network). "extensions list" and "explore" only
// tell, and stay.
var geminiUnlisted = map[string]string{
	"extensions install":   geminiExtensionsWhy,
	"extensions link":      geminiExtensionsWhy,
	"extensions uninstall": geminiExtensionsWhy,
	"extensions update":    geminiExtensionsWhy,
	"extensions enable":    geminiExtensionsWhy,
	"extensions disable":   geminiExtensionsWhy,
}

const geminiExtensionsWhy = "changes the CLI's installed extensions, outside the session's directory, with no tool call for the session's mode to judge"
