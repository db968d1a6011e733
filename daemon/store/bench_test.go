package store

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
)

// BenchmarkRunLifecycle is the store's cost per run as the daemon drives it:
// Create, 50 streamed events, Finish. Reported as runs/s.
func BenchmarkRunLifecycle(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "runs.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	payload := json.RawMessage(`{"type":"text","text":"a line of streamed agent output, about this long"}`)
	b.ResetTimer()
	for b.Loop() {
		id := s.NewRunID()
		if err := s.Create(ctx, Run{RunID: id, Adapter: "codex", Task: "do the thing"}); err != nil {
			b.Fatal(err)
		}
		for seq := int64(1); seq <= 50; seq++ {
			if err := s.AppendEvent(ctx, id, seq, "text", payload); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Finish(ctx, id, Finish{Status: StatusSucceeded, Answer: "ok"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
}
