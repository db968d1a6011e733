package spawn

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/card-dev/card/internal/permtool"
)

// Ask mode: a tool call outside the read-only boundary becomes a question
// the runner hands to an Approver, and the agent runs the call or is told
// no. The Approver is card's broker, which puts the question to the client;
// spawn knows nothing of clients.
//
// Each adapter that can ask reaches the Approver through the channel its
// CLI offers (its AskPlan). Claude Code asks an MCP tool (the
// permission-prompt tool) over loopback; an adapter whose CLI asks over its
// own stdio protocol (ACP's session/request_permission, Codex app-server's
// requestApproval, Droid's droid.request_permission, a Pi extension's
// confirm) calls the same Approver from its driver.

// Question is one tool call an agent asks about.
type Question struct {
	// Tool is the agent's own name for the tool (Bash, Write, ...).
	Tool string
	// Input is the tool's input as the agent gave it (a JSON object).
	Input json.RawMessage
	// ToolUseID is the agent's id for the call, which its tool_use and
	// tool_result events carry; empty when the agent gives none.
	ToolUseID string
	// Summary is one line for a person: what the call would do.
	Summary string
}

// Decision is the answer to a Question.
type Decision struct {
	Allow bool
	// Message is what the agent is told when the call is denied.
	Message string
}

// Approver decides the questions of one ask-mode run. Approve blocks until
// there is a decision; it must answer (deny, with a message that says why)
// when ctx ends, and it owns the timeout: no agent CLI times out a question
// on its own within any sensible wait.
type Approver interface {
	Approve(ctx context.Context, q Question) Decision
}

// AskChannel names how an agent asks.
type AskChannel string

const (
	// AskViaPermissionTool: Claude Code's --permission-prompt-tool, an MCP
	// tool card serves to the run alone (internal/permtool).
	AskViaPermissionTool AskChannel = "permission_tool"
	// AskViaSession: the agent asks inside the session protocol it is
	// run in (Plan.Session), on its own stdio; nothing else is opened.
	AskViaSession AskChannel = "session"
)

// AskPlan is the ask channel of a plan in ask mode.
type AskPlan struct {
	Channel AskChannel
	// ConfigFile is the private file (a PlanFile name, FileRef'd in Args)
	// the runner writes the channel's client config to once it is open: it
	// holds the channel's secret, so it is never on argv.
	ConfigFile string
	// Backstop is the agent's own limit on one question, when it has one to
	// set: a net under the Approver's timeout, never the timeout itself.
	Backstop time.Duration
}

// openAsk opens plan's ask channel for approver and adds its config file to
// the plan's private files. The returned stop closes the channel, ending
// any question still waiting.
func openAsk(plan *Plan, approver Approver) (stop func(), err error) {
	if approver == nil {
		return nil, fmt.Errorf("the plan asks (permission_mode ask) but the run was given no approver to ask")
	}
	switch plan.Ask.Channel {
	case AskViaPermissionTool:
		srv, err := permtool.Start(func(ctx context.Context, tool string, input json.RawMessage, id string) (bool, string) {
			d := approver.Approve(ctx, Question{Tool: tool, Input: input, ToolUseID: id, Summary: summarize(tool, input)})
			return d.Allow, d.Message
		})
		if err != nil {
			return nil, err
		}
		plan.Files = append(slices.Clip(plan.Files), PlanFile{Path: plan.Ask.ConfigFile, Content: srv.Config(plan.Ask.Backstop), Mode: 0o600})
		return srv.Close, nil
	case AskViaSession:
		if plan.Session == nil {
			return nil, fmt.Errorf("the plan asks through its session protocol but runs one-shot")
		}
		// The protocol asks the approver itself, and ends its
		// questions when its turn ends.
		return func() {}, nil
	}
	return nil, fmt.Errorf("unknown ask channel %q", plan.Ask.Channel)
}

// summaryMax bounds a summary: it is one line in a dialog.
const summaryMax = 200

// summarize says in one line what a tool call would do, from the input
// fields the common tools share across agents (a command, a path, a URL, a
// query), so a client can show a question without knowing every tool.
func summarize(tool string, input json.RawMessage) string {
	var in map[string]any
	_ = json.Unmarshal(input, &in)
	field := func(names ...string) string {
		for _, n := range names {
			if s, ok := in[n].(string); ok && strings.TrimSpace(s) != "" {
				return s
			}
		}
		return ""
	}
	var s string
	switch {
	case field("command", "cmd") != "":
		s = tool + ": " + field("command", "cmd")
	case field("file_path", "path", "notebook_path", "fileName") != "":
		s = tool + " " + field("file_path", "path", "notebook_path", "fileName")
	case field("url") != "":
		s = tool + " " + field("url")
	case field("query", "pattern") != "":
		s = tool + " " + field("query", "pattern")
	default:
		s = tool
	}
	return oneLine(s)
}
