package runs

import (
	"context"
	"encoding/json"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/spawn"
)

// Watch makes c one of the connections a live ask-mode run's questions go
// to once the connection that started it is gone, until the returned
// function is called (the daemon does for as long as c follows the run). It
// does nothing for a run that does not ask.
func (m *Manager) Watch(id string, c Asker) func() {
	lr := m.lookup(id)
	if lr == nil || lr.approvals == nil {
		return func() {}
	}
	return lr.approvals.watch(c)
}

// Decide records the decision connection conn gives for a question of a
// live run (agents.approval_decide). The first decision wins; a later one,
// one for a question never asked or not asked of conn, or one that is not
// a decision, is refused with a typed error and changes nothing.
func (m *Manager) Decide(ctx context.Context, conn uint64, runID, requestID, decision, message string) (api.DecideResult, error) {
	if err := CheckDecision(decision); err != nil {
		return api.DecideResult{}, err
	}
	lr := m.lookup(runID)
	if lr == nil {
		run, err := m.store.Get(ctx, runID)
		if err != nil {
			return api.DecideResult{}, notFound(runID, err)
		}
		if run.PermissionMode == string(spawn.ModeAsk) {
			return api.DecideResult{}, &ApprovalClosedError{RunID: runID}
		}
		return api.DecideResult{}, &ApprovalNotFoundError{RunID: runID, RequestID: requestID}
	}
	if lr.approvals == nil {
		return api.DecideResult{}, &ApprovalNotFoundError{RunID: runID, RequestID: requestID}
	}
	return lr.approvals.answer(conn, requestID, decision, message)
}

// approvalKinds are the events a run's approvals are read back from.
var approvalKinds = []string{api.EventApprovalRequested, api.EventApprovalDecided}

// approvalRecords folds approval events, in seq order, into one record
// per question. A rule's decision has no question event before it.
func approvalRecords(payloads []json.RawMessage) []api.ApprovalRecord {
	var out []api.ApprovalRecord
	index := map[string]int{}
	for _, raw := range payloads {
		var ev api.AgentEvent
		if json.Unmarshal(raw, &ev) != nil || ev.Approval == nil {
			continue
		}
		ap := *ev.Approval
		i, ok := index[ap.RequestID]
		if !ok {
			rec := api.ApprovalRecord{Approval: api.Approval{RequestID: ap.RequestID}}
			if ev.Tool != nil {
				rec.Tool = api.ToolCall{Name: ev.Tool.Name, ID: ev.Tool.ID, Input: ev.Tool.Input}
			}
			out = append(out, rec)
			i = len(out) - 1
			index[ap.RequestID] = i
		}
		r := &out[i]
		switch ev.Kind {
		case api.EventApprovalRequested:
			r.Summary, r.RequestedAt, r.ExpiresAt = ap.Summary, ap.RequestedAt, ap.ExpiresAt
		case api.EventApprovalDecided:
			r.Decision, r.By, r.Message, r.DecidedAt = ap.Decision, ap.By, ap.Message, ap.DecidedAt
		}
	}
	return out
}

// approvalsOf reads a run's approvals, at most MaxApprovalRecords of them,
// and how many it recorded: a live run's from memory (the store may lag),
// a finished one's from the store. The store is read once, up to
// store.MaxEventsLimit events; only a run with more than that is counted
// by another query.
func (m *Manager) approvalsOf(ctx context.Context, id string) ([]api.ApprovalRecord, int, error) {
	var payloads []json.RawMessage
	if lr := m.lookup(id); lr != nil {
		for _, e := range lr.log.ofKinds(approvalKinds...) {
			payloads = append(payloads, e.raw)
		}
		recs := approvalRecords(payloads)
		return recs[:min(len(recs), api.MaxApprovalRecords)], len(recs), nil
	}
	evs, err := m.store.EventsOfKinds(ctx, id, approvalKinds...)
	if err != nil {
		return nil, 0, err
	}
	for _, e := range evs {
		payloads = append(payloads, e.Payload)
	}
	recs := approvalRecords(payloads)
	total := len(recs)
	if len(evs) >= store.MaxEventsLimit {
		n, err := m.store.CountDistinct(ctx, id, "$.approval.request_id", approvalKinds...)
		if err != nil {
			return nil, 0, err
		}
		total = max(total, int(n))
	}
	return recs[:min(len(recs), api.MaxApprovalRecords)], total, nil
}
