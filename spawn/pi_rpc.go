package spawn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
)

// ProtocolPiRPC is Pi's RPC mode (`pi --mode rpc`): JSON objects one per
// line, not JSON-RPC. card sends commands ({id, type, …}) and Pi answers
// each with {type: "response", command, id, success}; the agent's events
// are the lines `pi --mode json` prints, and an extension's dialogs arrive
// as extension_ui_request lines answered by extension_ui_response.
const ProtocolPiRPC Protocol = "pi-rpc"

// Pi has no permission system of its own. In ask mode card loads one
// extension of its own (piAskGate, a private file of the run): before each
// tool call outside the read-only set it calls ctx.ui.confirm, whose
// message is the call as JSON. Pi puts that to card as
//
//	← {"type":"extension_ui_request","id":…,"method":"confirm","title":…,"message":"{\"tool\":…,\"input\":…,\"toolCallId\":…}"}
//	→ {"type":"extension_ui_response","id":…,"confirmed":true|false}
//
// and a false blocks the call: the model receives the gate's reason as
// the tool's error result and the turn goes on. agent_end ends the turn.

// piAskGateFile is the extension's private file name.
const piAskGateFile = "card-ask-gate.ts"

// piReadOnlyTools run unasked in ask mode: read_only's set.
var piReadOnlyTools = piModeTools[ModeReadOnly]

// piAskGate is the extension. It asks with no timeout of its own: card
// owns the timeout, and answers every question (deny when the run ends).
var piAskGate = `// card's ask-mode gate: every tool call outside the read-only set is put
// to card through ctx.ui.confirm, and a "no" blocks it.
export default function (pi: any) {
  const readOnly = new Set(` + mustJSON(piReadOnlyTools) + `);
  pi.on("tool_call", async (event: any, ctx: any) => {
    if (readOnly.has(event.toolName)) return undefined;
    if (!ctx.hasUI) return { block: true, reason: "card denied this tool call: there is nobody to ask" };
    const call = JSON.stringify({ tool: event.toolName, input: event.input, toolCallId: event.toolCallId });
    const ok = await ctx.ui.confirm("card: allow " + event.toolName + "?", call);
    if (!ok) return { block: true, reason: "The user denied this tool call." };
    return undefined;
  });
}
`

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

type (
	piRPCLine struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Command string `json:"command"`
		Success *bool  `json:"success"`
		Error   string `json:"error"`
		Method  string `json:"method"`
		// Message is a dialog's text on extension_ui_request, and an
		// object on the message events.
		Message json.RawMessage `json:"message"`
	}
	piRPCImage struct {
		Type     string `json:"type"`
		Data     string `json:"data"`
		MimeType string `json:"mimeType"`
	}
	piRPCPrompt struct {
		ID      string       `json:"id"`
		Type    string       `json:"type"`
		Message string       `json:"message"`
		Images  []piRPCImage `json:"images,omitempty"`
	}
	piRPCUIResponse struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		Confirmed *bool  `json:"confirmed,omitempty"`
		Cancelled bool   `json:"cancelled,omitempty"`
	}
	piGateCall struct {
		Tool       string          `json:"tool"`
		Input      json.RawMessage `json:"input"`
		ToolCallID string          `json:"toolCallId"`
	}
)

// piRPCConversation is one RPC-mode turn.
type piRPCConversation struct {
	turnState
	parser *piParser

	wmu sync.Mutex
	w   io.Writer
}

// piWords: Pi's turn starts with the prompt command.
var piWords = stopWords{verb: "finished", firstStep: "the prompt", cutShort: "its output was cut short"}

func newPiRPCConversation(sp SessionPlan) (conversation, error) {
	return &piRPCConversation{turnState: turnState{adapter: sp.Adapter, words: piWords}, parser: newPiParser()}, nil
}

func (c *piRPCConversation) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.w.Write(append(b, '\n'))
}

func (c *piRPCConversation) converse(ctx context.Context, t turn) {
	c.w = t.Stdin
	c.begin(ctx)
	defer c.over()
	c.prompt(t, "card-1")
	for {
		var line []byte
		var ok bool
		select {
		case <-ctx.Done():
			return
		case line, ok = <-t.Lines:
			if !ok {
				return
			}
		}
		if c.line(line, t) {
			return
		}
	}
}

// prompt sends the turn's prompt command.
func (c *piRPCConversation) prompt(t turn, id string) {
	p := piRPCPrompt{ID: id, Type: "prompt", Message: t.Prompt}
	for _, img := range t.Images {
		p.Images = append(p.Images, piRPCImage{Type: "image", Data: base64.StdEncoding.EncodeToString(img.Data), MimeType: img.MIME})
	}
	c.setStep("prompt")
	c.write(p)
}

// line reads one of Pi's lines for the turn; true once the turn is over
// (agent_end, or the prompt refused). A warm agent feeds every turn's
// lines through it.
func (c *piRPCConversation) line(line []byte, t turn) bool {
	var l piRPCLine
	if json.Unmarshal(line, &l) != nil || l.Type == "" {
		t.Emit(otherEvent("", line))
		return false
	}
	switch l.Type {
	case "response":
		if l.Success != nil && !*l.Success {
			msg := fmt.Sprintf("%s refused the %s command: %s", c.adapter, l.Command, strings.TrimSpace(l.Error))
			c.mu.Lock()
			if c.failure == nil {
				c.failure = failure(classifyMessage(msg), clip(msg, 2048))
			}
			c.mu.Unlock()
			return true
		}
		c.setStep("the turn (agent_end)")
	case "extension_ui_request":
		c.uiRequest(l, t)
	case "agent_end":
		t.Emit(c.parser.Feed(line)...)
		c.mu.Lock()
		c.completed = true
		c.mu.Unlock()
		return true
	default:
		t.Emit(c.parser.Feed(line)...)
	}
	return false
}

// uiRequest answers one extension dialog. Only the gate's confirm is a
// question for the approver; another dialog (none is loaded but card's
// gate) is answered cancelled, and fire-and-forget methods (notify,
// setStatus, …) need no answer.
func (c *piRPCConversation) uiRequest(l piRPCLine, t turn) {
	switch l.Method {
	case "confirm":
	case "select", "input", "editor":
		c.write(piRPCUIResponse{Type: "extension_ui_response", ID: l.ID, Cancelled: true})
		return
	default:
		return
	}
	no := false
	var text string
	var call piGateCall
	if json.Unmarshal(l.Message, &text) != nil || json.Unmarshal([]byte(text), &call) != nil || call.Tool == "" {
		c.write(piRPCUIResponse{Type: "extension_ui_response", ID: l.ID, Confirmed: &no})
		return
	}
	input := validRaw(call.Input)
	q := Question{Tool: call.Tool, Input: input, ToolUseID: call.ToolCallID, Summary: summarize(call.Tool, input)}
	reply := func(allow any) {
		ok := allow.(bool)
		c.write(piRPCUIResponse{Type: "extension_ui_response", ID: l.ID, Confirmed: &ok})
	}
	c.question(false, reply, func(ctx context.Context) any {
		return t.approve(ctx, q).Allow
	})
}

func (c *piRPCConversation) finish(exit ExitInfo) Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	parsed := exit
	if c.completed {
		// The child was ended after the turn: its exit says nothing.
		parsed = ExitInfo{}
	}
	res := c.parser.Finish(parsed)
	return c.end(res, exit, func(exit ExitInfo) *Failure {
		switch {
		case res.Error != nil:
			// The parser read the failure in Pi's own events.
			return res.Error
		case strings.Contains(exit.StderrTail, piNoKey):
			return failure(KindAuth, clip("pi: "+lineWith(exit.StderrTail, piNoKey), 2048))
		}
		return nil
	}, "")
}
