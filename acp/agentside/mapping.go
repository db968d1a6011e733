package agentside

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// maxToolOutput bounds the text of a tool's output an update carries: an
// editor shows it in a panel, and a command that printed megabytes must
// not become a frame of megabytes.
const maxToolOutput = 64 << 10

// mapEvent is one of card's events as ACP updates (none for an event ACP
// has nothing for). It runs on the session's pump only, which owns the
// open tool calls.
func (st *session) mapEvent(e api.AgentEvent) []acp.SessionUpdate {
	switch e.Kind {
	case api.EventText, api.EventThinking:
		if e.Text == "" {
			return nil
		}
		kind := acp.UpdateAgentMessageChunk
		if e.Kind == api.EventThinking {
			kind = acp.UpdateAgentThoughtChunk
		}
		return []acp.SessionUpdate{{Kind: kind, Chunk: &acp.ContentChunk{Content: acp.TextBlock(e.Text)}}}
	case api.EventToolUse:
		return st.toolUse(e)
	case api.EventToolResult:
		return st.toolResult(e)
	case api.EventApprovalRequested:
		return st.askedAbout(e)
	case api.EventUsage:
		if e.Usage == nil {
			return nil
		}
		return []acp.SessionUpdate{{Kind: acp.UpdateUsage, Usage: &acp.UsageUpdate{Used: used(*e.Usage), Meta: usageMeta(*e.Usage)}}}
	case api.EventWarning, api.EventAgentError, api.EventRetry, api.EventStalled, api.EventChanges, api.EventRewound:
		if !st.srv.notices() {
			return nil
		}
		if n := noticeOf(e); n != nil {
			return []acp.SessionUpdate{{Kind: acp.UpdateNotice, Notice: n}}
		}
		return nil
	case api.EventDone, api.EventRunError:
		return st.endTurn()
	}
	return nil
}

// toolUse announces a tool call once: a CLI that reports the call again
// (or asked about it first) gets no second card in the editor.
func (st *session) toolUse(e api.AgentEvent) []acp.SessionUpdate {
	if e.Tool == nil {
		return nil
	}
	id := e.Tool.ID
	if id == "" {
		id = fmt.Sprintf("%s-%d", e.RunID, e.Seq)
	}
	if _, seen := st.toolName[id]; seen {
		return nil
	}
	st.toolName[id] = e.Tool.Name
	st.open = append(st.open, id)
	call := toolCall(id, e.Tool.Name, e.Tool.Input)
	call.Status = acp.ToolInProgress
	out := []acp.SessionUpdate{{Kind: acp.UpdateToolCall, ToolCall: &call}}
	if plan := planOf(e.Tool.Name, e.Tool.Input); plan != nil {
		out = append(out, acp.SessionUpdate{Kind: acp.UpdatePlan, Plan: plan})
	}
	return out
}

// toolResult closes the call a result names, or the oldest open one when
// the CLI's result names none card saw.
func (st *session) toolResult(e api.AgentEvent) []acp.SessionUpdate {
	id := ""
	if e.Tool != nil {
		id = e.Tool.ID
	}
	if _, known := st.toolName[id]; !known || id == "" {
		if len(st.open) == 0 {
			return nil
		}
		id = st.open[0]
	}
	st.closeTool(id)
	status := acp.ToolCompleted
	if e.IsError {
		status = acp.ToolFailed
	}
	text := clip(e.Output, maxToolOutput)
	raw, _ := json.Marshal(text)
	up := acp.ToolCallUpdate{ToolCallID: id, Status: status, RawOutput: raw}
	if text != "" {
		block := acp.TextBlock(text)
		up.Content = []acp.ToolCallContent{{Type: acp.ToolContentContent, Content: &block}}
	}
	return []acp.SessionUpdate{{Kind: acp.UpdateToolCallUpdate, ToolCallUpdate: &up}}
}

// askedAbout announces the call a question is about if it was not: some
// CLIs ask before they report the call.
func (st *session) askedAbout(e api.AgentEvent) []acp.SessionUpdate {
	if e.Tool == nil || e.Tool.ID == "" {
		return nil
	}
	if _, seen := st.toolName[e.Tool.ID]; seen {
		return nil
	}
	st.toolName[e.Tool.ID] = e.Tool.Name
	st.open = append(st.open, e.Tool.ID)
	call := toolCall(e.Tool.ID, e.Tool.Name, e.Tool.Input)
	call.Status = acp.ToolPending
	return []acp.SessionUpdate{{Kind: acp.UpdateToolCall, ToolCall: &call}}
}

// endTurn fails the calls still open when the turn ends: they never
// finished.
func (st *session) endTurn() []acp.SessionUpdate {
	var out []acp.SessionUpdate
	for _, id := range st.open {
		up := acp.ToolCallUpdate{ToolCallID: id, Status: acp.ToolFailed}
		out = append(out, acp.SessionUpdate{Kind: acp.UpdateToolCallUpdate, ToolCallUpdate: &up})
	}
	st.open = nil
	clear(st.toolName)
	return out
}

// noticeOf is a warning, an agent's error, a retry, a stall or a worktree
// change as the notice an editor shows (nil when there is nothing to say).
func noticeOf(e api.AgentEvent) *acp.Notice {
	if e.Kind == api.EventChanges || e.Kind == api.EventRewound {
		return worktreeNotice(e)
	}
	sev, title := "warning", e.Text
	switch e.Kind {
	case api.EventAgentError:
		sev, title = "error", e.Error
	case api.EventRetry:
		title = fmt.Sprintf("retrying (attempt %d of %d): %s", e.Attempt, e.MaxAttempts, e.Error)
	case api.EventStalled:
		title = fmt.Sprintf("the agent has printed nothing for %d s", e.QuietMs/1000)
	}
	if title == "" {
		return nil
	}
	return &acp.Notice{Severity: sev, Title: title}
}

// worktreeNotice tells an editor what an isolated session's turn changed in
// the session's worktree, or that the worktree was rewound: ACP has no
// update for either, and the files the editor shows are the checkout's,
// which the agent does not write. The diff itself is card's sessions.diff.
func worktreeNotice(e api.AgentEvent) *acp.Notice {
	switch {
	case e.Changes != nil:
		c := e.Changes
		if c.Error != "" {
			return &acp.Notice{Severity: "warning", Title: fmt.Sprintf("card could not record turn %d's changes: %s", c.Turn, c.Error)}
		}
		if len(c.Files) == 0 {
			return nil
		}
		names := make([]string, 0, len(c.Files))
		for _, f := range c.Files {
			names = append(names, f.Path)
		}
		desc := "In card's worktree, not in your checkout: " + strings.Join(names, ", ") + ". card diff and card apply review and bring them in."
		return &acp.Notice{Severity: "info", Title: fmt.Sprintf("Turn %d changed %d files (+%d -%d)", c.Turn, len(c.Files), c.Added, c.Deleted),
			Description: &desc}
	case e.Rewound != nil:
		return &acp.Notice{Severity: "info", Title: fmt.Sprintf("The worktree is back to turn %d; the agent still remembers the later turns", e.Rewound.Turn)}
	}
	return nil
}

func (st *session) closeTool(id string) {
	for i, o := range st.open {
		if o == id {
			st.open = append(st.open[:i], st.open[i+1:]...)
			return
		}
	}
}

func (s *Server) notices() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientCaps.Session != nil && s.clientCaps.Session.Notices != nil
}

// used is the tokens a turn's context held as the agent last reported:
// what it read (fresh and cached) and wrote. card does not know the
// model's window, so usage_update's size is 0 ("unknown"); the counts
// themselves are in _meta.card.
func used(u api.Usage) uint64 {
	n := u.InputTokens + u.CachedInputTokens + u.OutputTokens
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func usageMeta(u api.Usage) acp.Meta {
	b, _ := json.Marshal(map[string]any{MetaKey: u})
	return b
}

// toolCall is a CLI's tool call as ACP shows it: a kind from the tool's
// name, a title naming what it works on, the files it touches, and for an
// edit the change as a diff.
func toolCall(id, name string, input json.RawMessage) acp.ToolCall {
	in := map[string]any{}
	_ = json.Unmarshal(input, &in)
	c := acp.ToolCall{ToolCallID: id, Title: title(name, in), Kind: kindOf(name), RawInput: input}
	if len(c.RawInput) == 0 {
		c.RawInput = nil
	}
	for _, k := range []string{"file_path", "path", "filePath", "absolute_path", "notebook_path", "file"} {
		if p, ok := in[k].(string); ok && strings.HasPrefix(p, "/") {
			c.Locations = append(c.Locations, acp.ToolCallLocation{Path: p})
			if c.Kind == acp.ToolEdit {
				old, hasOld := in["old_string"].(string)
				newText, hasNew := in["new_string"].(string)
				content, hasContent := in["content"].(string)
				switch {
				case hasOld && hasNew:
					c.Content = append(c.Content, acp.ToolCallContent{Type: acp.ToolContentDiff, Path: p, OldText: &old, NewText: newText})
				case hasContent:
					c.Content = append(c.Content, acp.ToolCallContent{Type: acp.ToolContentDiff, Path: p, NewText: content})
				}
			}
			break
		}
	}
	return c
}

// kindOf guesses ACP's kind from the tool's name, across the CLIs' names
// (Bash, run_shell_command, shell; Read, read_file; Edit, Write,
// replace, apply_patch; Grep, Glob, search_file_content; WebFetch...).
func kindOf(name string) acp.ToolKind {
	n := strings.ToLower(name)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(n, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("todo", "plan", "think"):
		return acp.ToolThink
	case has("bash", "shell", "exec", "command", "terminal", "run"):
		return acp.ToolExecute
	case has("fetch", "web", "http", "url", "browse"):
		return acp.ToolFetch
	case has("grep", "glob", "search", "find"):
		return acp.ToolSearch
	case has("delete", "remove"):
		return acp.ToolDelete
	case has("move", "rename"):
		return acp.ToolMove
	case has("edit", "write", "patch", "replace", "create", "insert"):
		return acp.ToolEdit
	case has("read", "view", "cat", "list", "ls", "open"):
		return acp.ToolRead
	}
	return acp.ToolOther
}

// title is the tool's name and the argument that says what it does.
func title(name string, in map[string]any) string {
	for _, k := range []string{"command", "cmd", "file_path", "path", "filePath", "absolute_path", "pattern", "url", "query", "description"} {
		switch v := in[k].(type) {
		case string:
			if v != "" {
				return clip(name+": "+v, 200)
			}
		case []any:
			parts := []string{}
			for _, p := range v {
				if s, ok := p.(string); ok {
					parts = append(parts, s)
				}
			}
			if len(parts) > 0 {
				return clip(name+": "+strings.Join(parts, " "), 200)
			}
		}
	}
	if name == "" {
		return "tool call"
	}
	return name
}

// planOf reads a todo tool's input as a plan: Claude's TodoWrite
// ({todos:[{content,status}]}), Gemini's write_todos
// ({todos:[{description,status}]}) and Codex's update_plan
// ({plan:[{step,status}]}).
func planOf(name string, input json.RawMessage) *acp.Plan {
	n := strings.ToLower(name)
	if !strings.Contains(n, "todo") && !strings.Contains(n, "plan") {
		return nil
	}
	var in struct {
		Todos []map[string]any `json:"todos"`
		Plan  []map[string]any `json:"plan"`
	}
	if json.Unmarshal(input, &in) != nil {
		return nil
	}
	items := append(in.Todos, in.Plan...)
	if len(items) == 0 {
		return nil
	}
	p := &acp.Plan{}
	for _, it := range items {
		text := ""
		for _, k := range []string{"content", "description", "step", "title", "text"} {
			if s, ok := it[k].(string); ok && s != "" {
				text = s
				break
			}
		}
		status, _ := it["status"].(string)
		p.Entries = append(p.Entries, acp.PlanEntry{Content: text, Priority: "medium", Status: planStatus(status)})
	}
	return p
}

func planStatus(s string) string {
	switch strings.ToLower(strings.ReplaceAll(s, "-", "_")) {
	case "in_progress", "inprogress", "active", "running":
		return "in_progress"
	case "completed", "done", "complete", "cancelled", "canceled":
		return "completed"
	}
	return "pending"
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "\n… (cut by card at " + fmt.Sprint(n) + " bytes)"
}
