package daemon

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
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

// ChatEventMethod is the notification a streamed agents.invoke_external
// sends, in CAR's shape.
const ChatEventMethod = "agents.chat.event"

// CAR's chat event kinds card sends. Every other event of a run (thinking,
// tool results, retries, usage, the agent's own mid-run errors) has no CAR
// kind; runs.subscribe with the run_id carries them all.
const (
	ChatToken    = "token"
	ChatToolCall = "tool_call"
	ChatDone     = "done"
	ChatError    = "error"
)

// maxRoutingID bounds a host's session_id: it is echoed in every event and
// kept per connection, and CAR's own are short ("chat-abc123").
const maxRoutingID = 256

// CodeSessionInUse refuses a second agents.invoke_external under a
// session_id that already names a running run of the same connection: its
// events and its cancel could not tell the two apart.
const CodeSessionInUse int64 = -32042

// ExternalInvokeParams are agents.invoke_external's params: CAR's fields in
// CAR's meaning, and card's agents.invoke fields beside them.
type ExternalInvokeParams struct {
	// ID is the adapter to run (claude-code, codex, gemini, ...).
	ID string `json:"id"`
	// Task is the prompt. It goes to the agent on stdin, never on argv.
	Task string `json:"task"`
	// Stream answers at once with {accepted, session_id, run_id} and sends
	// agents.chat.event notifications; without it the answer is the
	// finished run.
	Stream bool `json:"stream,omitempty"`
	// SessionID is the host's routing id, threaded through the answer and
	// every event: any printable string of at most 256 bytes; generated
	// (chat-<uuid>) when omitted. It never reaches the agent.
	SessionID string `json:"session_id,omitempty"`
	// Cwd is where the agent runs: an absolute, existing directory; the
	// daemon user's home when omitted (read_only only).
	Cwd          string   `json:"cwd,omitempty"`
	AllowedTools []string `json:"allowed_tools,omitempty"`
	MaxTurns     int      `json:"max_turns,omitempty"`
	// TimeoutSecs defaults to 300 and is clamped to [1, 3600].
	TimeoutSecs int `json:"timeout_secs,omitempty"`
	// MCPEndpoint is an MCP server (streamable HTTP) for the agent; "" or
	// omitted is none.
	MCPEndpoint string `json:"mcp_endpoint,omitempty"`
	// Attachments are images by path; one card cannot send is skipped and
	// counted in dropped_attachments, and the agent runs with the rest.
	Attachments []ExternalAttachment `json:"attachments,omitempty"`

	// card's fields, as on agents.invoke.
	InvokedBy          string `json:"invoked_by,omitempty"`
	PermissionMode     string `json:"permission_mode,omitempty"`
	Model              string `json:"model,omitempty"`
	Effort             string `json:"effort,omitempty"`
	SystemPrompt       string `json:"system_prompt,omitempty"`
	SystemPromptAppend bool   `json:"system_prompt_append,omitempty"`
	// AgentSessionID asks the agent for a new session with this UUID
	// (agents.invoke's session_id); Resume continues the agent's session
	// (the agent_session_id of an earlier answer); DiscardSession leaves
	// none behind.
	AgentSessionID                string `json:"agent_session_id,omitempty"`
	Resume                        string `json:"resume,omitempty"`
	DiscardSession                bool   `json:"discard_session,omitempty"`
	MaxAPIRetries                 *int   `json:"max_api_retries,omitempty"`
	ApprovalTimeoutSecs           int    `json:"approval_timeout_secs,omitempty"`
	AcknowledgeUnenforcedReadOnly bool   `json:"acknowledge_unenforced_read_only,omitempty"`
}

// Validate checks the routing id, the one field agents.invoke does not
// have.
func (p *ExternalInvokeParams) Validate() error {
	if p.SessionID == "" {
		return nil
	}
	if len(p.SessionID) > maxRoutingID || !utf8.ValidString(p.SessionID) || strings.ContainsFunc(p.SessionID, unicode.IsControl) {
		return rpc.InvalidField("session_id", "must be printable text of at most %d bytes (the host's own id for this conversation)", maxRoutingID)
	}
	return nil
}

// invokeParams is the run agents.invoke would be asked for; the routing id
// stays with the CAR layer.
func (p *ExternalInvokeParams) invokeParams() InvokeParams {
	return InvokeParams{
		ID: p.ID, Task: p.Task, InvokedBy: p.InvokedBy, Cwd: p.Cwd, PermissionMode: p.PermissionMode,
		AllowedTools: p.AllowedTools, Model: p.Model, MaxTurns: p.MaxTurns, Effort: p.Effort,
		SystemPrompt: p.SystemPrompt, SystemPromptAppend: p.SystemPromptAppend,
		SessionID: p.AgentSessionID, Resume: p.Resume, DiscardSession: p.DiscardSession,
		TimeoutSecs: p.TimeoutSecs, MaxAPIRetries: p.MaxAPIRetries, Stream: p.Stream, MCPEndpoint: p.MCPEndpoint,
		ApprovalTimeoutSecs: p.ApprovalTimeoutSecs, AcknowledgeUnenforcedReadOnly: p.AcknowledgeUnenforcedReadOnly,
	}
}

// ExternalInvokeResult is CAR's InvokeResult: the agent's result with the
// host's session_id, the number of attachments not sent, and card's run
// fields beside them.
type ExternalInvokeResult struct {
	Answer string `json:"answer"`
	// SessionID is the host's routing id (the one it sent, or the one
	// generated for it).
	SessionID string `json:"session_id"`
	// AgentSessionID is the agent CLI's own session, for resume; it is the
	// run's session_id in runs.get.
	AgentSessionID string         `json:"agent_session_id,omitempty"`
	Turns          int            `json:"turns"`
	ToolCalls      int            `json:"tool_calls"`
	DurationMs     int64          `json:"duration_ms"`
	CostUSD        *float64       `json:"total_cost_usd,omitempty"`
	Usage          spawn.Usage    `json:"usage"`
	IsError        bool           `json:"is_error"`
	Error          *spawn.Failure `json:"error,omitempty"`
	// DroppedAttachments counts the attachments the agent was not given
	// (omitted when 0); DroppedAttachmentReasons says which and why.
	DroppedAttachments       int                 `json:"dropped_attachments,omitempty"`
	DroppedAttachmentReasons []DroppedAttachment `json:"dropped_attachment_reasons,omitempty"`
	RunID                    string              `json:"run_id"`
	Adapter                  string              `json:"adapter"`
	Ancestry                 []string            `json:"ancestry"`
	Status                   store.Status        `json:"status"`
}

func externalResult(r runs.InvokeResult, sessionID string) ExternalInvokeResult {
	return ExternalInvokeResult{
		Answer: r.Answer, SessionID: sessionID, AgentSessionID: r.SessionID, Turns: r.Turns, ToolCalls: r.ToolCalls,
		DurationMs: r.DurationMs, CostUSD: r.CostUSD, Usage: r.Usage, IsError: r.IsError, Error: r.Error,
		DroppedAttachments: len(r.DroppedAttachments), DroppedAttachmentReasons: r.DroppedAttachments,
		RunID: r.RunID, Adapter: r.Adapter, Ancestry: r.Ancestry, Status: r.Status,
	}
}

// ExternalInvokeAccepted is a streamed agents.invoke_external's answer:
// CAR's {accepted, session_id}, and which run it is.
type ExternalInvokeAccepted struct {
	Accepted  bool     `json:"accepted"`
	SessionID string   `json:"session_id"`
	RunID     string   `json:"run_id"`
	Adapter   string   `json:"adapter"`
	Ancestry  []string `json:"ancestry"`
	// DroppedAttachments is said at once, before any event, and again on
	// the terminal done.
	DroppedAttachments       int                 `json:"dropped_attachments,omitempty"`
	DroppedAttachmentReasons []DroppedAttachment `json:"dropped_attachment_reasons,omitempty"`
}

// ExternalInvokeAnswer is agents.invoke_external's result.
type ExternalInvokeAnswer = rpc.Either[ExternalInvokeResult, ExternalInvokeAccepted]

// ChatEvent is one agents.chat.event: CAR's {session_id, agent_id, kind,
// …}, with card's run_id and seq beside them.
type ChatEvent struct {
	SessionID string `json:"session_id"`
	// AgentID is the adapter the run is of.
	AgentID string `json:"agent_id"`
	Kind    string `json:"kind"`
	// Delta is a token's text.
	Delta string `json:"delta,omitempty"`
	// Tool and Params are a tool_call's tool and its input; Detail is the
	// tool's name again, for hosts that read CAR's older name for it.
	Tool   string          `json:"tool,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Detail string          `json:"detail,omitempty"`
	// FinishReason and Text are done's: how the run finished, and its
	// whole answer.
	FinishReason string  `json:"finish_reason,omitempty"`
	Text         *string `json:"text,omitempty"`
	// DroppedAttachments is on done when some attachments were not sent.
	DroppedAttachments int `json:"dropped_attachments,omitempty"`
	// Error is error's message.
	Error string `json:"error,omitempty"`
	// RunID and Seq are the run and the agents.event this one comes from
	// (runs.subscribe with after_seq replays the run's every event).
	RunID string `json:"run_id"`
	Seq   int64  `json:"seq,omitempty"`
	// Status and Result are on done and error: the run's status and its
	// whole result.
	Status store.Status          `json:"status,omitempty"`
	Result *ExternalInvokeResult `json:"result,omitempty"`
}

// chatEvent translates one of a run's events into CAR's dialect; ok is
// false for the kinds CAR has no name for.
func chatEvent(raw json.RawMessage, sessionID, adapter string) (ChatEvent, bool) {
	var ev runs.AgentEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return ChatEvent{}, false
	}
	out := ChatEvent{SessionID: sessionID, AgentID: adapter, RunID: ev.RunID, Seq: ev.Seq}
	switch ev.Kind {
	case spawn.EventText:
		if ev.Text == "" {
			return ChatEvent{}, false
		}
		out.Kind, out.Delta = ChatToken, ev.Text
	case spawn.EventToolUse:
		out.Kind, out.Params = ChatToolCall, json.RawMessage(`{}`)
		if ev.Tool != nil {
			out.Tool, out.Detail = ev.Tool.Name, ev.Tool.Name
			if len(ev.Tool.Input) > 0 && ev.Tool.Input[0] == '{' {
				out.Params = ev.Tool.Input
			}
		}
	case runs.EventDone, runs.EventRunError:
		if ev.Result == nil {
			return ChatEvent{}, false
		}
		res := externalResult(*ev.Result, sessionID)
		out.Status, out.Result = ev.Status, &res
		if ev.Kind == runs.EventDone {
			answer := res.Answer
			out.Kind, out.Text, out.DroppedAttachments = ChatDone, &answer, res.DroppedAttachments
			out.FinishReason = finishReason(res)
		} else {
			out.Kind, out.Error = ChatError, runErrorText(res)
		}
	default:
		return ChatEvent{}, false
	}
	return out, true
}

// finishReason folds what a host may show about a finished run into one
// line, as CAR does: how it ended, its size, and the images not sent.
func finishReason(r ExternalInvokeResult) string {
	s := fmt.Sprintf("success: %d turn(s), %d tool call(s), %d ms", r.Turns, r.ToolCalls, r.DurationMs)
	if r.DroppedAttachments > 0 {
		s += fmt.Sprintf("; %d image(s) skipped", r.DroppedAttachments)
	}
	return s
}

// runErrorText is a failed run's error as one string: its status, then
// why.
func runErrorText(r ExternalInvokeResult) string {
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
func newChatID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("chat-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func routeOf(ctx context.Context, session string) carRoute {
	var conn uint64
	if p := rpc.PeerFrom(ctx); p != nil {
		conn = p.ID()
	}
	return carRoute{conn: conn, session: session}
}

// invokeExternal is agents.invoke_external: agents.invoke's run in CAR's
// dialect.
func (d *Daemon) invokeExternal(ctx context.Context, p ExternalInvokeParams) (ExternalInvokeAnswer, rpc.Then, error) {
	peer := rpc.PeerFrom(ctx)
	if peer != nil && peer.Origin() != "" && len(p.Attachments) > 0 {
		// As on agents.invoke, a web page may not have card read a file of
		// the user's; this is refused, not skipped, since it is a page
		// reaching for files rather than a host that named a bad one.
		return ExternalInvokeAnswer{}, nil, rpc.InvalidField("attachments[0].path",
			"a connection from a web page (Origin %s) may not make card read files on this machine; agents.invoke takes the image's bytes (data_b64 with mime_type)", peer.Origin())
	}
	if field := placeholderIn(reflect.ValueOf(p.Attachments), "attachments"); field != "" {
		return ExternalInvokeAnswer{}, nil, rpc.InvalidField(field, "holds card's private-file placeholder %q, which only card itself may write", spawn.FilePlaceholderPrefix)
	}
	car := p.Attachments
	if car == nil {
		car = []ExternalAttachment{}
	}
	req, err := d.prepareWith(p.invokeParams(), car)
	if err != nil {
		return ExternalInvokeAnswer{}, nil, err
	}
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
		answer := rpc.Second[ExternalInvokeResult](ExternalInvokeAccepted{Accepted: true, SessionID: p.SessionID,
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
	return rpc.First[ExternalInvokeResult, ExternalInvokeAccepted](externalResult(res, p.SessionID)), nil, nil
}

// followCAR sends a streamed run's events to the host that started it as
// agents.chat.event, ending with its terminal done or error. A host that
// falls further behind than max_subscriber_queue_bytes is sent a terminal
// error saying so (the run goes on, and runs.subscribe follows it).
func (d *Daemon) followCAR(ctx context.Context, peer *rpc.Peer, run *runs.Run, route carRoute, adapter string) {
	sessionID := route.session
	err := run.Follow(ctx, func(ctx context.Context, raw json.RawMessage) error {
		ev, ok := chatEvent(raw, sessionID, adapter)
		if !ok {
			return nil
		}
		if ev.Kind == ChatDone || ev.Kind == ChatError {
			// The run has ended: free its id before the host hears so,
			// since a host may start its next turn on that very event.
			d.carRoutes.release(route, run.ID())
		}
		return peer.Notify(ctx, ChatEventMethod, ev)
	}, d.cfg.MaxSubscriberQueueBytes)
	var behind *runs.BehindError
	if errors.As(err, &behind) {
		_ = peer.Notify(ctx, ChatEventMethod, ChatEvent{SessionID: sessionID, AgentID: adapter, Kind: ChatError, RunID: behind.RunID,
			Error: fmt.Sprintf("%s; the run goes on: runs.subscribe {\"run_id\": %q, \"after_seq\": %d} follows it", behind.Error(), behind.RunID, behind.NextSeq-1)})
	}
}

// ChatCancelParams are agents.chat.cancel's params.
type ChatCancelParams struct {
	// SessionID is the session_id of a running agents.invoke_external of
	// this connection.
	SessionID string `json:"session_id"`
}

// Validate requires the session id.
func (p *ChatCancelParams) Validate() error {
	if p.SessionID == "" {
		return rpc.InvalidField("session_id", "required: the session_id of the agents.invoke_external to end")
	}
	return nil
}

// ChatCancelResult says what agents.chat.cancel did.
type ChatCancelResult struct {
	SessionID string `json:"session_id"`
	// Cancelled is true when a run was going and this ended it; Reason
	// says why not otherwise.
	Cancelled bool         `json:"cancelled"`
	RunID     string       `json:"run_id,omitempty"`
	Status    store.Status `json:"status,omitempty"`
	Reason    string       `json:"reason,omitempty"`
}

func (d *Daemon) chatCancel(ctx context.Context, p ChatCancelParams) (ChatCancelResult, error) {
	id := d.carRoutes.lookup(routeOf(ctx, p.SessionID))
	if id == "" {
		return ChatCancelResult{SessionID: p.SessionID, Reason: fmt.Sprintf("no agents.invoke_external of this connection is running under session_id %q "+
			"(it ended, or it was started on another connection: agents.cancel takes its run_id)", p.SessionID)}, nil
	}
	route := routeOf(ctx, p.SessionID)
	res, err := d.runs.Cancel(ctx, id)
	if err != nil {
		return ChatCancelResult{}, err
	}
	// Cancel answers once the run has ended, so its id is free now.
	d.carRoutes.release(route, id)
	return ChatCancelResult{SessionID: p.SessionID, Cancelled: res.Cancelled, RunID: res.RunID, Status: res.Status, Reason: res.Reason}, nil
}

// SessionAuthParams are session.auth's params: CAR's in-band token.
type SessionAuthParams struct {
	// Token is the daemon's token, the one the connection was opened with.
	Token string `json:"token"`
	// AgentID, HostToken and MemoryNamespace are CAR's other ways in, which
	// card has no counterpart for; each is refused naming why.
	AgentID         string `json:"agent_id,omitempty"`
	HostToken       string `json:"host_token,omitempty"`
	MemoryNamespace string `json:"memory_namespace,omitempty"`
}

// Validate refuses what card cannot honour.
func (p *SessionAuthParams) Validate() error {
	switch {
	case p.HostToken != "":
		return rpc.InvalidField("host_token", "card has no host-management role: every connection that holds the daemon's token may call what its access class allows; send token")
	case p.AgentID != "":
		return rpc.InvalidField("agent_id", "card supervises no lifecycle agents, so there is no agent identity to bind; send only token")
	case p.MemoryNamespace != "":
		return rpc.InvalidField("memory_namespace", "card keeps no memory graph to scope; leave it out")
	case p.Token == "":
		return rpc.InvalidField("token", "required: the daemon's token (<home>/token), the one this connection was opened with")
	}
	return nil
}

// SessionAuthResult is CAR's answer on a connection that is authenticated.
type SessionAuthResult struct {
	OK          bool `json:"ok"`
	AuthEnabled bool `json:"auth_enabled"`
}

// sessionAuth answers CAR's in-band authentication. A card connection is
// authenticated before it opens (the token is checked on the upgrade), so
// the right token is a no-op answered as CAR answers it. A wrong one means
// the client holds something other than the daemon's token — another
// daemon's, or one it was handed — and the connection is closed after the
// refusal, as CAR closes an unauthenticated session.
func (d *Daemon) sessionAuth(ctx context.Context, p SessionAuthParams) (SessionAuthResult, error) {
	want, err := d.tokens.current()
	if err != nil || len(want) == 0 {
		return SessionAuthResult{}, errors.New("the daemon cannot read its token file")
	}
	if subtle.ConstantTimeCompare([]byte(p.Token), want) != 1 {
		return SessionAuthResult{}, rpc.CloseAfter(&rpc.Error{Code: rpc.CodeInternalError,
			Message: "auth failed: token mismatch; this is not the daemon's token (read <home>/token again: it changes on `card token rotate`); the connection is closed",
			Data:    map[string]any{"field": "token"}}, "auth failed: token mismatch")
	}
	return SessionAuthResult{OK: true, AuthEnabled: true}, nil
}

// HandshakeParams are server.handshake's params.
type HandshakeParams struct {
	// ProtocolVersion is the version the client speaks (CAR's is a number,
	// card's a string), echoed back.
	ProtocolVersion json.RawMessage `json:"protocol_version,omitempty"`
	ClientVersion   string          `json:"client_version,omitempty"`
}

// Validate accepts a number or a string for the version.
func (p *HandshakeParams) Validate() error {
	if v := strings.TrimSpace(string(p.ProtocolVersion)); v != "" {
		var s string
		var n json.Number
		if json.Unmarshal(p.ProtocolVersion, &s) != nil && json.Unmarshal(p.ProtocolVersion, &n) != nil {
			return rpc.InvalidField("protocol_version", "must be a number or a string, not %s", v)
		}
	}
	return nil
}

// HandshakeResult is server.handshake's answer: card's protocol version
// and build, and what the client said it speaks.
type HandshakeResult struct {
	ProtocolVersion       string          `json:"protocol_version"`
	ServerVersion         string          `json:"server_version"`
	ClientProtocolVersion json.RawMessage `json:"client_protocol_version,omitempty"`
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
			CodeUnenforcedReadOnly, CodeTooManyRuns, CodeSessionInUse, rpc.CodeShuttingDown},
	}, d.invokeExternal)
	rpc.Register(r, "agents.chat.cancel", rpc.Doc{
		Access:      rpc.AccessAgents,
		Summary:     "CAR's cancel: end this connection's running agents.invoke_external under session_id, with its whole process group.",
		Description: "Answers once the run has ended; its stream ends with a terminal error event (status cancelled). A session_id with no running run of this connection is answered cancelled = false with a reason, not an error.",
	}, d.chatCancel)
	rpc.Register(r, "session.auth", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "CAR's in-band authentication, answered on a connection the token already opened: the daemon's token is {ok: true, auth_enabled: true}.",
		Description: "Any other token is refused (-32603 \"auth failed: token mismatch\", as CAR answers it) and the connection is then closed with 1008. CAR's agent_id, host_token and memory_namespace are refused (-32602) naming why.",
	}, d.sessionAuth)
	rpc.Register(r, "server.handshake", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "CAR's protocol negotiation, answered with card's protocol version and build.",
		Description: "protocol_version is card's (`MAJOR.MINOR`, the one daemon.info carries), not CAR's; the client's own is echoed back as client_protocol_version. Nothing is gated on it.",
	}, func(ctx context.Context, p HandshakeParams) (HandshakeResult, error) {
		return HandshakeResult{ProtocolVersion: ProtocolVersion, ServerVersion: Version, ClientProtocolVersion: p.ProtocolVersion}, nil
	})
	rpc.Notification[ChatEvent](r, ChatEventMethod, rpc.Doc{
		Summary: "One event of a streamed agents.invoke_external, in CAR's shape: {session_id, agent_id, kind, …, run_id, seq}.",
		Description: "kinds: token (delta: a piece of the answer's text), tool_call (tool, params: its input, detail: the tool's name again), and " +
			"exactly one terminal event: done (finish_reason, text: the whole answer, dropped_attachments when some were not sent) or error " +
			"(error: the status and why). The terminal one also carries status and result. The run's other events (thinking, tool results, " +
			"retries, usage) have no CAR kind and are not sent here; runs.subscribe with the run_id has them all.",
	})
}
