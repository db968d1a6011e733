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
// back at the first event it hands over, with nothing queued, and one
// whose events may not is never held back; either way the editor then
// gets every chunk once, in order.
func TestASlowEditorHoldsBackTheDelivererOnlyWhereEventsMayWait(t *testing.T) {
	const n, size = 200, 64 << 10 // 12.5 MiB of text
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
					st.enqueueText(textEvent(i+1), quoted(texts[i]))
					delivered <- i
				}
			}()
			// The editor reads nothing for a while.
			time.Sleep(300 * time.Millisecond)
			if mayWait {
				assert.Empty(t, delivered, "the deliverer waits at the first event")
			} else {
				require.Eventually(t, func() bool { return len(delivered) == n }, 10*time.Second, 5*time.Millisecond, "the deliverer is never held back")
			}
			st.mu.Lock()
			inQueue := len(st.queue)
			st.mu.Unlock()
			if mayWait {
				assert.Zero(t, inQueue, "nothing is queued")
			} else {
				assert.Equal(t, n-1, inQueue, "everything but the event being written waits in the queue")
			}
			close(tr.open)
			require.Eventually(t, func() bool {
				tr.mu.Lock()
				defer tr.mu.Unlock()
				return len(tr.frames) == n
			}, 10*time.Second, 5*time.Millisecond, "every chunk reaches the editor")
			assert.Equal(t, texts, chunkTexts(t, tr.frames))
		})
	}
}

// Two subscriptions of one session (a load after a new, a subscription
// taken up again while the old one ends) deliver the same events at once;
// the editor gets each chunk once, in order, whichever way events go.
func TestTwoDeliverersOfOneSessionGiveTheEditorEachChunkOnceInOrder(t *testing.T) {
	const n = 2000
	for _, mayWait := range []bool{true, false} {
		t.Run(fmt.Sprintf("EventsMayWait=%v", mayWait), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr := &stalled{open: make(chan struct{})}
			close(tr.open)
			srv := New(Config{Version: "test", EventsMayWait: mayWait})
			srv.t, srv.ctx = tr, ctx
			st := srv.attach(api.Session{SessionID: "ses_1", NextSeq: 1}, api.Capabilities{})
			defer srv.wg.Wait()
			defer cancel()

			want := make([]string, n)
			for i := range want {
				want[i] = fmt.Sprintf("piece %d", i)
			}
			var both sync.WaitGroup
			for range 2 {
				both.Go(func() {
					for i := range n {
						st.enqueueText(textEvent(i+1), quoted(want[i]))
					}
				})
			}
			both.Wait()
			require.Eventually(t, func() bool {
				tr.mu.Lock()
				defer tr.mu.Unlock()
				return len(tr.frames) >= n
			}, 10*time.Second, 5*time.Millisecond, "every chunk reaches the editor")
			time.Sleep(50 * time.Millisecond) // room for a chunk sent twice
			tr.mu.Lock()
			defer tr.mu.Unlock()
			assert.Equal(t, want, chunkTexts(t, tr.frames))
		})
	}
}

// Every flow that follows a session's events, run again with the events
// handled on the goroutine that delivers them, as the daemon's front door
// has them, rather than by the pump, as `card acp` has them: the same
// updates, questions, answers and stop reasons either way.
func TestEveryEventFlowHoldsWhenEventsAreHandledWhereTheyAreDelivered(t *testing.T) {
	eventsMayWait = true
	t.Cleanup(func() { eventsMayWait = false })
	for name, flow := range map[string]func(*testing.T){
		"a prompt's turn as updates":               TestAPromptStreamsTheTurnAsUpdatesAndEndsIt,
		"a question asked and answered":            TestAQuestionIsAskedAsRequestPermissionAndTheAnswerDecides,
		"a question answered elsewhere":            TestAQuestionAnsweredByAnotherClientIsWithdrawnFromTheEditor,
		"a question decided before its ask":        TestAQuestionDecidedElsewhereIsNotPutAgainWhenTheDaemonsAskComesLate,
		"a question the daemon asks":               TestAQuestionTheDaemonAsksThisConnectionIsPutOnceAndAnsweredInReply,
		"a question answered in reply":             TestAQuestionAnsweredInReplyIsNotAskedAgainWhenItsEventFollows,
		"session/cancel":                           TestSessionCancelEndsTheTurnWithStopReasonCancelled,
		"a cancelled prompt request":               TestCancellingThePromptRequestCancelsTheTurn,
		"a second turn":                            TestASecondTurnRunsInTheSameSession,
		"a failed turn":                            TestATurnThatFailsAnswersThePromptWithTheReason,
		"a load's history":                         TestLoadReplaysTheSessionsHistoryBeforeItAnswers,
		"a load from the middle of a turn":         TestALoadFromTheMiddleOfATurnDoesNotEchoItsPromptAgain,
		"each update's seq":                        TestEveryUpdateCarriesItsSeqSoAReconnectingClientKnowsWhereItWas,
		"set_mode":                                 TestSetModeChangesTheCardSessionsModeFromTheNextTurnAndTellsTheEditor,
		"slash commands":                           TestTheSlashCommandsACLIListsReachTheEditorOnceLessThoseCardDoesNotOffer,
		"settings changed elsewhere":               TestAChangeOfTheSessionsSettingsReachesEveryEditorFollowingIt,
		"text as JSON":                             TestATurnFollowedWithItsTextAsJSONGivesTheEditorTheSameUpdates,
		"a long turn's chunks from reused buffers": TestEveryChunkOfALongTurnHoldsItsOwnTextThoughTheirBuffersAreReused,
	} {
		t.Run(name, flow)
	}
}

// textEvent is the text piece of seq i of run_1, in turn 1.
func textEvent(seq int) api.SessionEvent {
	return api.SessionEvent{SessionID: "ses_1", Seq: int64(seq), Turn: 1,
		Event: api.AgentEvent{RunID: "run_1", Seq: int64(seq), Event: api.Event{Kind: api.EventText, Delta: true}}}
}

func quoted(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// chunkTexts are the texts of frames, each an agent_message_chunk.
func chunkTexts(t *testing.T, frames [][]byte) []string {
	t.Helper()
	var texts []string
	for _, f := range frames {
		var m struct {
			Params acp.SessionNotification `json:"params"`
		}
		require.NoError(t, json.Unmarshal(f, &m))
		require.NotNil(t, m.Params.Update.Chunk, "%s", f)
		texts = append(texts, m.Params.Update.Chunk.Content.Text)
	}
	return texts
}
