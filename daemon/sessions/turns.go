package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/spawn"
)

// Prompt is one turn: it starts at once when the session is idle, else it
// waits in the queue. from is the prompting connection.
func (m *Manager) Prompt(ctx context.Context, p api.SessionPromptParams, from Sender) (api.SessionPromptResult, error) {
	s, err := m.lookup(ctx, p.SessionID)
	if err != nil {
		return api.SessionPromptResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked(ctx)
	if s.closed() {
		return api.SessionPromptResult{}, &ClosedError{SessionID: s.row.ID, Reason: s.row.CloseReason}
	}
	if err := s.capLocked(); err != nil {
		return api.SessionPromptResult{}, err
	}
	if err := s.worktreeGoneLocked(); err != nil {
		return api.SessionPromptResult{}, err
	}
	q := &queued{task: p.Task, atts: p.Attachments, sender: from, QueuedAt: time.Now().UTC().Truncate(time.Millisecond),
		TaskBytes: len(p.Task), Attachments: len(p.Attachments)}
	if s.current != nil {
		waiting := s.waitingLocked()
		if len(waiting) >= m.cfg.MaxQueue {
			return api.SessionPromptResult{}, &QueueFullError{SessionID: s.row.ID, Queued: len(waiting), Max: m.cfg.MaxQueue}
		}
		// Judge the prompt now, so a bad one is answered now rather than
		// refused later with nobody to tell.
		full, err := m.fullParamsLocked(s)
		if err != nil {
			return api.SessionPromptResult{}, err
		}
		if _, err := m.deps.Planner.Check(full, p.Task, p.Attachments, s.cont(plan.Continue{})); err != nil {
			return api.SessionPromptResult{}, err
		}
		s.row.Turns++
		q.Turn = s.row.Turns
		s.queue = append(s.queue, q)
		m.saveLocked(s)
		pos := len(waiting) + 1
		m.deps.Runs.Note(s.current.ID(), api.EventPromptQueued, api.AgentEvent{Queued: &api.QueuedPrompt{
			Turn: q.Turn, Position: pos, QueuedAt: q.QueuedAt, TaskBytes: q.TaskBytes, Attachments: q.Attachments}})
		m.log.Info("session prompt queued", zap.String("session_id", s.row.ID), zap.Int("turn", q.Turn), zap.Int("position", pos))
		return api.SessionPromptResult{SessionID: s.row.ID, Turn: q.Turn, Queued: true, Position: pos}, nil
	}
	q.Turn = s.row.Turns + 1
	run, err := m.startLocked(ctx, s, q, false)
	if err != nil {
		return api.SessionPromptResult{}, err
	}
	return api.SessionPromptResult{SessionID: s.row.ID, Turn: q.Turn, RunID: run.ID()}, nil
}

// waitingLocked are the queued prompts still to run, in order.
func (s *session) waitingLocked() []*queued {
	var out []*queued
	for _, q := range s.queue {
		if q.Dropped == "" {
			out = append(out, q)
		}
	}
	return out
}

// capLocked refuses a prompt once the session has spent a cap.
func (s *session) capLocked() error {
	if c := s.params.MaxCostUSD; c != nil && s.spentUSD >= *c {
		return &CapError{SessionID: s.row.ID, Cap: "max_cost_usd", Limit: *c, Spent: s.spentUSD}
	}
	if c := s.params.MaxTokens; c != nil && s.spentTokens >= *c {
		return &CapError{SessionID: s.row.ID, Cap: "max_tokens", Limit: float64(*c), Spent: float64(s.spentTokens)}
	}
	return nil
}

// startLocked starts q as the session's next turn. dequeued says q came
// from the queue (its turn number is already taken). A start the gate
// refuses is recorded as a refused run of the turn; one refused before
// anything was recorded (bad params) takes no turn number unless dequeued,
// in which case it is recorded refused here, since nobody else will hear.
func (m *Manager) startLocked(ctx context.Context, s *session, q *queued, dequeued bool) (*runs.Run, error) {
	p, err := m.fullParamsLocked(s)
	if err != nil {
		if dequeued {
			m.refuseTurnLocked(s, q.Turn, "the queued prompt could not be started: "+err.Error())
		}
		return nil, err
	}
	if c := p.MaxCostUSD; c != nil {
		left := *c - s.spentUSD
		p.MaxCostUSD = &left
	}
	if c := p.MaxTokens; c != nil {
		left := *c - s.spentTokens
		p.MaxTokens = &left
	}
	t, chosen, warmOnly, err := m.prepareTurn(s, p, q)
	if err != nil {
		if dequeued {
			m.refuseTurnLocked(s, q.Turn, "the queued prompt could not be started: "+err.Error())
		}
		return nil, err
	}
	req := t.Run
	req.CardSessionID, req.SessionTurn, req.SessionSeqBase = s.row.ID, q.Turn, s.row.NextSeq-1
	req.Ancestry = s.row.Ancestry
	if req.Ancestry == nil {
		req.Ancestry = []string{}
	}
	req.AskAll, req.Always = true, s.always
	if q.sender.NoStandingAnswers {
		req.Always = s.always.Scoped()
	}
	req.Asker, req.Conn = q.sender.Asker, q.sender.Conn
	req.Exec = m.execFor(s, t.Spawn, warmOnly)
	if s.iso != nil {
		req.Exec = m.committing(s, s.iso.Worktree, q.Turn, q.task, req.Exec)
	}
	run, err := m.deps.Runs.Start(context.WithoutCancel(ctx), req)
	if err != nil {
		var refused *runs.RefusedError
		if errors.As(err, &refused) {
			// The gate recorded the turn refused: its one event says why.
			m.addRefusalEvent(s, refused.RunID, q.Turn, refused.Error())
			s.row.Turns = max(s.row.Turns, q.Turn)
			m.saveLocked(s)
			s.notifyLocked()
		} else if dequeued {
			m.refuseTurnLocked(s, q.Turn, "the queued prompt could not be started: "+err.Error())
		}
		return nil, err
	}
	s.row.Turns = max(s.row.Turns, q.Turn)
	s.row.State = string(api.SessionRunning)
	if chosen != "" {
		s.row.AgentSessionID = chosen
	}
	s.current = run
	s.turns = append(s.turns, turnRef{turn: q.Turn, runID: run.ID(), base: req.SessionSeqBase})
	for id, a := range s.watchers {
		s.unwatch[id] = m.deps.Runs.Watch(run.ID(), a)
	}
	m.saveLocked(s)
	s.notifyLocked()
	m.wg.Add(1)
	go m.awaitTurn(s, run, req.SessionSeqBase)
	return run, nil
}

// prepareTurn plans q's turn: resuming the CLI session the conversation
// has, or for its first turn under a session id card chooses, where the
// adapter's CLI takes one (chosen says which; "" when the CLI picks its
// own, reported when the turn ends). warmOnly says the conversation can
// go on only over the session's warm agent, which holds it: the CLI
// cannot resume it cold (Gemini's ask channel).
func (m *Manager) prepareTurn(s *session, p api.SessionStartParams, q *queued) (t plan.Turn, chosen string, warmOnly bool, err error) {
	var fe *api.FieldError
	if s.row.AgentSessionID != "" {
		t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, s.cont(plan.Continue{Resume: s.row.AgentSessionID, UsageBase: s.reported}))
		if errors.As(err, &fe) && fe.Field == "resume" && m.warm.holds(s) {
			// The plan is the cold fallback's, which this turn never
			// takes: a new process would start a new conversation.
			t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, s.cont(plan.Continue{}))
			return t, "", err == nil, err
		}
		return t, "", false, err
	}
	if m.canWarm(s.row.Adapter) {
		// A warm agent's CLI names its own session and reports it (over
		// ACP, session/new takes no id), and the turn's result carries it.
		t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, s.cont(plan.Continue{}))
		return t, "", false, err
	}
	id := uuid.NewString()
	t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, s.cont(plan.Continue{SessionID: id}))
	if errors.As(err, &fe) && fe.Field == "session_id" {
		t, err = m.deps.Planner.SessionTurn(p, q.task, q.atts, s.cont(plan.Continue{}))
		return t, "", false, err
	}
	return t, id, false, err
}

// refuseTurnLocked records turn as a refused run of the session with its
// one event, for a prompt that never ran (dropped from the queue, or one
// the gate refused when its turn came).
func (m *Manager) refuseTurnLocked(s *session, turn int, reason string) {
	ctx := context.Background()
	rec := api.Run{RunID: m.st.NewRunID(), Adapter: s.row.Adapter, Status: api.StatusRefused, RefusalReason: reason,
		Ancestry: s.row.Ancestry, Cwd: s.row.Cwd, PermissionMode: s.row.PermissionMode, Model: s.row.Model,
		CardSessionID: s.row.ID, SessionTurn: turn, SessionSeqBase: s.row.NextSeq - 1}
	if err := m.st.Create(ctx, rec); err != nil {
		m.log.Error("could not record a session's refused turn", zap.String("session_id", s.row.ID), zap.Int("turn", turn), zap.Error(err))
		return
	}
	m.addRefusalEvent(s, rec.RunID, turn, reason)
	s.row.Turns = max(s.row.Turns, turn)
	m.saveLocked(s)
	s.notifyLocked()
}

// addRefusalEvent stores a refused turn's one event (an error event with
// status refused) and numbers it next in the session's stream.
func (m *Manager) addRefusalEvent(s *session, runID string, turn int, reason string) {
	base := s.row.NextSeq - 1
	ev := api.AgentEvent{RunID: runID, Seq: 1, Event: api.Event{Kind: api.EventRunError, Error: reason}, Status: api.StatusRefused,
		Result: &api.InvokeResult{RunID: runID, Adapter: s.row.Adapter, Ancestry: s.row.Ancestry, Status: api.StatusRefused,
			Result: api.Result{IsError: true, Error: &api.RunError{Kind: "refused", Message: reason}}}}
	raw, _ := json.Marshal(ev)
	if err := m.st.AppendEvent(context.Background(), runID, 1, api.EventRunError, raw); err != nil {
		m.log.Error("could not record a refused turn's event", zap.String("run_id", runID), zap.Error(err))
		return
	}
	s.turns = append(s.turns, turnRef{turn: turn, runID: runID, base: base, last: 1})
	s.row.NextSeq = base + 2
}

// awaitTurn waits for a turn's end, records it on the session, and starts
// the next queued prompt.
func (m *Manager) awaitTurn(s *session, run *runs.Run, base int64) {
	defer m.wg.Done()
	<-run.Done()
	res, _ := run.Wait(context.Background())
	s.mu.Lock()
	defer s.mu.Unlock()
	last := run.LastSeq()
	turn := 0
	for i := range s.turns {
		if s.turns[i].runID == run.ID() {
			s.turns[i].last, turn = last, s.turns[i].turn
		}
	}
	s.row.NextSeq = base + last + 1
	for _, n := range s.pending {
		m.addNoteLocked(s, turn, n.kind, n.ev)
	}
	s.pending = nil
	switch {
	case res.SessionID != "":
		if res.SessionID != s.row.AgentSessionID {
			// Another CLI session: the totals of the one before are not
			// its base.
			s.reported = api.Usage{}
		}
		s.row.AgentSessionID, s.confirmed = res.SessionID, true
	case !s.confirmed && res.Status != api.StatusSucceeded && !spawn.CardNamesSession(s.row.Adapter):
		// A session card named is kept: the file is card's to name, and
		// the CLI starts it whenever a turn first gets that far.
		s.row.AgentSessionID = ""
		s.reported = api.Usage{}
	}
	if res.SessionUsage != nil {
		s.reported = *res.SessionUsage
	}
	s.addSpentLocked(res.Result)
	s.current = nil
	for id, stop := range s.unwatch {
		stop()
		delete(s.unwatch, id)
	}
	if !s.closed() {
		s.row.State = string(api.SessionIdle)
	}
	m.saveLocked(s)
	s.notifyLocked()
	m.nextLocked(s)
}

func (s *session) addSpentLocked(r api.Result) {
	if r.CostUSD != nil {
		s.spentUSD += *r.CostUSD
	}
	s.spentTokens += r.Usage.InputTokens + r.Usage.OutputTokens
	s.usage.InputTokens += r.Usage.InputTokens
	s.usage.OutputTokens += r.Usage.OutputTokens
	s.usage.CachedInputTokens += r.Usage.CachedInputTokens
}

// nextLocked starts the next queued prompt, recording the dropped ones
// ahead of it as refused turns, while no turn runs.
func (m *Manager) nextLocked(s *session) {
	for s.current == nil && len(s.queue) > 0 {
		q := s.queue[0]
		s.queue = s.queue[1:]
		if q.Dropped == "" && !s.closed() {
			if err := s.capLocked(); err != nil {
				q.Dropped = err.Error()
			}
		}
		if q.Dropped == "" && m.isClosing() {
			q.Dropped = "card shut down before this queued prompt ran; send it again"
		}
		if q.Dropped == "" && q.sender.Judge != nil {
			// The session may have changed since the prompt was queued
			// (sessions.configure): its sender must still be one that may
			// prompt it as it is now.
			if p, err := m.fullParamsLocked(s); err != nil {
				q.Dropped = "the queued prompt could not be judged when its turn came: " + err.Error()
			} else if err := q.sender.Judge(p); err != nil {
				q.Dropped = "refused when its turn came, under the session's settings then: " + err.Error()
			}
		}
		if q.Dropped != "" {
			m.refuseTurnLocked(s, q.Turn, q.Dropped)
			continue
		}
		if _, err := m.startLocked(context.Background(), s, q, true); err != nil {
			m.log.Warn("a session's queued prompt was refused when its turn came", zap.String("session_id", s.row.ID),
				zap.Int("turn", q.Turn), zap.Error(err))
		}
	}
	m.saveLocked(s)
}
