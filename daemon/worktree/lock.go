package worktree

import (
	"context"
	"sync"
)

// keyedLock serialises the operations on one key (a session, a repository)
// while letting different keys proceed at once. It holds no state a restart
// would miss: a lock only lives while someone holds or waits for it.
type keyedLock struct {
	mu   sync.Mutex
	keys map[string]*keyEntry
}

type keyEntry struct {
	ch   chan struct{}
	refs int
}

// lock waits for key until ctx ends. The returned func releases it.
func (k *keyedLock) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string]*keyEntry{}
	}
	e := k.keys[key]
	if e == nil {
		e = &keyEntry{ch: make(chan struct{}, 1)}
		k.keys[key] = e
	}
	e.refs++
	k.mu.Unlock()
	select {
	case e.ch <- struct{}{}:
		return func() { <-e.ch; k.release(key, e) }, nil
	case <-ctx.Done():
		k.release(key, e)
		return nil, ctx.Err()
	}
}

func (k *keyedLock) release(key string, e *keyEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(k.keys, key)
	}
}
