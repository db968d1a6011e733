package spawn

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// ProtocolPiRPC is Pi's RPC mode (`pi --mode rpc`), as Pi 0.73.1 speaks
// it: JSON objects one per line, not JSON-RPC. card sends commands ({id,
// type, …}) and Pi answers each with {type: "response", command, id,
// success}; the agent's events are the lines `pi --mode json` prints. No
// opening (the session file is on argv: piSession), then one turn after
// another in the same process:
//
//	→ {type: prompt, id, message, images?}
//	← the agent's events while the turn runs, read by the one-shot
//	  parser (pi_parse.go); agent_end is the turn's end
//	← extension_ui_request {method: confirm, …} from card's ask gate,
//	  answered extension_ui_response {confirmed} (below)
//	→ {type: abort} stops a running turn (Pi ends it with agent_end and
//	  waits for the next prompt), and {type: steer, message} adds text to
//	  it (piRPC.steer)
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

// piRPC is card's side of Pi's RPC mode. A steer is a message Pi delivers
// inside the running turn, before its next model call (seen with Pi
// 0.73.1: the steered text went in a second model call of the same run,
// before agent_end). Its lines are read on the child's reader.
type piRPC struct {
	a    *runner
	done chan struct{}
	n    atomic.Uint64
	// steered gets the answers to card's steer commands.
	steered chan piRPCLine

	mu     sync.Mutex
	of     *turn
	parser *piParser
}

// piWords: Pi's turn starts with the prompt command.
var piWords = stopWords{verb: "finished", firstStep: "the prompt", cutShort: "its output was cut short"}

func newPiRPC(Plan) protocol { return &piRPC{steered: make(chan piRPCLine, 1)} }

func (p *piRPC) open(a *runner) {
	p.a, p.done = a, make(chan struct{})
	a.child.out = lineSink{line: p.feed, eof: func() { close(p.done) }}
}

func (p *piRPC) consumed() <-chan struct{} { return p.done }

// opening: Pi needs none.
func (p *piRPC) opening(*turn) bool { return true }

// turnOf is the turn's parser, fresh for a turn it has not read for yet.
func (p *piRPC) turnOf(t *turn) *piParser {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.of != t {
		p.of, p.parser = t, newPiParser()
	}
	return p.parser
}

func (p *piRPC) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return p.a.child.write(append(b, '\n'))
}

// begin sends the turn's prompt command.
func (p *piRPC) begin(t *turn) {
	p.turnOf(t)
	cmd := piRPCPrompt{ID: "card-" + strconv.FormatUint(p.n.Add(1), 10), Type: "prompt", Message: t.spec.Prompt}
	for _, img := range t.images {
		cmd.Images = append(cmd.Images, piRPCImage{Type: "image", Data: base64.StdEncoding.EncodeToString(img.Data), MimeType: img.MIME})
	}
	t.setStep("prompt")
	_ = p.write(cmd)
}

// feed reads one line: the answer to a steer or an abort is card's, the
// rest the running turn's; between turns (and once the turn is over) a
// dialog is answered no and anything else dropped.
func (p *piRPC) feed(line []byte) {
	var l piRPCLine
	_ = json.Unmarshal(line, &l)
	if l.Type == "response" && (l.Command == "steer" || l.Command == "abort") {
		if l.Command == "steer" {
			select {
			case p.steered <- l:
			default:
			}
		}
		return
	}
	t := p.a.current()
	if t == nil || t.isEnded() {
		if l.Type == "extension_ui_request" && l.Method == "confirm" {
			no := false
			_ = p.write(piRPCUIResponse{Type: "extension_ui_response", ID: l.ID, Confirmed: &no})
		}
		return
	}
	p.line(t, line)
}

// line reads one of Pi's lines for the turn; the turn is over at
// agent_end, or once the prompt is refused.
func (p *piRPC) line(t *turn, line []byte) {
	var l piRPCLine
	if json.Unmarshal(line, &l) != nil || l.Type == "" {
		t.emit(otherEvent("", line))
		return
	}
	parser := p.turnOf(t)
	switch l.Type {
	case "response":
		if l.Success != nil && !*l.Success {
			msg := fmt.Sprintf("%s refused the %s command: %s", agent.Pi, l.Command, strings.TrimSpace(l.Error))
			t.fail(failure(classifyMessage(msg), clip(msg, 2048)))
			return
		}
		t.setStep("the turn (agent_end)")
	case "extension_ui_request":
		p.uiRequest(t, l)
	case "agent_end":
		t.emit(parser.Feed(line)...)
		t.complete()
	default:
		t.emit(parser.Feed(line)...)
	}
}

// uiRequest answers one extension dialog. Only the gate's confirm is a
// question for the approver; another dialog (none is loaded but card's
// gate) is answered cancelled, and fire-and-forget methods (notify,
// setStatus, …) need no answer.
func (p *piRPC) uiRequest(t *turn, l piRPCLine) {
	switch l.Method {
	case "confirm":
	case "select", "input", "editor":
		_ = p.write(piRPCUIResponse{Type: "extension_ui_response", ID: l.ID, Cancelled: true})
		return
	default:
		return
	}
	no := false
	var text string
	var call piGateCall
	if json.Unmarshal(l.Message, &text) != nil || json.Unmarshal([]byte(text), &call) != nil || call.Tool == "" {
		_ = p.write(piRPCUIResponse{Type: "extension_ui_response", ID: l.ID, Confirmed: &no})
		return
	}
	input := validRaw(call.Input)
	q := Question{Tool: call.Tool, Input: input, ToolUseID: call.ToolCallID, Summary: summarize(call.Tool, input)}
	reply := func(allow any) {
		ok := allow.(bool)
		_ = p.write(piRPCUIResponse{Type: "extension_ui_response", ID: l.ID, Confirmed: &ok})
	}
	t.question(false, reply, func(ctx context.Context) any {
		return t.approve(ctx, q).Allow
	})
}

// interrupt sends abort.
func (p *piRPC) interrupt(*turn) bool {
	return p.write(map[string]string{"type": "abort"}) == nil
}

// steer sends Pi's steer command and waits for its answer.
func (p *piRPC) steer(t *turn, text string) error {
drain:
	for {
		select {
		case <-p.steered: // a stale answer
		default:
			break drain
		}
	}
	if err := p.write(map[string]string{"type": "steer", "message": text}); err != nil {
		return err
	}
	answered := func(l piRPCLine) error {
		if l.Success != nil && !*l.Success {
			return fmt.Errorf("pi refused steer: %s", strings.TrimSpace(l.Error))
		}
		return nil
	}
	select {
	case l := <-p.steered:
		return answered(l)
	case <-t.ended:
		// Pi answers the steer before the turn it joined ends: an
		// answer already read counts.
		select {
		case l := <-p.steered:
			return answered(l)
		default:
		}
		return ErrNoTurn
	case <-p.done:
		return ErrAgentGone
	case <-time.After(10 * p.a.child.lim.KillGrace):
		return fmt.Errorf("pi did not answer the steer command")
	}
}

func (p *piRPC) finish(t *turn, exit *ExitInfo) api.Result {
	x := exitOrAlive(exit)
	parsed := x
	if t.isCompleted() {
		// The child was ended after the turn: its exit says nothing.
		parsed = ExitInfo{}
	}
	res := p.turnOf(t).Finish(parsed)
	return t.outcome(res, x, agent.Pi, piWords, func(exit ExitInfo) *api.RunError {
		switch {
		case res.Error != nil:
			// The parser read the failure in Pi's own events.
			return res.Error
		case strings.Contains(exit.StderrTail, piNoKey):
			return failure(api.KindAuth, clip("pi: "+lineWith(exit.StderrTail, piNoKey), 2048))
		}
		return nil
	}, "")
}

// sessionID is the session card named (Plan.SessionID), since Pi's RPC
// mode reports none.
func (p *piRPC) sessionID() string { return p.a.plan.SessionID }

// buildPiWarm keeps Pi warm over its RPC mode. In read_only, edit and
// bypass the plan is the one-shot plan's, every boundary flag included
// (--tools, --no-extensions and edit mode's gate extension), with --mode
// rpc instead of -p --mode json, and the session file card names
// (piSession): Pi writes each turn there, so a turn after the process
// ended (idle, close, a daemon restart or crash) resumes the same file,
// warm or cold. Ask mode's plan speaks RPC mode already.
func buildPiWarm(bin string, req Request) (Plan, error) {
	p, err := buildOneShot(bin, req)
	if err != nil {
		return Plan{}, err
	}
	if p.Session == nil {
		i := slices.Index(p.Args, "-p")
		if i < 0 || i+2 >= len(p.Args) || p.Args[i+1] != "--mode" || p.Args[i+2] != "json" {
			return Plan{}, fmt.Errorf("spawn: the pi plan has no -p --mode json to turn into --mode rpc")
		}
		args := append(slices.Clip(p.Args[:i]), "--mode", "rpc")
		p.Args = append(args, p.Args[i+3:]...)
		p.Session = &SessionPlan{Protocol: ProtocolPiRPC, Adapter: agent.Pi}
	}
	return p, nil
}
