package daemon

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
)

// CAR's dialect. A host written against CAR's published daemon protocol
// speaks it to agents.invoke_external: its session_id is the host's own
// routing id for a conversation, not an agent's session; a streamed run
// answers {accepted, session_id} and is heard as agents.chat.event
// notifications; agents.chat.cancel ends it by that id; a bad attachment is
// skipped and counted, not refused; and the connection opens with
// session.auth and server.handshake. card's own methods keep card's
// meaning (agents.invoke: strict attachments, agents.event, a UUID
// session_id for the agent's session).

// CodeSessionInUse refuses a second agents.invoke_external under a
// session_id that already names a running run of the same connection: its
// events and its cancel could not tell the two apart.
const CodeSessionInUse int64 = -32042

// invokeParamsOf is the run agents.invoke would be asked for; the routing id
// stays with the CAR layer.
func invokeParamsOf(p *api.ExternalInvokeParams) api.InvokeParams {
	return api.InvokeParams{
		AgentSettings:  api.AgentSettings{ID: p.ID, InvokedBy: p.InvokedBy, Cwd: p.Cwd, PermissionMode: p.PermissionMode, AllowedTools: p.AllowedTools, Model: p.Model, Effort: p.Effort, SystemPrompt: p.SystemPrompt, SystemPromptAppend: p.SystemPromptAppend, TimeoutSecs: carTimeoutSecs(p.TimeoutSecs), MaxAPIRetries: p.MaxAPIRetries, StallSecs: p.StallSecs, StallKillSecs: p.StallKillSecs, MaxCostUSD: p.MaxCostUSD, MaxTokens: p.MaxTokens, MCPEndpoint: p.MCPEndpoint, ApprovalTimeoutSecs: p.ApprovalTimeoutSecs, AcknowledgeUnenforcedReadOnly: p.AcknowledgeUnenforcedReadOnly, AcknowledgeUnenforcedEdit: p.AcknowledgeUnenforcedEdit},
		Task:           p.Task,
		MaxTurns:       p.MaxTurns,
		SessionID:      p.AgentSessionID,
		Resume:         p.Resume,
		DiscardSession: p.DiscardSession,
		Stream:         p.Stream,
	}
}

// carTimeoutSecs is CAR's timeout_secs clamped to [1, 3600], as CAR
// documents agents.invoke_external's ("Defaults to 300s; clamped to [1,
// 3600]"); 0 stays the default. agents.invoke refuses such a value.
func carTimeoutSecs(secs int) int {
	if secs == 0 {
		return 0
	}
	return min(max(secs, api.MinInvokeTimeoutSecs), api.MaxInvokeTimeoutSecs)
}

func externalResult(r api.InvokeResult, sessionID string) api.ExternalInvokeResult {
	return api.ExternalInvokeResult{
		Answer: r.Answer, SessionID: sessionID, AgentSessionID: r.SessionID, Turns: r.Turns, ToolCalls: r.ToolCalls,
		DurationMs: r.DurationMs, CostUSD: r.CostUSD, Usage: r.Usage, IsError: r.IsError, Error: r.Error,
		DroppedAttachments: len(r.DroppedAttachments), DroppedAttachmentReasons: r.DroppedAttachments,
		RunID: r.RunID, Adapter: r.Adapter, Ancestry: r.Ancestry, Status: r.Status,
	}
}

// ExternalInvokeAnswer is agents.invoke_external's result.
type ExternalInvokeAnswer = rpc.Either[api.ExternalInvokeResult, api.ExternalInvokeAccepted]

// chatEvent translates one of a run's events into CAR's dialect; ok is
// false for the kinds CAR has no name for.
func chatEvent(raw json.RawMessage, sessionID, adapter string) (api.ChatEvent, bool) {
	var ev api.AgentEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return api.ChatEvent{}, false
	}
	out := api.ChatEvent{SessionID: sessionID, AgentID: adapter, RunID: ev.RunID, Seq: ev.Seq}
	switch ev.Kind {
	case api.EventText:
		if ev.Text == "" {
			return api.ChatEvent{}, false
		}
		out.Kind, out.Delta = api.ChatToken, ev.Text
	case api.EventToolUse:
		out.Kind, out.Params = api.ChatToolCall, json.RawMessage(`{}`)
		if ev.Tool != nil {
			out.Tool, out.Detail = ev.Tool.Name, ev.Tool.Name
			if len(ev.Tool.Input) > 0 && ev.Tool.Input[0] == '{' {
				out.Params = ev.Tool.Input
			}
		}
	case api.EventDone, api.EventRunError:
		if ev.Result == nil {
			return api.ChatEvent{}, false
		}
		res := externalResult(*ev.Result, sessionID)
		out.Status, out.Result = ev.Status, &res
		if ev.Kind == api.EventDone {
			answer := res.Answer
			out.Kind, out.Text, out.DroppedAttachments = api.ChatDone, &answer, res.DroppedAttachments
			out.FinishReason = finishReason(res)
		} else {
			out.Kind, out.Error = api.ChatError, runErrorText(res)
		}
	default:
		return api.ChatEvent{}, false
	}
	return out, true
}

// finishReason folds what a host may show about a finished run into one
// line, as CAR does: how it ended, its size, and the images not sent.
func finishReason(r api.ExternalInvokeResult) string {
	s := fmt.Sprintf("success: %d turn(s), %d tool call(s), %d ms", r.Turns, r.ToolCalls, r.DurationMs)
	if r.DroppedAttachments > 0 {
		s += fmt.Sprintf("; %d image(s) skipped", r.DroppedAttachments)
	}
	return s
}

// runErrorText is a failed run's error as one string: its status, then
// why.
func runErrorText(r api.ExternalInvokeResult) string {
	if r.Error == nil || r.Error.Message == "" {
		return string(r.Status)
	}
	return string(r.Status) + ": " + r.Error.Message
}

// carRoutes maps each connection's session_ids onto its live runs, for
// agents.chat.cancel and the one-run-per-session rule. A host's ids are its
// own: two hosts that both call a conversation "chat-1" never reach each
// other's runs.
type carRoutes struct {
	mu   sync.Mutex
	runs map[carRoute]string // the run id, "" while it starts
}

type carRoute struct {
	conn    uint64
	session string
}

// SessionInUseError refuses a second live run under one session_id.
type SessionInUseError struct{ SessionID, RunID string }

func (e *SessionInUseError) Error() string {
	return fmt.Sprintf("session_id %q already names a running agents.invoke_external of this connection (run %s): wait for its terminal event, end it with agents.chat.cancel, or use another session_id", e.SessionID, e.RunID)
}

// reserve claims route for a run about to start.
func (c *carRoutes) reserve(r carRoute) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[carRoute]string{}
	}
	if id, ok := c.runs[r]; ok {
		return &SessionInUseError{SessionID: r.session, RunID: id}
	}
	c.runs[r] = ""
	return nil
}

func (c *carRoutes) set(r carRoute, runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[r] = runID
}

// release frees route, if it still names runID.
func (c *carRoutes) release(r carRoute, runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs[r] == runID {
		delete(c.runs, r)
	}
}

func (c *carRoutes) lookup(r carRoute) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[r]
}

// newChatID is the session_id of a request that named none, in the form
// CAR gives its own: chat-<a random UUID>.
func newChatID() string { return "chat-" + uuid.NewString() }

func routeOf(ctx context.Context, session string) carRoute {
	var conn uint64
	if p := rpc.PeerFrom(ctx); p != nil {
		conn = p.ID()
	}
	return carRoute{conn: conn, session: session}
}

// invokeExternal is agents.invoke_external: agents.invoke's run in CAR's
// dialect.
func (d *Daemon) invokeExternal(ctx context.Context, p api.ExternalInvokeParams) (ExternalInvokeAnswer, rpc.Then, error) {
	peer := rpc.PeerFrom(ctx)
	if peer != nil && peer.Origin() != "" && len(p.Attachments) > 0 {
		// As on agents.invoke, a web page may not have card read a file of
		// the user's; this is refused, not skipped, since it is a page
		// reaching for files rather than a host that named a bad one.
		return ExternalInvokeAnswer{}, nil, api.InvalidField("attachments[0].path",
			"a connection from a web page (Origin %s) may not make card read files on this machine; agents.invoke takes the image's bytes (data_b64 with mime_type)", peer.Origin())
	}
	t, err := d.planner.InvokeCAR(invokeParamsOf(&p), p.Attachments)
	if err != nil {
		return ExternalInvokeAnswer{}, nil, err
	}
	req := t.Run
	if p.SessionID == "" {
		p.SessionID = newChatID()
	}
	route := routeOf(ctx, p.SessionID)
	if err := d.carRoutes.reserve(route); err != nil {
		return ExternalInvokeAnswer{}, nil, err
	}
	if peer != nil {
		req.Conn = peer.Context()
		req.Asker = peerAsker{peer}
	}
	run, err := d.runs.Start(ctx, req)
	if err != nil {
		d.carRoutes.release(route, "")
		return ExternalInvokeAnswer{}, nil, err
	}
	d.carRoutes.set(route, run.ID())
	go func() {
		// The route lives as long as the run: a cancel after the end
		// finds nothing to cancel, and the id is free for the next turn.
		_, _ = run.Wait(context.Background())
		d.carRoutes.release(route, run.ID())
	}()
	if p.Stream {
		acc := run.Accepted()
		answer := rpc.Second[api.ExternalInvokeResult](api.ExternalInvokeAccepted{Accepted: true, SessionID: p.SessionID,
			RunID: acc.RunID, Adapter: acc.Adapter, Ancestry: acc.Ancestry,
			DroppedAttachments: len(acc.DroppedAttachments), DroppedAttachmentReasons: acc.DroppedAttachments})
		if peer == nil {
			return answer, nil, nil
		}
		return answer, func(ctx context.Context) { d.followCAR(ctx, peer, run, route, req.Adapter) }, nil
	}
	res, err := run.Wait(ctx)
	if err != nil {
		return ExternalInvokeAnswer{}, nil, err
	}
	// Freed before the answer, so a host that sends its next turn the
	// moment it has this one is never told the id is still in use.
	d.carRoutes.release(route, run.ID())
	return rpc.First[api.ExternalInvokeResult, api.ExternalInvokeAccepted](externalResult(res, p.SessionID)), nil, nil
}

// followCAR sends a streamed run's events to the host that started it as
// agents.chat.event, ending with its terminal done or error. A host that
// falls further behind than max_subscriber_queue_bytes is sent a terminal
// error saying so (the run goes on, and runs.subscribe follows it).
func (d *Daemon) followCAR(ctx context.Context, peer *rpc.Peer, run *runs.Run, route carRoute, adapter string) {
	sessionID := route.session
	err := run.Follow(ctx, func(ctx context.Context, _ int64, raw json.RawMessage) error {
		ev, ok := chatEvent(raw, sessionID, adapter)
		if !ok {
			return nil
		}
		if ev.Kind == api.ChatDone || ev.Kind == api.ChatError {
			// The run has ended: free its id before the host hears so,
			// since a host may start its next turn on that very event.
			d.carRoutes.release(route, run.ID())
		}
		return peer.Notify(ctx, api.ChatEventMethod, ev)
	}, d.cfg.MaxSubscriberQueueBytes)
	var behind *runs.BehindError
	if errors.As(err, &behind) {
		_ = peer.Notify(ctx, api.ChatEventMethod, api.ChatEvent{SessionID: sessionID, AgentID: adapter, Kind: api.ChatError, RunID: behind.RunID,
			Error: fmt.Sprintf("%s; the run goes on: runs.subscribe {\"run_id\": %q, \"after_seq\": %d} follows it", behind.Error(), behind.RunID, behind.NextSeq-1)})
	}
}

func (d *Daemon) chatCancel(ctx context.Context, p api.ChatCancelParams) (api.ChatCancelResult, error) {
	id := d.carRoutes.lookup(routeOf(ctx, p.SessionID))
	if id == "" {
		return api.ChatCancelResult{SessionID: p.SessionID, Reason: fmt.Sprintf("no agents.invoke_external of this connection is running under session_id %q "+
			"(it ended, or it was started on another connection: agents.cancel takes its run_id)", p.SessionID)}, nil
	}
	route := routeOf(ctx, p.SessionID)
	res, err := d.runs.Cancel(ctx, id)
	if err != nil {
		return api.ChatCancelResult{}, err
	}
	// Cancel answers once the run has ended, so its id is free now.
	d.carRoutes.release(route, id)
	return api.ChatCancelResult{SessionID: p.SessionID, Cancelled: res.Cancelled, RunID: res.RunID, Status: res.Status, Reason: res.Reason}, nil
}

// sessionAuth answers CAR's in-band authentication. A card connection is
// authenticated before it opens (the token is checked on the upgrade), so
// the right token is a no-op answered as CAR answers it. A wrong one means
// the client holds something other than the daemon's token — another
// daemon's, or one it was handed — and the connection is closed after the
// refusal, as CAR closes an unauthenticated session.
//
// The right token is the one that opened this connection, not the one the
// daemon holds now: a connection can then confirm only what it already
// has. Compared with the current token, a connection opened before `card
// token rotate` (a page's, say, whose token was the reason to rotate) could
// test candidates for the new one, one per connection it kept open.
func (d *Daemon) sessionAuth(ctx context.Context, p api.SessionAuthParams) (api.SessionAuthResult, error) {
	match := false
	if peer := rpc.PeerFrom(ctx); peer != nil {
		match = peer.OpenedWith(p.Token)
	} else {
		want, err := d.tokens.current()
		if err != nil || len(want) == 0 {
			return api.SessionAuthResult{}, errors.New("the daemon cannot read its token file")
		}
		match = subtle.ConstantTimeCompare([]byte(p.Token), want) == 1
	}
	if !match {
		return api.SessionAuthResult{}, rpc.CloseAfter(&rpcclient.Error{Code: rpcclient.CodeInternalError,
			Message: "auth failed: token mismatch; this is not the token this connection was opened with (read <home>/token again and reconnect: it changes on `card token rotate`); the connection is closed",
			Data:    map[string]any{"field": "token"}}, "auth failed: token mismatch")
	}
	return api.SessionAuthResult{OK: true, AuthEnabled: true}, nil
}

func (d *Daemon) registerCAR() {
	r := d.registry
	rpc.RegisterThen(r, "agents.invoke_external", rpc.Doc{
		Access:      rpc.AccessAgents,
		AccessRules: invokeAccessRules,
		Summary:     "CAR's agents.invoke_external: agents.invoke's run, with session_id the host's routing id, attachments skipped and counted, and a stream of agents.chat.event.",
		Description: "The same checks, gates and run record as agents.invoke. Differs from it in CAR's way: `session_id` is the host's own id " +
			"for the conversation (any printable string of at most 256 bytes, `chat-<uuid>` when omitted), threaded through the answer and every event " +
			"and never given to the agent (its own session is `agent_session_id`); an attachment card cannot send (unreadable, not an image by its " +
			"bytes, over the size or count cap) is skipped and the agent runs with the rest, `dropped_attachments` counting them; without `stream` " +
			"the answer is CAR's InvokeResult plus the run's fields; with `stream` it is {accepted: true, session_id, run_id} at once, then " +
			"agents.chat.event notifications (token, tool_call, and one terminal done or error) to this connection. One running run per " +
			"session_id per connection; agents.chat.cancel ends it.",
		Errors: []int64{CodeGuardRefused, CodeBypassNotAllowed, CodeAgentNotInstalled, CodeAgentUnusable,
			CodeUnenforcedReadOnly, CodeTooManyRuns, CodeBudgetExceeded, CodeSessionInUse, rpcclient.CodeShuttingDown},
	}, d.invokeExternal)
	rpc.Register(r, "agents.chat.cancel", rpc.Doc{
		Access:      rpc.AccessAgents,
		Summary:     "CAR's cancel: end this connection's running agents.invoke_external under session_id, with its whole process group.",
		Description: "Answers once the run has ended; its stream ends with a terminal error event (status cancelled). A session_id with no running run of this connection is answered cancelled = false with a reason, not an error.",
	}, d.chatCancel)
	rpc.Register(r, "session.auth", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "CAR's in-band authentication, answered on a connection the token already opened: the daemon's token is {ok: true, auth_enabled: true}.",
		Description: "The token is the one that opened this connection; any other is refused (-32603 \"auth failed: token mismatch\", as CAR answers it) and the connection is then closed with 1008, so a connection can confirm only the token it holds. CAR's agent_id, host_token and memory_namespace are refused (-32602) naming why.",
	}, d.sessionAuth)
	rpc.Register(r, "server.handshake", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "CAR's protocol negotiation, answered with card's protocol version and build.",
		Description: "protocol_version is card's (`MAJOR.MINOR`, the one daemon.info carries), not CAR's; the client's own is echoed back as client_protocol_version. Nothing is gated on it.",
	}, func(ctx context.Context, p api.HandshakeParams) (api.HandshakeResult, error) {
		return api.HandshakeResult{ProtocolVersion: ProtocolVersion, ServerVersion: Version, ClientProtocolVersion: p.ProtocolVersion}, nil
	})
	rpc.Notification[api.ChatEvent](r, api.ChatEventMethod, rpc.Doc{
		Summary: "One event of a streamed agents.invoke_external, in CAR's shape: {session_id, agent_id, kind, …, run_id, seq}.",
		Description: "kinds: token (delta: a piece of the answer's text), tool_call (tool, params: its input, detail: the tool's name again), and " +
			"exactly one terminal event: done (finish_reason, text: the whole answer, dropped_attachments when some were not sent) or error " +
			"(error: the status and why). The terminal one also carries status and result. The run's other events (thinking, tool results, " +
			"retries, usage) have no CAR kind and are not sent here; runs.subscribe with the run_id has them all.",
	})
}
