package spawn

import "github.com/card-dev/card/agent"

// geminiApprovalMode maps card's mode onto `gemini --approval-mode`
// (choices in 0.61.0: default, auto_edit, yolo, plan).
//
//   - read_only → plan: Gemini's own read-only mode.
//   - edit → auto_edit: edit tools are auto-approved; shell still needs an
//     approval that headless cannot give, so it is refused.
//   - bypass → yolo (operator-allowed only).
//   - ask → default, over ACP (gemini_ask.go).
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
	if req.AllowedTools != nil {
		return Plan{}, errUnsupported("allowed_tools", agent.Gemini, "Gemini's --allowed-tools auto-approves tools (it widens, never narrows); its boundary is the approval mode")
	}
	if req.MaxTurns > 0 {
		return Plan{}, errUnsupported("max_turns", agent.Gemini, "the turn cap is the model.maxSessionTurns setting, not a flag; use timeout_secs")
	}
	if req.Effort != "" {
		return Plan{}, errUnsupported("effort", agent.Gemini, "Gemini CLI has no effort flag")
	}
	if req.NoSession {
		return Plan{}, errUnsupported("session_id", agent.Gemini, "Gemini CLI always records its session; it cannot discard it")
	}
	if req.SystemPromptAppend {
		return Plan{}, errUnsupported("system_prompt", agent.Gemini, "Gemini can replace its system prompt from a file (GEMINI_SYSTEM_MD) but not append to it")
	}
	if mode == ModeAsk {
		return buildGeminiAsk(bin, req)
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := append([]string{}, req.Extras.Args...)
	args = append(args, "--output-format", "stream-json", "--approval-mode", geminiApprovalMode(mode))
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
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
	Session:       SessionDriver{Protocol: ProtocolACP, New: acpClientOf(geminiACP)},
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
