package spawn

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/card-dev/card/agent"
)

// Pi's conversation channel is its RPC mode (`pi --mode rpc`), the
// protocol its ask mode already speaks: one prompt command per turn in the
// same process, the turn over at agent_end; abort stops a running turn
// (Pi ends it with agent_end and waits for the next prompt), and steer
// queues a message that Pi delivers inside the running turn, before its
// next model call (seen with Pi 0.73.1: the steered text went in a second
// model call of the same run, before agent_end).
//
// In read_only, edit and bypass the plan is the one-shot plan's, every
// boundary flag included (--tools, --no-extensions and edit mode's gate
// extension), with --mode rpc instead of -p --mode json, and the session
// file card names (piSession): Pi writes each turn there, so a turn after
// the process ended (idle, close, a daemon restart or crash) resumes the
// same file, warm or cold.
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

// piWarm is Pi's side of a warm agent: each turn a piRPCConversation of
// its own (the same reading of events and dialogs as an ask-mode run)
// over the one process's stdio.
type piWarm struct {
	w    *warmRunner
	done chan struct{}
	n    atomic.Uint64

	mu     sync.Mutex
	cur    *piRPCConversation
	curT   turn
	curW   *warmTurn
	byTurn map[*warmTurn]*piRPCConversation
	// steered gets the answers to card's steer commands.
	steered chan piRPCLine
	// sid is the session card named (Plan.SessionID); "" without one.
	sid string
}

func newPiWarm(plan Plan) warmProto {
	return &piWarm{done: make(chan struct{}), byTurn: map[*warmTurn]*piRPCConversation{}, steered: make(chan piRPCLine, 1), sid: plan.SessionID}
}

func (p *piWarm) consumed() <-chan struct{} { return p.done }

// open starts the reader; Pi needs no opening.
func (p *piWarm) open(_ context.Context, w *warmRunner) *Failure {
	p.w = w
	go func() {
		defer close(p.done)
		for line := range w.child.lines {
			p.feed(line)
		}
	}()
	return nil
}

func (p *piWarm) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return p.w.child.write(append(b, '\n'))
}

// feed reads one line: the answer to a steer or an abort is card's, the
// rest the running turn's; between turns a dialog is answered no and
// anything else dropped.
func (p *piWarm) feed(line []byte) {
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
	p.mu.Lock()
	c, t, wt := p.cur, p.curT, p.curW
	p.mu.Unlock()
	if c == nil {
		if l.Type == "extension_ui_request" && l.Method == "confirm" {
			no := false
			_ = p.write(piRPCUIResponse{Type: "extension_ui_response", ID: l.ID, Confirmed: &no})
		}
		return
	}
	if c.line(line, t) {
		p.mu.Lock()
		if p.cur == c {
			p.cur, p.curW = nil, nil
		}
		p.mu.Unlock()
		wt.end()
	}
}

func (p *piWarm) begin(wt *warmTurn) {
	c := &piRPCConversation{turnState: turnState{adapter: agent.Pi, words: piWords}, parser: newPiParser(), w: stdinWriter{p.w.child}}
	c.begin(wt.ctx)
	t := turn{Prompt: wt.spec.Prompt, Images: wt.images, Cwd: p.w.plan.Dir, Emit: wt.emit, Approver: p.w.child.approver}
	p.mu.Lock()
	p.cur, p.curT, p.curW = c, t, wt
	p.byTurn[wt] = c
	p.mu.Unlock()
	c.prompt(t, "card-"+strconv.FormatUint(p.n.Add(1), 10))
}

// interrupt sends abort.
func (p *piWarm) interrupt(*warmTurn) bool {
	return p.write(map[string]string{"type": "abort"}) == nil
}

// steer sends Pi's steer command and waits for its answer.
func (p *piWarm) steer(wt *warmTurn, text string) error {
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
	case <-wt.ended:
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
	case <-time.After(10 * p.w.lim.KillGrace):
		return fmt.Errorf("pi did not answer the steer command")
	}
}

func (p *piWarm) finish(wt *warmTurn, exit *ExitInfo) Result {
	p.mu.Lock()
	c := p.byTurn[wt]
	delete(p.byTurn, wt)
	if p.curW == wt {
		p.cur, p.curW = nil, nil
	}
	p.mu.Unlock()
	if c == nil {
		return Result{IsError: true, Error: failure(KindExit, "pi ended before the turn began")}
	}
	res := wt.settle(c, exit)
	if p.sid != "" {
		res.SessionID = p.sid
	}
	return res
}

// sessionID is the session card named, since Pi's RPC mode reports none.
func (p *piWarm) sessionID() string { return p.sid }
