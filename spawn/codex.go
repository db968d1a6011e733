package spawn

import (
	"strings"

	"github.com/card-dev/card/agent"

	"strconv"
)

// codexSandbox maps card's mode onto `codex exec --sandbox`. Codex's boundary
// is the OS sandbox (Landlock/seccomp on Linux, Seatbelt on macOS), so the
// model may run any command and the kernel refuses the writes.
func codexSandbox(m Mode) string {
	return modeValue(m, "read-only", "workspace-write", "danger-full-access")
}

// codexEditTmp takes /tmp and $TMPDIR out of workspace-write's writable
// roots. Codex adds both by default, so an edit run's shell could write
// beside the working dir in any temp dir (seen with Codex 0.171.0: a
// sibling of the cwd under /tmp was written, one under the home was
// "Read-only file system"), and edit promises the working dir only.
var codexEditTmp = []string{
	"-c", "sandbox_workspace_write.exclude_slash_tmp=true",
	"-c", "sandbox_workspace_write.exclude_tmpdir_env_var=true",
}

// buildCodex maps the request onto `codex exec`, checked against
// `codex exec --help` of 0.171.0.
//
//   - --ignore-user-config and --ignore-rules: the sandbox a flag asks for is
//     not the one that runs if ~/.codex/config.toml or execpolicy rules say
//     otherwise.
//   - -c approval_policy="never": `codex exec` has no --ask-for-approval; with
//     "never" a refused command goes back to the model instead of waiting for
//     a human who is not there until the deadline.
//   - edit adds codexEditTmp: no temp dir is writable, only the cwd.
//   - --color never keeps escape sequences out of the JSON lines.
//   - --skip-git-repo-check: the working dir is the client's choice, not
//     necessarily a git repository.
//   - the trailing `-` makes stdin the whole prompt.
func buildCodex(bin string, req Request) (Plan, error) {
	mode := req.EffectiveMode()
	if err := refuse(agent.Codex,
		refusal{req.AllowedTools != nil, "allowed_tools", "Codex has no tool allowlist; its boundary is the OS sandbox chosen by permission_mode"},
		refusal{req.MaxTurns > 0, "max_turns", "codex exec has no turn cap; use timeout_secs"},
		refusal{req.SessionID != "", "session_id", "Codex assigns its own thread id (reported in the session event); use resume with it"},
		refusal{req.SystemPromptAppend, "system_prompt", "Codex can replace its instructions from a file but cannot append to them without putting the text on argv"},
	); err != nil {
		return Plan{}, err
	}
	if mode == ModeAsk {
		return buildCodexAsk(bin, req)
	}
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	args := []string{"exec"}
	// Operator extras (e.g. -c model_providers.x={...}) before card's own:
	// for -c overrides the last one wins, and CheckExtras already refused
	// any that touch the sandbox or approval keys.
	args = append(args, codexModelArgs(req.Extras.Args)...)
	args = append(args,
		"--json",
		"--ignore-user-config",
		"--ignore-rules",
		"--color", "never",
		"--skip-git-repo-check",
		"--sandbox", codexSandbox(mode),
		"-c", `approval_policy="never"`,
	)
	if mode == ModeEdit {
		args = append(args, codexEditTmp...)
	}
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
	if req.Effort != "" {
		args = append(args, "-c", `model_reasoning_effort="`+req.Effort+`"`)
	}
	if req.NoSession {
		args = append(args, "--ephemeral")
	}
	if req.SystemPrompt != "" {
		args = append(args, "-c", `model_instructions_file="`+p.privateFile("instructions.md", req.SystemPrompt)+`"`)
	}
	for _, ref := range p.imageFiles(req.Images) {
		// --image=FILE, one per image: `-i FILE` takes several values and
		// reads a following `-` as one more image, and a comma splits a
		// path in either form (the private directory is refused one).
		args = append(args, "--image="+ref)
	}
	if req.Resume != "" {
		// `exec resume` has no --sandbox of its own; the exec-level flags
		// above apply to it (checked: clap parses them before the
		// subcommand). -c sandbox_mode says it once more in the resumed
		// session's own config layer.
		args = append(args, "-c", `sandbox_mode="`+codexSandbox(mode)+`"`, "resume", req.Resume)
	}
	args = append(args, "-")
	p.Args = args
	return p, nil
}

// boundaryConfigKeys are Codex `-c key=value` overrides that move the
// sandbox or approval policy.
var boundaryConfigKeys = []string{"sandbox_mode", "sandbox_workspace_write", "approval_policy", "approvals_reviewer", "sandbox_permissions",
	"model_instructions_file", "developer_instructions"}

// codexCheckExtraArg refuses a `-c` override of the sandbox or approval
// policy: for -c the last occurrence wins, and an operator line in card.toml
// must not quietly undo the mode a client asked for.
func codexCheckExtraArg(args []string, i int) string {
	key := codexConfigKey(args, i)
	if key == "" {
		return ""
	}
	for _, k := range boundaryConfigKeys {
		if key == k || strings.HasPrefix(key, k+".") {
			return "-c " + key + " overrides the sandbox or approval policy card sets from the permission mode"
		}
	}
	return ""
}

// codexConfigKey returns the key of a `-c key=value` override whose value is
// args[i] (or args[i] itself in the --config=key=value form).
func codexConfigKey(args []string, i int) string {
	a := args[i]
	var kv string
	switch {
	case strings.HasPrefix(a, "--config="):
		kv = strings.TrimPrefix(a, "--config=")
	case strings.HasPrefix(a, "-c") && len(a) > 2 && a[2] != '=':
		kv = a[2:]
	case i > 0 && (args[i-1] == "-c" || args[i-1] == "--config"):
		kv = a
	default:
		return ""
	}
	k, _, _ := strings.Cut(kv, "=")
	return strings.TrimSpace(k)
}

// codexDriver is Codex's driver: one-shot `codex exec`, and its app-server
// protocol in ask mode.
//
// The MCP hand-over: -c mcp_servers.client.url="…", a command-line override
// that --ignore-user-config leaves in force. It goes after "exec", before the
// subcommand and the prompt: -c is an exec-level option.
var codexDriver = Driver{
	For:           agent.Codex,
	Build:         buildCodex,
	NewParser:     func() Parser { return newCodexParser() },
	CheckExtraArg: codexCheckExtraArg,
	MCP: MCPHandover{Add: func(p *Plan, endpoint string) {
		override := "mcp_servers." + MCPServerName + ".url=" + strconv.Quote(endpoint)
		p.Args = append([]string{p.Args[0], "-c", override}, p.Args[1:]...)
	}},
	Session: SessionDriver{Protocol: ProtocolCodexApp, New: newCodexApp},
	Caps: CapsDriver{
		NoCost:     "codex reports tokens but no cost, and has no spending cap of its own",
		TokensWhen: TokensTurnEnd, // turn.completed carries the turn's usage
	},
	Warm: WarmDriver{Build: buildCodexWarm},
	Channels: Channels{
		OneShot: ArgChannel{Name: "codex exec (one-shot runs)", Refused: missingFrom("codex exec", codexAppServerOnly)},
		Session: ArgChannel{Name: "codex app-server (ask runs, sessions and ACP sessions)", Refused: missingFrom("codex app-server", codexExecOnly)},
	},
}

// codexExecOnly are the options of `codex exec --help` that `codex
// app-server --help` lacks (Codex 0.171.0), but for those card refuses on
// other grounds (the flags it owns, the forbidden ones) and -m/--model,
// which codexModelArgs turns into the -c override both take.
var codexExecOnly = []string{
	"--remote", "--remote-auth-token-env", "-i", "--image", "--oss", "--local-provider", "-C", "--cd", "--worktree",
	"--thread-source", "--cyber-access-program", "--skip-git-repo-check", "--ephemeral", "--ignore-user-config",
	"--ignore-rules", "--output-schema", "--color", "--json", "-o", "--output-last-message", "-V", "--version",
}

// codexAppServerOnly are the options of `codex app-server --help` that
// `codex exec --help` lacks (Codex 0.171.0), but for --listen and
// --stdio, which card owns.
var codexAppServerOnly = []string{
	"--startup-sign-out", "--print-startup-config", "--startup-client-info", "--cloud-skills-snapshot", "--code-mode-host",
	"--analytics-default-enabled", "--ws-auth", "--ws-token-file", "--ws-token-sha256", "--ws-shared-secret-file",
	"--ws-issuer", "--ws-audience", "--ws-max-clock-skew-seconds",
}

// missingFrom is a channel's Refused for the flags its command's --help
// lacks.
func missingFrom(command string, flags []string) map[string]string {
	out := make(map[string]string, len(flags))
	for _, f := range flags {
		out[f] = command + " has no " + f + " (its --help, Codex 0.171.0)"
	}
	return out
}

// codexModelArgs spells an operator's -m/--model (an option of codex exec
// only: codex app-server stops at it with status 2) as the -c model="…"
// override that codex exec and codex app-server both take, so one
// card.toml line picks the model of every channel. In exec it also leaves
// a request's own --model the only --model on the line: Codex refuses the
// option twice ("the argument '--model <MODEL>' cannot be used multiple
// times"), and a later --model, or a later -c model, wins over the
// operator's -c. The value of every -c is kept as it is.
func codexModelArgs(args []string) []string {
	out := make([]string, 0, len(args)+1)
	for i := 0; i < len(args); i++ {
		a := args[i]
		model, isModel := "", false
		switch {
		case a == "-c" || a == "--config":
			out = append(out, a)
			if i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		case a == "-m" || a == "--model":
			if i+1 < len(args) {
				i++
				model, isModel = args[i], true
			}
		case strings.HasPrefix(a, "--model="):
			model, isModel = strings.TrimPrefix(a, "--model="), true
		case strings.HasPrefix(a, "-m="):
			model, isModel = strings.TrimPrefix(a, "-m="), true
		case strings.HasPrefix(a, "-m") && len(a) > 2:
			model, isModel = a[2:], true
		}
		if isModel {
			out = append(out, "-c", "model="+tomlString(model))
			continue
		}
		out = append(out, a)
	}
	return out
}
