package fakeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/acp"
)

// The markers a prompt's text may carry, each choosing a behaviour of the
// turn (see the package comment). Several may be combined; [401] and [429]
// win over the rest, since the turn then fails before it says anything.
const (
	MarkerTool  = "[tool]"
	MarkerAsk   = "[ask]"
	MarkerImage = "[image]"
	MarkerUsage = "[usage]"
	MarkerSlow  = "[slow]"
	Marker401   = "[401]"
	Marker429   = "[429]"
)

// EditFile is the file an [ask] turn asks to edit, in the session's cwd.
// The fake agent never writes it.
const EditFile = "fake-agent-edit.txt"

// slowChunks is how many chunks a [slow] turn streams, SlowStep apart.
const slowChunks = 10

// turnRun is one session/prompt in progress.
type turnRun struct {
	a      *agent
	s      *session
	ctx    context.Context
	prompt []acp.ContentBlock
	text   string
	answer strings.Builder
	calls  int
}

// begin registers a prompt's turn with its session, or refuses it.
func (a *agent) begin(req *jsonrpc2.Request) (*turnRun, error) {
	var p acp.PromptRequest
	if err := params(req, &p); err != nil {
		return nil, err
	}
	s, err := a.session(p.SessionID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return nil, &jsonrpc2.Error{Code: int64(acp.CodeInvalidRequest), Message: "Invalid request: session " + p.SessionID + " is already running a turn"}
	}
	ctx, cancel := context.WithCancel(a.ctx)
	s.cancel = cancel
	var texts []string
	for _, b := range p.Prompt {
		switch {
		case b.Type == acp.ContentText:
			texts = append(texts, b.Text)
		case b.Type == acp.ContentResource && b.Resource != nil && b.Resource.Text != nil:
			texts = append(texts, *b.Resource.Text)
		}
	}
	return &turnRun{a: a, s: s, ctx: ctx, prompt: p.Prompt, text: strings.TrimSpace(strings.Join(texts, "\n"))}, nil
}

// run plays the turn and is session/prompt's answer.
func (t *turnRun) run(conn *jsonrpc2.Conn) (any, error) {
	defer func() {
		t.s.mu.Lock()
		t.s.cancel()
		t.s.cancel = nil
		t.s.mu.Unlock()
	}()
	lower := strings.ToLower(t.text)
	has := func(m string) bool { return strings.Contains(lower, m) }
	switch {
	case has(Marker401):
		// As an agent whose sign-in expired answers (Qwen Code's shape):
		// ACP's "authentication required", with the methods to sign in
		// when it offers any.
		e := &jsonrpc2.Error{Code: int64(acp.CodeAuthRequired), Message: "Authentication required: the sign-in has expired; sign in again"}
		if methods := t.a.initialize().AuthMethods; len(methods) > 0 {
			e.SetError(map[string]any{"authMethods": methods})
		}
		return nil, e
	case has(Marker429):
		// As Gemini CLI answers a rate limit: the model API's status as
		// the code.
		return nil, &jsonrpc2.Error{Code: 429, Message: "Too many requests: the rate limit is reached; try again in 30 seconds"}
	}
	steps := []struct {
		marker string
		do     func(*jsonrpc2.Conn) error
	}{
		{MarkerTool, t.tool},
		{MarkerAsk, t.ask},
		{MarkerImage, t.image},
		{MarkerSlow, t.slow},
	}
	for _, st := range steps {
		if !has(st.marker) {
			continue
		}
		if err := st.do(conn); err != nil {
			return t.end(conn, err)
		}
	}
	if err := t.say(conn, t.recall()); err != nil {
		return t.end(conn, err)
	}
	if has(MarkerUsage) {
		tokens, cost := t.s.usageAfter()
		if err := t.say(conn, fmt.Sprintf("\n\nThis turn used %d input and %d output tokens; the session holds %d tokens of %d and has cost $%.2f so far.",
			TurnInputTokens, TurnOutputTokens, tokens, ContextSize, cost)); err != nil {
			return t.end(conn, err)
		}
	}
	return t.end(conn, nil)
}

// errCancelled ends a turn the client cancelled.
var errCancelled = errors.New("cancelled")

// end records the turn and answers: a finished turn reports its usage
// and ends end_turn; a cancelled one keeps what it said and ends
// cancelled.
func (t *turnRun) end(conn *jsonrpc2.Conn, err error) (any, error) {
	if err != nil && !errors.Is(err, errCancelled) {
		return nil, err
	}
	cancelled := err != nil
	t.s.mu.Lock()
	t.s.rec.Turns = append(t.s.rec.Turns, turn{User: t.text, Agent: t.answer.String()})
	if !cancelled {
		t.s.rec.Tokens += TurnInputTokens + TurnOutputTokens
		t.s.rec.CostUSD = math.Round((t.s.rec.CostUSD+TurnCostUSD)*1e6) / 1e6
	}
	rec := t.s.rec
	rec.Turns = append([]turn(nil), rec.Turns...)
	t.s.mu.Unlock()
	if err := t.a.save(rec); err != nil {
		return nil, err
	}
	if cancelled {
		return acp.PromptResponse{StopReason: acp.StopCancelled}, nil
	}
	// The context's tokens and the session's cost as OpenCode reports
	// them, a usage_update; the turn's own tokens in the answer, as the
	// protocol's unstable schema and Copilot CLI have them.
	t.update(conn, acp.SessionUpdate{Kind: acp.UpdateUsage, Usage: &acp.UsageUpdate{Used: rec.Tokens, Size: ContextSize,
		Cost: &acp.Cost{Amount: rec.CostUSD, Currency: "USD"}}})
	return acp.PromptResponse{StopReason: acp.StopEndTurn, Usage: &acp.PromptUsage{
		InputTokens: TurnInputTokens, OutputTokens: TurnOutputTokens, TotalTokens: TurnInputTokens + TurnOutputTokens}}, nil
}

// usageAfter is the session's tokens and cost once this turn is counted.
func (s *session) usageAfter() (uint64, float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.Tokens + TurnInputTokens + TurnOutputTokens, math.Round((s.rec.CostUSD+TurnCostUSD)*1e6) / 1e6
}

func (t *turnRun) update(conn *jsonrpc2.Conn, u acp.SessionUpdate) {
	notify(t.a.ctx, conn, t.s.id(), u)
}

func (s *session) id() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.SessionID
}

func (s *session) snapshot() record {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec
	r.Turns = append([]turn(nil), s.rec.Turns...)
	return r
}

// say streams text as agent_message_chunk updates, a few words each, as
// a model's answer arrives; it stops at a cancel.
func (t *turnRun) say(conn *jsonrpc2.Conn, text string) error {
	for _, c := range chunks(text) {
		if t.ctx.Err() != nil {
			return errCancelled
		}
		t.update(conn, acp.SessionUpdate{Kind: acp.UpdateAgentMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock(c)}})
		t.answer.WriteString(c)
	}
	return nil
}

// chunks splits text after every fourth space, keeping every byte, so
// the chunks joined are the text.
func chunks(text string) []string {
	var out []string
	spaces, start := 0, 0
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' {
			spaces++
			if spaces%4 == 0 {
				out = append(out, text[start:i+1])
				start = i + 1
			}
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// recall is the default answer: it repeats the prompt and what earlier
// turns of the session said, so a client can see the session remember.
func (t *turnRun) recall() string {
	rec := t.s.snapshot()
	var b strings.Builder
	if t.answer.Len() > 0 {
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "You said: %q.", clip(t.text, 200))
	if len(rec.Turns) == 0 {
		b.WriteString(" This is the first turn of this session.")
		return b.String()
	}
	// The latest "remember …" an earlier turn asked for, answered plainly.
	for i := len(rec.Turns) - 1; i >= 0; i-- {
		u := rec.Turns[i].User
		if j := strings.Index(strings.ToLower(u), "remember"); j >= 0 {
			what := strings.TrimSpace(strings.TrimRight(u[j+len("remember"):], ".!?"))
			fmt.Fprintf(&b, " You asked me to remember: %s.", clip(what, 200))
			break
		}
	}
	const shown = 5
	first := max(0, len(rec.Turns)-shown)
	fmt.Fprintf(&b, " This session has %d earlier turn(s); ", len(rec.Turns))
	if first > 0 {
		fmt.Fprintf(&b, "the last %d said: ", shown)
	} else {
		b.WriteString("they said: ")
	}
	for i, tr := range rec.Turns[first:] {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%q", clip(tr.User, 80))
	}
	b.WriteString(".")
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (t *turnRun) callID() string {
	t.calls++
	return fmt.Sprintf("call_fake_%d", t.calls)
}

// tool is a read tool call that completes: announced, then done.
func (t *turnRun) tool(conn *jsonrpc2.Conn) error {
	cwd := t.s.snapshot().Cwd
	path := filepath.Join(cwd, "README.md")
	id := t.callID()
	input, _ := json.Marshal(map[string]string{"path": path})
	t.update(conn, acp.SessionUpdate{Kind: acp.UpdateToolCall, ToolCall: &acp.ToolCall{ToolCallID: id, Title: "Read README.md",
		Kind: acp.ToolRead, Status: acp.ToolPending, Locations: []acp.ToolCallLocation{{Path: path}}, RawInput: input}})
	result := acp.TextBlock("(the fake agent opens no file; this is its made-up result)")
	t.update(conn, acp.SessionUpdate{Kind: acp.UpdateToolCallUpdate, ToolCallUpdate: &acp.ToolCallUpdate{ToolCallID: id,
		Status: acp.ToolCompleted, Content: []acp.ToolCallContent{{Type: acp.ToolContentContent, Content: &result}}}})
	return t.say(conn, "I read README.md with a tool call (made up: the fake agent opens no file).")
}

// ask asks to edit a file in the cwd, as Qwen Code does in its default
// mode, and says what the answer was. The session's mode decides first:
// plan refuses and auto-edit allows, neither asking.
func (t *turnRun) ask(conn *jsonrpc2.Conn) error {
	rec := t.s.snapshot()
	path := filepath.Join(rec.Cwd, EditFile)
	id := t.callID()
	const content = "written by the fake agent\n"
	input, _ := json.Marshal(map[string]string{"file_path": path, "content": content})
	diff := []acp.ToolCallContent{{Type: acp.ToolContentDiff, Path: path, NewText: content}}
	loc := []acp.ToolCallLocation{{Path: path}}
	title := "Write " + EditFile
	t.update(conn, acp.SessionUpdate{Kind: acp.UpdateToolCall, ToolCall: &acp.ToolCall{ToolCallID: id, Title: title,
		Kind: acp.ToolEdit, Status: acp.ToolPending, Content: diff, Locations: loc, RawInput: input}})
	done := func(status acp.ToolCallStatus, why string) {
		b := acp.TextBlock(why)
		t.update(conn, acp.SessionUpdate{Kind: acp.UpdateToolCallUpdate, ToolCallUpdate: &acp.ToolCallUpdate{ToolCallID: id,
			Status: status, Content: []acp.ToolCallContent{{Type: acp.ToolContentContent, Content: &b}}}})
	}
	sep := ""
	if t.answer.Len() > 0 {
		sep = "\n\n"
	}
	switch rec.Mode {
	case ModePlan:
		done(acp.ToolFailed, "plan mode refuses edits")
		return t.say(conn, sep+"The edit of "+EditFile+" was refused without asking: the session is in plan mode.")
	case ModeAutoEdit:
		done(acp.ToolCompleted, "edited (made up: no file is written)")
		return t.say(conn, sep+"The edit of "+EditFile+" was allowed without asking: the session is in auto-edit mode. (The fake agent writes no file.)")
	}
	options := []acp.PermissionOption{
		{OptionID: "proceed_once", Name: "Allow", Kind: acp.PermissionAllowOnce},
		{OptionID: "proceed_always", Name: "Allow all edits", Kind: acp.PermissionAllowAlways},
		{OptionID: "cancel", Name: "Reject", Kind: acp.PermissionRejectOnce},
	}
	var res acp.RequestPermissionResponse
	err := conn.Call(t.ctx, acp.MethodSessionRequestPermission, acp.RequestPermissionRequest{SessionID: rec.SessionID,
		ToolCall: acp.ToolCallUpdate{ToolCallID: id, Title: title, Kind: acp.ToolEdit, Status: acp.ToolPending, Content: diff, Locations: loc, RawInput: input},
		Options:  options}, &res)
	if t.ctx.Err() != nil {
		done(acp.ToolFailed, "the turn was cancelled")
		return errCancelled
	}
	if err != nil {
		done(acp.ToolFailed, "could not ask: "+err.Error())
		return t.say(conn, sep+"The edit of "+EditFile+" was not made: asking for permission failed ("+err.Error()+").")
	}
	if res.Outcome.Outcome == acp.OutcomeCancelled {
		done(acp.ToolFailed, "the question was cancelled")
		return errCancelled
	}
	var kind acp.PermissionOptionKind
	for _, o := range options {
		if o.OptionID == res.Outcome.OptionID {
			kind = o.Kind
		}
	}
	switch kind {
	case acp.PermissionAllowOnce, acp.PermissionAllowAlways:
		done(acp.ToolCompleted, "edited (made up: no file is written)")
		return t.say(conn, sep+"Permission to edit "+EditFile+" was allowed ("+string(kind)+"). (The fake agent writes no file.)")
	case acp.PermissionRejectOnce:
		done(acp.ToolFailed, "Tool \"write_file\" was canceled by the user.")
		return t.say(conn, sep+"Permission to edit "+EditFile+" was denied ("+string(kind)+").")
	}
	done(acp.ToolFailed, "the answer chose no offered option")
	return t.say(conn, sep+fmt.Sprintf("Permission to edit %s was denied: the answer chose %q, which was not offered.", EditFile, res.Outcome.OptionID))
}

// image says which images the prompt carried.
func (t *turnRun) image(conn *jsonrpc2.Conn) error {
	var got []string
	for _, b := range t.prompt {
		if b.Type != acp.ContentImage {
			continue
		}
		if n := decodedSize(b.Data); n >= 0 {
			got = append(got, fmt.Sprintf("%s of %d bytes", b.MimeType, n))
		} else {
			got = append(got, b.MimeType+" whose data is not base64")
		}
	}
	sep := ""
	if t.answer.Len() > 0 {
		sep = "\n\n"
	}
	switch len(got) {
	case 0:
		return t.say(conn, sep+"I got no images.")
	case 1:
		return t.say(conn, sep+"I got 1 image: "+got[0]+".")
	}
	return t.say(conn, sep+fmt.Sprintf("I got %d images: %s.", len(got), strings.Join(got, ", ")))
}

// slow streams for slowChunks × SlowStep, and stops at a cancel.
func (t *turnRun) slow(conn *jsonrpc2.Conn) error {
	if t.answer.Len() > 0 {
		if err := t.say(conn, "\n\n"); err != nil {
			return err
		}
	}
	for i := 1; i <= slowChunks; i++ {
		if i > 1 {
			timer := time.NewTimer(t.a.opts.SlowStep)
			select {
			case <-t.ctx.Done():
				timer.Stop()
				return errCancelled
			case <-timer.C:
			}
		}
		if err := t.say(conn, fmt.Sprintf("Working slowly, step %d of %d. ", i, slowChunks)); err != nil {
			return err
		}
	}
	return nil
}
