package rpc

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type benchInvokeParams struct {
	ID             string   `json:"id"`
	Task           string   `json:"task"`
	Cwd            string   `json:"cwd,omitempty"`
	PermissionMode string   `json:"permission_mode,omitempty"`
	AllowedTools   []string `json:"allowed_tools,omitempty"`
	Model          string   `json:"model,omitempty"`
	MaxTurns       int      `json:"max_turns,omitempty"`
	TimeoutSecs    int      `json:"timeout_secs,omitempty"`
	Stream         bool     `json:"stream,omitempty"`
}

// decodeParamsV1 is how params were decoded before: encoding/json's
// Decoder with unknown fields refused, which folds case and lets the last
// duplicate win. Kept here only as the baseline the strict decode is
// measured against.
func decodeParamsV1(raw json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}

// BenchmarkDecodeParams measures the strict decode against the lenient one
// it replaced, side by side, on an agents.invoke's params with a short and
// a 100 KB task, and the frame stream's pass for names given twice:
//
//	go test -run '^$' -bench DecodeParams -benchmem ./rpc/
func BenchmarkDecodeParams(b *testing.B) {
	for _, task := range []struct{ name, text string }{{"short", "Summarise the README."}, {"100KB", strings.Repeat("word ", 20<<10)}} {
		raw, _ := json.Marshal(benchInvokeParams{ID: "claude-code", Task: task.text, Cwd: "/home/u/src/project",
			PermissionMode: "edit", AllowedTools: []string{"Read", "Edit"}, Model: "sonnet", MaxTurns: 4, TimeoutSecs: 120, Stream: true})
		t := reflect.TypeFor[benchInvokeParams]()
		b.Run(task.name+"/v1-lenient", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var p benchInvokeParams
				if err := decodeParamsV1(raw, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(task.name+"/duplicate-pass", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, dup := duplicateParam(raw); dup {
					b.Fatal("no duplicate there")
				}
			}
		})
		b.Run(task.name+"/v2-strict", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var p benchInvokeParams
				if err := decodeParams(raw, t, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
