package spawn

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/card-dev/card/acp"
)

// Session protocols: an agent that asks about tool calls over its own stdin
// and stdout cannot be run one-shot. The prompt cannot simply be written to
// stdin and stdin closed, because the agent's questions come back on stdout
// as requests that need answers on stdin, for as long as the turn lasts. A
// plan whose Session is set is run as a conversation instead: the runner
// starts the child as it starts every other (explicit cwd, own process
// group, deadline, output limits, private files), hands the child's stdout
// lines and its stdin to the protocol's conversation, and ends the group
// once the turn is over, since these agents wait for a next prompt instead
// of exiting.
//
// The seam: a protocol is one conversation type, named by the Session of
// each driver that speaks it.
// It gets the turn (prompt, cwd, stdout lines, stdin, emit, approver) and
// reports its result once the child is gone; the runner keeps every
// process guarantee. ACP (Gemini CLI, Copilot CLI) is the first; Codex's
// app-server, Droid's stream-jsonrpc and Pi's RPC mode are JSON objects one
// per line too, and fit the same turn (newLineStream is their framing when
// they are JSON-RPC).
//
// What a protocol does not own is shared: turnState (session_turn.go) is
// the common ending (the first failure wins, an early stop is explained,
// questions still waiting end denied before stdin closes), rpcTurn
// (session_rpc.go) the JSON-RPC calls and questions on top of it, and a
// new protocol gets an entry in the conformance suite that every protocol
// passes (session_conformance_test.go).

// Protocol names a session protocol an agent speaks over its stdio.
type Protocol string

// ProtocolACP is the Agent Client Protocol (JSON-RPC 2.0, one message per
// line): initialize, session/new, session/prompt, with session/update
// notifications and session/request_permission requests from the agent.
const ProtocolACP Protocol = "acp"

// SessionPlan is how a plan's child is talked to when it is not one-shot.
type SessionPlan struct {
	Protocol Protocol
	// Adapter picks the adapter's dialect of the protocol: how it names
	// tools and what its exit codes and stderr mean.
	Adapter string
	// Model and Effort go inside the protocol, for a CLI that takes them
	// there and not on argv (Droid's stream-jsonrpc); empty leaves the
	// CLI's own choice.
	Model, Effort string
	// thread is the app-server thread a Codex run or warm agent starts or
	// resumes (its mode's sandbox and approval policy); nil: the ask
	// thread.
	thread *codexAppThreadStart
	// resume is the CLI's own session a run or a warm agent opens instead
	// of a new one (ACP's session/load, Codex's thread/resume); "" for a
	// new one.
	resume string
	// usageBase is the plan's UsageBase, for a conversation resuming a
	// session whose CLI reports the session's running total.
	usageBase Usage
}

// usageBaser is a one-shot parser whose CLI reports the session's running
// total: it takes the run's part from the plan's base.
type usageBaser interface{ setUsageBase(Usage) }

// resumedBase is the running total a conversation's turn starts from: the
// plan's base when it resumes a session, none for a new one (whose total
// starts at zero whatever the request said).
func resumedBase(sp SessionPlan) Usage {
	if sp.resume == "" {
		return Usage{}
	}
	return sp.usageBase
}

// conversation is one run's side of a session protocol.
type conversation interface {
	// converse runs the turn. It returns once the agent has answered the
	// prompt, once the agent's stdout has ended, or once ctx has ended,
	// and not before every question it put to the approver is answered.
	converse(ctx context.Context, t turn)
	// finish is called once, after the child and its group are gone, and
	// gives the run's result; an unfinished turn is a failure it names.
	finish(exit ExitInfo) Result
}

// turn is what a conversation is given to work with.
type turn struct {
	// Prompt goes to the agent inside the protocol, never on argv.
	Prompt string
	// Images go with the prompt, inside the protocol, in order.
	Images []Image
	// Cwd is the run's working directory (absolute, checked).
	Cwd string
	// Lines are the child's stdout lines, complete and without the
	// newline, already bounded (MaxLine) and counted (MaxOutput) by the
	// runner; each slice is the receiver's. Closed when stdout ends.
	Lines <-chan []byte
	// Stdin is the child's stdin. The runner closes it after converse
	// returns.
	Stdin io.Writer
	// Emit hands events to the run, in order; safe from any goroutine.
	Emit func(...Event)
	// Approver decides the agent's questions; nil denies them all.
	Approver Approver
}

// approve puts q to the turn's approver; a turn without one denies it.
func (t turn) approve(ctx context.Context, q Question) Decision {
	if t.Approver == nil {
		return Decision{Message: "card denied this tool call: the run has no approver"}
	}
	return t.Approver.Approve(ctx, q)
}

// newConversation starts sp's conversation with the protocol its adapter's
// driver speaks (Driver.Session); a plan naming another protocol is a
// builder's mistake.
func newConversation(sp SessionPlan) (conversation, error) {
	a, ok := Lookup(sp.Adapter)
	if !ok || a.Session.New == nil || a.Session.Protocol != sp.Protocol {
		return nil, fmt.Errorf("adapter %q is not run over session protocol %q", sp.Adapter, sp.Protocol)
	}
	return a.Session.New(sp)
}

// lineStream is a jsonrpc2.ObjectStream over newline-delimited JSON, the
// framing of ACP (and of Codex's app-server and Droid's stream-jsonrpc):
// one message per line each way. It reads lines the runner has already
// bounded and counted, so nothing the child prints can grow it.
//
// The framing is acp's (these agents frame alike): a line that is not a
// JSON-RPC message (a log line, a stray object) is handed to bad and
// skipped, since sourcegraph/jsonrpc2 would otherwise close the whole
// conversation on it, and each message is written as one line.
type lineStream struct {
	lines <-chan []byte
	w     *acp.Writer
	bad   func(line []byte)
	// idle, when set, is called before the stream waits for the agent's
	// next line: none is in hand, so what the turn holds of its text
	// goes out (see emitter.held).
	idle func()

	done chan struct{}
	once sync.Once
}

func newLineStream(lines <-chan []byte, w io.Writer, bad func(line []byte)) *lineStream {
	return &lineStream{lines: lines, w: acp.NewWriter(w), bad: bad, done: make(chan struct{})}
}

// ReadObject implements jsonrpc2.ObjectStream.
func (s *lineStream) ReadObject(v any) error {
	for {
		var line []byte
		var ok, got bool
		if s.idle != nil {
			select {
			case line, ok = <-s.lines:
				got = true
			default:
				s.idle()
			}
		}
		if !got {
			select {
			case <-s.done:
				return io.EOF
			case line, ok = <-s.lines:
			}
		}
		if !ok {
			return io.EOF
		}
		if !acp.IsMessage(line) {
			if s.bad != nil {
				s.bad(line)
			}
			continue
		}
		return json.Unmarshal(line, v)
	}
}

// WriteObject implements jsonrpc2.ObjectStream: one line per message.
func (s *lineStream) WriteObject(obj any) error {
	return s.w.Write(obj)
}

// Close implements jsonrpc2.ObjectStream. It stops reading; the child's
// stdin is the runner's to close.
func (s *lineStream) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}
