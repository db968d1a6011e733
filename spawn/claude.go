package spawn

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/internal/permtool"
)

// claudeModeTools are the built-in tools each mode makes available. Read-only
// has no Bash: with Bash the model can write anywhere, whatever the mode
// says. Edit adds the file tools and still no Bash, for the same reason.
// Bypass inherits Claude's whole built-in set.
var claudeModeTools = map[Mode][]string{
	ModeReadOnly: {"Read", "Grep", "Glob"},
	ModeEdit:     append([]string{"Read", "Grep", "Glob"}, claudeFileTools...),
	// Ask offers Bash too: every call of it is a question (claudeAskArgs).
	ModeAsk: append([]string{"Read", "Grep", "Glob"}, claudeAskedTools...),
}

// claudeFileTools are the tools edit mode offers to change files. They are
// offered (--tools) and never allow-listed (--allowedTools): an allow rule
// for Edit or Write, bare or with a path, is a rule of its own that Claude
// applies before acceptEdits, and acceptEdits is what keeps an edit inside
// the working dir. With `--allowedTools Write` a Write of ~/.bashrc ran
// unasked; without it the same Write is refused and one inside the working
// dir still runs (checked against Claude Code 2.1.197).
var claudeFileTools = []string{"Edit", "Write", "NotebookEdit"}

// claudeWriteTools are the names an allow rule for changing files may take,
// MultiEdit included: it is not offered, but a rule naming it is refused
// for the same reason, not as merely unknown.
var claudeWriteTools = append([]string{"MultiEdit"}, claudeFileTools...)

// claudePermissionMode maps card's mode onto Claude's --permission-mode.
//
//   - read_only → dontAsk: anything not in --allowedTools is denied without
//     asking. `default` would also deny in -p (nobody to ask), but only by
//     accident of being headless; dontAsk says it.
//   - edit → acceptEdits: file edits are auto-accepted inside the working
//     dir only; an edit elsewhere needs a prompt, which headless means no.
//     That holds only while no allow rule names a file tool (see
//     claudeFileTools).
//   - bypass → bypassPermissions (operator-allowed only).
//   - ask → default, so Claude asks card's permission tool (claudeAskArgs).
func claudePermissionMode(m Mode) string {
	if m == ModeAsk {
		return "default"
	}
	return modeValue(m, "dontAsk", "acceptEdits", "bypassPermissions")
}

// buildClaude sets every flag that decides the boundary explicitly, because
// an unset flag is filled from the user's own settings.
func buildClaude(bin string, req Request) (Plan, error) {
	mode := req.EffectiveMode()
	p := Plan{Program: bin, Dir: req.Cwd, Env: extraEnv(req.Extras)}
	// Claude Code's own retry count (10 by default, about three minutes of
	// backoff on a 429 or a dead network); the request's bound instead.
	p.Env["CLAUDE_CODE_MAX_RETRIES"] = strconv.Itoa(req.APIRetries())
	// Operator extras first: for single-valued options the last occurrence
	// wins, so card's boundary flags after them cannot be overridden.
	args := append([]string{}, req.Extras.Args...)
	args = append(args,
		"-p", "--output-format", "stream-json", "--verbose",
		// Text as it is generated (stream_event lines), not only whole
		// messages: without it a client sees nothing until a turn ends.
		"--include-partial-messages",
		"--permission-mode", claudePermissionMode(mode),
		// Task spawns nested agents that would escape the turn cap and
		// the loop guard's view; never offered.
		"--disallowedTools", "Task",
		// No settings files: user or project settings can add hooks and
		// permission rules that widen the boundary.
		"--setting-sources", "",
		// Only MCP servers card passes, which is none: a project's
		// .mcp.json is code a cloned repository chose.
		"--strict-mcp-config",
	)

	if len(req.Images) > 0 {
		// Images travel as base64 blocks of one stream-json user message on
		// stdin, the only way Claude Code takes an image headless.
		args = append(args, "--input-format", "stream-json")
		p.Input = Input{Format: InputClaudeMessage, Images: req.Images}
	}

	tools, allowed, err := claudeTools(mode, req.AllowedTools)
	if err != nil {
		return Plan{}, err
	}
	// Always set --tools, even empty, so ambient tool config is not
	// inherited.
	args = append(args, "--tools", strings.Join(tools, ","))
	if len(allowed) > 0 {
		args = append(args, "--allowedTools")
		args = append(args, allowed...)
	}
	if mode == ModeAsk {
		askArgs, ask := claudeAskArgs(tools, req.ApprovalTimeout)
		args = append(args, askArgs...)
		p.Ask = ask
	}
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
	if req.Effort != "" {
		args = append(args, "--effort", req.Effort)
	}
	if req.MaxTurns > 0 {
		args = append(args, "--max-turns", strconv.Itoa(req.MaxTurns))
	}
	switch {
	case req.SessionID != "":
		args = append(args, "--session-id", req.SessionID)
	case req.Resume != "":
		args = append(args, "--resume", req.Resume)
	case req.NoSession:
		args = append(args, "--no-session-persistence")
	}
	p.Args = append(args, p.systemPromptFlag(req, "system-prompt.txt", "--system-prompt-file", "--append-system-prompt-file")...)
	return p, nil
}

// claudeTools returns the --tools base names and the --allowedTools entries
// for a mode, narrowed by the request. A requested entry whose base tool the
// mode does not offer is refused rather than dropped: the client asked for
// something it will not get, and should hear so.
//
// In edit mode the allow rules are the read tools' only (claudeFileTools
// says why), and the file tools are offered whatever allowed_tools says:
// a request cannot name them without asking for an allow rule, and what
// keeps them inside the working dir is the mode, not the list. A client
// that wants no writes asks for read_only.
func claudeTools(mode Mode, requested []string) (tools, allowed []string, err error) {
	offered, bounded := claudeModeTools[mode]
	unasked := claudeModeTools[ModeReadOnly]
	if requested == nil {
		if !bounded {
			return []string{"default"}, nil, nil
		}
		if mode == ModeAsk || mode == ModeEdit {
			return offered, unasked, nil
		}
		return offered, offered, nil
	}
	for i, entry := range requested {
		field := fmt.Sprintf("allowed_tools[%d]", i)
		base, _, _ := strings.Cut(entry, "(")
		if strings.EqualFold(base, "Task") {
			return nil, nil, &FieldError{field, "Task is never allowed: nested agents escape the turn cap and the loop guard"}
		}
		if mode == ModeEdit && slices.ContainsFunc(claudeWriteTools, func(w string) bool { return strings.EqualFold(w, base) }) {
			return nil, nil, &FieldError{field, fmt.Sprintf("%q is an allow rule for writing files, which Claude applies before edit mode's "+
				"working-dir boundary, so it would let the agent write outside the working dir; leave it out: edit mode "+
				"always offers %s and keeps them inside the working dir", entry, strings.Join(claudeFileTools, ", "))}
		}
		if bounded && !contains(offered, base) {
			return nil, nil, &FieldError{field, base + " is not available in " + string(mode) + " mode (it offers " + strings.Join(offered, ", ") + "); allowed_tools may only narrow the mode"}
		}
		if !contains(tools, base) {
			tools = append(tools, base)
		}
		if mode == ModeAsk && !contains(unasked, base) {
			// Offered, and asked about on every call: an allow rule for
			// it would skip the question.
			if entry != base {
				return nil, nil, &FieldError{field, entry + ": in ask mode every " + base +
					" call is asked, so it takes no pattern; name the tool alone (" + base + ")"}
			}
			continue
		}
		allowed = append(allowed, entry)
	}
	if mode == ModeEdit {
		for _, t := range claudeFileTools {
			if !contains(tools, t) {
				tools = append(tools, t)
			}
		}
	}
	if tools == nil {
		tools = []string{}
	}
	return tools, allowed, nil
}

// claudeDriver is Claude Code's driver. It asks through card's permission
// tool, an MCP server on its command line, so it needs no session protocol.
//
// The MCP hand-over: --mcp-config with a private JSON file ({"mcpServers":
// {"client": {"type": "http", "url": …}}}), next to the --strict-mcp-config
// every run carries, and --allowedTools mcp__client so its tools run in the
// modes whose permission rules would otherwise refuse anything not listed.
// The client chose the server; its tools are the client's, not a way around
// the file boundary.
var claudeDriver = Driver{
	For:           agent.ClaudeCode,
	Build:         buildClaude,
	NewParser:     func() Parser { return newClaudeParser() },
	CheckExtraArg: noExtraArgCheck,
	MCP: MCPHandover{Add: func(p *Plan, endpoint string) {
		p.Args = append(p.Args, "--mcp-config", p.privateFile("mcp.json", mcpConfig(endpoint, nil)), "--allowedTools", "mcp__"+MCPServerName)
	}},
	Session: SessionDriver{None: "Claude Code asks through card's permission tool (--permission-prompt-tool), not over its stdio"},
	Caps: CapsDriver{
		// Claude Code's own cap stops it before the next model call once
		// what it reports spent passes the amount (it ends with subtype
		// error_max_budget_usd); its tokens come only with the result.
		CostFlag: func(p *Plan, usd float64) {
			p.Args = append(p.Args, "--max-budget-usd", strconv.FormatFloat(usd, 'f', -1, 64))
		},
		TokensWhen: TokensTurnEnd,
	},
	Warm: WarmDriver{Build: buildClaudeWarm, Protocol: protocolClaudeStream, Proto: newClaudeStream},
	Channels: Channels{
		OneShot: ArgChannel{Name: "claude -p with the prompt as text on stdin (one-shot and ask runs)", Refused: map[string]string{
			"--input-format": "card picks the input format: text on stdin here, stream-json for images and for sessions",
			// Seen with 2.1.197: "Error: --replay-user-messages requires
			// both --input-format=stream-json and --output-format=stream-json".
			"--replay-user-messages": "claude exits at once without --input-format stream-json",
		}},
		Session: ArgChannel{Name: "claude -p --input-format stream-json (sessions and ACP sessions)", Refused: map[string]string{
			"--input-format": "a session writes stream-json user messages on stdin; another input format reads them as text",
		}},
	},
}

// Claude Code in ask mode, as checked against Claude Code 2.1.197:
//
//   - --permission-mode default: Claude asks the permission-prompt tool
//     about every call no rule allows. acceptEdits would run edits in the
//     working dir unasked, plan runs everything once the tool allows one,
//     and dontAsk never asks.
//   - --tools is the read-only set plus every tool that may be asked for: a
//     tool not in --tools is not offered to the model at all.
//   - --allowedTools is the read-only set only, so those run unasked, as in
//     read_only (also outside the working dir).
//   - --settings {"permissions":{"ask":[…]}} names every asked tool: without
//     it Claude's own classifier runs read-only shell commands (ls, cat) in
//     the working dir unasked, which is more than read_only allows.
//   - --mcp-config names card's permission tool only (--strict-mcp-config
//     and --setting-sources "" as in every mode: no other server, and no
//     user allow rule that would skip the question), and
//     --permission-prompt-tool points Claude at it. The tool is not offered
//     to the model.

// claudeAskedTools are the tools an ask run offers beyond the read-only
// set; each call of one is put to the client. Task stays out: nested agents
// escape the turn cap and the loop guard whatever anyone answers.
var claudeAskedTools = []string{"Bash", "Edit", "Write", "NotebookEdit", "WebFetch", "WebSearch"}

// claudeAskConfigFile is the private file holding the permission tool's
// address and secret.
const claudeAskConfigFile = "card-permission-mcp.json"

// claudeAskBackstop is added to the approval timeout for Claude's own limit
// on one question (its per-server MCP tool timeout, which defaults to about
// 28 hours).
const claudeAskBackstop = 30 * time.Second

// claudeAskArgs are the ask-mode flags for the tools offered, and the plan's
// ask channel.
func claudeAskArgs(tools []string, approvalTimeout time.Duration) ([]string, *AskPlan) {
	args := []string{"--mcp-config", FileRef(claudeAskConfigFile), "--permission-prompt-tool", permtool.PromptTool}
	var asked []string
	for _, t := range tools {
		if contains(claudeAskedTools, t) {
			asked = append(asked, t)
		}
	}
	if len(asked) > 0 {
		rules, _ := json.Marshal(map[string]any{"permissions": map[string]any{"ask": asked}})
		args = append(args, "--settings", string(rules))
	}
	plan := &AskPlan{Channel: AskViaPermissionTool, ConfigFile: claudeAskConfigFile}
	if approvalTimeout > 0 {
		plan.Backstop = approvalTimeout + claudeAskBackstop
	}
	return args, plan
}
