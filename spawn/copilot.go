package spawn

import (
	"fmt"
	"strings"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// copilotModeTools are the permission kinds (`--allow-tool`) each mode
// grants, and the ones it denies outright. Read-only has no `shell`: a shell
// can write anywhere, whatever the mode says; edit adds `write` (Copilot's
// path verification keeps it to the working dir, and --disallow-temp-dir
// takes away the temp dir it would otherwise add) and still no shell.
// Bypass grants every built-in kind by name rather than --allow-all-tools or
// --allow-all-paths, which card never passes: path verification stays on.
var copilotModeTools = map[Mode]struct{ allow, deny []string }{
	ModeReadOnly: {allow: []string{"read"}, deny: []string{"write", "shell"}},
	ModeEdit:     {allow: []string{"read", "write"}, deny: []string{"shell"}},
	ModeBypass:   {allow: []string{"read", "write", "shell"}},
}

// buildCopilot maps the request onto headless Copilot, checked against
// `copilot --help` of 1.0.102.
//
//   - No -p: piped stdin is the prompt, and Copilot ignores piped input when
//     -p is given, so both together would send an empty prompt.
//   - --output-format json: one JSON event per line (JSONL).
//   - --no-ask-user: nobody is there to answer; a question would stall the
//     run until its deadline.
//   - --deny-tool write (and shell) in read_only: a deny beats any allow,
//     so the allowlist and the deny cannot be talked out of agreeing.
//   - --no-custom-instructions, --disable-builtin-mcps: a cloned
//     repository's AGENTS.md and GitHub's MCP servers are not part of the
//     request.
//   - --no-auto-update and COPILOT_AUTO_UPDATE=false: the binary detection
//     probed is the one that runs.
//   - COPILOT_ALLOW_ALL=false: an inherited COPILOT_ALLOW_ALL would grant
//     every tool (and "true" also trusts the folder's hooks).
func buildCopilot(bin string, req Request) (Plan, error) {
	mode := req.EffectiveMode()
	if err := refuse(agent.Copilot,
		refusal{req.MaxTurns > 0, "max_turns", "Copilot CLI has no turn cap outside autopilot mode; use timeout_secs"},
		refusal{req.NoSession, "session_id", "Copilot CLI always saves its session; it cannot discard it"},
		refusal{req.SystemPrompt != "", "system_prompt", "Copilot CLI has no system-prompt flag, and its custom-instruction files are turned off so a repository's AGENTS.md cannot steer a run"},
	); err != nil {
		return Plan{}, err
	}
	if mode == ModeAsk {
		return buildCopilotAsk(bin, req)
	}
	allow, err := copilotAllow(mode, req.AllowedTools)
	if err != nil {
		return Plan{}, err
	}
	p := copilotPlan(bin, req)
	args := append([]string{}, req.Extras.Args...)
	args = append(args, "--output-format", "json")
	args = append(args, copilotAlways...)
	// One flag per tool: the options are variadic, and one value each
	// cannot be split differently by a later release.
	for _, t := range copilotModeTools[mode].deny {
		args = append(args, "--deny-tool", t)
	}
	for _, t := range allow {
		args = append(args, "--allow-tool", t)
	}
	args = withValue(args, "--model", req.Model)
	args = withValue(args, "--reasoning-effort", req.Effort)
	switch {
	case req.SessionID != "":
		args = append(args, "--session-id", req.SessionID)
	case req.Resume != "":
		// --resume takes an optional value: only the = form binds it.
		args = append(args, "--resume="+req.Resume)
	}
	for _, ref := range p.imageFiles(req.Images) {
		args = append(args, "--attachment", ref)
	}
	// Copilot prints its user.message with every attachment's base64.
	p.OutputAllowance = echoAllowance(req.Images, 1)
	p.Args = args
	return p, nil
}

// copilotAlways are passed in every mode (see buildCopilot for why).
var copilotAlways = []string{"--no-ask-user", "--no-auto-update", "--no-custom-instructions", "--disable-builtin-mcps", "--disallow-temp-dir", "--no-color"}

// copilotPlan is the plan every mode starts from: the operator's env, and
// the env that keeps an inherited allow-all and auto-update out.
func copilotPlan(bin string, req Request) Plan {
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	p.Env["COPILOT_ALLOW_ALL"] = "false"
	p.Env["COPILOT_AUTO_UPDATE"] = "false"
	return p
}

// copilotAllow returns the --allow-tool entries for a mode narrowed by the
// request. An entry is a permission kind with an optional argument
// ("shell(git log:*)"); its kind must be one the mode grants.
func copilotAllow(mode Mode, requested []string) ([]string, error) {
	return narrowTools("copilot", "grants", mode, copilotModeTools[mode].allow, requested, func(entry string) string {
		kind, _, _ := strings.Cut(entry, "(")
		return kind
	})
}

// copilotDriver is Copilot CLI's driver: one-shot with the prompt on stdin, and ACP in
// ask mode.
//
// The MCP hand-over: --additional-mcp-config @<private file> with
// {"mcpServers": {"client": {"type": "http", "url": …, "tools": ["*"]}}},
// and --allow-tool client.
var copilotDriver = Driver{
	StdoutToFile:  true,
	For:           agent.Copilot,
	Build:         buildCopilot,
	NewParser:     func() Parser { return newCopilotParser() },
	CheckExtraArg: noExtraArgCheck,
	MCP: MCPHandover{Add: func(p *Plan, endpoint string) {
		p.Args = append(p.Args, "--additional-mcp-config", "@"+p.privateFile("mcp.json", mcpConfig(endpoint, map[string]any{"tools": []string{"*"}})), "--allow-tool", MCPServerName)
	}},
	Protocols: map[Protocol]func(Plan) protocol{ProtocolACP: acpClientOf(copilotACP)},
	Caps: CapsDriver{
		NoCost: "copilot reports no cost; its own cap (--max-ai-credits) counts AI credits, not dollars, from 30 up",
		// Copilot CLI 1.0.102's JSON stream, run against a provider of the
		// operator's, has no token counts at all: no assistant.usage, and a
		// result whose usage holds only durations and premium requests.
		NoTokens: "copilot's JSON output reports no token counts (checked with Copilot CLI 1.0.102 on a provider of the operator's), so card cannot hold a token cap",
	},
	Warm: WarmDriver{Build: buildCopilotWarm},
	Channels: Channels{
		OneShot: ArgChannel{Name: "copilot with the prompt on stdin (one-shot runs)"},
		// Seen with 1.0.102: "--attachment is only supported in
		// non-interactive prompt mode (-p/--prompt or piped stdin). It is
		// not honored by --server, --headless, --acp, or interactive
		// mode." and exit 1 before initialize.
		Session: ArgChannel{Name: "copilot --acp (ask runs, sessions and ACP sessions)", Refused: map[string]string{
			"--attachment": "copilot exits at once over ACP with it (images go in session/prompt)",
		}},
	},
}

// buildCopilotWarm keeps Copilot warm over ACP (acp_client.go) in
// read_only and ask only. Seen with Copilot CLI 1.0.102 against a
// stand-in: over ACP, --allow-tool write created a file outside the
// working dir unasked, where the one-shot run's path verification refuses
// it; edit and bypass turns run one-shot, inside that boundary.
func buildCopilotWarm(bin string, req Request) (Plan, error) {
	if m := req.EffectiveMode(); m == ModeEdit || m == ModeBypass {
		return Plan{}, fmt.Errorf("%s: in %s mode Copilot's ACP channel does not keep writes inside the working dir: %w", req.Adapter, m, ErrNoWarmChannel)
	}
	return buildACPWarm(bin, req)
}

// Copilot CLI in ask mode, as checked against Copilot CLI 1.0.102 with a
// loopback model stand-in:
//
//   - --acp: Copilot speaks the Agent Client Protocol on its stdio and asks
//     with session/request_permission. Its one-shot mode cannot ask (card
//     runs it with --no-ask-user, and without it a question is denied for
//     want of an interactive user).
//   - No --allow-tool and no --deny-tool: with neither, an ACP session asks
//     about every shell command (even ls), every file creation or edit
//     and every path outside the working dir, and runs view, grep and
//     glob inside the working dir unasked — read_only's boundary, narrower
//     if anything. Never --allow-all, --allow-all-tools or --yolo, and
//     COPILOT_ALLOW_ALL=false so an inherited one cannot grant them.
//   - The flags of every mode that keep a cloned repository and the
//     network out (--no-custom-instructions, --disable-builtin-mcps,
//     --disallow-temp-dir, --no-auto-update) and --no-ask-user (card asks
//     allow or deny, never a free-form question).
//   - A denied call ends Copilot's turn: it answers the prompt at once
//     ("Info: Operation cancelled by user") without calling the model
//     again, so the model never hears the denial.
func buildCopilotAsk(bin string, req Request) (Plan, error) {
	if err := refuse(agent.Copilot,
		refusal{req.AllowedTools != nil, "allowed_tools", "in ask mode Copilot asks about every call outside read_only; an --allow-tool entry would skip the question instead of narrowing"},
		refusal{req.SessionID != "", "session_id", "in ask mode Copilot runs over ACP, where the agent names the session (session/new) and reports it in the session event"},
	); err != nil {
		return Plan{}, err
	}
	p := copilotPlan(bin, req)
	args := append([]string{}, req.Extras.Args...)
	args = append(args, "--acp")
	args = append(args, copilotAlways...)
	args = withValue(args, "--model", req.Model)
	args = withValue(args, "--reasoning-effort", req.Effort)
	// Images travel in session/prompt as image blocks, not as files.
	p.Input = Input{Images: req.Images}
	p.Args = args
	p.Ask = &AskPlan{Channel: AskViaSession}
	p.Session = &SessionPlan{Protocol: ProtocolACP, Adapter: agent.Copilot, resume: req.Resume}
	return p, nil
}

// copilotACP is Copilot's dialect of ACP. Its calls carry the model's own
// ids and no tool name, so a call is named by its ACP kind (execute, edit,
// read, ...): allow_always then covers the kind, as Copilot's own "always
// allow" does.
var copilotACP = acpDialect{
	toolName: func(c acp.ToolCallUpdate) string { return string(c.Kind) },
	exitFailure: func(exit ExitInfo) *api.RunError {
		if strings.Contains(exit.StderrTail, copilotNoAuth) {
			return copilotNoAuthFailure()
		}
		return nil
	},
	authHint: copilotAuthHint,
	notice:   copilotNotice,
	// Seen with 1.0.102: three alike prompts in one session reported
	// 10/5, 20/10 and 30/15 tokens.
	sessionUsage: true,
	unlisted:     copilotUnlisted,
}

// copilotUnlisted are the commands Copilot CLI 1.0.102 lists over ACP (32
// of them) that card does not pass on, with why. They run inside the CLI,
// not as tool calls: these would widen what the session's permission mode
// and cwd allow, act outside any turn of card's, or change the CLI's own
// setup outside the session's directory.
var copilotUnlisted = map[string]string{
	"add-dir":     "grants the agent a directory outside the session's cwd",
	"cwd":         "moves the agent out of the session's cwd",
	"allow-all":   "allows every tool, past the session's permission mode",
	"permissions": "switches the CLI's own permission mode, past the session's",
	"autopilot":   "lets the agent go on without asking, past the session's permission mode",
	"sandbox":     "changes the file and network permissions the session's mode set",
	"model":       "changes the model inside the CLI; the session's model is card's (set_config_option)",
	"every":       "schedules prompts that would run outside any turn of card's",
	"after":       "schedules a prompt that would run outside any turn of card's",
	"remote":      "hands the session to GitHub's web and mobile clients, outside card",
	"mcp":         "changes the CLI's MCP servers, outside the session's directory",
	"plugin":      "installs plugins into the CLI, outside the session's directory",
}

// copilotNotice reads Copilot's API trouble, which its ACP mode reports as
// message text, one chunk each, and then ends the turn as end_turn
// (checked against 1.0.102 with a stand-in answering 401, 429 and 500):
//
//	Info: Request failed due to a transient API error. Retrying...
//	Error: Authentication failed with provider at http://… (HTTP 401).
//	Error: Failed to get response from the AI model; retried 5 times (…) Last error: 429 …
//
// A model's own answer streams in many chunks, so a whole chunk in these
// words is Copilot speaking, not the model.
func copilotNotice(text string) (retry, failed bool) {
	switch {
	case strings.HasPrefix(text, "Info: Request failed due to a transient API error"):
		return true, false
	case strings.HasPrefix(text, "Error: ") && (strings.Contains(text, "(HTTP ") || strings.Contains(text, "Failed to get response from the AI model") ||
		strings.Contains(text, "Authentication failed")):
		return false, true
	}
	return false, false
}
