//go:build !linux

package spawn

import (
	"errors"
	"sync"
	"time"
)

// pollWatch wakes every few milliseconds where there is no inotify.
type pollWatch struct {
	tick *time.Ticker
	done chan struct{}
	once sync.Once
}

func newGrowthWatch(string) (growthWatch, error) {
	return &pollWatch{tick: time.NewTicker(10 * time.Millisecond), done: make(chan struct{})}, nil
}

func (w *pollWatch) Wait() error {
	select {
	case <-w.tick.C:
		return nil
	case <-w.done:
		return errors.New("watch closed")
	}
}

func (w *pollWatch) Close() error {
	w.once.Do(func() { w.tick.Stop(); close(w.done) })
	return nil
}
