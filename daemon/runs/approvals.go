package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

// The approval broker: an ask-mode run's questions go to a client, and the
// first valid answer decides each.
//
// Who is asked: the connection that started the run; once it is gone, the
// connections following the run (runs.subscribe), including one that
// subscribes while a question waits (an editor that reloads its window and
// follows its run again sees the question). Only a connection a question
// was sent to may answer it. The broker is handed only connections that
// may answer at all (the daemon keeps out those without the approve access
// class, starter or follower): a run started by one that may not has no
// starter to ask. No answer within the approval timeout, or
// nobody to ask when the question comes, denies it; so does every asked
// connection answering with an error instead of a decision. allow_always
// allows the tool by name for the rest of the run, and releases the
// questions about it still waiting. Each question and each decision is a
// run event (approval_requested, approval_decided), kept whatever the
// run's event bound, so the record of what was allowed is never partial.

// Asker is one client connection the broker can put a question to. The
// daemon's is a WebSocket connection sending agents.approve.
type Asker interface {
	// ID names the connection, uniquely for the daemon's life.
	ID() uint64
	// Done is closed when the connection ends.
	Done() <-chan struct{}
	// Ask sends the question and waits for the answer. ctx ends when the
	// question is decided otherwise; the asker then withdraws it. It
	// returns ErrAskerGone when the connection ends first, a
	// *DeclinedError when the client answers with an error, and any other
	// error for an answer it could not read.
	Ask(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error)
}

// ErrAskerGone is an Asker's error when its connection ends before the
// client answered.
var ErrAskerGone = errors.New("the connection closed before it answered")

// DeclinedError is a client that answered a question with an error instead
// of a decision (one that does not serve agents.approve answers -32601).
type DeclinedError struct {
	Code    int64
	Message string
}

func (e *DeclinedError) Error() string {
	return fmt.Sprintf("answered agents.approve with error %d: %s", e.Code, e.Message)
}

// The errors of an answer given with agents.approval_decide.
type (
	// ApprovalNotFoundError: the run never asked a question of that id.
	ApprovalNotFoundError struct{ RunID, RequestID string }
	// ApprovalClosedError: the question was already decided (by a client,
	// the timeout, a rule, or the run's end), or the run has ended.
	ApprovalClosedError struct {
		RunID, RequestID string
		Decision, By     string
	}
	// ApprovalNotAskedError: the question was not sent to this connection.
	ApprovalNotAskedError struct {
		RunID, RequestID string
		Conn             uint64
	}
	// BadDecisionError: a decision that is not one of Decisions.
	BadDecisionError struct{ Decision string }
)

func (e *ApprovalNotFoundError) Error() string {
	return fmt.Sprintf("run %s has no question %q: request_id is the one agents.approve (or the approval_requested event) gave", e.RunID, e.RequestID)
}

func (e *ApprovalClosedError) Error() string {
	if e.RequestID == "" {
		return fmt.Sprintf("run %s has ended; its questions were all decided (runs.get lists them)", e.RunID)
	}
	return fmt.Sprintf("question %s of run %s was already decided: %s by %s; an answer counts only while the question is open", e.RequestID, e.RunID, e.Decision, e.By)
}

func (e *ApprovalNotAskedError) Error() string {
	return fmt.Sprintf("this connection may not answer question %s of run %s: a question goes to the connection that started the run, "+
		"or, once that one is gone, to the connections following the run with runs.subscribe, and only those may answer it", e.RequestID, e.RunID)
}

func (e *BadDecisionError) Error() string {
	return fmt.Sprintf("unknown decision %q; answer allow, allow_always or deny", e.Decision)
}

// CheckDecision refuses a decision that is not one of Decisions.
func CheckDecision(d string) error {
	for _, ok := range api.Decisions {
		if d == ok {
			return nil
		}
	}
	return &BadDecisionError{Decision: d}
}

// approvals is one ask-mode run's broker. It is the run's spawn.Approver.
type approvals struct {
	runID, adapter string
	timeout        time.Duration
	log            *eventLog
	logger         *zap.Logger
	now            func() time.Time

	mu      sync.Mutex
	starter Asker // nil when the run was started without a connection
	// starterMayNotApprove says the run was started by a connection that
	// is never asked, since it may not approve (its grants lack the
	// approve class): a question nobody can take is denied for that, not
	// for a connection that closed.
	starterMayNotApprove bool
	watchers             map[uint64]Asker
	always               *Always
	// askAll sends each question to the starter and every watcher at
	// once, not to the watchers only once the starter is gone.
	askAll bool
	next   int
	open   map[string]*question
	closed map[string]*question
	ended  bool
}

// question is one tool call waiting for, or given, a decision.
type question struct {
	params   api.ApproveParams
	asked    map[uint64]Asker // every connection it was sent to
	declined int              // of those, how many answered with an error
	ctx      context.Context  // ends when decided: withdraws it everywhere
	cancel   context.CancelFunc
	done     chan struct{}
	decision string
	by       string
	result   spawn.Decision
}

func newApprovals(runID, adapter string, timeout time.Duration, starter Asker, log *eventLog, logger *zap.Logger) *approvals {
	return &approvals{runID: runID, adapter: adapter, timeout: timeout, starter: starter, log: log, logger: logger, now: time.Now,
		watchers: map[uint64]Asker{}, always: NewAlways(), open: map[string]*question{}, closed: map[string]*question{}}
}

// Always is the set of tools allow_always has allowed, by name. A run has
// its own unless its Request shares one: a session's turns share theirs,
// so an allow_always holds for the rest of the conversation.
type Always struct {
	mu    sync.Mutex
	tools map[string]bool
	// parent, for a scoped set, is the set its answers are also added to.
	parent *Always
}

// NewAlways is an empty set.
func NewAlways() *Always { return &Always{tools: map[string]bool{}} }

// Scoped is a set that starts empty and adds what it is answered to s as
// well: a run that must not be given s's standing answers (its starter may
// not approve) is still asked, and an allow_always answered in it stands
// for the runs that may use s.
func (s *Always) Scoped() *Always { return &Always{tools: map[string]bool{}, parent: s} }

// Has reports whether tool was allowed always.
func (s *Always) Has(tool string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools[tool]
}

func (s *Always) add(tool string) {
	s.mu.Lock()
	s.tools[tool] = true
	s.mu.Unlock()
	if s.parent != nil {
		s.parent.add(tool)
	}
}

func gone(a Asker) bool {
	select {
	case <-a.Done():
		return true
	default:
		return false
	}
}

// Approve puts one tool call to the run's clients and waits for the
// decision (spawn.Approver).
func (a *approvals) Approve(ctx context.Context, sq spawn.Question) spawn.Decision {
	tool := api.ToolCall{Name: sq.Tool, Input: sq.Input, ID: sq.ToolUseID}
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		return spawn.Decision{Message: "card denied this tool call: the run has ended"}
	}
	a.next++
	id := "apr_" + strconv.Itoa(a.next)
	// Times in milliseconds, as the store keeps every other time of a run.
	asked := a.now()
	now := asked.UTC().Truncate(time.Millisecond)
	deadline := asked.Add(a.timeout).UTC().Truncate(time.Millisecond)
	q := &question{
		params: api.ApproveParams{RunID: a.runID, RequestID: id, Adapter: a.adapter, Tool: tool, Summary: sq.Summary,
			ExpiresAt: deadline},
		asked: map[uint64]Asker{},
		done:  make(chan struct{}),
	}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	unrecorded := "card denied this tool call: run " + a.runID + " has kept max_events_per_run events, so this call could not be recorded, " +
		"and card runs no tool call its history cannot show; raise max_events_per_run or start a new run"
	if a.always.Has(sq.Tool) {
		if !a.log.hasRoom() {
			a.decideLocked(q, api.DecisionDeny, api.ByEventBound, unrecorded)
		} else {
			a.decideLocked(q, api.DecisionAllow, api.ByRule, "")
		}
		a.mu.Unlock()
		return q.result
	}
	a.open[id] = q
	if !a.log.keep(api.EventApprovalRequested, api.AgentEvent{
		Event:    api.Event{Kind: api.EventApprovalRequested, Tool: &api.Tool{Name: tool.Name, ID: tool.ID, Input: boundedInput(tool.Input)}},
		Approval: &api.Approval{RequestID: id, Summary: sq.Summary, RequestedAt: &now, ExpiresAt: &q.params.ExpiresAt},
	}) {
		a.decideLocked(q, api.DecisionDeny, api.ByEventBound, unrecorded)
		a.mu.Unlock()
		return q.result
	}
	audience := a.audienceLocked()
	for _, c := range audience {
		a.sendLocked(q, c)
	}
	if len(audience) == 0 {
		why := "the connection that started run " + a.runID + " has closed and no connection follows the run with runs.subscribe"
		if a.starterMayNotApprove {
			why = "the connection that started run " + a.runID + " may not approve tool calls (its grants lack the approve access class, " +
				"which card.toml's [origins.\"<origin>\"] grants give a web page), and no connection that may follows the run with runs.subscribe"
		}
		a.decideLocked(q, api.DecisionDeny, api.ByNoClient, "card denied this tool call: nobody could be asked ("+why+")")
	}
	a.mu.Unlock()

	timer := time.NewTimer(time.Until(asked.Add(a.timeout)))
	defer timer.Stop()
	select {
	case <-q.done:
	case <-timer.C:
		a.decide(q, api.DecisionDeny, api.ByTimeout, fmt.Sprintf("card denied this tool call: nobody answered within %s (approval_timeout_secs)", a.timeout))
	case <-ctx.Done():
		a.decide(q, api.DecisionDeny, api.ByRunEnd, "card denied this tool call: the agent stopped waiting for the answer")
	}
	<-q.done
	return q.result
}

// audienceLocked is who a new question goes to: the starter while it is
// connected, else every connection following the run.
func (a *approvals) audienceLocked() []Asker {
	var out []Asker
	if a.starter != nil && !gone(a.starter) {
		if !a.askAll {
			return []Asker{a.starter}
		}
		out = append(out, a.starter)
	}
	for _, w := range a.watchers {
		if !gone(w) {
			out = append(out, w)
		}
	}
	return out
}

// sendLocked sends q to c, once.
func (a *approvals) sendLocked(q *question, c Asker) {
	if _, ok := q.asked[c.ID()]; ok {
		return
	}
	q.asked[c.ID()] = c
	go a.askOne(q, c)
}

// askOne is one connection's side of one question.
func (a *approvals) askOne(q *question, c Asker) {
	ans, err := c.Ask(q.ctx, q.params)
	a.mu.Lock()
	defer a.mu.Unlock()
	var declined *DeclinedError
	switch {
	case q.decision != "":
		// Decided elsewhere while this one was out; a late answer is moot.
	case err == nil:
		if CheckDecision(ans.Decision) != nil {
			// Not an answer: the question stays open, for this client's
			// agents.approval_decide, another client, or the timeout.
			a.logger.Warn("a client answered agents.approve with no valid decision; the question stays open",
				zap.String("run_id", a.runID), zap.String("request_id", q.params.RequestID), zap.Uint64("conn", c.ID()),
				zap.String("decision", ans.Decision))
			return
		}
		a.decideLocked(q, ans.Decision, api.ByClient, ans.Message)
	case errors.Is(err, ErrAskerGone):
		if a.starter != nil && c.ID() == a.starter.ID() {
			for _, w := range a.watchers {
				if !gone(w) {
					a.sendLocked(q, w)
				}
			}
		}
	case errors.As(err, &declined):
		q.declined++
		a.logger.Info("a client declined to answer a question", zap.String("run_id", a.runID),
			zap.String("request_id", q.params.RequestID), zap.Uint64("conn", c.ID()), zap.Error(err))
		if q.declined == len(q.asked) {
			a.decideLocked(q, api.DecisionDeny, api.ByNoClient, fmt.Sprintf("card denied this tool call: no client could answer "+
				"(connection %d %s)", c.ID(), declined.Error()))
		}
	default:
		a.logger.Warn("could not read a client's answer to agents.approve; the question stays open", zap.String("run_id", a.runID),
			zap.String("request_id", q.params.RequestID), zap.Uint64("conn", c.ID()), zap.Error(err))
	}
}

func (a *approvals) decide(q *question, decision, by, message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.decideLocked(q, decision, by, message)
}

// decideLocked records q's decision unless it has one; the first wins.
func (a *approvals) decideLocked(q *question, decision, by, message string) bool {
	if q.decision != "" {
		return false
	}
	q.decision, q.by = decision, by
	allow := decision != api.DecisionDeny
	if allow {
		message = ""
	} else if message == "" {
		message = "The user denied this tool call."
	}
	q.result = spawn.Decision{Allow: allow, Message: message}
	id := q.params.RequestID
	delete(a.open, id)
	a.closed[id] = q
	now := a.now().UTC().Truncate(time.Millisecond)
	a.log.keep(api.EventApprovalDecided, api.AgentEvent{
		Event:    api.Event{Kind: api.EventApprovalDecided, Tool: &api.Tool{Name: q.params.Tool.Name, ID: q.params.Tool.ID}},
		Approval: &api.Approval{RequestID: id, Decision: decision, By: by, Message: message, DecidedAt: &now},
	})
	close(q.done)
	q.cancel()
	if decision == api.DecisionAllowAlways {
		tool := q.params.Tool.Name
		a.always.add(tool)
		for _, other := range a.open {
			if other.params.Tool.Name == tool {
				a.decideLocked(other, api.DecisionAllow, api.ByRule, "")
			}
		}
	}
	return true
}

// answer is a decision given with agents.approval_decide by connection
// conn.
func (a *approvals) answer(conn uint64, requestID, decision, message string) (api.DecideResult, error) {
	if err := CheckDecision(decision); err != nil {
		return api.DecideResult{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	q, ok := a.open[requestID]
	if !ok {
		if c, ok := a.closed[requestID]; ok {
			return api.DecideResult{}, &ApprovalClosedError{RunID: a.runID, RequestID: requestID, Decision: c.decision, By: c.by}
		}
		return api.DecideResult{}, &ApprovalNotFoundError{RunID: a.runID, RequestID: requestID}
	}
	if _, asked := q.asked[conn]; !asked {
		return api.DecideResult{}, &ApprovalNotAskedError{RunID: a.runID, RequestID: requestID, Conn: conn}
	}
	a.decideLocked(q, decision, api.ByClient, message)
	return api.DecideResult{RunID: a.runID, RequestID: requestID, Decision: decision, By: api.ByClient}, nil
}

// watch adds a connection following the run; while the starter is gone it
// is sent every question still waiting. The returned function removes it.
func (a *approvals) watch(c Asker) func() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.watchers[c.ID()] = c
	if a.askAll || a.starter == nil || gone(a.starter) {
		for _, q := range a.open {
			a.sendLocked(q, c)
		}
	}
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.watchers[c.ID()] == c {
			delete(a.watchers, c.ID())
		}
	}
}

// end denies every question still waiting and refuses new ones; the run
// calls it once its agent is gone, before its terminal event, so every
// question's decision is in the run's record.
func (a *approvals) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = true
	for _, q := range a.open {
		a.decideLocked(q, api.DecisionDeny, api.ByRunEnd, "card denied this tool call: the run ended before anyone answered")
	}
}

// maxEventInput bounds a tool input recorded in an approval_requested event
// (the client's question carries it whole): a Write of a large file would
// otherwise put the file into the run's history.
const maxEventInput = 64 << 10

func boundedInput(in json.RawMessage) json.RawMessage {
	if len(in) > maxEventInput || !json.Valid(in) {
		return nil
	}
	return in
}
