package rpc

import "testing"

// The stream's own work per request, apart from the WebSocket: decoding the
// envelope and building the answer around an encoded result.
//
//	go test -run '^$' -bench 'ParseRequest|ResultAnswer' -benchmem ./rpc/
func BenchmarkParseRequest(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":17,"method":"agents.detect","params":{"include_health":false}}`)
	s := &frameStream{}
	b.ReportAllocs()
	for b.Loop() {
		if req, e := s.parseRequest(frame); req == nil || e != nil {
			b.Fatal("not parsed")
		}
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
