package spawn

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/card-dev/card/acp"
)

// How an ACP agent's tool calls become card's events and questions.

// agentOutput counts a model turn at the first output after the prompt
// or after a tool's result.
func (st *acpTurn) agentOutput() {
	if st.fresh {
		st.turns++
		st.fresh = false
	}
}

// announce is the tool_use event of a call not announced yet.
func (c *acpClient) announce(st *acpTurn, call acp.ToolCallUpdate) []Event {
	t := st.tools.get(call.ToolCallID)
	if t != nil && !t.announced {
		t.name, t.input = c.nameOf(st, call), acpInput(call)
		st.newAnswer = true
	}
	return st.tools.announce(call.ToolCallID, t)
}

// result is the tool_result event of a call that has just finished.
func (st *acpTurn) result(call acp.ToolCallUpdate) []Event {
	if call.Status != acp.ToolCompleted && call.Status != acp.ToolFailed {
		return nil
	}
	t := st.tools.get(call.ToolCallID)
	if t != nil {
		if t.done {
			return nil
		}
		t.done = true
	}
	st.fresh = true
	return []Event{{Kind: EventToolResult, Tool: &Tool{ID: call.ToolCallID}, Output: clip(acpOutput(call), maxOutput), IsError: call.Status == acp.ToolFailed}}
}

// nameOf names a call by the dialect, falling back to the name it was
// announced with (an update need not repeat the kind).
func (c *acpClient) nameOf(st *acpTurn, call acp.ToolCallUpdate) string {
	if n := c.dialect.toolName(call); n != "" {
		return n
	}
	if t, ok := st.tools.byID[call.ToolCallID]; ok && t.name != "" {
		return t.name
	}
	return "tool"
}

// permission puts one session/request_permission to the approver and
// picks the agent's option for the decision.
func (c *acpClient) permission(ctx context.Context, t *turn, p acp.RequestPermissionRequest) acp.RequestPermissionResponse {
	call := p.ToolCall
	input := acpInput(call)
	c.mu.Lock()
	st := c.turnOf(t)
	name := c.nameOf(st, call)
	// Gemini asks before it announces the call: the question must not
	// be about a call the run's events never showed.
	t.emit(c.announce(st, call)...)
	c.mu.Unlock()

	d := t.approve(ctx, Question{Tool: name, Input: input, ToolUseID: call.ToolCallID, Summary: acpSummary(name, call, input)})
	return acpAnswer(p.Options, d.Allow)
}

// acpAnswer is the outcome for a decision: the agent's allow-once option
// for an allow, its reject-once option for a deny. An allow_always of the
// client is still answered allow-once: card's broker remembers it per tool
// name and answers the agent's next question by rule, so every call stays
// in the run's record, and what "always" covers is card's rule, not the
// agent's. With no fitting option the question is cancelled, which ACP
// agents read as a denial (checked with Gemini and Copilot).
func acpAnswer(opts []acp.PermissionOption, allow bool) acp.RequestPermissionResponse {
	want := acp.PermissionRejectOnce
	if allow {
		want = acp.PermissionAllowOnce
	}
	for _, o := range opts {
		if o.Kind == want && o.OptionID != "" {
			return acp.Selected(o.OptionID)
		}
	}
	return acp.Cancelled()
}

// acpInput is a call's input as card shows it: the agent's rawInput when
// it sends one (Copilot), else what the call says of itself (Gemini sends
// a title, a kind, locations and content such as a diff).
func acpInput(call acp.ToolCallUpdate) json.RawMessage {
	if in := call.RawInput; len(in) > 0 && in[0] == '{' && json.Valid(in) {
		return in
	}
	desc := map[string]any{}
	if call.Title != "" {
		desc["title"] = call.Title
	}
	if call.Kind != "" {
		desc["kind"] = call.Kind
	}
	for k, v := range map[string]any{"locations": call.Locations, "content": call.Content} {
		if b, err := json.Marshal(v); err == nil && len(b) <= maxRaw && string(b) != "[]" && string(b) != "null" {
			desc[k] = json.RawMessage(b)
		}
	}
	b, _ := json.Marshal(desc)
	return b
}

// acpSummary is the question's one line: from the input's command, path or
// URL, else from the call's title.
func acpSummary(name string, call acp.ToolCallUpdate, input json.RawMessage) string {
	s := summarize(name, input)
	if s == name && strings.TrimSpace(call.Title) != "" {
		s = oneLine(name + ": " + call.Title)
	}
	return s
}

// acpOutput is a finished call's output as text: its text content, else
// what its rawOutput says.
func acpOutput(call acp.ToolCallUpdate) string {
	var parts []string
	for _, b := range call.Content {
		switch {
		case b.Type == acp.ToolContentContent && b.Content != nil && b.Content.Type == acp.ContentText:
			parts = append(parts, b.Content.Text)
		case b.Type == acp.ToolContentDiff && b.Path != "":
			parts = append(parts, "changed "+b.Path)
		}
	}
	if out := strings.TrimSpace(strings.Join(parts, "\n")); out != "" {
		return out
	}
	var s string
	if json.Unmarshal(call.RawOutput, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
		Message string `json:"message"`
	}
	if decodeParams(call.RawOutput, &o) {
		if o.Content != "" {
			return o.Content
		}
		if o.Message != "" {
			return o.Message
		}
	}
	return ""
}
