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

	"github.com/card-dev/card/api"
)

// feedAll runs a stream through a fresh parser of the adapter, checking that
// every event marshals (it goes on the wire as is).
func feedAll(t *testing.T, adapter, stream string, exit ExitInfo) ([]Event, api.Result) {
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
	// A parser that reads stderr gets the captured stderr's lines too.
	if sp, ok := p.(StderrParser); ok && exit.StderrTail != "" {
		for _, line := range strings.Split(exit.StderrTail, "\n") {
			for _, ev := range sp.FeedStderr([]byte(line)) {
				_, err := json.Marshal(ev)
				require.NoError(t, err, "event %+v must marshal", ev)
				evs = append(evs, ev)
			}
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
	assert.Equal(t, []string{api.EventSession, api.EventText, api.EventUsage}, kinds(evs))
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", evs[0].SessionID)
	assert.Equal(t, "claude-opus-4-8[1m]", evs[0].Model)
	require.Len(t, evs[0].Commands, 26, "init's slash_commands")
	assert.Equal(t, api.SlashCommand{Name: "deep-research"}, evs[0].Commands[0])
	assert.Equal(t, "team-onboarding", evs[0].Commands[25].Name)
	assert.Equal(t, evs[0].Commands, evs[0].Wire().Commands, "the commands reach the wire")
	assert.Equal(t, "PONG from fake anthropic", evs[1].Text)
	assert.Equal(t, "PONG from fake anthropic", res.Answer)
	assert.Equal(t, "942c07c4-8230-4293-9685-338fbcab211c", res.SessionID)
	assert.Equal(t, 1, res.Turns)
	assert.EqualValues(t, 195, res.DurationMs)
	require.NotNil(t, res.CostUSD)
	assert.InDelta(t, 0.000175, *res.CostUSD, 1e-12)
	assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
	assert.False(t, res.IsError)
	assert.Nil(t, res.Error)
}

func TestClaudeNotLoggedInIsAnAuthError(t *testing.T) {
	// Captured from claude 2.1.197 with an empty HOME: exit 1, result
	// is_error with subtype success, and the assistant's error field.
	evs, res := feedAll(t, "claude-code", fixture(t, "claude-stream-no-auth.jsonl"), ExitInfo{Code: 1})
	assert.Contains(t, kinds(evs), api.EventError)
	require.NotNil(t, res.Error)
	assert.Equal(t, api.KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "Not logged in")
	assert.Contains(t, res.Error.Message, "claude auth login")
	assert.True(t, res.IsError)
}

func TestClaudeErrorKindsComeFromItsOwnSignals(t *testing.T) {
	const init = `{"type":"system","subtype":"init","session_id":"s1","model":"m"}` + "\n"
	cases := []struct {
		name, stream, kind string
	}{
		{"max turns", `{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3,"session_id":"s1"}`, api.KindMaxTurns},
		{"429 status", `{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: 429 rate limited"}`, api.KindRateLimit},
		{"401 status", `{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"result":"API Error: 401"}`, api.KindAuth},
		{"assistant rate_limit", `{"type":"assistant","message":{"content":[{"type":"text","text":"limit"}]},"error":"rate_limit"}` + "\n" +
			`{"type":"result","subtype":"success","is_error":true,"result":"limit"}`, api.KindRateLimit},
		{"500 status", `{"type":"result","subtype":"error_during_execution","is_error":true,"api_error_status":500,"errors":["boom"]}`, api.KindAPI},
		{"no result line", `{"type":"assistant","message":{"content":[{"type":"text","text":"half"}]}}`, api.KindBadOutput},
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
	assert.Equal(t, []string{api.EventRetry, api.EventText, api.EventToolUse, api.EventToolResult, api.EventText, api.EventOther, api.EventOther}, kinds(evs))
	assert.Equal(t, 2, evs[0].Attempt)
	assert.Equal(t, 10, evs[0].MaxAttempts)
	assert.EqualValues(t, 1200, evs[0].DelayMs)
	assert.Equal(t, "overloaded (HTTP 529)", evs[0].Error)
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
	assert.Equal(t, []string{api.EventSession, api.EventWarning, api.EventText, api.EventUsage}, kinds(evs))
	assert.Contains(t, evs[1].Text, "Model metadata for `gpt-fake` not found", "the warning says what Codex said")
	assert.Empty(t, evs[1].Error)
	assert.Equal(t, "01a22933-78e1-7402-8487-514b5febcff9", res.SessionID)
	assert.Equal(t, "PONG from fake openai", res.Answer)
	assert.Equal(t, 1, res.Turns)
	assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
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
		{"401", `{"type":"error","message":"unexpected status 401 Unauthorized: invalid api key"}` + "\n" + `{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}`, api.KindAuth, 1},
		{"429", `{"type":"error","message":"Reconnecting... 1/5 (429 Too Many Requests)"}` + "\n" + `{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}`, api.KindRateLimit, 1},
		{"500", `{"type":"turn.failed","error":{"message":"stream disconnected: 500 Internal Server Error"}}`, api.KindAPI, 1},
		{"cut short", `{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"hal"}}`, api.KindBadOutput, 0},
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
	assert.Equal(t, []string{api.EventToolUse, api.EventToolResult, api.EventToolUse, api.EventToolResult, api.EventThinking, api.EventUsage}, kinds(evs))
	assert.Equal(t, "thinking", evs[4].Text)
	assert.False(t, evs[4].Delta, "Codex gives reasoning whole, per item")
	assert.Equal(t, "command_execution", evs[0].Tool.Name)
	assert.JSONEq(t, `{"command":"ls"}`, string(evs[0].Tool.Input))
	assert.Equal(t, "a\nb\n", evs[1].Output)
	assert.Equal(t, "fs.read", evs[2].Tool.Name)
	assert.True(t, evs[3].IsError)
	assert.Equal(t, 2, res.ToolCalls)
	assert.Equal(t, api.Usage{InputTokens: 3, OutputTokens: 2, CachedInputTokens: 1}, res.Usage)
}

func TestGeminiSuccessFixture(t *testing.T) {
	evs, res := feedAll(t, "gemini", fixture(t, "gemini-stream-success.jsonl"), ExitInfo{StderrTail: fixture(t, "gemini-stream-success.stderr")})
	assert.Equal(t, []string{api.EventSession, api.EventText, api.EventUsage}, kinds(evs))
	assert.Equal(t, "gemini-2.5-flash", evs[0].Model)
	assert.True(t, evs[1].Delta)
	assert.Equal(t, "PONG from fake gemini", res.Answer)
	assert.Equal(t, "d6eaf790-d5db-4af0-89a6-e43a4f1031e3", res.SessionID)
	assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
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
		{41, fixture(t, "gemini-no-auth.stderr"), api.KindAuth, "GEMINI_API_KEY"},
		{55, fixture(t, "gemini-untrusted.stderr"), api.KindUntrustedWorkspace, "--skip-trust"},
		{42, "bad input", api.KindBadInput, "bad input"},
		{53, "Reached max session turns", api.KindMaxTurns, "turn limit"},
		{52, "Error in settings.json", api.KindConfig, "settings"},
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
	// result with status error. No HTTP status came back: kind network.
	evs, res := feedAll(t, "gemini", fixture(t, "gemini-stream-api-error.jsonl"), ExitInfo{Code: 1})
	assert.Equal(t, api.EventSession, evs[0].Kind)
	require.NotNil(t, res.Error)
	assert.Equal(t, api.KindNetwork, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "fetch failed")

	for stream, kind := range map[string]string{
		`{"type":"result","status":"error","error":{"type":"api","message":"[API Error: 429 RESOURCE_EXHAUSTED quota]"}}`: api.KindRateLimit,
		`{"type":"result","status":"error","error":{"type":"api","message":"[API Error: 401 API key not valid]"}}`:        api.KindAuth,
		`{"type":"message","role":"assistant","content":"half","delta":true}`:                                             api.KindBadOutput,
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
	assert.Equal(t, []string{api.EventSession, api.EventText, api.EventToolUse, api.EventToolResult, api.EventWarning, api.EventText, api.EventUsage}, kinds(evs))
	for _, ev := range evs {
		assert.NotContains(t, ev.Text, "secret task", "the echoed prompt is not re-streamed")
	}
	assert.Equal(t, "loop detected", evs[4].Text, "a warning-severity error is a warning")
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
	b, err := json.Marshal(Event{Kind: api.EventToolResult, SessionID: "s", Tool: &api.Tool{Name: "n", ID: "i"}, IsError: true, DelayMs: 5, MaxAttempts: 2})
	require.NoError(t, err)
	assert.JSONEq(t, `{"kind":"tool_result","session_id":"s","tool":{"name":"n","id":"i"},"is_error":true,"delay_ms":5,"max_attempts":2}`, string(b))
	cost := 0.5
	code := 41
	b, err = json.Marshal(api.Result{Answer: "a", CostUSD: &cost, IsError: true, Error: &api.RunError{Kind: api.KindAuth, Message: "m", ExitCode: &code}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"answer":"a","turns":0,"tool_calls":0,"duration_ms":0,"total_cost_usd":0.5,"usage":{"input_tokens":0,"output_tokens":0,"cached_input_tokens":0},"is_error":true,"error":{"kind":"auth","message":"m","exit_code":41}}`, string(b))
}

func TestAFieldOfAnUnexpectedShapeDoesNotCostTheLine(t *testing.T) {
	stream := `{"type":"assistant","message":{"content":"a plain string"},"session_id":"s3"}` + "\n" +
		`{"type":"result","subtype":"success","is_error":false,"result":"fine","session_id":"s3"}`
	evs, res := feedAll(t, "claude-code", stream, ExitInfo{})
	assert.NotContains(t, kinds(evs), api.EventOther)
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
func realRun(t *testing.T, adapter, name string) ([]Event, api.Result) {
	t.Helper()
	stdout := ""
	for _, ext := range []string{".jsonl", ".stdout"} {
		if b, err := os.ReadFile(filepath.Join("..", "e2e", "fixtures", "cli", name+ext)); err == nil {
			stdout = string(b)
		}
	}
	stderr, _ := os.ReadFile(filepath.Join("..", "e2e", "fixtures", "cli", name+".stderr"))
	exitLine := realCapture(t, name+".exit")
	code := -1 // "killed": the capture was stopped while the CLI still ran
	if !strings.HasPrefix(exitLine, "killed") {
		var err error
		code, err = strconv.Atoi(strings.Fields(strings.TrimPrefix(strings.TrimSpace(exitLine), "exit="))[0])
		require.NoError(t, err, exitLine)
	}
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
		if e.Kind == api.EventText {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func TestRealCopilotWithoutAnyAuthIsAnAuthError(t *testing.T) {
	_, res := feedAll(t, "copilot", "", ExitInfo{Code: 1, StderrTail: realCapture(t, "copilot-no-auth.stderr")})
	require.True(t, res.IsError)
	assert.Equal(t, api.KindAuth, res.Error.Kind)
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
	assert.Equal(t, []string{api.EventSession, api.EventText, api.EventToolUse, api.EventToolResult, api.EventUsage, api.EventText, api.EventOther, api.EventOther}, kinds(evs))
	assert.Equal(t, "view", evs[2].Tool.Name)
	assert.JSONEq(t, `{"path":"a.go"}`, string(evs[2].Tool.Input))
	assert.True(t, evs[3].IsError)
	assert.Equal(t, "denied", evs[3].Output)
	assert.False(t, res.IsError)
	assert.Equal(t, "Done.", res.Answer, "the answer is the last thing the agent said")
	assert.Equal(t, 2, res.Turns)
	assert.Equal(t, 1, res.ToolCalls)
	assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 4, CachedInputTokens: 2}, res.Usage)
	assert.EqualValues(t, 1234, res.DurationMs)
}

func TestRealDroid401AndNoAuthAreAuthErrorsWithTheAgentLoopsCause(t *testing.T) {
	evs, res := realRun(t, "droid", "droid-exec-stream-json-401")
	require.True(t, res.IsError)
	assert.Equal(t, api.KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "invalid x-api-key", "the API's cause, not the closing \"Exec failed\"")
	assert.Equal(t, 2, countKind(evs, api.EventError))

	_, res = realRun(t, "droid", "droid-no-auth")
	require.True(t, res.IsError)
	assert.Equal(t, api.KindAuth, res.Error.Kind)
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
	assert.Equal(t, []string{api.EventSession, api.EventToolUse, api.EventToolResult, api.EventError, api.EventError}, kinds(evs))
	assert.Equal(t, "contents", evs[2].Output)
	assert.Equal(t, 1, res.ToolCalls)
	require.True(t, res.IsError)
	assert.Equal(t, api.KindRateLimit, res.Error.Kind)

	_, res = feedAll(t, "droid", `{"type":"system","subtype":"init","session_id":"d2"}`, ExitInfo{Code: 0})
	require.True(t, res.IsError)
	assert.Equal(t, api.KindBadOutput, res.Error.Kind, "exit 0 without a completion is a cut-short stream")
}

func TestRealPiWithoutAKeyIsAnAuthError(t *testing.T) {
	_, res := realRun(t, "pi", "pi-no-auth")
	require.True(t, res.IsError)
	assert.Equal(t, api.KindAuth, res.Error.Kind)
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
	assert.Equal(t, []string{api.EventSession, api.EventRetry, api.EventToolUse, api.EventToolResult, api.EventUsage, api.EventOther}, kinds(evs))
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
	copilot := func(t *testing.T, _ []Event, res api.Result) { assert.Positive(t, res.DurationMs) }
	pi := func(t *testing.T, evs []Event, _ api.Result) {
		assert.Equal(t, api.EventSession, evs[0].Kind)
		assert.Equal(t, 1, countKind(evs, api.EventUsage))
		assert.Zero(t, countKind(evs, api.EventOther), "every Pi event type in a real run is understood")
	}
	cases := []struct {
		adapter, capture, answer string
		check                    func(t *testing.T, evs []Event, res api.Result)
	}{
		{"copilot", "copilot-json-success-anthropic", "PONG from the anthropic stand-in via copilot", copilot},
		{"copilot", "copilot-json-success-openai", "PONG from the openai stand-in via copilot", copilot},
		{"droid", "droid-exec-stream-json-success", "PONG from the anthropic stand-in via droid", func(t *testing.T, evs []Event, res api.Result) {
			assert.Equal(t, []string{api.EventSession, api.EventText, api.EventUsage}, kinds(evs))
			assert.Equal(t, "0b6ac262-e252-479b-b742-908a5f1addfb", res.SessionID)
			assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
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
			assert.Equal(t, 1, countKind(evs, api.EventSession))
			assert.NotEmpty(t, res.SessionID)
			assert.Equal(t, 1, res.Turns)
			assert.Zero(t, countKind(evs, api.EventError))
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
		{"copilot", "copilot-json-401", api.KindAuth, "COPILOT_PROVIDER_API_KEY", 2},
		{"copilot", "copilot-json-429", api.KindRateLimit, "429", 5},
		{"pi", "pi-json-401", api.KindAuth, "exited 0", 0},
		{"pi", "pi-json-429", api.KindRateLimit, "exited 0", 0},
	}
	for _, c := range cases {
		t.Run(c.capture, func(t *testing.T) {
			evs, res := realRun(t, c.adapter, c.capture)
			require.True(t, res.IsError)
			assert.Equal(t, c.kind, res.Error.Kind)
			assert.Contains(t, res.Error.Message, c.says)
			assert.Equal(t, c.retries, countKind(evs, api.EventRetry), "the agent's own retries show as retry events")
			assert.Equal(t, 1, countKind(evs, api.EventError))
			assert.Empty(t, res.Answer)
		})
	}
}

// eventsOf keeps the events of one kind.
func eventsOf(evs []Event, kind string) []Event {
	var out []Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// joined is the text a client gets by joining every event of a kind in
// order, pieces and whole messages alike.
func joined(evs []Event, kind string) string {
	var b strings.Builder
	for _, e := range eventsOf(evs, kind) {
		b.WriteString(e.Text)
	}
	return b.String()
}

// Claude Code with --include-partial-messages writes the text twice: as
// text_delta pieces while it is generated and then in the whole assistant
// message. A client that joins every text event must get it once.
func TestClaudePartialMessagesStreamTheTextOnceAsItIsWritten(t *testing.T) {
	stream := fixture(t, "claude-stream-partial.jsonl")
	evs, res := feedAll(t, "claude-code", stream, ExitInfo{})
	texts := eventsOf(evs, api.EventText)
	require.Len(t, texts, strings.Count(stream, `"type":"text_delta"`), "one text event per text_delta, and none for the whole message")
	for _, e := range texts {
		assert.True(t, e.Delta, "every text event of a streamed message is a piece: %+v", e)
	}
	assert.Equal(t, "PONG from fake anthropic", res.Answer)
	assert.Equal(t, res.Answer, joined(evs, api.EventText), "the joined pieces are the answer, exactly once")
	assert.Equal(t, api.EventSession, evs[0].Kind)
	assert.False(t, res.IsError)
}

// A real Claude Code turn with a thinking block and a tool call, then a
// second model message with thinking and the answer (captured against the
// Anthropic stand-in with Thinking and ToolCall, card's read-only argv).
// Thinking streams as thinking pieces, once; a tool's input never streams
// as JSON fragments, the tool_use carries it whole; the answer streams.
func TestClaudeThinkingStreamsOnceAndToolInputArrivesWhole(t *testing.T) {
	stream := fixture(t, "claude-stream-partial-thinking-tool.jsonl")
	evs, res := feedAll(t, "claude-code", stream, ExitInfo{})
	const thought = "The user wants the README. I will read it."
	thinking := eventsOf(evs, api.EventThinking)
	require.NotEmpty(t, thinking)
	for _, e := range thinking {
		assert.True(t, e.Delta, "thinking of a streamed message comes in pieces: %+v", e)
	}
	assert.Equal(t, thought+thought, joined(evs, api.EventThinking), "each message's thinking once, from its pieces")
	assert.NotContains(t, joined(evs, api.EventText), thought, "thinking is never answer text")

	uses := eventsOf(evs, api.EventToolUse)
	require.Len(t, uses, 1)
	assert.Equal(t, "Read", uses[0].Tool.Name)
	assert.Equal(t, "toolu_standin_1", uses[0].Tool.ID)
	assert.JSONEq(t, `{"file_path":"/home/user/project/README.md"}`, string(uses[0].Tool.Input))
	for _, e := range evs {
		assert.NotContains(t, e.Text, "file_path", "no event carries a fragment of the tool's input")
	}
	results := eventsOf(evs, api.EventToolResult)
	require.Len(t, results, 1)
	assert.Contains(t, results[0].Output, "hello")

	for _, e := range eventsOf(evs, api.EventText) {
		assert.True(t, e.Delta, "the answer streams: %+v", e)
	}
	assert.Equal(t, "The README says hello.", joined(evs, api.EventText))
	assert.Equal(t, "The README says hello.", res.Answer)
	assert.Equal(t, 1, res.ToolCalls)
	assert.Equal(t, 2, res.Turns)

	order := strings.Join(kinds(evs), " ")
	assert.Regexp(t, `^session( other)* ((thinking|other) )+tool_use tool_result ((thinking|other) )+(text )+usage$`, order)
}

// Without partial messages (an older capture, or a CLI that ignores the
// flag) the whole message is the text, once.
func TestClaudeWholeMessagesAreTextWhenNothingWasStreamed(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"system","subtype":"init","session_id":"s","model":"m"}`,
		`{"type":"assistant","message":{"id":"msg_1","content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"whole"}]}}`,
		`{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"whole"}`,
	}, "\n")
	evs, _ := feedAll(t, "claude-code", stream, ExitInfo{})
	assert.Equal(t, []string{api.EventSession, api.EventThinking, api.EventText}, kinds(evs))
	assert.False(t, evs[1].Delta)
	assert.False(t, evs[2].Delta)
	assert.Equal(t, "whole", evs[2].Text)
}

// The first 6 s of a real Claude Code run whose API answers 401: its
// retries are retry events that say why, read as a refused credential.
func TestClaude401RetriesAreReadAsRefusedCredentials(t *testing.T) {
	evs, _ := feedAll(t, "claude-code", fixture(t, "claude-stream-401-retrying.jsonl"), ExitInfo{Code: -1})
	retries := eventsOf(evs, api.EventRetry)
	require.Len(t, retries, 4)
	for i, r := range retries {
		assert.Equal(t, i+1, r.Attempt)
		assert.Equal(t, 10, r.MaxAttempts, "Claude's own count, before card bounds it")
		assert.Equal(t, "authentication_failed (HTTP 401)", r.Error)
		assert.Equal(t, api.KindAuth, r.cause)
	}
	assert.EqualValues(t, 508, retries[0].DelayMs)
}

// Every real capture of an agent that could not reach its API at all: the
// run fails with kind network, the agent's own retries are retry events
// read as network, and no error text passes for an answer.
func TestEveryRealUnreachableAPICaptureIsANetworkFailure(t *testing.T) {
	cases := []struct {
		adapter, capture, says string
		retries                int
	}{
		{"claude-code", "claude-stream-unreachable", "Unable to connect to API", 0},
		{"codex", "codex-exec-json-unreachable", "Connection failed", 6},
		{"gemini", "gemini-stream-unreachable", "fetch failed", 9},
		{"copilot", "copilot-json-unreachable", "Could not connect", 5},
		{"pi", "pi-json-unreachable", "Connection error", 3},
		{"droid", "droid-exec-stream-json-unreachable", "Connection error", 0},
	}
	for _, c := range cases {
		t.Run(c.capture, func(t *testing.T) {
			evs, res := realRun(t, c.adapter, c.capture)
			retries := eventsOf(evs, api.EventRetry)
			assert.Len(t, retries, c.retries)
			for _, r := range retries {
				assert.Equal(t, api.KindNetwork, r.cause, "%+v", r)
				assert.NotEmpty(t, r.Error)
			}
			assert.Empty(t, eventsOf(evs, api.EventText), "no text: the agent never heard from the model")
			assert.Empty(t, res.Answer)
			if res.Error == nil {
				// Killed while still retrying: the runner decides (the
				// retry guard), not the parser.
				require.Contains(t, []string{"gemini", "codex"}, c.adapter)
				return
			}
			assert.Equal(t, api.KindNetwork, res.Error.Kind, res.Error.Message)
			assert.Contains(t, res.Error.Message, c.says)
		})
	}
}

// Real retry announcements of a 429, from stdout (Codex's "Reconnecting...
// n/m", Pi's auto_retry_start) and from stderr (Gemini's "Attempt n failed
// with status 429"): attempt, the agent's bound where it says one, and the
// API's own message.
func TestEveryRealRetryAnnouncementIsARetryEvent(t *testing.T) {
	cases := []struct {
		adapter, capture, says string
		attempts               []int
		max                    int
	}{
		{"codex", "codex-exec-json-429-reconnecting", "429 Too Many Requests", []int{1, 2, 3}, 3},
		{"gemini", "gemini-stream-429-retrying", "HTTP 429: You exceeded your current quota", []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, 0},
		// With a wait named by the API, Gemini writes another notice,
		// over two lines; its third attempt was its last (maxAttempts 3).
		{"gemini", "gemini-stream-429-waiting", "You exceeded your current quota, please check your plan and billing details. (card stand-in)", []int{1, 2}, 0},
		{"pi", "pi-json-429-retrying", "429", []int{1, 2, 3}, 3},
	}
	for _, c := range cases {
		t.Run(c.capture, func(t *testing.T) {
			evs, res := realRun(t, c.adapter, c.capture)
			retries := eventsOf(evs, api.EventRetry)
			require.Len(t, retries, len(c.attempts))
			for i, r := range retries {
				assert.Equal(t, c.attempts[i], r.Attempt)
				assert.Equal(t, c.max, r.MaxAttempts)
				assert.Equal(t, api.KindRateLimit, r.cause)
				assert.Contains(t, r.Error, c.says)
			}
			if res.Error != nil {
				assert.Equal(t, api.KindRateLimit, res.Error.Kind, res.Error.Message)
			}
			assert.Empty(t, res.Answer)
		})
	}
	evs, res := realRun(t, "gemini", "gemini-stream-429-waiting")
	retries := eventsOf(evs, api.EventRetry)
	assert.Equal(t, []int64{5681, 11216}, []int64{retries[0].DelayMs, retries[1].DelayMs}, "the wait Gemini announced")
	assert.NotContains(t, retries[0].Error, "Retrying", "the API's words only")
	require.NotNil(t, res.Error)
	assert.Equal(t, 173, *exitOf(t, "gemini-stream-429-waiting"))
}

// exitOf is a capture's exit status, nil when it was killed.
func exitOf(t *testing.T, name string) *int {
	line := realCapture(t, name+".exit")
	if strings.HasPrefix(line, "killed") {
		return nil
	}
	n, err := strconv.Atoi(strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "exit="))[0])
	require.NoError(t, err)
	return &n
}

func TestCodexReconnectLinesAreRetriesAndTheRestAreErrors(t *testing.T) {
	cases := []struct {
		line      string
		retry     bool
		attempt   int
		max       int
		cause     string
		unbounded bool
	}{
		{"Reconnecting... 2/5 (unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1:38317/v1/responses)", true, 2, 5, api.KindAuth, false},
		{"Reconnecting... 1/3 (exceeded retry limit, last status: 429 Too Many Requests)", true, 1, 3, api.KindRateLimit, false},
		{"Reconnecting... waiting for network (Connection failed: error sending request)", true, 0, 0, api.KindNetwork, true},
		{"Reconnecting... 1/5 (stream disconnected before completion: 500 Internal Server Error)", true, 1, 5, api.KindAPI, false},
		{"exceeded retry limit, last status: 429 Too Many Requests", false, 0, 0, "", false},
	}
	for _, c := range cases {
		ev, ok := codexRetry(c.line)
		require.Equal(t, c.retry, ok, c.line)
		if !ok {
			continue
		}
		assert.Equal(t, c.attempt, ev.Attempt, c.line)
		assert.Equal(t, c.max, ev.MaxAttempts, c.line)
		assert.Equal(t, c.cause, ev.cause, c.line)
		assert.Equal(t, c.unbounded, ev.unbounded, c.line)
		assert.NotContains(t, ev.Error, "Reconnecting", "the reason, without Codex's prefix")
	}
}

func TestErrorMessagesAreClassifiedWithNetworkAsTheAPINeverAnswering(t *testing.T) {
	cases := map[string]string{
		"API Error: Unable to connect to API (ConnectionRefused)": api.KindNetwork,
		"exception TypeError: fetch failed sending request":       api.KindNetwork,
		"Connection error.": api.KindNetwork,
		"Could not connect to local model provider at http://127.0.0.1:9.":                               api.KindNetwork,
		"Connection failed: error sending request":                                                       api.KindNetwork,
		"unexpected status 401 Unauthorized: Incorrect API key provided, url: http://127.0.0.1:45123/v1": api.KindAuth,
		`429 {"error":{"message":"Number of request tokens has exceeded your per-minute rate limit"}}`:   api.KindRateLimit,
		"stream disconnected before completion: 500 Internal Server Error":                               api.KindAPI,
		"connection error after the API answered 503 Service Unavailable":                                api.KindAPI,
		"Full report available at: /tmp/gemini-client-error-2026-11-30T23-22-40-442Z.json: fetch failed": api.KindNetwork,
	}
	for msg, kind := range cases {
		assert.Equal(t, kind, classifyMessage(msg), msg)
	}
}

func TestGeminiStderrRetryNoticesBecomeRetryEvents(t *testing.T) {
	p := newGeminiParser()
	evs := p.FeedStderr([]byte(`Attempt 2 failed with status 401. Retrying with backoff... _ApiError: {"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`))
	require.Len(t, evs, 1)
	assert.Equal(t, api.EventRetry, evs[0].Kind)
	assert.Equal(t, 2, evs[0].Attempt)
	assert.Equal(t, api.KindAuth, evs[0].cause)
	assert.Equal(t, "HTTP 401: Request had invalid authentication credentials.", evs[0].Error)

	evs = p.FeedStderr([]byte("\x1b[33mAttempt 1 failed. Retrying with backoff... Error: exception TypeError: fetch failed sending request\x1b[0m"))
	require.Len(t, evs, 1)
	assert.Equal(t, api.KindNetwork, evs[0].cause)
	assert.Equal(t, "exception TypeError: fetch failed sending request", evs[0].Error)

	assert.Empty(t, p.FeedStderr([]byte("    at throwErrorIfNotOK (file:///usr/lib/node_modules/@google/gemini-cli/bundle/chunk.js:1:1)")))
	assert.Empty(t, p.FeedStderr([]byte("Ripgrep is not available. Falling back to GrepTool.")))
}

// Copilot's turn_retry says only "rate_limit" or "transient_auth_error";
// the retry event carries the status and the API's own words from the call
// failure before it.
func TestCopilotRetriesCarryTheAPIsOwnWords(t *testing.T) {
	cases := []struct{ capture, says, cause string }{
		{"copilot-json-401", "HTTP 401: invalid x-api-key", api.KindAuth},
		{"copilot-json-429", "HTTP 429: Number of request tokens has exceeded your per-minute rate limit (card stand-in).", api.KindRateLimit},
	}
	for _, c := range cases {
		evs, _ := realRun(t, "copilot", c.capture)
		retries := eventsOf(evs, api.EventRetry)
		require.NotEmpty(t, retries, c.capture)
		for _, r := range retries {
			assert.Equal(t, c.says, r.Error, c.capture)
			assert.Equal(t, c.cause, r.cause, c.capture)
		}
	}
}

// Claude Code reports a failed API call as subtype "success" with is_error
// true; is_error decides, whatever the subtype says, and the error text is
// never the answer.
func TestAnIsErrorResultIsNeverASuccessWhateverItsSubtype(t *testing.T) {
	for _, subtype := range []string{"success", "", "something_new"} {
		line := `{"type":"result","subtype":"` + subtype + `","is_error":true,"result":"API Error: 500 boom","session_id":"s"}`
		_, res := feedAll(t, "claude-code", line+"\n", ExitInfo{Code: 1})
		require.True(t, res.IsError, subtype)
		require.NotNil(t, res.Error, subtype)
		assert.Equal(t, api.KindAPI, res.Error.Kind, subtype)
		assert.Equal(t, "API Error: 500 boom", res.Error.Message)
		assert.Empty(t, res.Answer, "an error message is not an answer")
	}
}

// Claude Code 2.1.197 stopped by --max-budget-usd ends with subtype
// error_max_budget_usd and a usage of zeros; the run's tokens are only in
// modelUsage, and the parser keeps them.
func TestClaudesBudgetStopIsBudgetWithTheTokensOfItsModelUsage(t *testing.T) {
	evs, res := feedAll(t, "claude-code", fixture(t, "claude-stream-budget.jsonl"), ExitInfo{Code: 1})
	require.True(t, res.IsError)
	assert.Equal(t, api.KindBudget, res.Error.Kind)
	assert.Equal(t, "Reached maximum budget ($0.01)", res.Error.Message)
	assert.Equal(t, api.Usage{InputTokens: 1_000_000, OutputTokens: 1000}, res.Usage)
	require.NotNil(t, res.CostUSD)
	assert.InDelta(t, 3.015, *res.CostUSD, 1e-9)
	assert.Equal(t, api.EventUsage, evs[len(evs)-1].Kind)
}

// A stream a token a line is most of what Claude Code prints: a text delta
// costs the text's own string and nothing else. Two allocations a line
// more (the decoded line, the event's slice) made the garbage collector
// the largest cost of a 5,000-line run (docs/performance.md, round five).
func TestAClaudeTextDeltaLineAllocatesOnlyItsText(t *testing.T) {
	const n = 200
	lines := make([][]byte, n)
	for i := range lines {
		lines[i] = []byte(`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"token number ` +
			strconv.Itoa(i) + ` of a long streamed answer"}},"session_id":"993febd9-67ce-473e-92fe-5108d7030f4d","parent_tool_use_id":null,"uuid":"6bf0a57b-1414-4d22-9dc8-97e194b6ef11"}`)
	}
	p := newClaudeParser()
	var text strings.Builder
	i := 0
	allocs := testing.AllocsPerRun(n-1, func() {
		evs := p.Feed(lines[i%n])
		i++
		if len(evs) == 1 {
			text.WriteString(evs[0].Text)
		}
	})
	assert.Contains(t, text.String(), "token number 7 of a long streamed answer")
	if raceDetector {
		t.Logf("%.1f allocations a line under the race detector, which adds its own; counted without it", allocs)
		return
	}
	assert.LessOrEqual(t, allocs, 1.0)
}
