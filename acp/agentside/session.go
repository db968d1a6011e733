package agentside

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// session is one card session as this connection follows it: the events
// in, in seq order, each handled once; the prompts of this connection that
// wait for their turn's end; the questions put to the editor.
type session struct {
	srv *Server
	id  string
	// adapter and caps are the session's agent and what it takes; they
	// change (under mu) when the editor picks another agent before the
	// first turn.
	adapter string
	caps    api.Capabilities
	// agents are the adapters the editor may pick for the session, when no
	// adapter is fixed for this connection (nil when one is).
	agents []string

	mu   sync.Mutex
	mode string
	// model and effort are the session's ("" the CLI's default), as its
	// config options show them.
	model, effort string
	// worktree is the worktree the session's turns run in, nil when they
	// run in its cwd: the isolation option shows it, and the answers that
	// name the session carry it.
	worktree *api.SessionWorktree
	// configSeq is the session's seq as of which mode, model and effort
	// are known.
	configSeq int64
	// commands are the slash commands last sent to the editor, so an
	// unchanged list is not sent again.
	commands []acp.AvailableCommand

	cond  *sync.Cond
	queue []queued // for the pump (when events may not wait)
	// handling is held while one event is handled where it is delivered
	// (when events may wait): two subscriptions of the session deliver
	// the same events, and each seq is handled once, in order.
	handling sync.Mutex
	handled  int64 // the last seq handled
	stopped  bool
	// replayUntil is the last seq of the history a load replays: events up
	// to it are history (their prompts echoed, their old questions not
	// asked again).
	replayUntil int64
	// prompting counts this connection's prompts in flight: a turn that
	// starts meanwhile is this connection's, and its prompt is not echoed.
	prompting int
	waiters   map[int]chan turnEnd
	ended     map[int]turnEnd
	cancelled map[int]bool
	running   int // the turn whose events come now; 0 between turns
	lastTurn  int // the last turn whose first event was handled

	// Handled on the pump only: the tool calls of the turn still open, by
	// id, in the order they started.
	open     []string
	toolName map[string]string

	runs  map[string]int // the running turns' runs, for a question's run id
	perms map[string]*perm
	// answered are the questions answered, here or by another client,
	// kept until their turn ends: the same question arriving the other way
	// (as agents.approve after the event, or the event after
	// agents.approve), even after it was decided, is not put again. The
	// turn's events and the daemon's agents.approve come by different
	// paths, so either can come late.
	answered   map[string]answered
	always     map[string]string // tool name → the decision an "always" answer gave
	replayAsks map[string]api.AgentEvent
	cost       float64
}

type turnEnd struct {
	stop acp.StopReason
	err  *acp.Error
	meta acp.Meta
}

// attach is the connection's state of sess, made on first use.
func (s *Server) attach(sess api.Session, caps api.Capabilities) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.sessions[sess.SessionID]; st != nil {
		st.configured(sess, sess.NextSeq-1)
		return st
	}
	st := &session{srv: s, id: sess.SessionID, adapter: sess.Adapter, mode: sess.PermissionMode, model: sess.Model, effort: sess.Effort,
		worktree: liveWorktree(sess.Worktree), configSeq: sess.NextSeq - 1, caps: caps,
		waiters: map[int]chan turnEnd{}, ended: map[int]turnEnd{}, cancelled: map[int]bool{},
		toolName: map[string]string{}, runs: map[string]int{}, perms: map[string]*perm{}, answered: map[string]answered{}, always: map[string]string{}, replayAsks: map[string]api.AgentEvent{}}
	st.cond = sync.NewCond(&st.mu)
	s.sessions[sess.SessionID] = st
	ctx := s.ctx
	if !s.cfg.EventsMayWait {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			st.pump(ctx)
		}()
	}
	go func() {
		<-ctx.Done()
		st.stop()
	}()
	return st
}

func (st *session) stop() {
	st.mu.Lock()
	st.stopped = true
	st.cond.Broadcast()
	st.mu.Unlock()
}

// subscribe follows the session's events after seq after. A replay (load)
// waits until the history up to the subscription's answer has been sent as
// updates, so the load is answered after its history, as ACP has it.
func (s *Server) subscribe(ctx context.Context, be Backend, st *session, after int64, replay bool) *acp.Error {
	if after < 0 {
		after = 0
	}
	st.mu.Lock()
	if replay || st.handled == 0 {
		st.handled = after
	}
	st.mu.Unlock()
	sp := api.SessionSubscribeParams{SessionID: st.id, AfterSeq: after}
	var res api.SessionSubscribeResult
	var err error
	if tb, ok := be.(TextBackend); ok {
		res, err = tb.SubscribeSessionText(ctx, sp, st.enqueueText)
	} else {
		res, err = be.SubscribeSession(ctx, sp, st.enqueue)
	}
	if err != nil {
		return fromBackend(err)
	}
	if !replay {
		return nil
	}
	last := res.NextSeq - 1
	st.mu.Lock()
	if last > st.replayUntil {
		st.replayUntil = last
	}
	for st.handled < last && !st.stopped && ctx.Err() == nil {
		st.waitLocked(ctx)
	}
	asks := st.replayAsks
	st.replayAsks = map[string]api.AgentEvent{}
	st.mu.Unlock()
	// Questions still open at the end of the history are asked now.
	for _, ev := range asks {
		st.askAsync(ev)
	}
	return nil
}

// waitLocked waits on cond, woken at the latest when ctx ends.
func (st *session) waitLocked(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		st.mu.Lock()
		st.cond.Broadcast()
		st.mu.Unlock()
	})
	st.cond.Wait()
	stop()
}

// queued is an event waiting for the pump; text, when set, is its text as
// JSON, Event.Text being empty (TextBackend).
type queued struct {
	ev   api.SessionEvent
	text json.RawMessage
	// buf is the pooled buffer text is in, returned once it is handled.
	buf *[]byte
}

// enqueue is the subscription's handler for a Backend.
func (st *session) enqueue(ev api.SessionEvent) { st.enqueueText(ev, nil) }

// enqueueText is the subscription's handler. Where events may wait
// (Config.EventsMayWait) it handles the event at once, on the goroutine
// that delivers it: that goroutine waits while the editor catches up, and
// the event is handed on with no copy and no other goroutine woken, as an
// /rpc follower's is. Otherwise it runs on the goroutine that reads the
// backend's answers, which handling may need, so it only queues for the
// pump, copying the text, which is the caller's.
func (st *session) enqueueText(ev api.SessionEvent, text json.RawMessage) {
	if st.srv.cfg.EventsMayWait {
		st.handling.Lock()
		defer st.handling.Unlock()
		st.process(st.srv.ctx, ev, text)
		return
	}
	q := queued{ev: ev}
	if text != nil {
		q.buf = textBufs.Get().(*[]byte)
		q.text = append((*q.buf)[:0], text...)
	}
	st.mu.Lock()
	st.queue = append(st.queue, q)
	st.cond.Broadcast()
	st.mu.Unlock()
}

// release returns q's text buffer to its pool: the chunk it went into has
// been written, and nothing keeps the text.
func (q *queued) release() {
	if q.buf != nil {
		putBuf(&textBufs, q.buf, q.text)
	}
}

// pump handles the queued events one at a time, in order.
func (st *session) pump(ctx context.Context) {
	for {
		st.mu.Lock()
		for len(st.queue) == 0 && !st.stopped {
			st.cond.Wait()
		}
		if st.stopped {
			st.mu.Unlock()
			return
		}
		q := st.queue[0]
		st.queue[0] = queued{} // the backing array keeps no text it no longer needs
		st.queue = st.queue[1:]
		st.mu.Unlock()
		st.process(ctx, q.ev, q.text)
		q.release()
	}
}

// process handles one event, unless its seq was handled already (a second
// subscription of the session, or one taken up again, delivers it again)
// or the connection has ended. One event is processed at a time.
func (st *session) process(ctx context.Context, ev api.SessionEvent, text json.RawMessage) {
	st.mu.Lock()
	if ev.Seq <= st.handled || st.stopped {
		st.mu.Unlock()
		return
	}
	history := ev.Seq <= st.replayUntil || st.replayUntil > st.handled
	// A turn starts with its first event of a run (a queued prompt's own
	// event names no run yet). Its prompt is echoed only from the run's
	// very first event: a load from afterSeq in the middle of a turn
	// resumes a turn the client has already seen begin.
	starts := ev.Event.RunID != "" && ev.Turn > st.lastTurn
	echo := starts && ev.Event.Seq == 1 && (history || st.prompting == 0 && st.waiters[ev.Turn] == nil)
	if starts {
		st.lastTurn = ev.Turn
	}
	if id := ev.Event.RunID; id != "" {
		if terminal(ev.Event) {
			delete(st.runs, id)
			clear(st.answered)
		} else {
			st.runs[id] = ev.Turn
		}
	}
	st.mu.Unlock()

	st.handle(ctx, ev, text, echo, history)

	st.mu.Lock()
	st.handled = ev.Seq
	st.cond.Broadcast()
	st.mu.Unlock()
}

// handle sends one event's updates and, for a turn's last event, ends the
// prompt waiting for it. text, when set, is a text or thinking event's
// text as JSON, to be written into its chunk as it is.
func (st *session) handle(ctx context.Context, ev api.SessionEvent, text json.RawMessage, echo, history bool) {
	if echo && ev.Event.RunID != "" {
		if task := st.taskOf(ctx, ev.Event.RunID); task != "" {
			st.send(ev, acp.SessionUpdate{Kind: acp.UpdateUserMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock(task)}})
		}
	}
	e := ev.Event
	switch e.Kind {
	case api.EventApprovalRequested:
		st.send(ev, st.mapEvent(e)...)
		if history {
			st.mu.Lock()
			if e.Approval != nil {
				st.replayAsks[e.Approval.RequestID] = e
			}
			st.mu.Unlock()
			return
		}
		st.askAsync(e)
		return
	case api.EventSessionConfigured:
		// A load's answer carries the settings as they are now; older
		// changes in the history would only flicker past.
		if !history && e.Configured != nil {
			st.reconfigured(ev, *e.Configured)
		}
		return
	case api.EventApprovalDecided:
		if e.Approval != nil {
			id := e.Approval.RequestID
			a := api.ApproveAnswer{Decision: e.Approval.Decision, Message: e.Approval.Message}
			st.mu.Lock()
			delete(st.replayAsks, id)
			if p := st.perms[id]; p != nil {
				p.decidedElsewhere(a)
			} else if _, ok := st.answered[id]; !ok {
				// Decided before this connection put it: an agents.approve
				// still on its way finds it decided.
				st.answered[id] = answered{ApproveAnswer: a, elsewhere: true}
			}
			st.mu.Unlock()
		}
		return
	}
	if e.RunID != "" {
		st.mu.Lock()
		st.running = ev.Turn
		st.mu.Unlock()
	}
	if e.Kind == api.EventSession && len(e.Commands) > 0 {
		st.announceCommands(ev)
	}
	if text != nil {
		st.sendText(ev, text)
		return
	}
	st.send(ev, st.mapEvent(e)...)
	if e.Kind == api.EventDone || e.Kind == api.EventRunError {
		st.mu.Lock()
		cancelled := st.cancelled[ev.Turn]
		st.running = 0
		st.mu.Unlock()
		if e.Result != nil && e.Result.CostUSD != nil {
			st.cost += *e.Result.CostUSD
			st.send(ev, acp.SessionUpdate{Kind: acp.UpdateUsage, Usage: &acp.UsageUpdate{Used: used(e.Result.Usage),
				Cost: &acp.Cost{Amount: st.cost, Currency: "USD"}, Meta: usageMeta(e.Result.Usage)}})
		}
		st.finish(ev.Turn, endOf(ev, cancelled))
	}
}

// reconfigured tells the editor of a change of the session's settings made
// through sessions.configure by any client (another editor, an /rpc
// client, this editor's own set_mode), as ACP's current_mode_update and
// config_option_update, each only when it changes what this editor has.
func (st *session) reconfigured(ev api.SessionEvent, c api.SessionConfigured) {
	mode, options := st.configured(api.Session{Adapter: c.Adapter, PermissionMode: c.PermissionMode, Model: c.Model, Effort: c.Effort,
		Worktree: c.Worktree}, ev.Seq)
	if mode {
		st.send(ev, acp.SessionUpdate{Kind: acp.UpdateCurrentMode, CurrentMode: &acp.CurrentModeUpdate{CurrentModeID: c.PermissionMode}})
	}
	if options {
		st.send(ev, acp.SessionUpdate{Kind: acp.UpdateConfigOption, ConfigOption: &acp.ConfigOptionUpdate{ConfigOptions: st.configOptions()}})
	}
}

// taskOf is a turn's prompt from the run's record, for a turn this
// connection did not send (history, or another client's prompt).
func (st *session) taskOf(ctx context.Context, runID string) string {
	st.srv.mu.Lock()
	be := st.srv.backend
	st.srv.mu.Unlock()
	if be == nil {
		return ""
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, err := be.Run(cctx, runID)
	if err != nil {
		return ""
	}
	return rec.Task
}

func (st *session) send(ev api.SessionEvent, ups ...acp.SessionUpdate) {
	meta := updateMeta(ev)
	for _, u := range ups {
		st.srv.notifyUpdate(acp.SessionNotification{SessionID: st.id, Update: u, Meta: meta})
	}
}

// sendText is mapEvent and send for a text or thinking event whose text is
// JSON: the chunk mapEvent would make, its text spliced in as it is.
func (st *session) sendText(ev api.SessionEvent, text json.RawMessage) {
	kind := acp.UpdateAgentMessageChunk
	switch {
	case ev.Event.Kind == api.EventThinking:
		kind = acp.UpdateAgentThoughtChunk
	case ev.Event.Kind != api.EventText:
		return
	}
	if string(text) == `""` {
		return // as mapEvent: an empty text is no chunk
	}
	st.srv.writeTextChunk(st.id, kind, text, updateMeta(ev))
}

// updateMeta is the _meta every update of an event carries: where it is in
// card's session and history. It is written as encoding/json writes the
// map {card: {runId, seq, turn}} (keys in order), without the reflection
// and map a turn's every chunk would pay for.
func updateMeta(ev api.SessionEvent) json.RawMessage {
	b := make([]byte, 0, 64+len(ev.Event.RunID))
	b = append(b, `{"`+MetaKey+`":{"runId":`...)
	b, _ = jsontext.AppendQuote(b, ev.Event.RunID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, `,"turn":`...)
	b = strconv.AppendInt(b, int64(ev.Turn), 10)
	return append(b, "}}"...)
}

// await is the channel the end of turn comes on: at once when the turn
// already ended (its events can overtake the prompt's own answer).
func (st *session) await(turn int) chan turnEnd {
	ch := make(chan turnEnd, 1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if end, ok := st.ended[turn]; ok {
		delete(st.ended, turn)
		ch <- end
		return ch
	}
	st.waiters[turn] = ch
	return ch
}

func (st *session) finish(turn int, end turnEnd) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.cancelled, turn)
	if ch := st.waiters[turn]; ch != nil {
		delete(st.waiters, turn)
		ch <- end
		return
	}
	if st.prompting > 0 {
		st.ended[turn] = end
		// Bounded: only the turns of prompts still in flight are kept.
		for t := range st.ended {
			if t < turn-16 {
				delete(st.ended, t)
			}
		}
	}
}

// markCancelled notes that every turn this connection waits for, and the
// one running, ends as cancelled.
func (st *session) markCancelled() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for t := range st.waiters {
		st.cancelled[t] = true
	}
	if st.running != 0 {
		st.cancelled[st.running] = true
	}
}

// cancelQueued answers the prompts that waited in the queue, which the
// cancel dropped: they will have no events. The running turn is answered
// when its last event comes.
func (st *session) cancelQueued(res api.SessionCancelResult) {
	st.mu.Lock()
	defer st.mu.Unlock()
	_ = res
	for t, ch := range st.waiters {
		if t == st.running || t <= st.lastTurn {
			continue
		}
		delete(st.waiters, t)
		delete(st.cancelled, t)
		ch <- turnEnd{stop: acp.StopCancelled}
	}
}

func terminal(e api.AgentEvent) bool {
	return e.Kind == api.EventDone || e.Kind == api.EventRunError
}

// endOf is how a turn's last event answers its prompt.
func endOf(ev api.SessionEvent, cancelled bool) turnEnd {
	e := ev.Event
	meta, _ := json.Marshal(map[string]any{MetaKey: map[string]any{"runId": e.RunID, "turn": ev.Turn, "status": e.Status}})
	switch {
	case cancelled || e.Status == api.StatusCancelled:
		return turnEnd{stop: acp.StopCancelled, meta: meta}
	case e.Kind == api.EventDone:
		return turnEnd{stop: acp.StopEndTurn, meta: meta}
	}
	var re *api.RunError
	if e.Result != nil {
		re = e.Result.Error
	}
	if re != nil && re.Kind == api.KindMaxTurns {
		return turnEnd{stop: acp.StopMaxTurnRequests, meta: meta}
	}
	code := acp.CodeInternalError
	kind, msg := "", "the turn failed"
	if re != nil {
		kind, msg = re.Kind, re.Message
		if re.Kind == api.KindAuth {
			code = acp.CodeAuthRequired
		}
	}
	data, _ := json.Marshal(map[string]any{"runId": e.RunID, "turn": ev.Turn, "status": e.Status, "kind": kind})
	return turnEnd{err: &acp.Error{Code: code, Message: msg, Data: data}}
}

// unlistedCommands are the slash commands a CLI lists that card does not
// offer an editor, with why.
var unlistedCommands = map[string]string{
	// Claude Code's /heapdump writes a snapshot of the CLI's own memory
	// (hundreds of megabytes) to a file outside the session's directory:
	// a diagnostic of the CLI, not something asked of the conversation,
	// and a write no permission mode of the session bounds.
	"heapdump": "writes the CLI's memory to a file outside the session's directory",
}

// announceCommands sends the editor the slash commands a turn's CLI lists,
// less those card does not offer, when they differ from what it was last
// sent: once per session, and again only when the list changes.
func (st *session) announceCommands(ev api.SessionEvent) {
	var cmds []acp.AvailableCommand
	for _, c := range ev.Event.Commands {
		if _, skip := unlistedCommands[c.Name]; skip || c.Name == "" {
			continue
		}
		ac := acp.AvailableCommand{Name: c.Name, Description: c.Description}
		if c.InputHint != "" {
			ac.Input = &struct {
				Hint string   `json:"hint"`
				Meta acp.Meta `json:"_meta,omitempty"`
			}{Hint: c.InputHint}
		}
		cmds = append(cmds, ac)
	}
	if len(cmds) == 0 {
		return
	}
	st.mu.Lock()
	same := slices.EqualFunc(st.commands, cmds, func(a, b acp.AvailableCommand) bool {
		return a.Name == b.Name && a.Description == b.Description && (a.Input == nil) == (b.Input == nil) && (a.Input == nil || a.Input.Hint == b.Input.Hint)
	})
	if !same {
		st.commands = cmds
	}
	st.mu.Unlock()
	if !same {
		st.send(ev, acp.SessionUpdate{Kind: acp.UpdateAvailableCommands, AvailableCommands: &acp.AvailableCommandsUpdate{AvailableCommands: cmds}})
	}
}
