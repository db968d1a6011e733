package spawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// The Agent Client Protocol conversation (protocol version 1), as Gemini
// CLI 0.61.0 (`gemini --acp`) and Copilot CLI 1.0.102 (`copilot --acp`)
// speak it: card is the client. One turn is
//
//	→ initialize {protocolVersion: 1, clientCapabilities: no fs, no terminal}
//	→ session/new {cwd, mcpServers: []}
//	→ session/prompt {sessionId, prompt: [{type: text, text}]}
//	← session/update notifications while the turn runs
//	← session/request_permission requests, answered with one of the
//	  options the agent offers (picked by kind, since the ids differ:
//	  Gemini proceed_once/cancel, Copilot allow_once/reject_once)
//	← the session/prompt result: {stopReason, usage or _meta.quota}
//
// The client declares no file system and no terminal: the agent then
// reads, writes and runs commands itself, inside its own permission
// checks, and asks card only whether it may.
//
// The messages are package acp's, which both of card's ACP roles share;
// what is here is this role's reading of them: updates as card's events,
// permission options as card's decisions, errors and exits as failures.

// acpDialect is what differs between agents speaking ACP.
type acpDialect struct {
	// toolName names a call for the approver and the events; ACP itself
	// carries no tool name.
	toolName func(c acp.ToolCallUpdate) string
	// exitFailure explains an agent that stopped before its turn ended,
	// from its exit status and stderr; nil when it has nothing to add.
	exitFailure func(exit ExitInfo) *Failure
	// authHint is what to do about an auth failure.
	authHint string
	// sessionUsage says the prompt result's usage is the session's total
	// so far, not the prompt's (Copilot): a warm turn's is its part.
	sessionUsage bool
	// notice reads an agent that reports its own API trouble as message
	// text instead of an error (Copilot): a retry it is making, or the
	// error it gave up on. Nil for an agent that answers with errors.
	notice func(text string) (retry bool, failed bool)
	// unlisted are the slash commands the agent lists over ACP that card
	// does not pass on to a client, with why: they cannot run headless or
	// do what no permission mode of the session bounds.
	unlisted map[string]string
}

// acpConversation is one ACP turn. Its state is touched by the reader
// (session/update, in order) and by each question waiting on the approver.
type acpConversation struct {
	rpcTurn
	dialect acpDialect

	sessionID string
	model     string
	images    bool   // the agent declared image support (initialize)
	resume    string // the session handshake loads instead of a new one
	// loading is set while session/load runs: the history the agent
	// replays then is the turns before this one, not this turn's events.
	loading bool
	// usageTotal is what the agent reported; usageBase, for a warm
	// agent's turn, the session's total before it (see sessionUsage).
	usageTotal, usageBase Usage
	answer                answerBuf
	newAnswer             bool // a tool call came since the last text: the next text starts the answer again
	fresh                 bool // the next agent output starts a model turn
	turns                 int
	tools                 sessionTools
	usage                 Usage
	retries               int
	// lastNotice is the error the agent said it gave up on, as text,
	// while no text has come after it.
	lastNotice string
	// commands are the slash commands the agent last listed
	// (available_commands_update), less the unlisted; nil until it has.
	commands []api.SlashCommand
}

// acpSession is the Session.New of an adapter run over ACP in dialect d.
func acpSession(d acpDialect) func(SessionPlan) (conversation, error) {
	return func(sp SessionPlan) (conversation, error) {
		return &acpConversation{rpcTurn: newRPCTurn(sp.Adapter, "", acpWords), dialect: d, fresh: true, resume: sp.resume}, nil
	}
}

// newACPConversation is the ACP conversation for sp's adapter, whose driver
// must speak ACP.
func newACPConversation(sp SessionPlan) (conversation, error) {
	sp.Protocol = ProtocolACP
	return newConversation(sp)
}

// acpWords name the step as ACP's calls are answered; ACP's first call is
// initialize.
var acpWords = stopWords{verb: "answered", firstStep: "initialize", cutShort: "its ACP output was cut short"}

func (c *acpConversation) converse(ctx context.Context, t turn) {
	stream := newLineStream(t.Lines, t.Stdin, func(line []byte) { t.Emit(otherEvent("", line)) })
	c.open(ctx, stream, func(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
		c.handle(hctx, conn, req, t)
	})
	defer c.close()
	if !c.handshake(t) {
		return
	}
	c.prompt(t)
}

// acpCall is one of card's calls: ACP's results have many fields an agent
// may send in an unexpected type, and each costs that field, not the turn.
func (c *acpConversation) acpCall(method string, params, result any) bool {
	return c.call(method, params, &lenientResult{result}, c.fail)
}

// handshake is ACP's opening: initialize, then session/new in the turn's
// cwd; false when the agent did not get that far (the failure recorded).
// A warm agent makes it once, for every turn after.
func (c *acpConversation) handshake(t turn) bool {
	var ini acp.InitializeResponse
	if !c.acpCall(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersion}, &ini) {
		return false
	}
	if ini.ProtocolVersion != acp.ProtocolVersion {
		c.setFailure(failure(KindBadOutput, fmt.Sprintf("%s speaks ACP version %d; card speaks version %d", c.adapter, ini.ProtocolVersion, acp.ProtocolVersion)))
		return false
	}
	c.mu.Lock()
	c.images = ini.AgentCapabilities.PromptCapabilities.Image
	c.mu.Unlock()
	var sess acp.NewSessionResponse
	if c.resume != "" {
		// A warm agent continuing a session the conversation has: the
		// agent replays its history as updates, which the opening drops.
		if !ini.AgentCapabilities.LoadSession {
			c.setFailure(failure(KindBadInput, fmt.Sprintf("%s declared no session/load over ACP (agentCapabilities.loadSession), so session %s cannot be continued in it", c.adapter, c.resume)))
			return false
		}
		var loaded acp.LoadSessionResponse
		c.mu.Lock()
		c.loading = true
		c.mu.Unlock()
		ok := c.acpCall(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: c.resume, Cwd: t.Cwd}, &loaded)
		c.mu.Lock()
		c.loading = false
		c.mu.Unlock()
		if !ok {
			return false
		}
		sess.SessionID = c.resume
	} else if !c.acpCall(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: t.Cwd}, &sess) {
		return false
	}
	c.mu.Lock()
	c.sessionID = sess.SessionID
	if sess.Models != nil {
		c.model = sess.Models.CurrentModelID
	}
	t.Emit(Event{Kind: EventSession, SessionID: c.sessionID, Model: c.model})
	c.mu.Unlock()
	return true
}

// prompt is one turn of the session handshake opened: session/prompt, and
// its result.
func (c *acpConversation) prompt(t turn) {
	c.mu.Lock()
	images, sid := c.images, c.sessionID
	c.mu.Unlock()
	if len(t.Images) > 0 && !images {
		// ACP forbids an image block to an agent that did not declare
		// images; sending none would run the task without what it shows.
		c.setFailure(failure(KindBadInput, fmt.Sprintf("%s declared no image support over ACP (promptCapabilities.image), and the request has %d attachment(s)", c.adapter, len(t.Images))))
		return
	}
	var res acp.PromptResponse
	if !c.acpCall(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: acpPrompt(t.Prompt, t.Images)}, &res) {
		return
	}
	c.endTurn(res, t.Emit)
}

// handle serves one message of the agent, on the reader.
func (c *acpConversation) handle(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request, t turn) {
	switch req.Method {
	case acp.MethodSessionUpdate:
		// In order, on the reader: the events keep the agent's order, and
		// the prompt's result is read only after every update before it
		// is handled.
		var p struct {
			Update json.RawMessage `json:"update"`
		}
		c.mu.Lock()
		replay := c.loading
		c.mu.Unlock()
		if replay {
			return
		}
		if req.Params != nil && decodeParams(*req.Params, &p) {
			c.update(p.Update, t.Emit)
		}
	case acp.MethodSessionRequestPermission:
		if req.Notif {
			return
		}
		var p acp.RequestPermissionRequest
		if req.Params == nil || !decodeParams(*req.Params, &p) {
			_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "card could not read the permission request"})
			return
		}
		// Off the reader: the question waits for a person, and the
		// agent's messages keep coming meanwhile.
		c.ask(hctx, req.ID, acp.Cancelled(), func(ctx context.Context) any { return c.permission(ctx, p, t) })
	default:
		if !req.Notif {
			_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound,
				Message: "card does not serve " + req.Method + " (it declared no file system and no terminal)"})
		}
	}
}

// acpPrompt is the prompt's content: the images first, as card's other
// image paths send them, then the text.
func acpPrompt(text string, images []Image) []acp.ContentBlock {
	blocks := make([]acp.ContentBlock, 0, len(images)+1)
	for _, img := range images {
		blocks = append(blocks, acp.ImageBlock(img.MIME, img.Data))
	}
	return append(blocks, acp.TextBlock(text))
}

// geminiMeta is where Gemini reports a turn's tokens: its own _meta.
type geminiMeta struct {
	Quota *struct {
		TokenCount *struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"token_count"`
	} `json:"quota"`
}

// endTurn records the prompt's result: the turn is over.
func (c *acpConversation) endTurn(res acp.PromptResponse, emit func(...Event)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.completed = true
	var m geminiMeta
	if res.Usage != nil {
		c.usageTotal = Usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CachedInputTokens: res.Usage.CachedReadTokens}
		c.usage = c.usageTotal
		if c.dialect.sessionUsage {
			c.usage = usageMinus(c.usageTotal, c.usageBase)
		}
	} else if len(res.Meta) > 0 && decodeParams(res.Meta, &m) && m.Quota != nil && m.Quota.TokenCount != nil {
		c.usage = Usage{InputTokens: m.Quota.TokenCount.InputTokens, OutputTokens: m.Quota.TokenCount.OutputTokens}
	}
	if c.usage != (Usage{}) {
		u := c.usage
		emit(Event{Kind: EventUsage, Usage: &u})
	}
	if c.lastNotice != "" {
		// The agent gave up on an API error and said so as text, then
		// ended the turn as if it had answered.
		c.failure = c.classified(c.lastNotice, 0)
		return
	}
	switch res.StopReason {
	case acp.StopMaxTurnRequests:
		c.failure = failure(KindMaxTurns, c.adapter+" ended the turn: it reached its limit of model requests for one prompt")
	case acp.StopRefusal:
		c.failure = failure(KindAPI, c.adapter+" ended the turn: the agent refused to continue")
	case acp.StopCancelled:
		c.failure = failure(KindCancelled, c.adapter+" ended the turn as cancelled")
	}
}

// fail records why a call did not get its answer, when the agent gave a
// reason: an error response. A closed stream (the agent died) or an ended
// context is the runner's to explain.
func (c *acpConversation) fail(method string, err error) {
	var je *jsonrpc2.Error
	if !errors.As(err, &je) {
		return
	}
	msg := strings.TrimSpace(je.Message)
	if je.Data != nil && len(*je.Data) > 0 && string(*je.Data) != "null" {
		var s string
		if json.Unmarshal(*je.Data, &s) != nil {
			s = string(*je.Data)
		}
		msg += ": " + s
	}
	c.setFailure(c.classified(fmt.Sprintf("%s answered %s with error %d: %s", c.adapter, method, je.Code, msg), je.Code))
}

// classified is the failure for an agent's error message and JSON-RPC
// code. Gemini answers with the API's HTTP status as the code; -32000 is
// ACP's "authentication required", unless the message says otherwise.
func (c *acpConversation) classified(msg string, code int64) *Failure {
	kind := classifyMessage(msg)
	switch {
	case code == 401 || code == 403:
		kind = KindAuth
	case code == 429:
		kind = KindRateLimit
	case code == int64(acp.CodeAuthRequired) && kind == KindAPI:
		kind = KindAuth
	}
	if kind == KindAuth && c.dialect.authHint != "" {
		msg += " — " + c.dialect.authHint
	}
	return failure(kind, clip(msg, 2048))
}

// update maps one session/update onto events, emitted under the lock so
// they keep their order with the tool_use a question may emit.
func (c *acpConversation) update(raw json.RawMessage, emit func(...Event)) {
	var u acp.SessionUpdate
	if !decodeParams(raw, &u) || u.Kind == "" {
		emit(otherEvent("", raw))
		return
	}
	kind := string(u.Kind)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch u.Kind {
	case acp.UpdateAgentMessageChunk:
		if u.Chunk == nil || u.Chunk.Content.Type != acp.ContentText {
			emit(otherEvent(kind, raw))
			return
		}
		b := u.Chunk.Content
		if c.dialect.notice != nil {
			switch retry, failed := c.dialect.notice(b.Text); {
			case retry:
				c.retries++
				emit(Event{Kind: EventRetry, Attempt: c.retries, Error: clip(strings.TrimSpace(b.Text), 2048)})
				return
			case failed:
				c.lastNotice = clip(strings.TrimSpace(b.Text), 2048)
				emit(Event{Kind: EventError, Error: c.lastNotice})
				return
			}
		}
		c.lastNotice = ""
		c.agentOutput()
		if c.newAnswer {
			// The answer is what the agent said last, not every "let me
			// look" before a tool call.
			c.answer = answerBuf{}
			c.newAnswer = false
		}
		c.answer.add(b.Text)
		emit(Event{Kind: EventText, Text: b.Text, Delta: true})
	case acp.UpdateAgentThoughtChunk:
		c.agentOutput()
		emit(otherEvent(kind, raw))
	case acp.UpdateToolCall:
		c.lastNotice = ""
		c.agentOutput()
		var call acp.ToolCallUpdate
		if u.ToolCall != nil {
			call = u.ToolCall.AsUpdate()
		}
		emit(c.announce(call)...)
		emit(c.result(call)...)
	case acp.UpdateToolCallUpdate:
		var call acp.ToolCallUpdate
		if u.ToolCallUpdate != nil {
			call = *u.ToolCallUpdate
		}
		emit(c.announce(call)...)
		emit(c.result(call)...)
	case acp.UpdateAvailableCommands:
		// The agent's slash commands, as Claude Code's init lists its
		// own: a session event with them, which a client (card's ACP
		// front door) offers its user.
		if u.AvailableCommands == nil {
			return
		}
		c.commands = c.dialect.listed(u.AvailableCommands.AvailableCommands)
		if len(c.commands) > 0 {
			emit(Event{Kind: EventSession, SessionID: c.sessionID, Model: c.model, Commands: c.commands})
		}
	case acp.UpdateUserMessageChunk, acp.UpdateCurrentMode, acp.UpdateConfigOption,
		acp.UpdateSessionInfo, acp.UpdateUsage:
		// The prompt's echo and the agent's menus and meters: nothing a
		// run's record needs.
	default:
		// plan and whatever comes next, as the agent sent it.
		emit(otherEvent(kind, raw))
	}
}

// listed are the agent's commands card passes on, in its order.
func (d acpDialect) listed(cmds []acp.AvailableCommand) []api.SlashCommand {
	out := []api.SlashCommand{}
	for _, ac := range cmds {
		if _, skip := d.unlisted[ac.Name]; skip || ac.Name == "" {
			continue
		}
		sc := api.SlashCommand{Name: ac.Name, Description: ac.Description}
		if ac.Input != nil {
			sc.InputHint = ac.Input.Hint
		}
		out = append(out, sc)
	}
	return out
}

func (c *acpConversation) finish(exit ExitInfo) Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := Result{Answer: c.answer.String(), SessionID: c.sessionID, Turns: c.turns, ToolCalls: c.tools.calls, Usage: c.usage}
	return c.end(res, exit, c.dialect.exitFailure, "")
}

// idToolName reads the tool name Gemini puts in front of its call ids
// ("run_shell_command__run_shell_command_1796082544230_0").
var idToolName = regexp.MustCompile(`^([a-z][a-z0-9_]*)__`)
