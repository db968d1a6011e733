package spawn

import "testing"

// Fuzz tests for the Copilot, Droid and Pi parsers; the committed corpora in
// testdata/fuzz hold the real captures of e2e/fixtures/cli.

func FuzzCopilotParser(f *testing.F) {
	fuzzParser(f, "copilot",
		`{"type":"session.start","data":{"sessionId":"s","selectedModel":"m"}}`,
		`{"type":"assistant.message_delta","data":{"messageId":"m","deltaContent":"x"}}`,
		`{"type":"tool.execution_complete","data":{"toolCallId":"t","success":false,"error":{"message":"x"},"result":{"content":1}}}`,
		`{"type":"session.error","data":{"errorType":"rate_limit","message":"429","statusCode":429}}`,
		`{"type":"result","sessionId":"s","exitCode":1,"usage":{"sessionDurationMs":"x"}}`)
}

func FuzzDroidParser(f *testing.F) {
	fuzzParser(f, "droid",
		`{"type":"system","subtype":"init","session_id":"d","model":"m"}`,
		`{"type":"tool_result","id":"c","value":{"a":[1,2]},"isError":true}`,
		`{"type":"error","source":"agent_loop","message":"401 {}"}`,
		`{"type":"completion","finalText":"x","numTurns":2,"usage":{"input_tokens":"NaN"}}`)
}

func FuzzPiParser(f *testing.F) {
	fuzzParser(f, "pi",
		`{"type":"session","id":"p"}`,
		`{"type":"message_update","assistantMessageEvent":{"type":"text_delta","delta":"x"}}`,
		`{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"a"}],"stopReason":"error","errorMessage":"429"}}`,
		`{"type":"tool_execution_end","toolCallId":"c","result":"plain","isError":true}`)
}
