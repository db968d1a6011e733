package spawn

import (
	"bytes"
	"encoding/json"
	"testing"
)

// fuzzParser feeds arbitrary bytes, line by line, through a fresh parser:
// it must never panic, every event must marshal (it goes on the wire), and
// what it keeps must stay bounded whatever the input.
func fuzzParser(f *testing.F, adapter string, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, data []byte, code int) {
		a, _ := Lookup(adapter)
		p := a.NewParser()
		for _, line := range bytes.Split(data, []byte("\n")) {
			for _, ev := range p.Feed(line) {
				b, err := json.Marshal(ev)
				if err != nil {
					t.Fatalf("event does not marshal: %v (%+v)", err, ev)
				}
				if len(b) > 3*len(data)+maxRaw {
					t.Fatalf("event of %d bytes from %d bytes of input", len(b), len(data))
				}
			}
		}
		res := p.Finish(ExitInfo{Code: code % 256, StderrTail: string(data), StdoutBytes: int64(len(data))})
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("result does not marshal: %v", err)
		}
		if len(res.Answer) > maxAnswer {
			t.Fatalf("answer of %d bytes is over the bound", len(res.Answer))
		}
	})
}

func FuzzClaudeParser(f *testing.F) {
	fuzzParser(f, "claude-code",
		`{"type":"system","subtype":"init","session_id":"s","model":"m"}`,
		`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"Read","input":{"a":1}}]},"error":"rate_limit"}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}}`,
		`{"type":"result","subtype":"error_max_turns","is_error":true,"api_error_status":429,"total_cost_usd":1}`)
}

func FuzzCodexParser(f *testing.F) {
	fuzzParser(f, "codex",
		`{"type":"thread.started","thread_id":"t"}`,
		`{"type":"item.completed","item":{"id":"c","type":"command_execution","exit_code":1}}`,
		`{"type":"turn.failed","error":{"message":"401"}}`)
}

func FuzzGeminiParser(f *testing.F) {
	fuzzParser(f, "gemini",
		`{"type":"init","session_id":"g","model":"m"}`,
		`{"type":"tool_result","tool_id":"t","status":"error","error":{"message":"x"}}`,
		`{"type":"result","status":"error","error":{"type":"api","message":"429"}}`)
}

// The committed corpora of the Copilot, Droid and Pi targets in
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
