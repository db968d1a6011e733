package agentside

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// The option ids card offers in session/request_permission. A client picks
// by kind; the ids say what card records.
const (
	optAllow       = "allow"
	optAllowAlways = "allow_always"
	optReject      = "reject"
	optRejectAlway = "reject_always"
)

// perm is one question of card's, put to the editor once however it
// reached this connection: as agents.approve (Approve) or as the turn's
// approval_requested event, or both.
type perm struct {
	done   chan struct{}
	answer api.ApproveAnswer
	// viaApprove: the daemon asked this connection itself, so the answer
	// goes back as the reply to that question, not as approval_decide.
	viaApprove bool
	cancel     context.CancelFunc
	elsewhere  bool
}

// decidedElsewhere withdraws the editor's question: another client (or
// the timeout) answered first. Called with the session's lock held.
func (p *perm) decidedElsewhere(a api.ApproveAnswer) {
	select {
	case <-p.done:
		return
	default:
	}
	p.elsewhere = true
	p.answer = a
	if p.cancel != nil {
		p.cancel()
	}
}

// Approve answers a question the daemon put to this connection
// (agents.approve): the client's OnApprove. The question goes to the
// editor as session/request_permission, once even when the turn's event
// announces it too.
func (s *Server) Approve(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
	var st *session
	for i := 0; st == nil && i < 50; i++ {
		st = s.sessionOfRun(q.RunID)
		if st == nil {
			select {
			case <-ctx.Done():
				return api.ApproveAnswer{}, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if st == nil {
		return api.ApproveAnswer{}, errors.New("no ACP session of this connection runs " + q.RunID)
	}
	ev := api.AgentEvent{RunID: q.RunID, Event: api.Event{Kind: api.EventApprovalRequested,
		Tool: &api.Tool{Name: q.Tool.Name, ID: q.Tool.ID, Input: q.Tool.Input}},
		Approval: &api.Approval{RequestID: q.RequestID, Summary: q.Summary}}
	p := st.ask(ev, true)
	select {
	case <-p.done:
		if p.elsewhere {
			return api.ApproveAnswer{}, errors.New("answered by another client")
		}
		return p.answer, nil
	case <-ctx.Done():
		return api.ApproveAnswer{}, ctx.Err()
	}
}

// sessionOfRun is the session whose turn run is, once its first event has
// been handled.
func (s *Server) sessionOfRun(runID string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sessions {
		st.mu.Lock()
		_, ok := st.runs[runID]
		st.mu.Unlock()
		if ok {
			return st
		}
	}
	return nil
}

func (st *session) askAsync(e api.AgentEvent) { st.ask(e, false) }

// ask puts the question to the editor unless it is already being put.
func (st *session) ask(e api.AgentEvent, viaApprove bool) *perm {
	if e.Approval == nil {
		return &perm{done: closed()}
	}
	id := e.Approval.RequestID
	st.mu.Lock()
	if a, done := st.answered[id]; done {
		st.mu.Unlock()
		return &perm{done: closed(), answer: a.ApproveAnswer, elsewhere: a.elsewhere}
	}
	p := st.perms[id]
	if p != nil {
		p.viaApprove = p.viaApprove || viaApprove
		st.mu.Unlock()
		return p
	}
	ctx, cancel := context.WithCancel(st.srv.ctx)
	p = &perm{done: make(chan struct{}), viaApprove: viaApprove, cancel: cancel}
	st.perms[id] = p
	st.mu.Unlock()
	st.srv.wg.Add(1)
	go func() {
		defer st.srv.wg.Done()
		defer cancel()
		answer := st.question(ctx, e)
		st.mu.Lock()
		if !p.elsewhere {
			p.answer = answer
		}
		decide := !p.viaApprove && !p.elsewhere
		delete(st.perms, id)
		st.answered[id] = answered{ApproveAnswer: p.answer, elsewhere: p.elsewhere}
		close(p.done)
		st.mu.Unlock()
		if decide {
			st.srv.mu.Lock()
			be := st.srv.backend
			st.srv.mu.Unlock()
			dctx, dcancel := context.WithTimeout(st.srv.ctx, 10*time.Second)
			defer dcancel()
			if _, err := be.ApprovalDecide(dctx, api.DecideParams{RunID: e.RunID, RequestID: id, Decision: answer.Decision, Message: answer.Message}); err != nil {
				st.srv.logf("card acp: answer question %s: %v", id, err)
			}
		}
	}()
	return p
}

// answered is how a question was decided: here (the editor's answer, or
// an "always" it gave), or elsewhere (another client, the timeout).
type answered struct {
	api.ApproveAnswer
	elsewhere bool
}

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// question asks the editor, or answers from an "always" the person gave
// earlier in this session for the same tool.
func (st *session) question(ctx context.Context, e api.AgentEvent) api.ApproveAnswer {
	name := ""
	var input json.RawMessage
	toolID := "approval-" + e.Approval.RequestID
	if e.Tool != nil {
		name, input = e.Tool.Name, e.Tool.Input
		if e.Tool.ID != "" {
			toolID = e.Tool.ID
		}
	}
	st.mu.Lock()
	remembered := st.always[name]
	st.mu.Unlock()
	switch remembered {
	case optAllowAlways:
		return api.ApproveAnswer{Decision: api.DecisionAllowAlways}
	case optRejectAlway:
		return api.ApproveAnswer{Decision: api.DecisionDeny, Message: "the person rejected " + name + " for this session"}
	}
	call := toolCall(toolID, name, input).AsUpdate()
	call.Status = acp.ToolPending
	if e.Approval.Summary != "" {
		call.Title = e.Approval.Summary
	}
	req := acp.RequestPermissionRequest{SessionID: st.id, ToolCall: call, Options: []acp.PermissionOption{
		{OptionID: optAllow, Name: "Allow", Kind: acp.PermissionAllowOnce},
		{OptionID: optAllowAlways, Name: "Always allow " + orTool(name), Kind: acp.PermissionAllowAlways},
		{OptionID: optReject, Name: "Reject", Kind: acp.PermissionRejectOnce},
		{OptionID: optRejectAlway, Name: "Always reject " + orTool(name), Kind: acp.PermissionRejectAlways},
	}}
	var res acp.RequestPermissionResponse
	if err := st.srv.call(ctx, acp.MethodSessionRequestPermission, req, &res); err != nil {
		return api.ApproveAnswer{Decision: api.DecisionDeny, Message: "the editor gave no answer"}
	}
	if res.Outcome.Outcome != acp.OutcomeSelected {
		return api.ApproveAnswer{Decision: api.DecisionDeny, Message: "the person cancelled"}
	}
	switch res.Outcome.OptionID {
	case optAllow:
		return api.ApproveAnswer{Decision: api.DecisionAllow}
	case optAllowAlways:
		st.remember(name, optAllowAlways)
		return api.ApproveAnswer{Decision: api.DecisionAllowAlways}
	case optRejectAlway:
		st.remember(name, optRejectAlway)
		return api.ApproveAnswer{Decision: api.DecisionDeny, Message: "the person rejected " + name + " for this session"}
	}
	return api.ApproveAnswer{Decision: api.DecisionDeny, Message: "the person rejected it"}
}

func (st *session) remember(name, opt string) {
	if name == "" {
		return
	}
	st.mu.Lock()
	st.always[name] = opt
	st.mu.Unlock()
}

func orTool(name string) string {
	if name == "" {
		return "this tool"
	}
	return name
}
