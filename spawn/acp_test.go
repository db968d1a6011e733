package spawn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

// Gemini and Copilot ask over ACP: their ask plans run the CLI in ACP mode,
// with no one-shot output flag and the prompt nowhere on argv.
func TestGeminiAndCopilotAskPlansRunOverACP(t *testing.T) {
	for _, id := range []string{agent.Gemini, agent.Copilot} {
		p, err := Build("/usr/bin/"+id, Request{Adapter: id, Mode: ModeAsk, Cwd: cwd, ApprovalTimeout: time.Minute})
		require.NoError(t, err, id)
		assert.Equal(t, &SessionPlan{Protocol: ProtocolACP, Adapter: id}, p.Session, id)
		assert.Equal(t, &AskPlan{Channel: AskViaSession}, p.Ask, id)
		assert.Contains(t, p.Args, "--acp", id)
		assert.NotContains(t, p.Args, "--output-format", id)
		assert.Empty(t, p.Files, id)
	}
	for _, m := range []Mode{ModeReadOnly, ModeEdit, ModeBypass} {
		for _, id := range []string{agent.Gemini, agent.Copilot} {
			p, err := Build("/usr/bin/"+id, Request{Adapter: id, Mode: m, Cwd: cwd, AllowBypass: true})
			require.NoError(t, err)
			assert.Nil(t, p.Session, "%s/%s stays one-shot", id, m)
			assert.NotContains(t, p.Args, "--acp", "%s/%s", id, m)
		}
	}
	p, err := Build("/usr/bin/copilot", Request{Adapter: agent.Copilot, Mode: ModeAsk, Cwd: cwd})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"COPILOT_ALLOW_ALL": "false", "COPILOT_AUTO_UPDATE": "false"}, p.Env,
		"an inherited COPILOT_ALLOW_ALL would answer every question yes")
}

// The framing: one JSON-RPC message per line; anything else on the line is
// not a message and is set aside, never fed to jsonrpc2.
func TestALineIsAMessageOnlyWhenItIsOneJSONRPCObject(t *testing.T) {
	for line, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`:                           true,
		`{"jsonrpc":"2.0","method":"session/update","params":{"update":{}}}`:                   true,
		`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}`:                              true,
		`{"jsonrpc":"2.0","id":1,"result":null}`:                                               true,
		`{"jsonrpc":"2.0","id":0,"error":{"code":-32000,"message":"Authentication required"}}`: true,
		`{"id":3,"result":{}}`:                                true,
		`Ripgrep is not available. Falling back to GrepTool.`: false,
		`{"level":"info","msg":"a log line that is JSON"}`:    false,
		`{"result":{}}`:                          false,
		`[{"jsonrpc":"2.0","id":1,"result":{}}]`: false,
		`{"jsonrpc":"2.0","id":1,"method":`:      false,
		``:                                       false,
	} {
		assert.Equal(t, want, acp.IsMessage([]byte(line)), line)
	}
}

func TestTheLineStreamWritesOneLinePerMessageAndSkipsWhatIsNoMessage(t *testing.T) {
	lines := make(chan []byte, 3)
	var out bytes.Buffer
	var skipped []string
	s := newLineStream(lines, &out, func(l []byte) { skipped = append(skipped, string(l)) })
	require.NoError(t, s.WriteObject(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"text": "two\nlines"}}))
	require.NoError(t, s.WriteObject(map[string]any{"jsonrpc": "2.0", "method": "session/cancel"}))
	assert.Equal(t, 2, strings.Count(out.String(), "\n"), "a newline inside a string is escaped: %s", out.String())

	lines <- []byte("not json")
	lines <- []byte(`{"jsonrpc":"2.0","id":1,"result":{"ok":true}}`)
	close(lines)
	var m map[string]any
	require.NoError(t, s.ReadObject(&m))
	assert.Equal(t, map[string]any{"ok": true}, m["result"])
	assert.Equal(t, []string{"not json"}, skipped)
	assert.ErrorIs(t, s.ReadObject(&m), io.EOF, "the child's stdout ended")
}

// acpReading is an ACP client in a dialect reading one turn, outside any
// process.
type acpReading struct {
	*acpClient
	t *turn
}

func newACPReading(t *testing.T, dialect string, emit func(...Event)) acpReading {
	t.Helper()
	proto, err := protocolOf(Plan{Session: &SessionPlan{Protocol: ProtocolACP, Adapter: dialect}})
	require.NoError(t, err)
	return acpReading{proto.(*acpClient), readingTurn(emit, nil)}
}

func (r acpReading) endTurn(res acp.PromptResponse) { r.acpClient.endTurn(r.t, res) }

func (r acpReading) finish() api.Result { return r.acpClient.finish(r.t, &ExitInfo{}) }

// update feeds raw session/update payloads through a client in the given
// dialect and returns the events.
func updates(t *testing.T, dialect string, raws ...string) ([]Event, acpReading) {
	t.Helper()
	var evs []Event
	c := newACPReading(t, dialect, func(e ...Event) { evs = append(evs, e...) })
	for _, r := range raws {
		c.update(c.t, json.RawMessage(r))
	}
	return evs, c
}

// Each session/update maps onto card's event model; the agent's slash
// commands are a session event, its other menus and meters are dropped, and what card has no kind for travels as "other".
func TestSessionUpdatesMapOntoCardsEvents(t *testing.T) {
	// Copilot's updates, as 1.0.102 sent them for an allowed shell command.
	evs, c := updates(t, agent.Copilot,
		`{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"add-dir","description":"Allow file access to a directory","input":{"hint":"directory"}},{"name":"compact","description":"Summarize conversation history","input":{"hint":"focus instructions"}}]}`,
		`{"sessionUpdate":"usage_update","used":9765,"size":128000}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Let me "}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"look."}}`,
		`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm"}}`,
		`{"sessionUpdate":"tool_call","toolCallId":"toolu_1","title":"Write a file","kind":"execute","status":"pending","rawInput":{"command":"echo hello > f.txt","description":"Write a file"}}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"toolu_1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"\n<shellId: 0 completed with exit code 0>"}}],"rawOutput":{"content":"x"}}`,
		`{"sessionUpdate":"plan","entries":[{"content":"write the file","priority":"high","status":"completed"}]}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"DONE"}}`,
		`{"sessionUpdate":"something_new","x":1}`,
	)
	require.Len(t, evs, 9)
	assert.Equal(t, Event{Kind: api.EventSession, Commands: []api.SlashCommand{{Name: "compact", Description: "Summarize conversation history", InputHint: "focus instructions"}}}, evs[0],
		"the commands, less add-dir, which would widen the session past its cwd")
	evs = evs[1:]
	assert.Equal(t, Event{Kind: api.EventText, Text: "Let me ", Delta: true}, evs[0])
	assert.Equal(t, Event{Kind: api.EventText, Text: "look.", Delta: true}, evs[1])
	assert.Equal(t, api.EventOther, evs[2].Kind)
	assert.Equal(t, "agent_thought_chunk", evs[2].Type)
	assert.JSONEq(t, `{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm"}}`, string(evs[2].Raw))
	assert.Equal(t, Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "execute", ID: "toolu_1",
		Input: json.RawMessage(`{"command":"echo hello > f.txt","description":"Write a file"}`)}}, evs[3])
	assert.Equal(t, Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: "toolu_1"}, Output: "<shellId: 0 completed with exit code 0>"}, evs[4])
	assert.Equal(t, "plan", evs[5].Type)
	assert.Equal(t, Event{Kind: api.EventText, Text: "DONE", Delta: true}, evs[6])
	assert.Equal(t, "something_new", evs[7].Type)

	c.endTurn(acp.PromptResponse{StopReason: "end_turn"})
	res := c.finish()
	assert.Equal(t, "DONE", res.Answer, "the answer is what the agent said after its last tool call")
	assert.Equal(t, 1, res.ToolCalls)
	assert.Equal(t, 2, res.Turns, "one model turn before the tool call, one after its result")
}

// Gemini announces a read tool with a tool_call, runs it, and reports the
// end in an update; a failed call is a tool_result marked as an error,
// with the agent's message; each call is announced and ended once.
func TestGeminiToolCallsAreNamedFromTheirIDAndEndOnce(t *testing.T) {
	evs, _ := updates(t, agent.Gemini,
		`{"sessionUpdate":"tool_call","toolCallId":"read_file__read_file_1796082639318_0","status":"in_progress","title":"existing.txt","content":[],"locations":[{"path":"/p/existing.txt"}],"kind":"read"}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"read_file__read_file_1796082639318_0","status":"completed","title":"existing.txt","content":[],"locations":[{"path":"/p/existing.txt"}],"kind":"read"}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"read_file__read_file_1796082639318_0","status":"completed"}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"web_fetch__web_fetch_1_0","status":"failed","content":[{"type":"content","content":{"type":"text","text":"All requested URLs were skipped"}}],"kind":"fetch"}`,
	)
	require.Len(t, evs, 4)
	assert.Equal(t, "read_file", evs[0].Tool.Name)
	assert.JSONEq(t, `{"title":"existing.txt","kind":"read","locations":[{"path":"/p/existing.txt"}]}`, string(evs[0].Tool.Input))
	assert.Equal(t, api.EventToolResult, evs[1].Kind)
	assert.Equal(t, Event{Kind: api.EventToolUse, Tool: &api.Tool{Name: "web_fetch", ID: "web_fetch__web_fetch_1_0",
		Input: json.RawMessage(`{"content":[{"type":"content","content":{"type":"text","text":"All requested URLs were skipped"}}],"kind":"fetch"}`)}}, evs[2],
		"an update for a call never announced announces it first")
	assert.Equal(t, Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: "web_fetch__web_fetch_1_0"}, Output: "All requested URLs were skipped", IsError: true}, evs[3])
}

// Copilot reports API trouble as message text; card reads it as a retry
// and as the run's error, not as the answer.
func TestCopilotsAPITroubleInMessageTextIsARetryAndAnError(t *testing.T) {
	evs, c := updates(t, agent.Copilot,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Info: Request failed due to a transient API error. Retrying..."}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Error: Authentication failed with provider at http://127.0.0.1:36303 (HTTP 401)."}}`,
	)
	require.Len(t, evs, 2)
	assert.Equal(t, Event{Kind: api.EventRetry, Attempt: 1, Error: "Info: Request failed due to a transient API error. Retrying..."}, evs[0])
	assert.Equal(t, api.EventError, evs[1].Kind)
	c.endTurn(acp.PromptResponse{StopReason: "end_turn"})
	res := c.finish()
	require.NotNil(t, res.Error)
	assert.Equal(t, api.KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "HTTP 401")
	assert.Contains(t, res.Error.Message, "COPILOT_PROVIDER_BASE_URL", "says what to do")
	assert.Empty(t, res.Answer)

	// The same words streamed as a model's answer are the answer.
	_, c = updates(t, agent.Copilot,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Error: "}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"the build failed (HTTP 500 from the registry)."}}`)
	c.endTurn(acp.PromptResponse{StopReason: "end_turn"})
	assert.Nil(t, c.finish().Error)
}

func TestAStopReasonOtherThanTheEndOfTheTurnIsAFailureOfItsKind(t *testing.T) {
	for reason, kind := range map[string]string{"end_turn": "", "max_tokens": "", "max_turn_requests": api.KindMaxTurns, "refusal": api.KindAPI, "cancelled": api.KindCancelled} {
		_, c := updates(t, agent.Gemini)
		c.endTurn(acp.PromptResponse{StopReason: acp.StopReason(reason)})
		res := c.finish()
		if kind == "" {
			assert.Nil(t, res.Error, reason)
			continue
		}
		require.NotNil(t, res.Error, reason)
		assert.Equal(t, kind, res.Error.Kind, reason)
	}
}

// An agent's error response is classified as the one-shot parsers do:
// Gemini answers with the API's status as the code, and -32000 is ACP's
// "authentication required".
func TestAnAgentsErrorResponseIsClassified(t *testing.T) {
	for _, c := range []struct {
		dialect string
		err     *jsonrpc2.Error
		kind    string
		says    string
	}{
		{agent.Gemini, &jsonrpc2.Error{Code: -32000, Message: "Gemini API key is missing or not configured."}, api.KindAuth, "GEMINI_API_KEY"},
		{agent.Copilot, &jsonrpc2.Error{Code: -32000, Message: "Authentication required"}, api.KindAuth, "COPILOT_GITHUB_TOKEN"},
		{agent.Gemini, &jsonrpc2.Error{Code: 429, Message: "You exceeded your current quota"}, api.KindRateLimit, "quota"},
		{agent.Gemini, &jsonrpc2.Error{Code: 401, Message: `{"error":{"code":401}}`}, api.KindAuth, "401"},
		{agent.Gemini, &jsonrpc2.Error{Code: 500, Message: "Internal Server Error"}, api.KindAPI, "session/prompt with error 500"},
		{agent.Gemini, &jsonrpc2.Error{Code: -32000, Message: "Too many requests, rate limit"}, api.KindRateLimit, "rate limit"},
	} {
		ac := newACPReading(t, c.dialect, func(...Event) {})
		ac.fail(ac.t, "session/prompt", c.err)
		res := ac.finish()
		require.NotNil(t, res.Error, c.err.Message)
		assert.Equal(t, c.kind, res.Error.Kind, c.err.Message)
		assert.Contains(t, res.Error.Message, c.says)
	}
	// A stream that closed is no answer from the agent: the exit explains.
	ac := newACPReading(t, agent.Gemini, func(...Event) {})
	ac.fail(ac.t, "session/prompt", jsonrpc2.ErrClosed)
	assert.Nil(t, ac.t.failed())
}

func TestAnswerOptionsArePickedByKindNotByID(t *testing.T) {
	gemini := []acp.PermissionOption{{OptionID: "proceed_always", Kind: "allow_always"}, {OptionID: "proceed_once", Kind: "allow_once"}, {OptionID: "cancel", Kind: "reject_once"}}
	copilot := []acp.PermissionOption{{OptionID: "allow_once", Kind: "allow_once"}, {OptionID: "allow_always", Kind: "allow_always"}, {OptionID: "reject_once", Kind: "reject_once"}}
	assert.Equal(t, acp.RequestPermissionOutcome{Outcome: "selected", OptionID: "proceed_once"}, acpAnswer(gemini, true).Outcome)
	assert.Equal(t, acp.RequestPermissionOutcome{Outcome: "selected", OptionID: "cancel"}, acpAnswer(gemini, false).Outcome)
	assert.Equal(t, acp.RequestPermissionOutcome{Outcome: "selected", OptionID: "allow_once"}, acpAnswer(copilot, true).Outcome)
	assert.Equal(t, acp.RequestPermissionOutcome{Outcome: "selected", OptionID: "reject_once"}, acpAnswer(copilot, false).Outcome)
	onlyAlways := []acp.PermissionOption{{OptionID: "a", Kind: "allow_always"}, {OptionID: "r", Kind: "reject_always"}}
	assert.Equal(t, acp.RequestPermissionOutcome{Outcome: "cancelled"}, acpAnswer(onlyAlways, true).Outcome,
		"an agent offering no allow-once is not given more than the client allowed")
	assert.Equal(t, acp.RequestPermissionOutcome{Outcome: "cancelled"}, acpAnswer(onlyAlways, false).Outcome)
}

// The fake ACP agent: the test binary re-executed with helperEnv=acp:<script>.
// Scripts:
//
//	turn      asks about a shell command in Gemini's shape; writes made.txt in
//	          its cwd if card picked proceed_once; says what it was answered;
//	          ends the turn and exits when stdin closes.
//	linger    as turn, then ignores stdin EOF and SIGTERM.
//	die       answers initialize and session/new, then exits 3 on session/prompt.
//	silent    starts a grandchild (pid in grandchild.pid), answers nothing.
//	noise     prints an over-long line and a non-JSON line (fakeNoise), then as turn.
//	error     answers session/prompt with error 429.
//	flood     prints stdout without end once prompted.
//	images    declares image support; says what blocks the prompt had.
//	noimage   as images, but declares no image support.
func fakeACP(script string) int {
	if script == "silent" {
		gc := exec.Command("sleep", "300")
		if gc.Start() == nil {
			_ = os.WriteFile("grandchild.pid", []byte(strconv.Itoa(gc.Process.Pid)), 0o600)
		}
		_, _ = io.Copy(io.Discard, os.Stdin)
		select {}
	}
	if script == "noise" {
		fakeNoise()
	}
	ctx := context.Background()
	h := rpcHandler(func(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
		switch req.Method {
		case "initialize":
			_ = conn.Reply(ctx, req.ID, map[string]any{"protocolVersion": 1, "agentInfo": map[string]any{"name": "fake", "version": "1"},
				"agentCapabilities": map[string]any{"loadSession": script == "resume", "promptCapabilities": map[string]any{"image": script != "noimage"}}})
		case "session/load":
			// The saved history is replayed as updates before the answer.
			var p acp.LoadSessionRequest
			_ = json.Unmarshal(*req.Params, &p)
			_ = conn.Notify(ctx, "session/update", map[string]any{"sessionId": p.SessionID, "update": map[string]any{"sessionUpdate": "agent_message_chunk",
				"content": map[string]any{"type": "text", "text": "replayed history of " + p.SessionID}}})
			_ = conn.Reply(ctx, req.ID, map[string]any{})
		case "session/new":
			_ = conn.Reply(ctx, req.ID, map[string]any{"sessionId": "sess-fake", "models": map[string]any{"currentModelId": "fake-model"}})
		case "session/prompt":
			switch script {
			case "die":
				fmt.Fprintln(os.Stderr, "fatal: the fake agent fell over")
				os.Exit(3)
			case "error":
				_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: 429, Message: "You exceeded your current quota"})
				return
			case "images", "noimage":
				// Says what the prompt's blocks were, and ends the turn.
				var p struct {
					Prompt []struct {
						Type     string `json:"type"`
						Text     string `json:"text"`
						MimeType string `json:"mimeType"`
						Data     []byte `json:"data"`
					} `json:"prompt"`
				}
				_ = json.Unmarshal(*req.Params, &p)
				var said []string
				for _, b := range p.Prompt {
					said = append(said, fmt.Sprintf("%s %s %q", b.Type, b.MimeType, string(b.Data)+b.Text))
				}
				_ = conn.Notify(ctx, "session/update", map[string]any{"update": map[string]any{"sessionUpdate": "agent_message_chunk",
					"content": map[string]any{"type": "text", "text": strings.Join(said, "; ")}}})
				_ = conn.Reply(ctx, req.ID, map[string]any{"stopReason": "end_turn"})
				return
			case "flood":
				line := strings.Repeat("y", 1<<10) + "\n"
				for {
					if _, err := os.Stdout.WriteString(line); err != nil {
						os.Exit(1)
					}
				}
			}
			go fakePrompt(ctx, conn, req)
		}
	})
	conn := jsonrpc2.NewConn(ctx, jsonrpc2.NewPlainObjectStream(stdio{}), h)
	<-conn.DisconnectNotify()
	if script == "linger" {
		signal.Ignore(syscall.SIGTERM)
		select {}
	}
	return 0
}

type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error                { return os.Stdin.Close() }

func fakePrompt(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p acp.PromptRequest
	_ = json.Unmarshal(*req.Params, &p)
	update := func(u map[string]any) {
		_ = conn.Notify(ctx, "session/update", map[string]any{"sessionId": p.SessionID, "update": u})
	}
	text := func(s string) {
		update(map[string]any{"sessionUpdate": "agent_message_chunk", "content": map[string]any{"type": "text", "text": s}})
	}
	text("You said: " + p.Prompt[0].Text)
	const id = "run_shell_command__run_shell_command_1_0"
	var res acp.RequestPermissionResponse
	err := conn.Call(ctx, "session/request_permission", map[string]any{"sessionId": p.SessionID,
		"options": []map[string]any{{"optionId": "proceed_always", "name": "Allow for this session", "kind": "allow_always"},
			{"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"}, {"optionId": "cancel", "name": "Reject", "kind": "reject_once"}},
		"toolCall": map[string]any{"toolCallId": id, "status": "pending", "title": "echo hello > made.txt", "kind": "execute",
			"content": []any{map[string]any{"type": "content", "content": map[string]any{"type": "text", "text": "(Write a file)"}}}}}, &res)
	answer := res.Outcome.Outcome + " " + res.Outcome.OptionID
	if err != nil {
		answer = "error " + err.Error()
	}
	if res.Outcome.OptionID == "proceed_once" {
		_ = os.WriteFile("made.txt", []byte("hello\n"), 0o600)
		update(map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "completed", "content": []any{}})
	}
	text("DONE after ")
	text(strings.TrimSpace(answer))
	_ = conn.Reply(ctx, req.ID, map[string]any{"stopReason": "end_turn",
		"_meta": map[string]any{"quota": map[string]any{"token_count": map[string]any{"input_tokens": 20, "output_tokens": 10}}}})
}

// A cold ask-mode turn continues the agent's session: session/load of the
// id, the history it replays kept out of the turn, and the turn's tool call
// still put to the approver. An agent that declares no session/load is
// refused, naming the capability, before any prompt.
func TestAnACPRunResumingASessionLoadsItAndStillAsks(t *testing.T) {
	r := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := acpProtocol.plan("resume")
	p.Session.resume = "sess-old"
	res, evs, work, err := sessionRun(t, ctx, p, r, Limits{})
	require.NoError(t, err)
	assert.Equal(t, "sess-old", res.SessionID)
	require.Len(t, r.asked, 1, "the resumed turn's call is asked")
	assert.FileExists(t, filepath.Join(work, "made.txt"))
	assert.Contains(t, res.Answer, "DONE after selected proceed_once")
	for _, e := range evs {
		assert.NotContains(t, e.Text, "replayed", "the loaded history is not the turn's")
	}

	r = &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
	p = acpProtocol.plan("turn")
	p.Session.resume = "sess-old"
	res, _, _, err = sessionRun(t, ctx, p, r, Limits{})
	e := runErr(t, err)
	assert.Equal(t, api.KindBadInput, e.Kind)
	assert.Contains(t, e.Message, "loadSession")
	assert.Empty(t, r.asked)
	assert.True(t, res.IsError)
}

// Copilot's ask plan continues a session inside ACP (session/load), never
// on argv; Gemini's is refused, since its session/load loses the session.
func TestAnACPAskPlanResumesInsideTheProtocolWhereTheAgentKeepsTheSession(t *testing.T) {
	p, err := Build("/bin/copilot", Request{Adapter: agent.Copilot, Mode: ModeAsk, Cwd: cwd, Resume: "31882199-0000"})
	require.NoError(t, err)
	assert.Equal(t, &SessionPlan{Protocol: ProtocolACP, Adapter: agent.Copilot, resume: "31882199-0000"}, p.Session)
	assert.NotContains(t, strings.Join(p.Args, " "), "31882199")
	assert.NotContains(t, strings.Join(p.Args, " "), "--resume")
	w, err := BuildWarm("/bin/copilot", Request{Adapter: agent.Copilot, Mode: ModeAsk, Cwd: cwd, Resume: "31882199-0000"})
	require.NoError(t, err)
	assert.Equal(t, p.Args, w.Args, "a warm agent resuming it runs the same ask plan")
	assert.Equal(t, "31882199-0000", w.Session.resume)

	_, err = Build("/bin/gemini", Request{Adapter: agent.Gemini, Mode: ModeAsk, Cwd: cwd, Resume: "31882199-0000"})
	var fe *api.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "resume", fe.Field)
	assert.Contains(t, fe.Error(), "loses a session")
}

// acpRun runs the fake ACP agent with script through the real runner, as
// Gemini's ask plan would run.
func acpRun(t *testing.T, ctx context.Context, script string, approver Approver, lim Limits, images ...Image) (api.Result, []Event, string, error) {
	p := acpProtocol.plan(script)
	p.Input.Images = images
	return sessionRun(t, ctx, p, approver, lim)
}

func TestAnACPTurnPutsTheQuestionToTheApproverAndAnswersWithTheAgentsOption(t *testing.T) {
	for _, allow := range []bool{true, false} {
		r := &recorder{answer: func(Question) Decision { return Decision{Allow: allow, Message: "no"} }}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, evs, work, err := acpRun(t, ctx, "turn", r, Limits{})
		cancel()
		require.NoError(t, err)
		require.Len(t, r.asked, 1)
		q := r.asked[0]
		assert.Equal(t, "run_shell_command", q.Tool, "named from Gemini's call id")
		assert.Equal(t, "run_shell_command__run_shell_command_1_0", q.ToolUseID)
		assert.Equal(t, "run_shell_command: echo hello > made.txt", q.Summary)
		assert.JSONEq(t, `{"content":[{"type":"content","content":{"type":"text","text":"(Write a file)"}}],"kind":"execute","title":"echo hello > made.txt"}`,
			string(q.Input), "with no rawInput, what the call says of itself")
		assert.Equal(t, "sess-fake", res.SessionID)
		assert.Equal(t, api.Usage{InputTokens: 20, OutputTokens: 10}, res.Usage)
		assert.Equal(t, 1, res.ToolCalls)
		if allow {
			assert.FileExists(t, filepath.Join(work, "made.txt"))
			assert.Equal(t, "DONE after selected proceed_once", res.Answer)
			assert.Equal(t, []string{api.EventSession, api.EventText, api.EventToolUse, api.EventToolResult, api.EventText, api.EventText, api.EventUsage}, kinds(evs))
		} else {
			assert.NoFileExists(t, filepath.Join(work, "made.txt"))
			assert.Equal(t, "DONE after selected cancel", res.Answer, "a deny is the agent's reject-once option")
			assert.Equal(t, []string{api.EventSession, api.EventText, api.EventToolUse, api.EventText, api.EventText, api.EventUsage}, kinds(evs))
		}
		assert.Equal(t, "You said: Please create the file.", evs[1].Text, "the prompt travelled in session/prompt")
		assert.Equal(t, Event{Kind: api.EventSession, SessionID: "sess-fake", Model: "fake-model"}, evs[0])
	}
}

func TestNoApproverDeniesEveryQuestion(t *testing.T) {
	var a Approver // a nil approver never reaches Run's check: the plan's channel is the session
	c := newACPReading(t, agent.Gemini, func(...Event) {})
	c.t.approver = a
	out := c.permission(context.Background(), c.t, acp.RequestPermissionRequest{ToolCall: acp.ToolCallUpdate{ToolCallID: "x__1", Kind: "execute"},
		Options: []acp.PermissionOption{{OptionID: "ok", Kind: "allow_once"}, {OptionID: "no", Kind: "reject_once"}}})
	assert.Equal(t, acp.RequestPermissionOutcome{Outcome: "selected", OptionID: "no"}, out.Outcome)
}

// A turn that is over ends the agent: ACP agents wait for the next prompt.
// One that ignores stdin's end and SIGTERM is killed after the grace.
func TestAnAgentThatStaysUpAfterItsTurnIsEnded(t *testing.T) {
	r := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pgid int
	plan := Plan{Program: os.Args[0], Dir: t.TempDir(), Env: map[string]string{helperEnv: "acp:linger"},
		Ask: &AskPlan{Channel: AskViaSession}, Session: &SessionPlan{Protocol: ProtocolACP, Adapter: agent.Gemini}}
	start := time.Now()
	res, err := Run(ctx, RunSpec{Plan: plan, Prompt: "x", Approver: r, BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
		Limits: Limits{KillGrace: 300 * time.Millisecond}, OnStart: func(pid, g int) { pgid = g }})
	require.NoError(t, err, "the turn ended as the protocol says; how the child went after is card's doing")
	assert.Equal(t, "DONE after selected proceed_once", res.Answer)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.False(t, proc.GroupAlive(pgid), "the agent's group outlived the run")
}

func TestAnACPErrorResponseFailsTheRunWithItsKind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, _, _, err := acpRun(t, ctx, "error", &recorder{}, Limits{})
	e := runErr(t, err)
	assert.Equal(t, api.KindRateLimit, e.Kind)
	assert.Equal(t, api.KindRateLimit, res.Error.Kind)
	assert.Contains(t, e.Message, "gemini answered session/prompt with error 429: You exceeded your current quota")
}

func TestAnACPAgentPrintingWithoutEndHitsTheOutputLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, _, err := acpRun(t, ctx, "flood", &recorder{}, Limits{MaxOutput: 1 << 20, KillGrace: 300 * time.Millisecond})
	assert.Equal(t, api.KindOutputLimit, runErr(t, err).Kind)
}

// Images travel in session/prompt as ACP image blocks (base64 data), before
// the text; an agent that declares no image support is not sent the task
// without them.
func TestImagesGoInTheACPPromptOnlyToAnAgentThatTakesThem(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nred")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, _, _, err := acpRun(t, ctx, "images", &recorder{}, Limits{}, Image{Name: "red.png", MIME: "image/png", Data: png})
	require.NoError(t, err)
	assert.Equal(t, `image image/png "\x89PNG\r\n\x1a\nred"; text  "Please create the file."`, res.Answer)

	_, _, _, err = acpRun(t, ctx, "noimage", &recorder{}, Limits{}, Image{Name: "red.png", MIME: "image/png", Data: png})
	e := runErr(t, err)
	assert.Equal(t, api.KindBadInput, e.Kind)
	assert.Contains(t, e.Message, "declared no image support over ACP")
}

func TestTheACPPlansCarryTheRequestsImages(t *testing.T) {
	img := Image{Name: "red.png", MIME: "image/png", Data: []byte("\x89PNG\r\n\x1a\nred")}
	for _, id := range []string{agent.Gemini, agent.Copilot} {
		p, err := Build("/bin/"+id, Request{Adapter: id, Mode: ModeAsk, Cwd: "/tmp", Images: []Image{img}})
		require.NoError(t, err, id)
		require.Len(t, p.Input.Images, 1, id)
		assert.True(t, sameBytes(img.Data, p.Input.Images[0].Data), id)
		assert.Empty(t, p.Files, "%s: no private copy, and no --attachment or @path", id)
	}
}
