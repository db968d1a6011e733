package spawn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/card-dev/card/api"
)

// buildClaudeWarm keeps Claude Code warm over its stream-json
// conversation (protocolClaudeStream). Every flag of the one-shot plan
// stays, so each permission mode's boundary is the one-shot run's; only
// the input format changes, and the prompt goes in the protocol.
func buildClaudeWarm(bin string, req Request) (Plan, error) {
	p, err := buildOneShot(bin, req)
	if err != nil {
		return Plan{}, err
	}
	if !slices.Contains(p.Args, "--input-format") {
		// Operator extras come first and card's own flags after them, so
		// the last --input-format (card's) is the one Claude uses.
		p.Args = append(p.Args, "--input-format", "stream-json")
	}
	p.Input = Input{Format: InputClaudeMessage}
	// The runner knows the warm agent's protocol by its session plan;
	// Claude asks through its permission tool, never over stdio.
	p.Session = &SessionPlan{Protocol: protocolClaudeStream, Adapter: req.Adapter}
	return p, nil
}

// protocolClaudeStream is Claude Code's stream-json conversation: `-p
// --input-format stream-json --output-format stream-json` with stdin left
// open, as Claude Code 2.1.197 speaks it (checked with a loopback
// stand-in). Only warm agents speak it: a one-shot run writes one message
// and closes stdin, and ask mode asks through card's permission tool. The
// agent's opening, then one turn after another in the same session and
// the same process:
//
//	→ {"type":"control_request","request":{"subtype":"initialize"}}, the
//	  first message of the CLI's own SDK; its control_response describes
//	  the slash commands
//	→ {"type":"user","message":{…}}: a turn's prompt, images included
//	← the CLI's assistant, user and system lines while the turn runs,
//	  read by the one-shot parser (claude_parse.go)
//	← {"type":"result",…}: the turn's end; the CLI then waits for the
//	  next user line (the second turn's API request carried the first
//	  turn's messages), and exits when stdin closes
//	→ {"type":"control_request","request":{"subtype":"interrupt"}}, as
//	  the SDK sends it, stops a running turn: the CLI stops the model call
//	  and ends the turn with its result within about a second, and takes
//	  the next line as a new turn in the same process
//
// A user line written while a turn runs does not join it (see steer).
const protocolClaudeStream Protocol = "claude-stream-json"

// claudeStream is card's side of Claude Code's stream-json conversation.
// Its lines are read on the child's reader.
type claudeStream struct {
	a    *runner
	done chan struct{}
	next atomic.Uint64

	mu     sync.Mutex
	t      *turn // the turn the lines belong to, nil between turns
	parser *claudeParser
	sid    string
	// spent is the process's cost so far: Claude's result reports what
	// the process has spent over all its turns (seen with 2.1.197:
	// 0.000105, 0.00021, 0.000315 for three alike turns), and a turn's
	// cost is its part.
	spent float64
	// described are the slash commands with the description and argument
	// hint the CLI's initialize answer gives them, by name; the init line
	// of each turn names the commands only.
	described map[string]api.SlashCommand
}

// claudeInitializeID is the request id of the initialize control request
// a warm agent opens with.
const claudeInitializeID = "card-initialize"

func newClaudeStream(Plan) protocol { return &claudeStream{done: make(chan struct{})} }

func (c *claudeStream) consumed() <-chan struct{} { return c.done }

// open reads each line as the reader has it; when it has no whole line in
// hand, what the turn holds of its text goes out before it waits for the
// agent, so the deltas read together go out as one.
func (c *claudeStream) open(a *runner) {
	c.a, a.merges = a, true
	a.child.out = lineSink{line: c.feed, idle: c.flush, eof: func() { close(c.done) }}
}

// opening asks the CLI's initialize control request (its own SDK's first
// message) for its commands: the answer describes each, where a turn's
// init line only names them. Nothing waits for it; Claude Code says
// nothing else before its first prompt, and a CLI already gone is
// explained by its first turn, from the exit.
func (c *claudeStream) opening(*turn) bool {
	msg, _ := json.Marshal(map[string]any{"type": "control_request", "request_id": claudeInitializeID, "request": map[string]any{"subtype": "initialize"}})
	_ = c.a.child.write(append(msg, '\n'))
	return true
}

// flush sends what the running turn holds of its text.
func (c *claudeStream) flush() {
	c.mu.Lock()
	t := c.t
	c.mu.Unlock()
	if t != nil {
		t.ev.flush()
	}
}

// feed reads one stdout line for the running turn; the turn ends at its
// result line. A line between turns is nobody's and is dropped.
func (c *claudeStream) feed(line []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bytes.Contains(line, []byte(`"control_response"`)) && c.initialized(line) {
		return
	}
	if c.t == nil {
		return
	}
	evs := c.parser.Feed(line)
	for i := range evs {
		if evs[i].Kind == api.EventSession {
			evs[i].Commands = c.describe(evs[i].Commands)
		}
	}
	if c.parser.sessionID != "" {
		c.sid = c.parser.sessionID
	}
	c.t.emit(evs...)
	if c.parser.result != nil {
		c.t.end()
		c.t = nil
	}
}

// initialized reads the answer to the initialize request, if line is it.
func (c *claudeStream) initialized(line []byte) bool {
	var m struct {
		Type     string `json:"type"`
		Response struct {
			RequestID string `json:"request_id"`
			Response  struct {
				Commands []struct {
					Name         string `json:"name"`
					Description  string `json:"description"`
					ArgumentHint string `json:"argumentHint"`
				} `json:"commands"`
			} `json:"response"`
		} `json:"response"`
	}
	if !decodeParams(line, &m) || m.Type != "control_response" || m.Response.RequestID != claudeInitializeID {
		return false
	}
	c.described = map[string]api.SlashCommand{}
	for _, cmd := range m.Response.Response.Commands {
		c.described[cmd.Name] = api.SlashCommand{Name: cmd.Name, Description: cmd.Description, InputHint: cmd.ArgumentHint}
	}
	return true
}

// describe gives the commands a turn's init line names the description
// and hint the initialize answer had for them.
func (c *claudeStream) describe(cmds []api.SlashCommand) []api.SlashCommand {
	for i, cmd := range cmds {
		if d, ok := c.described[cmd.Name]; ok {
			if cmd.Description == "" {
				cmds[i].Description = d.Description
			}
			if cmd.InputHint == "" {
				cmds[i].InputHint = d.InputHint
			}
		}
	}
	return cmds
}

func (c *claudeStream) begin(t *turn) {
	c.mu.Lock()
	c.t, c.parser = t, newClaudeParser()
	c.mu.Unlock()
	var b bytes.Buffer
	if err := writeClaudeMessage(&b, t.spec.Prompt, t.images); err != nil {
		t.fail(failure(api.KindBadInput, err.Error()))
		return
	}
	if err := c.a.child.write(b.Bytes()); err != nil {
		// The agent is gone; the runner explains it from the exit.
		return
	}
}

// interrupt sends Claude Code's interrupt control request.
func (c *claudeStream) interrupt(*turn) bool {
	id := "card-interrupt-" + strconv.FormatUint(c.next.Add(1), 10)
	msg, _ := json.Marshal(map[string]any{"type": "control_request", "request_id": id, "request": map[string]any{"subtype": "interrupt"}})
	return c.a.child.write(append(msg, '\n')) == nil
}

// steer is refused: a user line written while a turn runs does not join
// it. Claude Code 2.1.197 queues it as a turn of its own, answered with its
// own result after the running turn's (seen against a stand-in: the
// running turn's model call never carried it, the next one did), so card
// would hand one turn's answer to another.
func (c *claudeStream) steer(*turn, string) error { return ErrNoSteer }

func (c *claudeStream) finish(t *turn, exit *ExitInfo) api.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t == t {
		c.t = nil
	}
	p := c.parser
	if p == nil {
		p = newClaudeParser()
	}
	x := ExitInfo{Code: 0}
	if exit != nil {
		x = *exit
	}
	res := p.Finish(x)
	if res.CostUSD != nil {
		total := *res.CostUSD
		turn := max(total-c.spent, 0)
		c.spent = total
		res.CostUSD = &turn
	}
	if f := t.failed(); f != nil {
		res.IsError, res.Error = true, f
	}
	if p.result == nil && res.Error == nil && exit != nil {
		msg := fmt.Sprintf("claude ended (exit status %d) before it answered the turn", exit.Code)
		if exit.Code < 0 {
			msg = "claude was killed before it answered the turn"
		}
		if l := lastLine(exit.StderrTail); l != "" {
			msg += ": " + l
		}
		res.IsError, res.Error = true, failure(api.KindExit, clip(msg, 2048))
	}
	return res
}

func (c *claudeStream) sessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sid
}
