package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/card-dev/card/rpc"
)

// loopbackHeader carries, on the upgrade of a connection the daemon opens
// to its own /rpc (the ACP front door's), the secret that tells the
// listener which in-process receiver the connection's events go to.
const loopbackHeader = "Card-Loopback"

// loopbacks are the receivers of the daemon's own /rpc connections, by the
// secret each connection's upgrade carries. A secret is 32 random bytes,
// known only to this process, and claimed once, by the upgrade that
// carries it: a client that sends the header with anything else is served
// as every client is. What a receiver changes is only how a subscription's
// events reach the connection that subscribed. Which sessions it may
// follow, the access classes it holds (its Origin's, as on /rpc) and the
// questions it is asked stay the connection's.
type loopbacks struct {
	mu    sync.Mutex
	byKey map[string]rpc.LocalReceiver
	// delivered counts the notifications handed over in process.
	delivered atomic.Int64
}

// add registers fn and returns the secret for the header; drop it once
// the connection is up (or failed).
func (l *loopbacks) add(fn rpc.LocalReceiver) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	key := hex.EncodeToString(b[:])
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey = map[string]rpc.LocalReceiver{}
	}
	l.byKey[key] = func(method string, params json.RawMessage) {
		l.delivered.Add(1)
		fn(method, params)
	}
	return key, nil
}

func (l *loopbacks) drop(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byKey, key)
}

// claim is rpc.ServerConfig.Local: the receiver r's secret names, taken
// out of the table, or nil.
func (l *loopbacks) claim(r *http.Request) rpc.LocalReceiver {
	key := r.Header.Get(loopbackHeader)
	if key == "" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fn := l.byKey[key]
	delete(l.byKey, key)
	return fn
}
