package rpc

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// releaseCounter makes st's server count its memory releases instead of
// making them, after quiet.
func releaseCounter(st *serverTest, quiet time.Duration) *atomic.Int32 {
	var n atomic.Int32
	st.srv.release.quiet = quiet
	st.srv.release.free = func() { n.Add(1) }
	return &n
}

func largeFrame(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"wait.ms","params":{"n":1,"note":"%s"}}`, id, strings.Repeat("x", largeMessage))
}

func TestMemoryIsReleasedOnceABurstOfLargeFramesIsOver(t *testing.T) {
	st := newServerTest(t, 0)
	released := releaseCounter(st, 2*time.Second)
	c := st.dial(t)
	start := time.Now()
	for i := 1; i <= 3; i++ {
		c.send(largeFrame(i))
		assert.Contains(t, c.read(), `"error"`)
	}
	assert.Zero(t, released.Load(), "not during the burst (%v in)", time.Since(start))
	require.Eventually(t, func() bool { return released.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(2500 * time.Millisecond)
	assert.EqualValues(t, 1, released.Load(), "once per burst")
}

func TestSmallFramesNeverReleaseMemory(t *testing.T) {
	st := newServerTest(t, 0)
	released := releaseCounter(st, 50*time.Millisecond)
	c := st.dial(t)
	for i := 1; i <= 20; i++ {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"wait.ms","params":{"n":0}}`, i))
		c.read()
	}
	time.Sleep(200 * time.Millisecond)
	assert.Zero(t, released.Load())
}

func TestALargeAnswerCountsAsMuchAsALargeFrame(t *testing.T) {
	st := newServerTest(t, 0)
	released := releaseCounter(st, 50*time.Millisecond)
	c := st.dial(t)
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"stream.start","params":{"n":0,"pad":%d}}`, largeMessage))
	assert.Contains(t, c.read(), `"started":true`)
	require.Eventually(t, func() bool { return released.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
}

func TestShutdownDisarmsAPendingRelease(t *testing.T) {
	st := newServerTest(t, 0)
	released := releaseCounter(st, 200*time.Millisecond)
	st.srv.release.note()
	st.srv.release.close()
	time.Sleep(400 * time.Millisecond)
	assert.Zero(t, released.Load())
}
