package spawn

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/agent"
)

// piModeTools are the built-in tools each mode hands Pi. This list is the
// whole of Pi's boundary, and it is not enforced: Pi has no sandbox, no
// per-command allowlist and no approval prompts, so read-only means the
// model was given no tool that writes. Bash is handed out only in bypass,
// because with bash the model can write anywhere.
var piModeTools = map[Mode][]string{
	ModeReadOnly: {"read", "grep", "find", "ls"},
	ModeEdit:     {"read", "grep", "find", "ls", "edit", "write"},
	ModeBypass:   {"read", "grep", "find", "ls", "edit", "write", "bash"},
	// In ask mode every tool is offered and card's gate asks about each
	// one outside read_only's set (piAskGate).
	ModeAsk: {"read", "grep", "find", "ls", "edit", "write", "bash"},
}

// piThinking are the --thinking levels of Pi 0.73.1 that card's effort
// levels map onto by name.
var piThinking = []string{"low", "medium", "high", "xhigh"}

// buildPi maps the request onto Pi 0.73.1. Read-only is NOT enforced (see
// piModeTools); detect discloses it as not_enforced and the daemon makes a
// read_only request acknowledge that.
//
// The rest is hermetic sealing: each flag drops a file outside the request
// that could otherwise change what the agent does.
//
//   - -p --mode json: print mode (piped stdin is the prompt), one JSON event
//     per line.
//   - --no-session: a run without a session writes no session file nobody
//     resumes; a run with one (session_id, or resume with the id card
//     gave it) keeps it where card says (piSession).
//   - -nc: no AGENTS.md / CLAUDE.md from the working dir.
//   - --no-extensions, --no-skills, --no-prompt-templates, --no-themes: none
//     of the user's or the project's add-ons (extensions are code).
//   - Pi 0.73.1 has no opt-out for project config (-na is "Unknown
//     option"); these four flags are what there is.
//     The working dir's .pi/settings.json and .pi/SYSTEM.md are still read,
//     which is one more reason read-only is disclosed as not enforced.
//   - --offline: no update check or other startup network call.
//   - edit: card's gate extension (-e, pi_edit.go) keeps edit and write
//     inside the working dir; Pi itself would write anywhere.
//   - ask (checked against Pi 0.73.1 with a loopback model stand-in): `pi
//     --mode rpc` (pi_rpcmode.go) with card's ask gate loaded by -e from
//     the run's private dir. The model is handed every built-in tool;
//     read, grep, find and ls run unasked, as in read_only, and every
//     other call (bash, edit, write) is asked.
func buildPi(bin string, req Request) (Plan, error) {
	mode := req.EffectiveMode()
	if req.MaxTurns > 0 {
		return Plan{}, errUnsupported("max_turns", agent.Pi, "Pi has no turn cap; use timeout_secs")
	}
	session, id, err := piSession(req)
	if err != nil {
		return Plan{}, err
	}
	if req.Effort != "" && !contains(piThinking, req.Effort) {
		return Plan{}, errUnsupported("effort", agent.Pi, "Pi's --thinking levels stop at xhigh; use "+strings.Join(piThinking, ", "))
	}
	tools, err := piTools(mode, req.AllowedTools)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras), SessionID: id, NoSessionID: id == ""}
	p.Env["PI_OFFLINE"] = "1"
	args := append([]string{}, req.Extras.Args...)
	if mode == ModeAsk {
		args = append(args, "--mode", "rpc")
	} else {
		args = append(args, "-p", "--mode", "json")
	}
	args = append(args, session...)
	args = append(args, "-nc", "--no-extensions")
	switch mode {
	case ModeEdit:
		// The gate that keeps edit and write inside the cwd (pi_edit.go).
		args = append(args, "-e", p.privateFile(piEditGateFile, piEditGate))
	case ModeAsk:
		// The gate that asks card about each call outside read_only's
		// tools (pi_rpcmode.go); an explicit -e loads despite
		// --no-extensions.
		args = append(args, "-e", p.privateFile(piAskGateFile, piAskGate))
	}
	args = append(args, "--no-skills", "--no-prompt-templates", "--no-themes", "--offline")
	if len(tools) == 0 {
		args = append(args, "--no-tools")
	} else {
		args = append(args, "--tools", strings.Join(tools, ","))
	}
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
	if req.Effort != "" {
		args = append(args, "--thinking", req.Effort)
	}
	// Pi reads either flag's value as a file when one exists at that path,
	// so the text itself never reaches argv.
	args = append(args, p.systemPromptFlag(req, "system-prompt.md", "--system-prompt", "--append-system-prompt")...)
	if mode == ModeAsk {
		// Images go in the prompt command, as base64.
		p.Input = Input{Images: req.Images}
		p.Ask = &AskPlan{Channel: AskViaSession}
		p.Session = &SessionPlan{Protocol: ProtocolPiRPC, Adapter: agent.Pi}
	} else {
		// An @path argument attaches the file to the prompt read from
		// stdin. Pi passes an image on only to a model that declares image
		// input; for any other it sends "(image omitted: model does not
		// support images)" instead, and its own output does not say so.
		for _, ref := range p.imageFiles(req.Images) {
			args = append(args, "@"+ref)
		}
	}
	// Pi prints the user message with the images' base64 three times
	// (message_start, message_end, agent_end).
	p.OutputAllowance = echoAllowance(req.Images, 3)
	p.Args = args
	return p, nil
}

// piSession is how a Pi run keeps its conversation: --no-session without
// a session, else a file card names, <AgentSessionDir>/pi/<cwd key>/<id>.jsonl,
// given to Pi by path (--session) with --session-dir naming its directory
// too, so nothing of the session is looked up or written elsewhere (Pi
// 0.73.1 opens the file when it exists and starts a conversation that it
// writes there when not). The id is a UUID card chose (session_id, or the
// one a resume names), so the path never leaves card's directory. The cwd
// is in the path because Pi runs a session in the cwd its file records:
// a resume from another cwd finds no file and starts afresh in its own
// cwd rather than work in a directory this request never named.
func piSession(req Request) (args []string, id string, err error) {
	id, field := req.SessionID, "session_id"
	if req.Resume != "" {
		id, field = req.Resume, "resume"
	}
	if id == "" {
		return []string{"--no-session"}, "", nil
	}
	if !uuidRE.MatchString(id) {
		return nil, "", &FieldError{field, "a Pi session is named by the UUID card gave it (its agent_session_id), such as 123e4567-e89b-12d3-a456-426614174000"}
	}
	if req.AgentSessionDir == "" {
		return nil, "", errUnsupported(field, agent.Pi, "card has no directory to keep Pi's session files in")
	}
	sum := sha256.Sum256([]byte(req.Cwd))
	dir := filepath.Join(req.AgentSessionDir, "pi", hex.EncodeToString(sum[:12]))
	id = strings.ToLower(id)
	return []string{"--session-dir", dir, "--session", filepath.Join(dir, id+".jsonl")}, id, nil
}

// piTools narrows the mode's tools by the request; a tool the mode does not
// hand out is refused rather than dropped.
func piTools(mode Mode, requested []string) ([]string, error) {
	return narrowTools("pi", "offers", mode, piModeTools[mode], requested, func(tool string) string { return tool })
}

// piDriver is Pi's driver: one-shot `pi -p`, and its RPC mode in ask mode.
var piDriver = Driver{
	For:           agent.Pi,
	Build:         buildPi,
	NewParser:     func() Parser { return newPiParser() },
	CheckExtraArg: noExtraArgCheck,
	MCP:           MCPHandover{Refused: "Pi has no MCP client"},
	// Pi writes its conversation where card says (piSession).
	CardNamesSession: true,
	Session:          SessionDriver{Protocol: ProtocolPiRPC, New: newPiRPC},
	Caps: CapsDriver{
		// Each assistant message_end carries its tokens and its cost.
		CostReported: true,
		TokensWhen:   TokensPerCall,
	},
	Warm: WarmDriver{Build: buildPiWarm},
	Channels: Channels{
		OneShot: ArgChannel{Name: "pi -p --mode json (one-shot runs)"},
		Session: ArgChannel{Name: "pi --mode rpc (ask runs, sessions and ACP sessions)", Refused: map[string]string{
			"-p":      "print mode is pi's one-shot mode, which card sets itself where it runs one; a session's pi takes its prompts over rpc",
			"--print": "print mode is pi's one-shot mode, which card sets itself where it runs one; a session's pi takes its prompts over rpc",
		}},
	},
}
