package runs

import (
	"context"
	"encoding/json"

	"github.com/card-dev/card/api"
)

// Send delivers one event (its JSON, as stored, and its seq) to one
// subscriber, in order; an error ends the subscription. Each subscriber has
// its own, called from its own goroutine, so a slow one slows only itself.
// The seq is handed over beside the JSON, where the log already has it: a
// subscriber that needs it (a session numbering its turns' events) would
// otherwise read it back out of an event whose text may be many KiB long.
type Send func(ctx context.Context, seq int64, event json.RawMessage) error

// replayPage bounds the stored events a replaying subscriber holds at once:
// a page of a run's biggest events, not a thousand of them, per subscriber.
const replayPage = 64

// follow sends a run's kept events after seq, from memory, until its last
// event or until ctx ends. limit (0: none) caps what the subscriber may
// fall behind by: the bytes of the events the run added since it joined
// that it has yet to be sent, which is what a queue per subscriber would
// hold. Past it the subscriber is cut off with a *BehindError; the run
// and every other subscriber go on, and the subscriber may come back from
// where it stopped. The history it asked to replay (after seq) is not
// counted: that is what it subscribed for.
func follow(ctx context.Context, send Send, log *eventLog, seq int64, limit int64) error {
	base := max(log.bytesThrough(seq), log.bytes.Load())
	for {
		pending, ended, changed := log.after(seq)
		for _, e := range pending {
			if limit > 0 {
				if behind := log.bytes.Load() - max(base, e.end-int64(len(e.raw))); behind > limit {
					return &BehindError{RunID: log.runID, NextSeq: e.seq, Behind: behind, Limit: limit}
				}
			}
			if err := send(ctx, e.seq, e.raw); err != nil {
				return nil
			}
			seq = e.seq
		}
		if ended && len(pending) == 0 {
			return nil
		}
		if len(pending) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// replay sends a finished run's stored events after seq, a page at a time.
func (m *Manager) replay(ctx context.Context, send Send, id string, after int64) {
	for {
		evs, err := m.store.Events(ctx, id, after, replayPage)
		if err != nil || len(evs) == 0 {
			return
		}
		for _, e := range evs {
			if err := send(ctx, e.Seq, e.Payload); err != nil {
				return
			}
			after = e.Seq
		}
	}
}

// Subscribe answers where run id stands and returns what sends its events
// after afterSeq: the caller answers first, then calls it with the
// subscriber's Send and a context that ends with the subscriber. A live
// run's events are all in memory (the store has a prefix of them), so its
// replay and its follow are one ordered pass; a finished run (its outcome
// and every event are in the store before it leaves the live set) is
// replayed from the store.
func (m *Manager) Subscribe(ctx context.Context, id string, afterSeq int64) (api.SubscribeResult, func(context.Context, Send) error, error) {
	if lr := m.lookup(id); lr != nil {
		res := api.SubscribeResult{RunID: id, Status: api.StatusRunning, Live: true}
		if status, ended := lr.outcome(); ended {
			res = api.SubscribeResult{RunID: id, Status: status}
		}
		return res, func(ctx context.Context, send Send) error {
			return follow(ctx, send, lr.log, afterSeq, m.cfg.MaxSubscriberQueueBytes)
		}, nil
	}
	run, err := m.store.Get(ctx, id)
	if err != nil {
		return api.SubscribeResult{}, nil, notFound(id, err)
	}
	return api.SubscribeResult{RunID: id, Status: run.Status}, func(ctx context.Context, send Send) error { m.replay(ctx, send, id, afterSeq); return nil }, nil
}
