package runs

import (
	"sort"
	"sync"
	"time"

	"github.com/card-dev/card/api"
)

// The rate-limit windows the agents reported, kept in memory: the latest
// report of each window per adapter, with the run and the time it came
// in. In memory, not read back from the event history, because a window
// is the account's state at one moment (a five-hour window has moved on
// within minutes), a figure from before a restart would read as current,
// and finding the latest rate_limit event per adapter in the history would
// scan every stored event on each usage.summary and health call. After a
// restart the book is empty until an agent reports again, and says so by
// having no entry.

// maxWindowsPerAdapter bounds what one adapter's reports can make the
// daemon keep: the CLIs name two to five windows; a CLI that printed a new
// name on every line must not grow the book.
const maxWindowsPerAdapter = 16

type rateLimitBook struct {
	mu sync.Mutex
	by map[string]map[string]api.RateLimitSeen // adapter → window → latest
}

func (b *rateLimitBook) note(adapter, runID string, ws []api.RateLimitWindow, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil {
		b.by = map[string]map[string]api.RateLimitSeen{}
	}
	of := b.by[adapter]
	if of == nil {
		of = map[string]api.RateLimitSeen{}
		b.by[adapter] = of
	}
	for _, w := range ws {
		if _, known := of[w.Window]; !known && len(of) >= maxWindowsPerAdapter {
			continue
		}
		of[w.Window] = api.RateLimitSeen{Adapter: adapter, RateLimitWindow: w, RunID: runID, SeenAt: now.UTC().Truncate(time.Millisecond)}
	}
}

// list is every window kept, or one adapter's ("" for all), in adapter
// then window order; never nil.
func (b *rateLimitBook) list(adapter string) []api.RateLimitSeen {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []api.RateLimitSeen{}
	for a, of := range b.by {
		if adapter != "" && a != adapter {
			continue
		}
		for _, s := range of {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Adapter != out[j].Adapter {
			return out[i].Adapter < out[j].Adapter
		}
		return out[i].Window < out[j].Window
	})
	return out
}

// NoteRateLimits records windows an agent reported in a run (a one-shot
// run's rate_limit events come here by themselves; a session's turns call
// it for theirs).
func (m *Manager) NoteRateLimits(adapter, runID string, ws []api.RateLimitWindow) {
	if len(ws) > 0 {
		m.rateLimits.note(adapter, runID, ws, time.Now())
	}
}

// RateLimits is the latest report of each window, of one adapter or ("")
// of all: what usage.summary and health show.
func (m *Manager) RateLimits(adapter string) []api.RateLimitSeen { return m.rateLimits.list(adapter) }
