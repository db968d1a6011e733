package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// collector is a subscriber that keeps what it is sent.
type collector struct {
	mu   sync.Mutex
	seqs []int64
	// gate, when set, holds every send until it is closed: a client that
	// stopped reading.
	gate chan struct{}
	// entered, when set, is closed by the first send.
	entered   chan struct{}
	enterOnce sync.Once
}

func (c *collector) send(ctx context.Context, seq int64, raw json.RawMessage) error {
	if c.entered != nil {
		c.enterOnce.Do(func() { close(c.entered) })
	}
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var ev api.AgentEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return err
	}
	if ev.Seq != seq {
		return fmt.Errorf("event %d was sent as seq %d", ev.Seq, seq)
	}
	c.mu.Lock()
	c.seqs = append(c.seqs, ev.Seq)
	c.mu.Unlock()
	return nil
}

func (c *collector) got() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.seqs...)
}

func text(s string) api.AgentEvent {
	return api.AgentEvent{Event: api.Event{Kind: api.EventText, Text: s}}
}

func addN(l *eventLog, n int) {
	for i := 0; i < n; i++ {
		l.add(api.EventText, text("x"), false)
	}
}

// end adds the terminal event and marks every event stored, as the run's
// writer would.
func end(l *eventLog) {
	l.add(api.EventDone, api.AgentEvent{Event: api.Event{Kind: api.EventDone}}, true)
	stored(l)
}

// stored marks every event added so far as written to the store.
func stored(l *eventLog) {
	pending, _, _ := l.unwritten()
	l.markWritten(len(pending))
}

func seqsOf(es []entry) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.seq)
	}
	return out
}

// follows runs follow in the background and returns a wait for its end.
func follows(ctx context.Context, c *collector, l *eventLog, after int64) func(time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = follow(ctx, c.send, l, after, 0)
	}()
	return func(d time.Duration) bool {
		select {
		case <-done:
			return true
		case <-time.After(d):
			return false
		}
	}
}

func TestEventsAreNumberedFromOneInTheOrderTheyAreAddedAndCarryTheRunID(t *testing.T) {
	l := newEventLog("run_1", 100)
	for _, s := range []string{"a", "b", "c"} {
		l.add(api.EventText, text(s), false)
	}
	evs, ended, _ := l.after(0)
	require.Equal(t, []int64{1, 2, 3}, seqsOf(evs))
	assert.False(t, ended)
	for i, e := range evs {
		var ev api.AgentEvent
		require.NoError(t, json.Unmarshal(e.raw, &ev))
		assert.Equal(t, "run_1", ev.RunID)
		assert.Equal(t, []string{"a", "b", "c"}[i], ev.Text)
	}
	evs, _, _ = l.after(2)
	assert.Equal(t, []int64{3}, seqsOf(evs), "after a seq: only what follows it")
}

// A subscriber that joins late gets what followed its seq from memory, then
// the live tail, each event once and in order, and ends with the run.
func TestAFollowerReplaysAfterItsSeqThenFollowsTheRunLiveToItsEnd(t *testing.T) {
	l := newEventLog("run_1", 100)
	addN(l, 3)
	c := &collector{}
	wait := follows(context.Background(), c, l, 1)
	require.Eventually(t, func() bool { return len(c.got()) == 2 }, 5*time.Second, time.Millisecond)
	addN(l, 2)
	end(l)
	require.True(t, wait(5*time.Second), "the follower ends with the run's last event")
	assert.Equal(t, []int64{2, 3, 4, 5, 6}, c.got())
}

// One subscriber that stops reading holds up neither the run (adding an
// event never waits for a subscriber) nor any other subscriber.
func TestASlowSubscriberSlowsOnlyItself(t *testing.T) {
	l := newEventLog("run_1", 10000)
	stalled := &collector{gate: make(chan struct{})}
	reading := &collector{}
	stalledDone := follows(context.Background(), stalled, l, 0)
	readingDone := follows(context.Background(), reading, l, 0)

	produced := make(chan struct{})
	go func() {
		addN(l, 2000)
		end(l)
		close(produced)
	}()
	select {
	case <-produced:
	case <-time.After(5 * time.Second):
		t.Fatal("the run was held up by a subscriber that stopped reading")
	}
	require.True(t, readingDone(5*time.Second), "the reading subscriber was held up by the stalled one")
	assert.Len(t, reading.got(), 2001)
	assert.Empty(t, stalled.got(), "the stalled one is still on its first event")
	assert.False(t, stalledDone(50*time.Millisecond))

	close(stalled.gate)
	require.True(t, stalledDone(5*time.Second))
	assert.Equal(t, reading.got(), stalled.got(), "once it reads again it gets every event in order")
}

// The log keeps the first max events and the terminal one. The others take
// a seq (a subscriber sees the gap), are not kept, and are counted.
func TestTheBoundKeepsTheFirstEventsAndTheTerminalOneAndCountsTheRest(t *testing.T) {
	l := newEventLog("run_1", 3)
	addN(l, 10)
	l.add(api.EventDone, api.AgentEvent{Event: api.Event{Kind: api.EventDone}}, true)
	pending, _, _ := l.unwritten()
	assert.Equal(t, []int64{1, 2, 3, 11}, seqsOf(pending), "what is stored is what is kept")
	stored(l)
	evs, ended, _ := l.after(0)
	assert.True(t, ended)
	assert.Equal(t, []int64{1, 2, 3, 11}, seqsOf(evs))
	assert.Equal(t, int64(7), l.droppedCount())

	c := &collector{}
	require.True(t, follows(context.Background(), c, l, 0)(5*time.Second))
	assert.Equal(t, []int64{1, 2, 3, 11}, c.got(), "what is sent is what is kept")
}

func TestAFollowerStopsWhenItsSubscriberGoesAway(t *testing.T) {
	l := newEventLog("run_1", 100)
	addN(l, 1)
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{}
	wait := follows(ctx, c, l, 0)
	require.Eventually(t, func() bool { return len(c.got()) == 1 }, 5*time.Second, time.Millisecond)
	assert.False(t, wait(20*time.Millisecond), "a live run is followed until it ends")
	cancel()
	assert.True(t, wait(5*time.Second))

	failing := func(context.Context, int64, json.RawMessage) error { return errors.New("socket closed") }
	done := make(chan struct{})
	go func() { _ = follow(context.Background(), failing, l, 0, 0); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a subscriber whose sends fail is not followed further")
	}
}

// A subscriber that stops reading is cut off once the run has added more
// than the limit's bytes of events it has yet to be sent: with where to come
// back from, while the run and a reading subscriber go on. The history it
// asked to replay does not count against it.
func TestASubscriberTooFarBehindIsCutOffAndTheRunGoesOn(t *testing.T) {
	l := newEventLog("run_1", 10000)
	stalled := &collector{gate: make(chan struct{}), entered: make(chan struct{})}
	var cut error
	stalledDone := make(chan struct{})
	go func() { cut = follow(context.Background(), stalled.send, l, 0, 2000); close(stalledDone) }()
	reading := &collector{}
	readingDone := follows(context.Background(), reading, l, 0)

	addN(l, 1)
	<-stalled.entered // it holds the first event and reads no more
	addN(l, 99)       // about 50 bytes each: past the limit while it waits
	end(l)
	require.True(t, readingDone(5*time.Second), "the reading subscriber got the whole run")
	assert.Len(t, reading.got(), 101)
	close(stalled.gate)
	select {
	case <-stalledDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled subscriber was not cut off")
	}
	var be *BehindError
	require.ErrorAs(t, cut, &be)
	assert.Equal(t, "run_1", be.RunID)
	assert.Equal(t, int64(2), be.NextSeq, "it had been sent the first event")
	assert.Greater(t, be.Behind, int64(2000))
	assert.Equal(t, int64(2000), be.Limit)
	assert.Contains(t, be.Error(), "after_seq = 1")
	assert.Equal(t, []int64{1}, stalled.got())

	// Coming back later: the whole history is replayed, limit or not.
	again := &collector{}
	require.NoError(t, follow(context.Background(), again.send, l, be.NextSeq-1, 2000))
	assert.Len(t, again.got(), 100)
}

// Following a run hands each subscriber a view of the one log, not a copy
// of it: three thousand subscribers of a long run cost three thousand
// views, not three thousand logs.
func TestFollowersShareTheLogInsteadOfCopyingIt(t *testing.T) {
	l := newEventLog("run_1", 10000)
	addN(l, 3000)
	allocs := testing.AllocsPerRun(100, func() { _, _, _ = l.after(0) })
	assert.Zero(t, allocs)
	a, _, _ := l.after(0)
	addN(l, 1)
	b, _, _ := l.after(0)
	assert.Len(t, a, 3000, "a view does not grow under its holder")
	assert.Len(t, b, 3001)
}

// A follower is sent the terminal event only once the store has every
// event: a client that learns the run ended and asks the history at once
// finds all of it.
func TestTheTerminalEventWaitsForTheStoreToHaveEveryEvent(t *testing.T) {
	l := newEventLog("run_1", 100)
	addN(l, 3)
	l.add(api.EventDone, api.AgentEvent{Event: api.Event{Kind: api.EventDone}}, true)
	c := &collector{}
	wait := follows(context.Background(), c, l, 0)
	require.Eventually(t, func() bool { return len(c.got()) == 3 }, 5*time.Second, time.Millisecond)
	assert.False(t, wait(50*time.Millisecond), "the follower waits for the store")
	assert.Equal(t, []int64{1, 2, 3}, c.got(), "the events before the end are sent as they come")
	l.markWritten(2)
	assert.False(t, wait(50*time.Millisecond), "two of four stored is not all")
	l.markWritten(2)
	require.True(t, wait(5*time.Second), "the follower ends once the store has them all")
	assert.Equal(t, []int64{1, 2, 3, 4}, c.got())
}
