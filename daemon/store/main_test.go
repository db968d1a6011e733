package store

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/card-dev/card/api"
)

// crashWriterEnv, when set to a database path, turns the test binary into a
// writer that records runs in a loop until it is killed; see
// TestAStoreKilledMidWriteReopensIntact.
const crashWriterEnv = "CARD_STORE_TEST_CRASH_WRITER"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashWriterEnv); path != "" {
		os.Exit(crashWriter(path))
	}
	goleak.VerifyTestMain(m)
}

// crashWriter writes complete runs forever, printing each run id only after
// its Finish has committed, so the parent knows exactly which rows must
// survive a SIGKILL.
func crashWriter(path string) int {
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for i := 0; ; i++ {
		id := s.NewRunID()
		if err := s.Create(ctx, api.Run{RunID: id, Adapter: "codex", Task: fmt.Sprintf("task %d", i)}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		for seq := int64(1); seq <= 5; seq++ {
			if err := s.AppendEvent(ctx, id, seq, "text", []byte(`{"text":"hello"}`)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
		}
		if err := s.Finish(ctx, id, Finish{Status: api.StatusSucceeded, Answer: "done " + id}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Println(id)
	}
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
