package agentside

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// stalled is a Transport whose writes wait until it is opened, as an
// editor that stopped reading makes them; it keeps what it was written.
type stalled struct {
	open   chan struct{}
	mu     sync.Mutex
	frames [][]byte
}

func (s *stalled) Read(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() }

func (s *stalled) Write(ctx context.Context, b []byte) error {
	select {
	case <-s.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frames = append(s.frames, append([]byte(nil), b...))
	return nil
}

// While the editor is behind, a backend whose events may wait is held
// back once about maxQueuedBytes wait for the editor, and one whose
// events may not is never held back; either way the editor then gets
// every chunk once, in order.
func TestTheEventsWaitingForASlowEditorAreBoundedWhereTheyMayWait(t *testing.T) {
	const n, size = 200, 64 << 10 // 12.5 MiB of text, three times the bound
	for _, mayWait := range []bool{true, false} {
		t.Run(fmt.Sprintf("EventsMayWait=%v", mayWait), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr := &stalled{open: make(chan struct{})}
			srv := New(Config{Version: "test", EventsMayWait: mayWait})
			srv.t, srv.ctx = tr, ctx
			st := srv.attach(api.Session{SessionID: "ses_1", NextSeq: 1}, api.Capabilities{})
			defer srv.wg.Wait()
			defer cancel()

			texts := make([]string, n)
			delivered := make(chan int, n)
			go func() {
				for i := range n {
					texts[i] = fmt.Sprintf("<%d>", i) + strings.Repeat(string(rune('a'+i%26)), size)
					text, _ := json.Marshal(texts[i])
					st.enqueueText(api.SessionEvent{SessionID: "ses_1", Seq: int64(i + 1), Turn: 1,
						Event: api.AgentEvent{RunID: "run_1", Seq: int64(i + 1), Event: api.Event{Kind: api.EventText, Delta: true}}}, text)
					delivered <- i
				}
			}()
			// The editor reads nothing for a while.
			time.Sleep(300 * time.Millisecond)
			st.mu.Lock()
			queued, inQueue := st.queued, len(st.queue)
			st.mu.Unlock()
			if mayWait {
				assert.LessOrEqual(t, queued, maxQueuedBytes+size+1024, "the queue holds at most the bound and one event")
				assert.Less(t, len(delivered), n/2, "the deliverer was held back")
			} else {
				require.Eventually(t, func() bool { return len(delivered) == n }, 5*time.Second, 5*time.Millisecond, "the deliverer is never held back")
				assert.GreaterOrEqual(t, inQueue+1, n-2, "everything waits in the queue")
			}
			close(tr.open)
			require.Eventually(t, func() bool {
				tr.mu.Lock()
				defer tr.mu.Unlock()
				return len(tr.frames) == n
			}, 10*time.Second, 5*time.Millisecond, "every chunk reaches the editor")
			for i, f := range tr.frames {
				var m struct {
					Params acp.SessionNotification `json:"params"`
				}
				require.NoError(t, json.Unmarshal(f, &m))
				require.Equal(t, texts[i], m.Params.Update.Chunk.Content.Text, "chunk %d", i)
			}
			st.mu.Lock()
			assert.Equal(t, 0, st.queued, "nothing is counted as waiting once written")
			st.mu.Unlock()
		})
	}
}
