package store

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/card-dev/card/api"
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
		if err := s.Create(ctx, api.Run{RunID: id, Adapter: "codex", Task: "do the thing"}); err != nil {
			b.Fatal(err)
		}
		for seq := int64(1); seq <= 50; seq++ {
			if err := s.AppendEvent(ctx, id, seq, "text", payload); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Finish(ctx, id, Finish{Status: api.StatusSucceeded, Answer: "ok"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
}

// BenchmarkChattyRunEvents is what a chatty run asks of the store: 5,000
// text deltas of an agents.event's size, in the daemon's batches of 512.
// Reported as µs per event.
func BenchmarkChattyRunEvents(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "runs.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	payload := json.RawMessage(`{"run_id":"run_01KBQ3Z5Y9T8W0X1V2N3M4P5Q6","seq":1234,"kind":"text","session_id":"993febd9-67ce-473e-92fe-5108d7030f4d","text":"PONG from fake anthropic","delta":true}`)
	const events, batch = 5000, 512
	b.ResetTimer()
	for b.Loop() {
		id := s.NewRunID()
		if err := s.Create(ctx, api.Run{RunID: id, Adapter: "claude-code", Status: api.StatusRunning}); err != nil {
			b.Fatal(err)
		}
		for first := 1; first <= events; first += batch {
			var evs []NewEvent
			for seq := first; seq < first+batch && seq <= events; seq++ {
				evs = append(evs, NewEvent{Seq: int64(seq), Kind: "text", Payload: payload})
			}
			if err := s.AppendEvents(ctx, id, evs); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*events), "µs/event")
}
