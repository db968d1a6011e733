package spawn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// The Agent Client Protocol (version 1), as Gemini CLI 0.61.0 (`gemini
// --acp`) and Copilot CLI 1.0.102 (`copilot --acp`) speak it: card is the
// client. The agent's opening, then one turn after another on its session:
//
//	→ initialize {protocolVersion: 1, clientCapabilities: no fs, no terminal}
//	→ session/new {cwd, mcpServers: []}, or session/load {sessionId, cwd}
//	  to continue a session the conversation has
//	→ session/prompt {sessionId, prompt: [{type: text, text}]}
//	← session/update notifications while the turn runs
//	← session/request_permission requests, answered with one of the
//	  options the agent offers (picked by kind, since the ids differ:
//	  Gemini proceed_once/cancel, Copilot allow_once/reject_once)
//	← the session/prompt result: {stopReason, usage or _meta.quota}
//	→ session/cancel stops a running turn inside the protocol: the agent
//	  answers the prompt with stopReason "cancelled" and waits for the next
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
	exitFailure func(exit ExitInfo) *api.RunError
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
	// byMode says card answers the agent's questions by the session's
	// permission mode (acpModeAnswer) and asks the client only in ask
	// mode: the agent runs over ACP in every mode, with no flag of its
	// own that holds one (a declared agent).
	byMode bool

	// What follows is what a driver switches on for an agent whose ACP
	// card has checked; each is off for an agent card knows nothing of.

	// fs says card declares fs.readTextFile and fs.writeTextFile in
	// initialize and serves the agent's file reads and writes itself,
	// holding the session's mode on each (acp_fs.go). Off by default: an
	// agent that reads and writes through its client behaves differently
	// (one writes twice, one fails on a missing file), so it is a choice
	// made per agent.
	fs bool
	// modes maps card's permission mode to the agent's own mode id, set
	// with session/set_mode once the session is open (new, load or
	// resume) when the agent offers that id; a mode not in the map leaves
	// the agent's own. A mapped id the agent does not offer fails the
	// opening: the mode it was to hold would not be held.
	modes map[Mode]string
	// cancelFirst says a one-shot run that is cancelled or runs out of
	// time sends session/cancel first and ends the agent's process group
	// only after the grace, as a warm turn does: an agent whose commands
	// run in sessions of their own ends them on cancel, and a kill of its
	// group would leave them running.
	cancelFirst bool
	// metaUsage reads a turn's tokens from a _meta card does not know the
	// shape of by ACP alone: the prompt result's, else the last agent
	// message chunk's that had one (Qwen Code reports them there); false
	// when meta has none.
	metaUsage func(meta json.RawMessage) (api.Usage, bool)
}

// acpClient is card's side of an ACP agent. Its state is touched by the
// reader (session/update, in order) and by each question waiting on the
// approver.
type acpClient struct {
	rpcClient
	dialect acpDialect
	resume  string // the session the opening loads, "" for a new one
	mode    Mode   // the session's permission mode, for a dialect byMode

	images bool // the agent declared image support (initialize)
	// cost is the session's cost so far in US dollars, as the agent's
	// last usage_update said (ACP's cost is the session's running total).
	cost float64
	// loading is set while session/load runs: the history the agent
	// replays then is the turns before this one, not this turn's events.
	loading bool
	// commands are the slash commands the agent last listed, less the
	// unlisted, kept across turns: it lists them once, after session/new
	// or session/load, usually between turns, and each turn's session
	// event carries them.
	commands []api.SlashCommand
	// of is the turn st reads for.
	of *turn
	st acpTurn
}

// acpTurn is what one turn reads of the agent.
type acpTurn struct {
	reading
	newAnswer bool // a tool call came since the last text: the next text starts the answer again
	fresh     bool // the next agent output starts a model turn
	// lastNotice is the error the agent said it gave up on, as text,
	// while no text has come after it.
	lastNotice string
	// costBase is the session's cost when the turn's prompt went out, and
	// cost the turn's part since, once a usage_update said.
	costBase float64
	cost     *float64
	// metaUsage is the turn's tokens as the last chunk's _meta had them,
	// for a dialect that reads them there.
	metaUsage *api.Usage
	// allowedWrites counts, by cleaned path, the edits the client allowed
	// this turn in ask mode that the agent has not yet written through
	// card's fs: an agent that asks and then writes through the client
	// (Qwen Code) would otherwise put one edit to the person twice.
	allowedWrites map[string]int
}

// acpClientOf is the Session.New of an adapter run over ACP in dialect d.
func acpClientOf(d acpDialect) func(Plan) protocol {
	return func(plan Plan) protocol {
		c := &acpClient{dialect: d}
		c.classify = c.classified
		if plan.Session != nil {
			c.adapter, c.resume, c.mode = plan.Session.Adapter, plan.Session.resume, plan.Session.mode
		}
		return c
	}
}

// acpWords name the step as ACP's calls are answered; ACP's first call is
// initialize.
var acpWords = stopWords{verb: "answered", firstStep: "initialize", cutShort: "its ACP output was cut short"}

func (c *acpClient) open(a *runner) { c.rpcClient.open(a, c.handle, nil) }

// turnOf is the turn's reading of the agent, fresh for a turn it has not
// read for yet; called with mu held.
func (c *acpClient) turnOf(t *turn) *acpTurn {
	if c.of != t {
		c.of, c.st = t, acpTurn{fresh: true}
	}
	return &c.st
}

// acpCall is one of card's calls: ACP's results have many fields an agent
// may send in an unexpected type, and each costs that field, not the turn.
func (c *acpClient) acpCall(ctx context.Context, t *turn, method string, params, result any) bool {
	return c.call(ctx, t, method, params, &lenientResult{result})
}

// opening is ACP's: initialize, then session/new in the agent's cwd, or
// session/load of the session to continue.
func (c *acpClient) opening(t *turn) bool {
	c.mu.Lock()
	c.turnOf(t)
	c.mu.Unlock()
	var ini acp.InitializeResponse
	hello := acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersion}
	if c.dialect.fs {
		hello.ClientCapabilities.FS = acp.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}
	}
	if !c.acpCall(t.ctx, t, acp.MethodInitialize, hello, &ini) {
		return false
	}
	if ini.ProtocolVersion != acp.ProtocolVersion {
		t.setFailure(failure(api.KindBadOutput, fmt.Sprintf("%s speaks ACP version %d; card speaks version %d", c.adapter, ini.ProtocolVersion, acp.ProtocolVersion)))
		return false
	}
	c.mu.Lock()
	c.images = ini.AgentCapabilities.PromptCapabilities.Image
	c.mu.Unlock()
	var sess acp.NewSessionResponse
	if c.resume != "" {
		modes, ok := c.reopen(t, ini.AgentCapabilities)
		if !ok {
			return false
		}
		sess.SessionID, sess.Modes = c.resume, modes
	} else if !c.acpCall(t.ctx, t, acp.MethodSessionNew, acp.NewSessionRequest{Cwd: c.a.plan.Dir}, &sess) {
		return false
	}
	var model string
	if sess.Models != nil {
		model = sess.Models.CurrentModelID
	}
	if !c.setMode(t, sess.SessionID, sess.Modes) {
		return false
	}
	c.opened(t, sess.SessionID, model)
	return true
}

// reopen continues the session the conversation has: with session/resume
// where the agent advertises it (sessionCapabilities.resume: no history
// replayed), else with session/load. It gives the modes the agent's
// answer offers.
func (c *acpClient) reopen(t *turn, caps acp.AgentCapabilities) (*acp.SessionModeState, bool) {
	if caps.SessionCapabilities.Resume == nil {
		return c.load(t, caps.LoadSession)
	}
	var resumed acp.ResumeSessionResponse
	// As load's: an agent that replays anyway replays the turns before
	// this one, not this turn's events.
	c.mu.Lock()
	c.loading = true
	c.mu.Unlock()
	ok := c.acpCall(t.ctx, t, acp.MethodSessionResume, acp.ResumeSessionRequest{SessionID: c.resume, Cwd: c.a.plan.Dir}, &resumed)
	c.mu.Lock()
	c.loading = false
	c.mu.Unlock()
	return resumed.Modes, ok
}

// setMode sets the agent's own mode for the session's permission mode,
// where the dialect maps it to one: after every opening, since an agent
// may open a loaded or resumed session in its default mode whatever it was
// left in. The mapped id must be one the agent offers: a mode card was to
// hold through the agent's own is not silently left unheld.
func (c *acpClient) setMode(t *turn, sid string, offered *acp.SessionModeState) bool {
	want, ok := c.dialect.modes[c.mode]
	if !ok || want == "" {
		return true
	}
	if offered == nil || !slices.ContainsFunc(offered.AvailableModes, func(m acp.SessionMode) bool { return m.ID == want }) {
		t.setFailure(failure(api.KindBadOutput, fmt.Sprintf("%s does not offer its mode %q, which card sets for %s; the mode cannot be held", c.adapter, want, c.mode)))
		return false
	}
	if offered.CurrentModeID == want {
		return true
	}
	var res json.RawMessage
	return c.acpCall(t.ctx, t, acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: sid, ModeID: want}, &res)
}

// load continues the session with session/load: the agent replays its
// history as updates, which the opening drops.
func (c *acpClient) load(t *turn, declared bool) (*acp.SessionModeState, bool) {
	if !declared {
		t.setFailure(failure(api.KindBadInput, fmt.Sprintf("%s declared no session/load over ACP (agentCapabilities.loadSession), so session %s cannot be continued in it", c.adapter, c.resume)))
		return nil, false
	}
	var loaded acp.LoadSessionResponse
	c.mu.Lock()
	c.loading = true
	c.mu.Unlock()
	ok := c.acpCall(t.ctx, t, acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: c.resume, Cwd: c.a.plan.Dir}, &loaded)
	c.mu.Lock()
	c.loading = false
	c.mu.Unlock()
	return loaded.Modes, ok
}

// begin sends session/prompt. Its call waits for the agent's answer
// however the turn's ctx ends: a cancelled turn is answered "cancelled"
// within the grace.
func (c *acpClient) begin(t *turn) {
	c.mu.Lock()
	c.turnOf(t).costBase = c.cost
	images, sid := c.images, c.sid
	if !t.first {
		// Under the lock: a list that comes after is the turn's to emit.
		t.emit(Event{Kind: api.EventSession, SessionID: sid, Model: c.model, Commands: c.commands})
	}
	c.mu.Unlock()
	if len(t.images) > 0 && !images {
		// ACP forbids an image block to an agent that did not declare
		// images; sending none would run the task without what it shows.
		t.fail(failure(api.KindBadInput, fmt.Sprintf("%s declared no image support over ACP (promptCapabilities.image), and the request has %d attachment(s)", c.adapter, len(t.images))))
		return
	}
	var res acp.PromptResponse
	if !c.acpCall(c.a.life, t, acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: acpPrompt(t.spec.Prompt, t.images)}, &res) {
		t.endIfFailed()
		return
	}
	c.endTurn(t, res)
}

// interrupt sends session/cancel for the agent's session; false before
// there is one (the opening is still under way, and nothing to cancel).
func (c *acpClient) interrupt(*turn) bool {
	sid := c.sessionID()
	if sid == "" {
		return false
	}
	return c.conn.Notify(context.Background(), acp.MethodSessionCancel, map[string]string{"sessionId": sid}) == nil
}

// cancelsFirst says a one-shot run is stopped inside ACP before its agent
// is ended, where the dialect says so.
func (c *acpClient) cancelsFirst() bool { return c.dialect.cancelFirst }

func (c *acpClient) steer(*turn, string) error { return ErrNoSteer }

// handle serves one message of the agent, on the reader: to the running
// turn, or, between turns, a question answered cancelled (ACP's denial)
// and anything else dropped.
func (c *acpClient) handle(hctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	t, params := c.running(hctx, req, map[string]any{acp.MethodSessionRequestPermission: acp.Cancelled()})
	c.mu.Lock()
	replay := c.loading
	if (t == nil || replay) && req.Method == acp.MethodSessionUpdate {
		c.keepCommandsLocked(params)
		c.keepCostLocked(params)
	}
	c.mu.Unlock()
	var u struct {
		Update json.RawMessage `json:"update"`
	}
	var p acp.RequestPermissionRequest
	switch {
	case t == nil:
	case req.Method == acp.MethodSessionUpdate:
		// In order, on the reader: the events keep the agent's order, and
		// the prompt's result is read only after every update before it
		// is handled.
		if !replay && decodeParams(params, &u) {
			c.update(t, u.Update)
		}
	case req.Notif:
	case c.dialect.fs && (req.Method == acp.MethodFSReadTextFile || req.Method == acp.MethodFSWriteTextFile):
		c.serveFS(t, req, params)
	case req.Method != acp.MethodSessionRequestPermission:
		c.notServed(hctx, req, " (it declared no file system and no terminal)")
	case params == nil || !decodeParams(params, &p):
		_ = conn.ReplyWithError(hctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "card could not read the permission request"})
	default:
		// Off the reader: the question waits for a person, and the
		// agent's messages keep coming meanwhile.
		c.ask(t, req.ID, acp.Cancelled(), func(ctx context.Context) any { return c.permission(ctx, t, p) })
	}
}

// keepCommandsLocked keeps the slash commands an update lists when no turn
// reads it: the agent lists them once, usually between turns, and every
// later turn's session event carries them.
func (c *acpClient) keepCommandsLocked(params json.RawMessage) {
	if !bytes.Contains(params, []byte(acp.UpdateAvailableCommands)) {
		return
	}
	var p struct {
		Update acp.SessionUpdate `json:"update"`
	}
	if !decodeParams(params, &p) || p.Update.Kind != acp.UpdateAvailableCommands || p.Update.AvailableCommands == nil {
		return
	}
	c.commands = c.dialect.listed(p.Update.AvailableCommands.AvailableCommands)
}

// keepCostLocked keeps the session's cost an update reports when no turn
// reads it (a replay, or between turns): the next turn's part is counted
// from it.
func (c *acpClient) keepCostLocked(params json.RawMessage) {
	if !bytes.Contains(params, []byte(acp.UpdateUsage)) {
		return
	}
	var p struct {
		Update acp.SessionUpdate `json:"update"`
	}
	if decodeParams(params, &p) && p.Update.Kind == acp.UpdateUsage && p.Update.Usage != nil {
		if usd, ok := usdOf(p.Update.Usage.Cost); ok {
			c.cost = usd
		}
	}
}

// usdOf is a cost in US dollars; false for none or another currency
// (card's budgets are in dollars, and it converts nothing).
func usdOf(cost *acp.Cost) (float64, bool) {
	if cost == nil || !strings.EqualFold(cost.Currency, "USD") || cost.Amount < 0 {
		return 0, false
	}
	return cost.Amount, true
}

// usageUpdate reads a usage_update: the session's cost so far, whose
// part since the turn's prompt is the turn's, fed to the run's budget as
// it comes. Its token counts are the context window's fill, not what the
// turn spent, and are not counted.
func (c *acpClient) usageUpdate(t *turn, st *acpTurn, u *acp.UsageUpdate) {
	usd, ok := usdOf(u.Cost)
	if !ok {
		return
	}
	c.cost = usd
	spent := usd - st.costBase
	if spent < 0 {
		// The agent's total went down (a session it reset): its report
		// is all card has.
		spent = usd
	}
	st.cost = &spent
	us := st.usage
	t.emit(Event{Kind: api.EventUsage, Usage: &us, costUSD: spent, capsOnly: true})
}

// acpMetaUsage reads tokens from a _meta's "usage" in the field names of
// ACP's own (unstable) prompt usage, as Qwen Code reports them on its last
// chunk: a driver's metaUsage for an agent seen to do so.
func acpMetaUsage(meta json.RawMessage) (api.Usage, bool) {
	var m struct {
		Usage *acp.PromptUsage `json:"usage"`
	}
	if !decodeParams(meta, &m) || m.Usage == nil {
		return api.Usage{}, false
	}
	return api.Usage{InputTokens: m.Usage.InputTokens, OutputTokens: m.Usage.OutputTokens, CachedInputTokens: m.Usage.CachedReadTokens}, true
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
func (c *acpClient) endTurn(t *turn, res acp.PromptResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer t.complete()
	st := c.turnOf(t)
	var m geminiMeta
	if res.Usage != nil {
		st.usageTotal = api.Usage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens, CachedInputTokens: res.Usage.CachedReadTokens}
		st.usage = st.usageTotal
		if c.dialect.sessionUsage {
			st.usage = usageMinus(st.usageTotal, c.used)
		}
	} else if len(res.Meta) > 0 && decodeParams(res.Meta, &m) && m.Quota != nil && m.Quota.TokenCount != nil {
		st.usage = api.Usage{InputTokens: m.Quota.TokenCount.InputTokens, OutputTokens: m.Quota.TokenCount.OutputTokens}
	} else if c.dialect.metaUsage != nil {
		if u, ok := c.dialect.metaUsage(res.Meta); ok && len(res.Meta) > 0 {
			st.usage = u
		} else if st.metaUsage != nil {
			st.usage = *st.metaUsage
		}
	}
	if st.usage != (api.Usage{}) {
		u := st.usage
		ev := Event{Kind: api.EventUsage, Usage: &u}
		if st.cost != nil {
			ev.costUSD = *st.cost
		}
		t.emit(ev)
	}
	if st.lastNotice != "" {
		// The agent gave up on an API error and said so as text, then
		// ended the turn as if it had answered.
		t.setFailure(c.classified(st.lastNotice, 0))
		return
	}
	switch res.StopReason {
	case acp.StopMaxTurnRequests:
		t.setFailure(failure(api.KindMaxTurns, c.adapter+" ended the turn: it reached its limit of model requests for one prompt"))
	case acp.StopRefusal:
		t.setFailure(failure(api.KindAPI, c.adapter+" ended the turn: the agent refused to continue"))
	case acp.StopCancelled:
		t.setFailure(failure(api.KindCancelled, c.adapter+" ended the turn as cancelled"))
	}
}

// classified is the failure for an agent's error message and JSON-RPC
// code. Gemini answers with the API's HTTP status as the code; -32000 is
// ACP's "authentication required", unless the message says otherwise.
func (c *acpClient) classified(msg string, code int64) *api.RunError {
	kind := classifyMessage(msg)
	switch {
	case code == 401 || code == 403:
		kind = api.KindAuth
	case code == 429:
		kind = api.KindRateLimit
	case code == int64(acp.CodeAuthRequired) && kind == api.KindAPI:
		kind = api.KindAuth
	}
	if kind == api.KindAuth && c.dialect.authHint != "" {
		msg += " — " + c.dialect.authHint
	}
	return failure(kind, clip(msg, 2048))
}

// update maps one session/update onto events, emitted under the lock so
// they keep their order with the tool_use a question may emit.
func (c *acpClient) update(t *turn, raw json.RawMessage) {
	var u acp.SessionUpdate
	if !decodeParams(raw, &u) || u.Kind == "" {
		t.emit(otherEvent("", raw))
		return
	}
	kind := string(u.Kind)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.turnOf(t)
	switch u.Kind {
	case acp.UpdateAgentMessageChunk:
		c.text(t, st, u, raw)
	case acp.UpdateAgentThoughtChunk:
		st.agentOutput()
		t.emit(otherEvent(kind, raw))
	case acp.UpdateToolCall:
		st.lastNotice = ""
		st.agentOutput()
		var call acp.ToolCallUpdate
		if u.ToolCall != nil {
			call = u.ToolCall.AsUpdate()
		}
		t.emit(c.announce(st, call)...)
		t.emit(st.result(call)...)
	case acp.UpdateToolCallUpdate:
		var call acp.ToolCallUpdate
		if u.ToolCallUpdate != nil {
			call = *u.ToolCallUpdate
		}
		t.emit(c.announce(st, call)...)
		t.emit(st.result(call)...)
	case acp.UpdateAvailableCommands:
		// The agent's slash commands, as Claude Code's init lists its
		// own: a session event with them, which a client (card's ACP
		// front door) offers its user.
		if u.AvailableCommands == nil {
			return
		}
		c.commands = c.dialect.listed(u.AvailableCommands.AvailableCommands)
		if len(c.commands) > 0 {
			t.emit(Event{Kind: api.EventSession, SessionID: c.sid, Model: c.model, Commands: c.commands})
		}
	case acp.UpdateUsage:
		if u.Usage != nil {
			c.usageUpdate(t, st, u.Usage)
		}
	case acp.UpdateUserMessageChunk, acp.UpdateCurrentMode, acp.UpdateConfigOption,
		acp.UpdateSessionInfo:
		// The prompt's echo and the agent's menus and meters: nothing a
		// run's record needs.
	default:
		// plan and whatever comes next, as the agent sent it.
		t.emit(otherEvent(kind, raw))
	}
}

// text reads an agent_message_chunk: the agent's API trouble where its
// dialect reports it as text, else the answer's next piece.
func (c *acpClient) text(t *turn, st *acpTurn, u acp.SessionUpdate, raw json.RawMessage) {
	if u.Chunk != nil && len(u.Chunk.Meta) > 0 && c.dialect.metaUsage != nil {
		if mu, ok := c.dialect.metaUsage(u.Chunk.Meta); ok {
			st.metaUsage = &mu
		}
	}
	if u.Chunk == nil || u.Chunk.Content.Type != acp.ContentText {
		t.emit(otherEvent(string(u.Kind), raw))
		return
	}
	b := u.Chunk.Content
	if c.dialect.notice != nil {
		switch retry, failed := c.dialect.notice(b.Text); {
		case retry:
			st.retries++
			t.emit(Event{Kind: api.EventRetry, Attempt: st.retries, Error: clip(strings.TrimSpace(b.Text), 2048)})
			return
		case failed:
			st.lastNotice = clip(strings.TrimSpace(b.Text), 2048)
			t.emit(Event{Kind: api.EventError, Error: st.lastNotice})
			return
		}
	}
	st.lastNotice = ""
	st.agentOutput()
	if st.newAnswer {
		// The answer is what the agent said last, not every "let me
		// look" before a tool call.
		st.answer = answerBuf{}
		st.newAnswer = false
	}
	st.answer.add(b.Text)
	t.emit(Event{Kind: api.EventText, Text: b.Text, Delta: true})
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

func (c *acpClient) finish(t *turn, exit *ExitInfo) api.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.turnOf(t)
	res := c.result(t, &st.reading, exit, acpWords, c.dialect.exitFailure, false)
	if st.cost != nil {
		spent := *st.cost
		res.CostUSD = &spent
	}
	return res
}

// How an ACP agent's tool calls become card's events and questions.

// agentOutput counts a model turn at the first output after the prompt
// or after a tool's result.
func (st *acpTurn) agentOutput() {
	if st.fresh {
		st.turns++
		st.fresh = false
	}
}

// announce is the tool_use event of a call not announced yet.
func (c *acpClient) announce(st *acpTurn, call acp.ToolCallUpdate) []Event {
	t := st.tools.get(call.ToolCallID)
	if t != nil && !t.announced {
		t.name, t.input = c.nameOf(st, call), acpInput(call)
		st.newAnswer = true
	}
	return st.tools.announce(call.ToolCallID, t)
}

// result is the tool_result event of a call that has just finished.
func (st *acpTurn) result(call acp.ToolCallUpdate) []Event {
	if call.Status != acp.ToolCompleted && call.Status != acp.ToolFailed {
		return nil
	}
	t := st.tools.get(call.ToolCallID)
	if t != nil {
		if t.done {
			return nil
		}
		t.done = true
	}
	st.fresh = true
	return []Event{{Kind: api.EventToolResult, Tool: &api.Tool{ID: call.ToolCallID}, Output: clip(acpOutput(call), maxOutput), IsError: call.Status == acp.ToolFailed}}
}

// nameOf names a call by the dialect, falling back to the name it was
// announced with (an update need not repeat the kind).
func (c *acpClient) nameOf(st *acpTurn, call acp.ToolCallUpdate) string {
	if n := c.dialect.toolName(call); n != "" {
		return n
	}
	if t, ok := st.tools.byID[call.ToolCallID]; ok && t.name != "" {
		return t.name
	}
	return "tool"
}

// permission puts one session/request_permission to the approver and
// picks the agent's option for the decision.
func (c *acpClient) permission(ctx context.Context, t *turn, p acp.RequestPermissionRequest) acp.RequestPermissionResponse {
	call := p.ToolCall
	input := acpInput(call)
	c.mu.Lock()
	st := c.turnOf(t)
	name := c.nameOf(st, call)
	// Gemini asks before it announces the call: the question must not
	// be about a call the run's events never showed.
	t.emit(c.announce(st, call)...)
	c.mu.Unlock()
	if c.dialect.byMode {
		if a, ok := c.byMode(t, name, call, p.Options); ok {
			return a
		}
	}

	d := t.approve(ctx, Question{Tool: name, Input: input, ToolUseID: call.ToolCallID, Summary: acpSummary(name, call, input)})
	if d.Allow && c.mode == ModeAsk && c.dialect.fs && call.Kind == acp.ToolEdit {
		c.mu.Lock()
		st = c.turnOf(t)
		for _, l := range call.Locations {
			if filepath.IsAbs(l.Path) {
				if st.allowedWrites == nil {
					st.allowedWrites = map[string]int{}
				}
				st.allowedWrites[filepath.Clean(l.Path)]++
			}
		}
		c.mu.Unlock()
	}
	return acpAnswer(p.Options, d.Allow)
}

// takeAllowedWrite says whether the client already allowed, this turn, an
// edit of path the agent has not yet written, and uses that answer up: one
// question answers one write.
func (c *acpClient) takeAllowedWrite(t *turn, path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.turnOf(t)
	p := filepath.Clean(path)
	if st.allowedWrites[p] == 0 {
		return false
	}
	st.allowedWrites[p]--
	return true
}

// acpAnswer is the outcome for a decision: the agent's allow-once option
// for an allow, its reject-once option for a deny. An allow_always of the
// client is still answered allow-once: card's broker remembers it per tool
// name and answers the agent's next question by rule, so every call stays
// in the run's record, and what "always" covers is card's rule, not the
// agent's. With no fitting option the question is cancelled, which ACP
// agents read as a denial (checked with Gemini and Copilot).
func acpAnswer(opts []acp.PermissionOption, allow bool) acp.RequestPermissionResponse {
	want := acp.PermissionRejectOnce
	if allow {
		want = acp.PermissionAllowOnce
	}
	for _, o := range opts {
		if o.Kind == want && o.OptionID != "" {
			return acp.Selected(o.OptionID)
		}
	}
	return acp.Cancelled()
}

// acpInput is a call's input as card shows it: the agent's rawInput when
// it sends one (Copilot), else what the call says of itself (Gemini sends
// a title, a kind, locations and content such as a diff).
func acpInput(call acp.ToolCallUpdate) json.RawMessage {
	if in := call.RawInput; len(in) > 0 && in[0] == '{' && json.Valid(in) {
		return in
	}
	desc := map[string]any{}
	if call.Title != "" {
		desc["title"] = call.Title
	}
	if call.Kind != "" {
		desc["kind"] = call.Kind
	}
	for k, v := range map[string]any{"locations": call.Locations, "content": call.Content} {
		if b, err := json.Marshal(v); err == nil && len(b) <= maxRaw && string(b) != "[]" && string(b) != "null" {
			desc[k] = json.RawMessage(b)
		}
	}
	b, _ := json.Marshal(desc)
	return b
}

// acpSummary is the question's one line: from the input's command, path or
// URL, else from the call's title.
func acpSummary(name string, call acp.ToolCallUpdate, input json.RawMessage) string {
	s := summarize(name, input)
	if s == name && strings.TrimSpace(call.Title) != "" {
		s = oneLine(name + ": " + call.Title)
	}
	return s
}

// acpOutput is a finished call's output as text: its text content, else
// what its rawOutput says.
func acpOutput(call acp.ToolCallUpdate) string {
	var parts []string
	for _, b := range call.Content {
		switch {
		case b.Type == acp.ToolContentContent && b.Content != nil && b.Content.Type == acp.ContentText:
			parts = append(parts, b.Content.Text)
		case b.Type == acp.ToolContentDiff && b.Path != "":
			parts = append(parts, "changed "+b.Path)
		}
	}
	if out := strings.TrimSpace(strings.Join(parts, "\n")); out != "" {
		return out
	}
	var s string
	if json.Unmarshal(call.RawOutput, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
		Message string `json:"message"`
	}
	if decodeParams(call.RawOutput, &o) {
		if o.Content != "" {
			return o.Content
		}
		if o.Message != "" {
			return o.Message
		}
	}
	return ""
}

// idToolName reads the tool name Gemini puts in front of its call ids
// ("run_shell_command__run_shell_command_1796082544230_0").
var idToolName = regexp.MustCompile(`^([a-z][a-z0-9_]*)__`)

// buildACPWarm is the plan of an agent kept warm over ACP. In read_only,
// edit and bypass it is the one-shot plan, every boundary flag included
// (Gemini's --approval-mode, Copilot's --deny-tool and --allow-tool), with
// --acp instead of the one-shot output flag; what the agent would still
// ask about is denied, since only ask mode has anyone to ask. In ask mode
// it is the ask plan as it is.
func buildACPWarm(bin string, req Request) (Plan, error) {
	if req.SessionID != "" {
		return Plan{}, errUnsupported("session_id", req.Adapter, "over ACP the agent names the session (session/new) and reports it in the session event")
	}
	// The session to continue goes inside the protocol (session/load),
	// never on argv.
	resume := req.Resume
	req.Resume = ""
	p, err := buildOneShot(bin, req)
	if err != nil {
		return Plan{}, err
	}
	if p.Session == nil {
		args, ok := withoutFlag(p.Args, "--output-format")
		if !ok {
			return Plan{}, fmt.Errorf("spawn: the %s plan has no --output-format to turn into --acp", req.Adapter)
		}
		// --acp before the boundary flags it keeps: Gemini's and
		// Copilot's option parsers take the last of a repeated flag,
		// and card's come after the operator's.
		n := len(req.Extras.Args)
		p.Args = append(slices.Clip(args[:n]), append([]string{"--acp"}, args[n:]...)...)
		p.Session = &SessionPlan{Protocol: ProtocolACP, Adapter: req.Adapter}
	}
	p.Session.resume = resume
	return p, nil
}

// withoutFlag is args without the flag and its value.
func withoutFlag(args []string, flag string) ([]string, bool) {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return args, false
	}
	return append(slices.Clip(args[:i]), args[i+2:]...), true
}
