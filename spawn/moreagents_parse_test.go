package spawn

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func TestRealCopilotSuccessBecomesTextSessionAndAnAnswer(t *testing.T) {
	for _, vendor := range []string{"anthropic", "openai"} {
		t.Run(vendor, func(t *testing.T) {
			evs, res := realRun(t, "copilot", "copilot-json-success-"+vendor)
			assert.False(t, res.IsError, "%+v", res.Error)
			want := "PONG from the " + vendor + " stand-in via copilot"
			assert.Equal(t, want, res.Answer)
			assert.Equal(t, want, textOf(evs), "the deltas make the answer, and the whole message is not sent twice")
			assert.Equal(t, 1, res.Turns)
			assert.NotEmpty(t, res.SessionID)
			assert.Equal(t, 1, countKind(evs, EventSession))
			assert.Positive(t, res.DurationMs)
			assert.Zero(t, countKind(evs, EventError))
		})
	}
}

func TestRealCopilot401And429AreClassifiedFromSessionError(t *testing.T) {
	cases := []struct {
		name    string
		kind    string
		retries int
		says    string
	}{
		{"copilot-json-401", KindAuth, 2, "COPILOT_PROVIDER_API_KEY"},
		{"copilot-json-429", KindRateLimit, 5, "429"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, res := realRun(t, "copilot", c.name)
			require.True(t, res.IsError)
			assert.Equal(t, c.kind, res.Error.Kind)
			assert.Contains(t, res.Error.Message, c.says)
			assert.Equal(t, c.retries, countKind(evs, EventRetry), "Copilot's own retries show as retry events")
			assert.Equal(t, 1, countKind(evs, EventError))
			assert.Empty(t, res.Answer)
		})
	}
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

func TestRealDroidSuccessBecomesSessionTextUsageAndResult(t *testing.T) {
	evs, res := realRun(t, "droid", "droid-exec-stream-json-success")
	assert.False(t, res.IsError, "%+v", res.Error)
	assert.Equal(t, []string{EventSession, EventText, EventUsage}, kinds(evs))
	assert.Equal(t, "0b6ac262-e252-479b-b742-908a5f1addfb", res.SessionID)
	assert.Equal(t, "PONG from the anthropic stand-in via droid", res.Answer)
	assert.Equal(t, 1, res.Turns)
	assert.Equal(t, Usage{InputTokens: 10, OutputTokens: 5}, res.Usage)
	assert.EqualValues(t, 559, res.DurationMs)
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

func TestRealPiSuccessBecomesSessionDeltasUsageAndAnAnswer(t *testing.T) {
	for _, vendor := range []string{"anthropic", "openai"} {
		t.Run(vendor, func(t *testing.T) {
			evs, res := realRun(t, "pi", "pi-json-success-"+vendor)
			assert.False(t, res.IsError, "%+v", res.Error)
			want := "PONG from the " + vendor + " stand-in via pi"
			assert.Equal(t, want, res.Answer)
			assert.Equal(t, want, textOf(evs))
			assert.Equal(t, EventSession, evs[0].Kind)
			assert.NotEmpty(t, res.SessionID)
			assert.Equal(t, 1, res.Turns)
			assert.Equal(t, 1, countKind(evs, EventUsage))
			assert.Zero(t, countKind(evs, EventOther), "every Pi event type in a real run is understood")
		})
	}
}

// Pi exits 0 when the API fails; the run must still fail, from stopReason.
func TestRealPi401And429ExitZeroButFailFromStopReason(t *testing.T) {
	for _, c := range []struct{ name, kind string }{{"pi-json-401", KindAuth}, {"pi-json-429", KindRateLimit}} {
		t.Run(c.name, func(t *testing.T) {
			evs, res := realRun(t, "pi", c.name)
			require.True(t, res.IsError, "exit 0 is not success for Pi")
			assert.Equal(t, c.kind, res.Error.Kind)
			assert.Contains(t, res.Error.Message, "exited 0")
			assert.Equal(t, 1, countKind(evs, EventError))
			assert.Empty(t, res.Answer)
		})
	}
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
