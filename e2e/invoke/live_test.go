package invoke_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

// arrivals notes when each event reached the client.
type arrivals struct {
	mu sync.Mutex
	at map[string]time.Time
}

func newArrivals() *arrivals { return &arrivals{at: map[string]time.Time{}} }

func (a *arrivals) note(ev api.AgentEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at[fmt.Sprintf("%s/%d", ev.RunID, ev.Seq)] = time.Now()
}

func (a *arrivals) of(ev api.AgentEvent) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at[fmt.Sprintf("%s/%d", ev.RunID, ev.Seq)]
}

// invoke streams p and waits for the run's end; it returns the events and
// when the invoke was sent.
func (s *session) invoke(t *testing.T, p api.InvokeParams) ([]api.AgentEvent, time.Time) {
	t.Helper()
	p.Cwd, p.TimeoutSecs = s.cwd, 120
	start := time.Now()
	acc, err := s.c.Stream(daemontest.Context(t), p, nil)
	require.NoError(t, err)
	evs := s.events.WaitEnd(t, acc.RunID, 150*time.Second)
	for _, ev := range evs {
		captureExample(t, p.ID, ev)
	}
	return evs, start
}

// ended is how long after the agent's first event (its session line, once
// the CLI has started) the run's last event reached the client, and how
// long after the invoke. The bounds below are on the first: a CLI's own
// start-up is not card's to shorten (Gemini CLI took 8–13 s to start on
// this 2-core machine at load 10, about 3 s idle), and the issue's
// minutes were all retries.
func (s *session) ended(evs []api.AgentEvent, start time.Time) (sinceUp, sinceInvoke time.Duration) {
	end := s.arrived.of(evs[len(evs)-1])
	return end.Sub(s.arrived.of(evs[0])), end.Sub(start)
}

// failsAs runs p to its end, requires that it failed with kind within 10 s
// of the agent's first event, logs how long it took, and returns its events.
func (s *session) failsAs(t *testing.T, p api.InvokeParams, kind string) []api.AgentEvent {
	t.Helper()
	evs, start := s.invoke(t, p)
	last := evs[len(evs)-1]
	took, total := s.ended(evs, start)
	require.Equal(t, api.EventRunError, last.Kind, daemontest.Kinds(evs))
	require.NotNil(t, last.Result.Error)
	assert.Equal(t, kind, last.Result.Error.Kind, last.Result.Error.Message)
	assert.LessOrEqual(t, took, 10*time.Second)
	t.Logf("%s: %s %v after the agent's first event, %v after the invoke, %d retry events: %s", p.ID, kind,
		took.Round(time.Millisecond), total.Round(time.Millisecond), len(ofKind(evs, api.EventRetry)), last.Result.Error.Message)
	return evs
}

func ofKind(evs []api.AgentEvent, kind string) []api.AgentEvent {
	var out []api.AgentEvent
	for _, ev := range evs {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// How each CLI streams, as docs/protocol.md ("What live means per agent")
// states it: token is text in pieces as the model writes it, message is a
// whole message at a time.
var grain = map[string]string{"claude-code": "token", "gemini": "token", "codex": "message"}

// A stand-in that writes its answer slowly (a piece every 700 ms): a CLI
// that streams must put text in front of the client while the answer is
// still being written, long before the run ends; a CLI that gives whole
// messages sends the answer once, whole.
func TestTextReachesTheClientAsTheAgentWritesIt(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.adapter, func(t *testing.T) {
			bin := standin.CLI(t, tc.bin)
			t.Parallel()
			const answer = "one two three four five six seven eight"
			const pause = 700 * time.Millisecond
			// Only the Anthropic stand-in thinks out loud; the others
			// ignore Thinking.
			const thought = "Counting slowly, one word at a time."
			sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Answer: answer, DeltaDelay: pause, Thinking: thought}, false))
			evs, start := sess.invoke(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: tc.adapter}, Task: "count to eight"})
			last := evs[len(evs)-1]
			require.Equal(t, api.EventDone, last.Kind, "%s: %+v", daemontest.Kinds(evs), last.Result.Error)
			texts := ofKind(evs, api.EventText)
			require.NotEmpty(t, texts)
			var joined strings.Builder
			for _, ev := range texts {
				joined.WriteString(ev.Text)
			}
			assert.Equal(t, answer, strings.TrimSpace(joined.String()), "the text events joined are the answer, once")
			assert.Equal(t, answer, strings.TrimSpace(last.Result.Answer))

			first, done := sess.arrived.of(texts[0]), sess.arrived.of(last)
			t.Logf("%s: first text %v after invoke, done %v after invoke; %d text events",
				tc.adapter, first.Sub(start).Round(time.Millisecond), done.Sub(start).Round(time.Millisecond), len(texts))
			switch grain[tc.adapter] {
			case "token":
				assert.GreaterOrEqual(t, len(texts), 8, "a piece per word")
				for _, ev := range texts {
					assert.True(t, ev.Delta, "seq %d", ev.Seq)
				}
				// The stand-in takes 7 × 700 ms to write the answer; the
				// first word must be on the client while it does.
				assert.Greater(t, done.Sub(first), 3*time.Second, "the first text arrived well before the run ended")
			case "message":
				require.Len(t, texts, 1, "one whole message")
				assert.False(t, texts[0].Delta)
			}
			if tc.adapter == "claude-code" {
				var thinking strings.Builder
				for _, ev := range ofKind(evs, api.EventThinking) {
					assert.True(t, ev.Delta)
					assert.True(t, sess.arrived.of(ev).Before(first), "thinking comes before the answer")
					thinking.WriteString(ev.Text)
				}
				assert.Equal(t, thought, thinking.String(), "the thinking, once, in pieces")
			}
		})
	}
}

// A key the API refuses ends the run with kind auth within 10 s, and
// within 5 s of the agent's first sign of it; the CLIs keep their own retry
// defaults, so an agent that would retry (Claude, Codex) is ended when the
// key is refused again after one retry.
func TestARefusedKeyEndsTheRunAsAuthWithinTenSeconds(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.adapter, func(t *testing.T) {
			bin := standin.CLI(t, tc.bin)
			sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Status: http.StatusUnauthorized}, true))
			evs := sess.failsAs(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: tc.adapter}, Task: "say pong"}, api.KindAuth)
			if r := ofKind(evs, api.EventRetry); len(r) > 0 {
				sign := sess.arrived.of(r[0])
				assert.LessOrEqual(t, sess.arrived.of(evs[len(evs)-1]).Sub(sign), 5*time.Second, "within 5 s of the first sign")
				require.Len(t, r, 1, "one retry; the refusal after it ends the run and is not sent as a retry")
				assert.Equal(t, 1, r[0].Attempt)
				assert.Equal(t, 1, r[0].MaxAttempts, "a refused key's own bound of one retry")
			}
		})
	}
}

// A 429 with max_api_retries 1: the agent retries once (Claude through its
// own setting, Codex and Gemini because card ends the run at the retry
// after that), the retries are retry events, and the run ends as
// rate_limit within 10 s with the API's own message. The stand-in asks
// for a 1 s wait, as a rate-limited API does.
func TestARateLimitWithOneRetryEndsAsRateLimitWithItsRetryEvents(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.adapter, func(t *testing.T) {
			bin := standin.CLI(t, tc.bin)
			sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Status: http.StatusTooManyRequests, RetryAfter: time.Second}, true))
			one := 1
			evs := sess.failsAs(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: tc.adapter, MaxAPIRetries: &one}, Task: "say pong"}, api.KindRateLimit)
			retries := ofKind(evs, api.EventRetry)
			require.NotEmpty(t, retries, daemontest.Kinds(evs))
			assert.LessOrEqual(t, len(retries), 2, "one retry allowed; the next is where card ends the run")
			for i, r := range retries {
				assert.Equal(t, i+1, r.Attempt)
				assert.Equal(t, 1, r.MaxAttempts)
				assert.NotEmpty(t, r.Error)
			}
			assert.Regexp(t, `\(card stand-in\)|429 Too Many Requests`, evs[len(evs)-1].Result.Error.Message, "the API's own words")
		})
	}
}

// An API that refuses connections: with card's defaults the run ends as
// network within 10 s, whatever the CLI's own patience.
func TestAnAPIThatRefusesConnectionsEndsAsNetworkWithinTenSeconds(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.adapter, func(t *testing.T) {
			bin := standin.CLI(t, tc.bin)
			s := tc.newServer(t, bin, standin.Script{}, true)
			s.server.Close() // its port now refuses connections
			sess := startDaemon(t, s)
			sess.failsAs(t, api.InvokeParams{AgentSettings: api.AgentSettings{ID: tc.adapter}, Task: "say pong"}, api.KindNetwork)
		})
	}
}

// captureExample writes the events docs/protocol.md shows as real examples
// to $CARD_E2E_CAPTURE (appending), one marked block each.
func captureExample(t *testing.T, adapter string, ev api.AgentEvent) {
	out := os.Getenv("CARD_E2E_CAPTURE")
	if out == "" {
		return
	}
	note, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "agents.event", "params": ev})
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, json.Indent(&b, note, "", "  "))
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = fmt.Fprintf(f, "%s %s\n<!-- example: agents.event notification -->\n```json\n%s\n```\n\n", t.Name(), adapter, b.String())
	require.NoError(t, err)
}
