package detect

import (
	"context"
	"reflect"
	"sync/atomic"

	"github.com/card-dev/card/api"
)

// detectRun is how one detection learns versions.
type detectRun struct {
	// quick answers from the cache or the install's files where they
	// tell, and runs only what neither does.
	quick bool
	// slots, when set, bounds the probes running at once.
	slots chan struct{}
	// session collects the cache entries this detection used or learned.
	session *cacheSession
	// unconfirmed is set when an answer came without running the install,
	// so a probe must confirm it.
	unconfirmed atomic.Bool
}

func (d *Detector) newRun(quick bool, slots int) *detectRun {
	r := &detectRun{quick: quick}
	if slots > 0 {
		r.slots = make(chan struct{}, slots)
	}
	if d.cache != nil {
		r.session = d.cache.session()
	}
	return r
}

// answered notes an answer given without running the install; e is its
// cache entry when it came from the cache.
func (r *detectRun) answered(e cacheEntry) {
	r.unconfirmed.Store(true)
	if e.Adapter != "" {
		r.learned(e)
	}
}

// learned keeps e in the cache this detection leaves behind.
func (r *detectRun) learned(e cacheEntry) {
	if r.session != nil {
		r.session.keep(e)
	}
}

func (r *detectRun) acquire(ctx context.Context) bool {
	if r.slots == nil {
		return true
	}
	select {
	case r.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *detectRun) release() {
	if r.slots != nil {
		<-r.slots
	}
}

// commit leaves this detection's entries in the cache file.
func (r *detectRun) commit() {
	if r.session != nil {
		r.session.commit()
	}
}

// confirm runs every install again, one probe at a time so it does not
// compete with the daemon's clients for the CPU, after a detection that
// answered from the cache or the install's files (or on a search path the
// login shell has not confirmed yet). If nothing detected since gen, its
// answer replaces the cached one when they differ.
func (d *Detector) confirm(gen uint64) {
	d.resolveSearch(d.base)
	run := d.newRun(false, 1)
	specs := d.detectAll(d.base, run)
	if d.base.Err() != nil {
		return
	}
	d.mu.Lock()
	if d.gen.Load() != gen {
		d.mu.Unlock()
		return // a refresh answered since, from probes as fresh as these
	}
	if !sameDetection(d.specs, specs) {
		d.specs = specs
		d.gen.Add(1)
	}
	d.mu.Unlock()
	run.commit()
}

// withoutCheckTime is s with its verdict's time zeroed.
func withoutCheckTime(s api.ExecutableStatus) api.ExecutableStatus {
	if reason, bad := s.UnusableReason(); bad {
		return Unusable(reason, 0)
	}
	return s
}

// sameDetection compares two detections without their timestamps.
func sameDetection(a, b []api.ExternalAgentSpec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.DetectedAt, y.DetectedAt = 0, 0
		x.Execution, y.Execution = withoutCheckTime(x.Execution), withoutCheckTime(y.Execution)
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}
