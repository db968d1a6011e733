package spawn

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// feedAll runs a stream through a fresh parser of the adapter, checking that
// every event marshals (it goes on the wire as is).
func feedAll(t *testing.T, adapter, stream string, exit ExitInfo) ([]Event, Result) {
	t.Helper()
	a, ok := Lookup(adapter)
	require.True(t, ok)
	p := a.NewParser()
	var evs []Event
	sc := bufio.NewScanner(strings.NewReader(stream))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, ev := range p.Feed(sc.Bytes()) {
			_, err := json.Marshal(ev)
			require.NoError(t, err, "event %+v must marshal", ev)
			evs = append(evs, ev)
		}
	}
	if exit.StdoutBytes == 0 {
		exit.StdoutBytes = int64(len(stream))
	}
	res := p.Finish(exit)
	_, err := json.Marshal(res)
	require.NoError(t, err)
	return evs, res
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

func kinds(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

func TestClaudeSuccessFixtureBecomesSessionTextUsageAndResult(t *testing.T) {
	evs, res := feedAll(t, "claude-code", fixture(t, "claude-stream-success.jsonl"), ExitInfo{})
	assert.Equal(t, []string{EventSession, EventText, EventUsage}, kinds(evs))
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", evs[0].SessionID)
	assert.Equal(t, "claude-opus-4-8[1m]", evs[0].Model)
	assert.Equal(t, "PONG from fake anthropic", evs[1].Text)
	assert.Equal(t, "PONG from fake anthropic", res.Answer)
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", res.SessionID)
	assert.Equal(t, 1, res.Turns)
	assert.EqualValues(t, 195, res.DurationMs)
	require.NotNil(t, res.CostUSD)
	assert.InDelta(t, 0.000175, *res.CostUSD, 1e-12)
	assert.Equal(t, Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
	assert.False(t, res.IsError)
	assert.Nil(t, res.Error)
}

func TestClaudeNotLoggedInIsAnAuthError(t *testing.T) {
	// Captured from claude 2.1.197 with an empty HOME: exit 1, result
	// is_error with subtype success, and the assistant's error field.
	evs, res := feedAll(t, "claude-code", fixture(t, "claude-stream-no-auth.jsonl"), ExitInfo{Code: 1})
	assert.Contains(t, kinds(evs), EventError)
	require.NotNil(t, res.Error)
	assert.Equal(t, KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "Not logged in")
	assert.Contains(t, res.Error.Message, "claude auth login")
	assert.True(t, res.IsError)
}

func TestClaudeErrorKindsComeFromItsOwnSignals(t *testing.T) {
	const init = `{"type":"system","subtype":"init","session_id":"s1","model":"m"}` + "\n"
	cases := []struct {
		name, stream, kind string
	}{
		{"max turns", `{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3,"session_id":"s1"}`, KindMaxTurns},
		{"429 status", `{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: 429 rate limited"}`, KindRateLimit},
		{"401 status", `{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"result":"API Error: 401"}`, KindAuth},
		{"assistant rate_limit", `{"type":"assistant","message":{"content":[{"type":"text","text":"limit"}]},"error":"rate_limit"}` + "\n" +
			`{"type":"result","subtype":"success","is_error":true,"result":"limit"}`, KindRateLimit},
		{"500 status", `{"type":"result","subtype":"error_during_execution","is_error":true,"api_error_status":500,"errors":["boom"]}`, KindAPI},
		{"no result line", `{"type":"assistant","message":{"content":[{"type":"text","text":"half"}]}}`, KindBadOutput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, res := feedAll(t, "claude-code", init+c.stream+"\n", ExitInfo{})
			require.NotNil(t, res.Error)
			assert.Equal(t, c.kind, res.Error.Kind)
			assert.NotEmpty(t, res.Error.Message)
		})
	}
}

func TestClaudeToolsRetriesAndUnknownLinesBecomeEvents(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"retry_delay_ms":1200.5,"error_status":529,"error":"overloaded"}`,
		`{"type":"assistant","message":{"content":[{"type":"text","text":"looking"},{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/a"}}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"file body"}],"is_error":false}]}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":"par"}}}`,
		`{"type":"brand_new_event","x":1}`,
		`not json at all`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"done","session_id":"s9"}`,
	}, "\n")
	evs, res := feedAll(t, "claude-code", stream, ExitInfo{})
	assert.Equal(t, []string{EventRetry, EventText, EventToolUse, EventToolResult, EventText, EventOther, EventOther}, kinds(evs))
	assert.Equal(t, 2, evs[0].Attempt)
	assert.Equal(t, 10, evs[0].MaxAttempts)
	assert.EqualValues(t, 1200, evs[0].DelayMs)
	assert.Equal(t, "overloaded", evs[0].Error)
	assert.Equal(t, "Read", evs[2].Tool.Name)
	assert.JSONEq(t, `{"file_path":"/a"}`, string(evs[2].Tool.Input))
	assert.Equal(t, "t1", evs[3].Tool.ID)
	assert.Equal(t, "file body", evs[3].Output)
	assert.True(t, evs[4].Delta)
	assert.Equal(t, "brand_new_event", evs[5].Type)
	assert.JSONEq(t, `{"type":"brand_new_event","x":1}`, string(evs[5].Raw))
	assert.Equal(t, "not json at all", evs[6].Text)
	assert.Equal(t, 1, res.ToolCalls)
	assert.Equal(t, "done", res.Answer)
	assert.Equal(t, "s9", res.SessionID)
}

func TestCodexSuccessFixtureSurvivesItsWarningItem(t *testing.T) {
	evs, res := feedAll(t, "codex", fixture(t, "codex-exec-json-success.jsonl"), ExitInfo{StderrTail: fixture(t, "codex-exec-json-success.stderr")})
	assert.Equal(t, []string{EventSession, EventError, EventText, EventUsage}, kinds(evs))
	assert.Equal(t, "01a22933-78e1-7402-8487-514b5febcff9", res.SessionID)
	assert.Equal(t, "PONG from fake openai", res.Answer)
	assert.Equal(t, 1, res.Turns)
	assert.Equal(t, Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
	assert.Nil(t, res.CostUSD, "codex reports no cost")
	assert.Nil(t, res.Error, "an item error is a warning, not a failed run")
}

func TestCodexNoPromptExitIsLeftToTheRunner(t *testing.T) {
	// codex-no-auth.stderr: empty stdin, exit 1, nothing on stdout. The
	// parser has no signal of its own, so the runner reports `exit`.
	_, res := feedAll(t, "codex", "", ExitInfo{Code: 1, StderrTail: fixture(t, "codex-no-auth.stderr")})
	assert.Nil(t, res.Error)
}

func TestCodexErrorKindsComeFromTurnFailedAndErrorEvents(t *testing.T) {
	const start = `{"type":"thread.started","thread_id":"th"}` + "\n" + `{"type":"turn.started"}` + "\n"
	cases := []struct {
		name, stream, kind string
		exit               int
	}{
		{"401", `{"type":"error","message":"unexpected status 401 Unauthorized: invalid api key"}` + "\n" + `{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}`, KindAuth, 1},
		{"429", `{"type":"error","message":"Reconnecting... 1/5 (429 Too Many Requests)"}` + "\n" + `{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}`, KindRateLimit, 1},
		{"500", `{"type":"turn.failed","error":{"message":"stream disconnected: 500 Internal Server Error"}}`, KindAPI, 1},
		{"cut short", `{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"hal"}}`, KindBadOutput, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, res := feedAll(t, "codex", start+c.stream+"\n", ExitInfo{Code: c.exit})
			require.NotNil(t, res.Error)
			assert.Equal(t, c.kind, res.Error.Kind)
		})
	}
	// A retried error followed by a completed turn is a success.
	_, res := feedAll(t, "codex", start+`{"type":"error","message":"Reconnecting... 1/5"}`+"\n"+`{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"ok"}}`+"\n"+`{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}`+"\n", ExitInfo{})
	assert.Nil(t, res.Error)
	assert.Equal(t, "ok", res.Answer)
}

func TestCodexToolItemsBecomeToolUseAndResult(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"item.started","item":{"id":"c1","type":"command_execution","command":"ls","status":"in_progress"}}`,
		`{"type":"item.completed","item":{"id":"c1","type":"command_execution","command":"ls","aggregated_output":"a\nb\n","exit_code":0,"status":"completed"}}`,
		`{"type":"item.completed","item":{"id":"m1","type":"mcp_tool_call","server":"fs","tool":"read","arguments":{"p":1},"status":"failed","error":{"message":"denied"}}}`,
		`{"type":"item.completed","item":{"id":"r1","type":"reasoning","text":"thinking"}}`,
		`{"type":"turn.completed","usage":{"input_tokens":3,"cached_input_tokens":1,"output_tokens":2}}`,
	}, "\n")
	evs, res := feedAll(t, "codex", stream, ExitInfo{})
	assert.Equal(t, []string{EventToolUse, EventToolResult, EventToolUse, EventToolResult, EventOther, EventUsage}, kinds(evs))
	assert.Equal(t, "command_execution", evs[0].Tool.Name)
	assert.JSONEq(t, `{"command":"ls"}`, string(evs[0].Tool.Input))
	assert.Equal(t, "a\nb\n", evs[1].Output)
	assert.Equal(t, "fs.read", evs[2].Tool.Name)
	assert.True(t, evs[3].IsError)
	assert.Equal(t, 2, res.ToolCalls)
	assert.Equal(t, Usage{InputTokens: 3, OutputTokens: 2, CachedInputTokens: 1}, res.Usage)
}

func TestGeminiSuccessFixture(t *testing.T) {
	evs, res := feedAll(t, "gemini", fixture(t, "gemini-stream-success.jsonl"), ExitInfo{StderrTail: fixture(t, "gemini-stream-success.stderr")})
	assert.Equal(t, []string{EventSession, EventText, EventUsage}, kinds(evs))
	assert.Equal(t, "gemini-2.5-flash", evs[0].Model)
	assert.True(t, evs[1].Delta)
	assert.Equal(t, "PONG from fake gemini", res.Answer)
	assert.Equal(t, "d6eaf790-d5db-4af0-89a6-e43a4f1031e3", res.SessionID)
	assert.Equal(t, Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
	assert.EqualValues(t, 70, res.DurationMs)
	assert.Equal(t, 1, res.Turns)
	assert.Nil(t, res.Error)
}

func TestGeminiExitCodesAreClassified(t *testing.T) {
	cases := []struct {
		code   int
		stderr string
		kind   string
		says   string
	}{
		{41, fixture(t, "gemini-no-auth.stderr"), KindAuth, "GEMINI_API_KEY"},
		{55, fixture(t, "gemini-untrusted.stderr"), KindUntrustedWorkspace, "--skip-trust"},
		{42, "bad input", KindBadInput, "bad input"},
		{53, "Reached max session turns", KindMaxTurns, "turn limit"},
		{52, "Error in settings.json", KindConfig, "settings"},
	}
	for _, c := range cases {
		_, res := feedAll(t, "gemini", "", ExitInfo{Code: c.code, StderrTail: c.stderr})
		require.NotNil(t, res.Error, "exit %d", c.code)
		assert.Equal(t, c.kind, res.Error.Kind, "exit %d", c.code)
		assert.Contains(t, res.Error.Message, c.says, "exit %d", c.code)
		assert.NotContains(t, res.Error.Message, "\x1b[", "colour codes are stripped")
	}
}

func TestGeminiResultStatusErrorIsClassified(t *testing.T) {
	// Captured from gemini 0.61.0 with the API unreachable: exit 1 and a
	// result with status error.
	evs, res := feedAll(t, "gemini", fixture(t, "gemini-stream-api-error.jsonl"), ExitInfo{Code: 1})
	assert.Equal(t, EventSession, evs[0].Kind)
	require.NotNil(t, res.Error)
	assert.Equal(t, KindAPI, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "fetch failed")

	for stream, kind := range map[string]string{
		`{"type":"result","status":"error","error":{"type":"api","message":"[API Error: 429 RESOURCE_EXHAUSTED quota]"}}`: KindRateLimit,
		`{"type":"result","status":"error","error":{"type":"api","message":"[API Error: 401 API key not valid]"}}`:        KindAuth,
		`{"type":"message","role":"assistant","content":"half","delta":true}`:                                             KindBadOutput,
	} {
		_, res := feedAll(t, "gemini", stream+"\n", ExitInfo{})
		require.NotNil(t, res.Error, stream)
		assert.Equal(t, kind, res.Error.Kind, stream)
	}
}

func TestGeminiToolsAndErrorsBecomeEvents(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"init","session_id":"g1","model":"m"}`,
		`{"type":"message","role":"user","content":"secret task"}`,
		`{"type":"message","role":"assistant","content":"Let me look. ","delta":true}`,
		`{"type":"tool_use","tool_name":"read_file","tool_id":"t1","parameters":{"path":"a"}}`,
		`{"type":"tool_result","tool_id":"t1","status":"error","output":"","error":{"type":"x","message":"nope"}}`,
		`{"type":"error","severity":"warning","message":"loop detected"}`,
		`{"type":"message","role":"assistant","content":"Done.","delta":true}`,
		`{"type":"result","status":"success","stats":{"input_tokens":1,"output_tokens":2,"cached":0,"duration_ms":9,"tool_calls":1}}`,
	}, "\n")
	evs, res := feedAll(t, "gemini", stream, ExitInfo{})
	assert.Equal(t, []string{EventSession, EventText, EventToolUse, EventToolResult, EventError, EventText, EventUsage}, kinds(evs))
	for _, ev := range evs {
		assert.NotContains(t, ev.Text, "secret task", "the echoed prompt is not re-streamed")
	}
	assert.Equal(t, "read_file", evs[2].Tool.Name)
	assert.True(t, evs[3].IsError)
	assert.Equal(t, "nope", evs[3].Output)
	assert.Equal(t, "Let me look. Done.", res.Answer)
	assert.Equal(t, 2, res.Turns)
	assert.Equal(t, 1, res.ToolCalls)
}

// Every fixture file is read by some test: a new capture that no parser
// test reads is a fixture nobody checks.
func TestEveryFixtureIsCoveredByAParserTest(t *testing.T) {
	src, err := os.ReadFile("parse_test.go")
	require.NoError(t, err)
	ents, err := os.ReadDir("testdata")
	require.NoError(t, err)
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		assert.True(t, bytes.Contains(src, []byte(`"`+e.Name()+`"`)), "fixture %s is not used by parse_test.go", e.Name())
	}
}

func TestEventsUseSnakeCaseWireNames(t *testing.T) {
	b, err := json.Marshal(Event{Kind: EventToolResult, SessionID: "s", Tool: &Tool{Name: "n", ID: "i"}, IsError: true, DelayMs: 5, MaxAttempts: 2})
	require.NoError(t, err)
	assert.JSONEq(t, `{"kind":"tool_result","session_id":"s","tool":{"name":"n","id":"i"},"is_error":true,"delay_ms":5,"max_attempts":2}`, string(b))
	cost := 0.5
	code := 41
	b, err = json.Marshal(Result{Answer: "a", CostUSD: &cost, IsError: true, Error: &Failure{Kind: KindAuth, Message: "m", ExitCode: &code}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"answer":"a","turns":0,"tool_calls":0,"duration_ms":0,"total_cost_usd":0.5,"usage":{"input_tokens":0,"output_tokens":0,"cached_input_tokens":0},"is_error":true,"error":{"kind":"auth","message":"m","exit_code":41}}`, string(b))
}

func TestAFieldOfAnUnexpectedShapeDoesNotCostTheLine(t *testing.T) {
	stream := `{"type":"assistant","message":{"content":"a plain string"},"session_id":"s3"}` + "\n" +
		`{"type":"result","subtype":"success","is_error":false,"result":"fine","session_id":"s3"}`
	evs, res := feedAll(t, "claude-code", stream, ExitInfo{})
	assert.NotContains(t, kinds(evs), EventOther)
	assert.Equal(t, "s3", res.SessionID)
	assert.Equal(t, "fine", res.Answer)
}

// realCapture reads a file of e2e/fixtures/cli: real output of the CLIs
// captured against card's loopback stand-ins (see its README.md).
func realCapture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "e2e", "fixtures", "cli", name))
	require.NoError(t, err)
	return string(b)
}

// realRun feeds a captured run (NAME.jsonl or NAME.stdout, NAME.stderr,
// NAME.exit) through the adapter's parser with the exit it really had.
func realRun(t *testing.T, adapter, name string) ([]Event, Result) {
	t.Helper()
	stdout := ""
	for _, ext := range []string{".jsonl", ".stdout"} {
		if b, err := os.ReadFile(filepath.Join("..", "e2e", "fixtures", "cli", name+ext)); err == nil {
			stdout = string(b)
		}
	}
	stderr, _ := os.ReadFile(filepath.Join("..", "e2e", "fixtures", "cli", name+".stderr"))
	exitLine := realCapture(t, name+".exit")
	code, err := strconv.Atoi(strings.Fields(strings.TrimPrefix(strings.TrimSpace(exitLine), "exit="))[0])
	require.NoError(t, err, exitLine)
	return feedAll(t, adapter, stdout, ExitInfo{Code: code, StderrTail: string(stderr), StdoutBytes: int64(len(stdout) + 1)})
}

func countKind(evs []Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func textOf(evs []Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Kind == EventText {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func TestRealCopilotWithoutAnyAuthIsAnAuthError(t *testing.T) {
	_, res := feedAll(t, "copilot", "", ExitInfo{Code: 1, StderrTail: realCapture(t, "copilot-no-auth.stderr")})
	require.True(t, res.IsError)
	assert.Equal(t, KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "COPILOT_GITHUB_TOKEN")
}

func TestCopilotToolsAndUsageBecomeEvents(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"session.start","data":{"sessionId":"s1","selectedModel":"gpt-5","copilotVersion":"1.0.102","producer":"copilot-agent"}}`,
		`{"type":"assistant.turn_start","data":{"turnId":"0"}}`,
		`{"type":"assistant.message","data":{"messageId":"m1","content":"Let me look.","toolRequests":[{"toolCallId":"t1","name":"view"}]}}`,
		`{"type":"tool.execution_start","data":{"toolCallId":"t1","toolName":"view","arguments":{"path":"a.go"}}}`,
		`{"type":"tool.execution_complete","data":{"toolCallId":"t1","success":false,"error":{"message":"denied"}}}`,
		`{"type":"assistant.usage","data":{"model":"gpt-5","inputTokens":10,"outputTokens":4,"cacheReadTokens":2}}`,
		`{"type":"assistant.turn_start","data":{"turnId":"1"}}`,
		`{"type":"assistant.message","data":{"messageId":"m2","content":"Done."}}`,
		`{"type":"brand.new_event","data":{}}`,
		`not json at all`,
		`{"type":"result","sessionId":"s1","exitCode":0,"usage":{"sessionDurationMs":1234}}`,
	}, "\n")
	evs, res := feedAll(t, "copilot", stream, ExitInfo{})
	assert.Equal(t, []string{EventSession, EventText, EventToolUse, EventToolResult, EventUsage, EventText, EventOther, EventOther}, kinds(evs))
	assert.Equal(t, "view", evs[2].Tool.Name)
	assert.JSONEq(t, `{"path":"a.go"}`, string(evs[2].Tool.Input))
	assert.True(t, evs[3].IsError)
	assert.Equal(t, "denied", evs[3].Output)
	assert.False(t, res.IsError)
	assert.Equal(t, "Done.", res.Answer, "the answer is the last thing the agent said")
	assert.Equal(t, 2, res.Turns)
	assert.Equal(t, 1, res.ToolCalls)
	assert.Equal(t, Usage{InputTokens: 10, OutputTokens: 4, CachedInputTokens: 2}, res.Usage)
	assert.EqualValues(t, 1234, res.DurationMs)
}

func TestRealDroid401AndNoAuthAreAuthErrorsWithTheAgentLoopsCause(t *testing.T) {
	evs, res := realRun(t, "droid", "droid-exec-stream-json-401")
	require.True(t, res.IsError)
	assert.Equal(t, KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "invalid x-api-key", "the API's cause, not the closing \"Exec failed\"")
	assert.Equal(t, 2, countKind(evs, EventError))

	_, res = realRun(t, "droid", "droid-no-auth")
	require.True(t, res.IsError)
	assert.Equal(t, KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "FACTORY_API_KEY")
}

func TestDroidToolEventsAndRateLimitsAreClassified(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"system","subtype":"init","session_id":"d1","model":"m"}`,
		`{"type":"tool_call","id":"c1","toolId":"Read","toolName":"Read","parameters":{"file_path":"a"},"session_id":"d1"}`,
		`{"type":"tool_result","id":"c1","toolId":"Read","isError":false,"value":"contents","session_id":"d1"}`,
		`{"type":"error","source":"agent_loop","message":"429 {\"error\":{\"type\":\"rate_limit_error\"}}","session_id":"d1"}`,
		`{"type":"error","source":"cli","message":"Exec failed","session_id":"d1"}`,
	}, "\n")
	evs, res := feedAll(t, "droid", stream, ExitInfo{Code: 1})
	assert.Equal(t, []string{EventSession, EventToolUse, EventToolResult, EventError, EventError}, kinds(evs))
	assert.Equal(t, "contents", evs[2].Output)
	assert.Equal(t, 1, res.ToolCalls)
	require.True(t, res.IsError)
	assert.Equal(t, KindRateLimit, res.Error.Kind)

	_, res = feedAll(t, "droid", `{"type":"system","subtype":"init","session_id":"d2"}`, ExitInfo{Code: 0})
	require.True(t, res.IsError)
	assert.Equal(t, KindBadOutput, res.Error.Kind, "exit 0 without a completion is a cut-short stream")
}

func TestRealPiWithoutAKeyIsAnAuthError(t *testing.T) {
	_, res := realRun(t, "pi", "pi-no-auth")
	require.True(t, res.IsError)
	assert.Equal(t, KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "No API key found for the selected model")
}

func TestPiToolsRetriesAndCostBecomeEvents(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"session","version":3,"id":"p1","cwd":"/w"}`,
		`{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":2000,"errorMessage":"overloaded"}`,
		`{"type":"tool_execution_start","toolCallId":"c1","toolName":"read","args":{"path":"a"}}`,
		`{"type":"tool_execution_end","toolCallId":"c1","toolName":"read","result":{"content":[{"type":"text","text":"hello"}]},"isError":false}`,
		`{"type":"message_end","message":{"role":"assistant","model":"m","content":[{"type":"text","text":"Read it."}],"usage":{"input":7,"output":3,"cacheRead":1,"cost":{"total":0.25}},"stopReason":"stop"}}`,
		`{"type":"compaction_start","reason":"threshold"}`,
	}, "\n")
	evs, res := feedAll(t, "pi", stream, ExitInfo{})
	assert.Equal(t, []string{EventSession, EventRetry, EventToolUse, EventToolResult, EventUsage, EventOther}, kinds(evs))
	assert.Equal(t, 3, evs[1].MaxAttempts)
	assert.Equal(t, "hello", evs[3].Output)
	assert.False(t, res.IsError)
	assert.Equal(t, "Read it.", res.Answer)
	require.NotNil(t, res.CostUSD)
	assert.InDelta(t, 0.25, *res.CostUSD, 1e-9)
	assert.Equal(t, 1, res.ToolCalls)
}

// Every real success capture of Copilot, Droid and Pi: the answer, streamed
// as text once and whole in the result, one session, one turn, no error.
func TestEveryRealSuccessCaptureBecomesItsAnswerWithItsSession(t *testing.T) {
	copilot := func(t *testing.T, _ []Event, res Result) { assert.Positive(t, res.DurationMs) }
	pi := func(t *testing.T, evs []Event, _ Result) {
		assert.Equal(t, EventSession, evs[0].Kind)
		assert.Equal(t, 1, countKind(evs, EventUsage))
		assert.Zero(t, countKind(evs, EventOther), "every Pi event type in a real run is understood")
	}
	cases := []struct {
		adapter, capture, answer string
		check                    func(t *testing.T, evs []Event, res Result)
	}{
		{"copilot", "copilot-json-success-anthropic", "PONG from the anthropic stand-in via copilot", copilot},
		{"copilot", "copilot-json-success-openai", "PONG from the openai stand-in via copilot", copilot},
		{"droid", "droid-exec-stream-json-success", "PONG from the anthropic stand-in via droid", func(t *testing.T, evs []Event, res Result) {
			assert.Equal(t, []string{EventSession, EventText, EventUsage}, kinds(evs))
			assert.Equal(t, "0b6ac262-e252-479b-b742-908a5f1addfb", res.SessionID)
			assert.Equal(t, Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
			assert.EqualValues(t, 559, res.DurationMs)
		}},
		{"pi", "pi-json-success-anthropic", "PONG from the anthropic stand-in via pi", pi},
		{"pi", "pi-json-success-openai", "PONG from the openai stand-in via pi", pi},
	}
	for _, c := range cases {
		t.Run(c.capture, func(t *testing.T) {
			evs, res := realRun(t, c.adapter, c.capture)
			assert.False(t, res.IsError, "%+v", res.Error)
			assert.Equal(t, c.answer, res.Answer)
			assert.Equal(t, c.answer, textOf(evs), "the deltas make the answer, and the whole message is not sent twice")
			assert.Equal(t, 1, countKind(evs, EventSession))
			assert.NotEmpty(t, res.SessionID)
			assert.Equal(t, 1, res.Turns)
			assert.Zero(t, countKind(evs, EventError))
			c.check(t, evs, res)
		})
	}
}

// Every real API-error capture of Copilot and Pi is a failed run of the
// right kind, with the agent's own retries as retry events. Pi exits 0 when
// the API fails; its run must still fail, from stopReason.
func TestEveryRealAPIErrorCaptureIsClassified(t *testing.T) {
	cases := []struct {
		adapter, capture, kind, says string
		retries                      int
	}{
		{"copilot", "copilot-json-401", KindAuth, "COPILOT_PROVIDER_API_KEY", 2},
		{"copilot", "copilot-json-429", KindRateLimit, "429", 5},
		{"pi", "pi-json-401", KindAuth, "exited 0", 0},
		{"pi", "pi-json-429", KindRateLimit, "exited 0", 0},
	}
	for _, c := range cases {
		t.Run(c.capture, func(t *testing.T) {
			evs, res := realRun(t, c.adapter, c.capture)
			require.True(t, res.IsError)
			assert.Equal(t, c.kind, res.Error.Kind)
			assert.Contains(t, res.Error.Message, c.says)
			assert.Equal(t, c.retries, countKind(evs, EventRetry), "the agent's own retries show as retry events")
			assert.Equal(t, 1, countKind(evs, EventError))
			assert.Empty(t, res.Answer)
		})
	}
}
