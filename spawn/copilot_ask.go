package spawn

import (
	"strings"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
)

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
	if req.AllowedTools != nil {
		return Plan{}, errUnsupported("allowed_tools", agent.Copilot, "in ask mode Copilot asks about every call outside read_only; an --allow-tool entry would skip the question instead of narrowing")
	}
	if req.SessionID != "" {
		return Plan{}, errUnsupported("session_id", agent.Copilot, "in ask mode Copilot runs over ACP, where the agent names the session (session/new) and reports it in the session event")
	}
	p := copilotPlan(bin, req)
	args := append([]string{}, req.Extras.Args...)
	args = append(args, "--acp")
	args = append(args, copilotAlways...)
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
	if req.Effort != "" {
		args = append(args, "--reasoning-effort", req.Effort)
	}
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
	exitFailure: func(exit ExitInfo) *Failure {
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
