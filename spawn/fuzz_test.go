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
