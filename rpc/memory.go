package rpc

import (
	"runtime/debug"
	"sync"
	"time"
)

// largeMessage is the size from which a frame read or written counts as
// large: a few of them at once (a 3 MiB task, a long run's events) make the
// heap grow by tens of megabytes.
const largeMessage = 1 << 20

// releaseQuiet is how long after the last large message the memory it
// needed is handed back.
const releaseQuiet = 2 * time.Second

// memoryRelease hands the memory of a burst of large messages back to the
// OS once the burst is over. Reading, decoding and answering a 3 MiB frame
// allocates about 20 MiB, all garbage a moment later; but an idle daemon
// allocates nothing, so no collection runs to free it, and the runtime
// returns freed pages only slowly: sixteen such frames left the daemon at
// 171 MiB (idle: 18 MiB) for as long as it stayed idle. A forced collection
// and release once the burst has been quiet for releaseQuiet costs a few
// milliseconds per burst and nothing at all without large messages.
type memoryRelease struct {
	quiet time.Duration
	free  func()

	mu     sync.Mutex
	last   time.Time
	timer  *time.Timer
	closed bool
}

func newMemoryRelease() *memoryRelease {
	return &memoryRelease{quiet: releaseQuiet, free: debug.FreeOSMemory}
}

// note records a large message and arms the release.
func (m *memoryRelease) note() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.last = time.Now()
	if m.timer == nil {
		m.timer = time.AfterFunc(m.quiet, m.fire)
	}
}

func (m *memoryRelease) fire() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	if wait := m.quiet - time.Since(m.last); wait > 0 {
		m.timer.Reset(wait) // the burst goes on
		m.mu.Unlock()
		return
	}
	m.timer = nil
	m.mu.Unlock()
	m.free()
}

// close disarms it for good (at shutdown).
func (m *memoryRelease) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
}
