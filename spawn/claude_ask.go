package spawn

import (
	"encoding/json"
	"time"

	"github.com/card-dev/card/internal/permtool"
)

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
