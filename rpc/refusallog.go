package rpc

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults of the refusal log's rate: the first DefaultRefusalLogBurst
// refusals of each reason in a window of DefaultRefusalLogWindow are
// logged, the rest counted and summed up in one line when the window ends.
const (
	DefaultRefusalLogBurst  = 10
	DefaultRefusalLogWindow = time.Minute
)

// maxLoggedField is how much of an attacker-supplied string (Host, Origin,
// path) a refusal line keeps.
const maxLoggedField = 128

// refusalLog writes the "refused websocket upgrade" lines at a bounded
// rate. Refusals cost an attacker nothing (no token is needed to be
// refused), so one line per refusal let anyone on the machine, or any web
// page, fill the disk: hundreds of megabytes in seconds with long Host and
// Origin headers. The first few of each reason in a window are logged as
// before, so an operator still sees who and why; the rest are counted, and
// the count is logged once when the window ends.
type refusalLog struct {
	log    *zap.Logger
	burst  int
	window time.Duration

	mu sync.Mutex
	// start is when the current window began; zero when none is open.
	start time.Time
	// logged counts this window's lines by reason; suppressed the refusals
	// not logged, by reason. Reasons are the gate's own texts, a small
	// fixed set: nothing an attacker sends becomes a key.
	logged     map[string]int
	suppressed map[string]int
	timer      *time.Timer
	closed     bool
}

func newRefusalLog(log *zap.Logger, burst int, window time.Duration) *refusalLog {
	return &refusalLog{log: log, burst: burst, window: window, logged: map[string]int{}, suppressed: map[string]int{}}
}

// refused logs or counts one refused upgrade. The log names who and why,
// never the token: Authorization and the subprotocols are not logged.
func (l *refusalLog) refused(r *http.Request, status int, reason string) {
	if !l.take(reason) {
		return
	}
	l.log.Info("refused websocket upgrade",
		zap.Int("status", status), zap.String("reason", reason),
		zap.String("remote", loggable(r.RemoteAddr)), zap.String("host", loggable(r.Host)),
		zap.String("origin", loggable(r.Header.Get("Origin"))), zap.String("path", loggable(r.URL.Path)))
}

// closedPending logs or counts one connection closed before its upgrade
// finished, to make room for a newer one.
func (l *refusalLog) closedPending(remote string) {
	const reason = "closed: too many connections had not finished their upgrade; the oldest made room"
	if l.take(reason) {
		l.log.Info("closed a connection that had not finished its upgrade",
			zap.String("reason", reason), zap.String("remote", loggable(remote)))
	}
}

// take reports whether one more line of reason may be logged in this
// window, and counts it as suppressed when not.
func (l *refusalLog) take(reason string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.start.IsZero() || now.Sub(l.start) >= l.window {
		l.flushLocked()
		l.start = now
	}
	if l.logged[reason] >= l.burst {
		l.suppressed[reason]++
		if l.timer == nil && !l.closed {
			l.timer = time.AfterFunc(l.window-now.Sub(l.start), l.flush)
		}
		return false
	}
	l.logged[reason]++
	return true
}

// flush ends the window: the count of what was not logged, in one line.
func (l *refusalLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *refusalLog) flushLocked() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	total := 0
	for _, n := range l.suppressed {
		total += n
	}
	if total > 0 {
		l.log.Warn("refused websocket upgrades not logged one by one",
			zap.Int("suppressed", total), zap.Any("by_reason", l.suppressed),
			zap.Duration("window", l.window), zap.Int("logged_per_reason", l.burst),
			zap.Time("since", l.start))
	}
	l.start = time.Time{}
	l.logged = map[string]int{}
	l.suppressed = map[string]int{}
}

// close logs what is still counted and stops the timer, at shutdown.
func (l *refusalLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.flushLocked()
}

// loggable cuts an attacker-supplied string short and escapes what is not
// printable ASCII (control characters, invalid UTF-8, quotes, backslashes),
// so that a log line neither grows with the input nor can be made to look
// like another line in a terminal or a non-JSON log viewer. Plain short
// values (a Host, an Origin) stay as they were.
func loggable(s string) string {
	cut := len(s) > maxLoggedField
	if cut {
		// A rune split by the cut is escaped byte by byte below, like any
		// other invalid UTF-8.
		s = s[:maxLoggedField]
	} else if plain(s) {
		return s
	}
	q := strconv.QuoteToASCII(s)
	q = q[1 : len(q)-1]
	if cut {
		q += "…(cut)"
	}
	return q
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
