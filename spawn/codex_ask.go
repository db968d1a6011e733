package spawn

import "github.com/card-dev/card/agent"

// codexAskThread is the thread of ask mode: every command and every file
// change asked (approvalPolicy untrusted, reviewed by the user, which is
// card's broker), an approved one run in codexAskSandbox. It is saved for a
// later turn to resume unless ephemeral.
func codexAskThread(cwd string, ephemeral bool) codexAppThreadStart {
	return codexAppThreadStart{Cwd: cwd, ApprovalPolicy: "untrusted", ApprovalsReviewer: "user", Sandbox: codexAskSandbox, Ephemeral: ephemeral}
}

// Codex in ask mode, as checked against Codex 0.171.0 with a loopback
// model stand-in:
//
//   - `codex app-server` (JSON-RPC on stdio): codex exec cannot ask (it
//     refuses approval_policy "untrusted" and runs "on-request" as never).
//   - The thread starts with approvalPolicy "untrusted", sandbox
//     "workspace-write" and approvalsReviewer "user" (codex_appserver.go): every
//     command the model runs is put to card first, even ls or cat (Codex
//     has no separate read tool here, and untrusted asks for them all), and
//     every file change. An accepted command can run as the user, outside
//     Codex's sandbox: one the model marks "require_escalated" runs
//     unsandboxed at once, and a plain one that the sandbox refuses is run
//     again unsandboxed, unasked, whenever Codex reads the refusal as a
//     sandbox denial (a timing guess that went both ways with 0.171.0). So
//     the sandbox is no boundary card can count on once the user says yes:
//     the question is the whole boundary, as it is for Claude Code's Bash,
//     and it shows the command whole. A declined one
//     does not run and the model is told it was rejected. Nothing runs
//     unasked: narrower than read_only, where any command may run inside
//     the read-only sandbox.
//   - The thread is saved (not ephemeral) unless the request discards its
//     session: a cold turn resumes it by its id with thread/resume, carrying
//     the same approval policy, sandbox and reviewer as thread/start, so a
//     resumed thread asks exactly as a new one does (checked with 0.171.0:
//     the resumed thread's first command was put to card before it ran).
//   - The app-server has no --ignore-user-config or --ignore-rules: the
//     thread's own approval policy, sandbox and reviewer override
//     ~/.codex/config.toml, and card's CheckExtras keeps the operator's -c
//     off them; execpolicy rules the user wrote themselves still apply.
//   - Model, effort and instructions are -c overrides, as in codex exec;
//     the prompt and the images go in turn/start.
func buildCodexAsk(bin string, req Request) (Plan, error) {
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := []string{"app-server"}
	args = append(args, codexModelArgs(req.Extras.Args)...)
	args = append(args, "--listen", "stdio://")
	if req.Model != "" {
		args = append(args, "-c", `model="`+req.Model+`"`)
	}
	if req.Effort != "" {
		args = append(args, "-c", `model_reasoning_effort="`+req.Effort+`"`)
	}
	if req.SystemPrompt != "" {
		args = append(args, "-c", `model_instructions_file="`+p.privateFile("instructions.md", req.SystemPrompt)+`"`)
	}
	// Images travel in turn/start as data URLs, not as files.
	p.Input = Input{Images: req.Images}
	p.Args = args
	p.Ask = &AskPlan{Channel: AskViaSession}
	th := codexAskThread(req.Cwd, req.NoSession)
	p.Session = &SessionPlan{Protocol: ProtocolCodexApp, Adapter: agent.Codex, thread: &th, resume: req.Resume}
	return p, nil
}
