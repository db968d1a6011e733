package rpc

import (
	"encoding/json"
	"strings"
	"testing"
)

// The stream's own work per request, apart from the WebSocket: decoding the
// envelope (and checking params for names given twice) and building the
// answer around an encoded result.
//
//	go test -run '^$' -bench 'ParseRequest|ResultAnswer' -benchmem ./rpc/
func BenchmarkParseRequest(b *testing.B) {
	p, _ := json.Marshal(benchInvokeParams{ID: "claude-code", Task: strings.Repeat("word ", 20<<10), Cwd: "/home/u/src/project",
		PermissionMode: "edit", AllowedTools: []string{"Read", "Edit"}, Model: "sonnet", MaxTurns: 4, TimeoutSecs: 120, Stream: true})
	for _, f := range []struct{ name, frame string }{
		{"no-params", `{"jsonrpc":"2.0","id":17,"method":"agents.detect"}`},
		{"small-params", `{"jsonrpc":"2.0","id":17,"method":"agents.detect","params":{"include_health":false}}`},
		{"100KB-params", `{"jsonrpc":"2.0","id":17,"method":"agents.invoke","params":` + string(p) + `}`},
	} {
		b.Run(f.name, func(b *testing.B) {
			frame := []byte(f.frame)
			s := &frameStream{}
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if req, e := s.parseRequest(frame); req == nil || e != nil {
					b.Fatal("not parsed")
				}
			}
		})
	}
}

func BenchmarkResultAnswer(b *testing.B) {
	result := make([]byte, 1300)
	for i := range result {
		result[i] = 'x'
	}
	id := []byte("17")
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendResultAnswer(buf[:0], id, result)
	}
}
