package spawn

import (
	"fmt"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
)

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
	if req.SessionID != "" {
		return Plan{}, errUnsupported("session_id", agent.Gemini, "in ask mode Gemini runs over ACP, where the agent names the session (session/new) and reports it in the session event")
	}
	if req.Resume != "" {
		return Plan{}, errUnsupported("resume", agent.Gemini, geminiNoLoad+"; resume in read_only or edit mode, which continue it one-shot with --resume")
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := append([]string{}, req.Extras.Args...)
	args = append(args, "--acp", "--approval-mode", "default")
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
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
	exitFailure: func(exit ExitInfo) *Failure {
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
