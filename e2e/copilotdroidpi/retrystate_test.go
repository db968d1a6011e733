package copilotdroidpi

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/e2e/standin"
)

// An API that answers 429 and then answers: Copilot (turn_retry, which
// names no delay) and Pi (auto_retry_start with its delay) announce the
// retry, the run's state says waiting_api while they wait, then working,
// and the run succeeds with the answer. Pi's provider SDK first retries
// twice by itself and says nothing (three calls refused before its own
// announced retry): those two are invisible to card, so the stand-in
// refuses three. Droid announces nothing while it retries and is not run
// here.
func TestCopilotAndPiRetryingA429ThenAnsweredShowTheRunWaitingForTheAPI(t *testing.T) {
	refused := map[string]int{agent.Copilot: 1, agent.Pi: 3}
	// Copilot retries at once and the answer began at once, so its
	// waiting_api was sometimes over between two polls of runs.get on a
	// loaded CI machine: the stand-in's answer begins after a second.
	firstDelay := map[string]time.Duration{agent.Copilot: time.Second}
	for _, id := range []string{agent.Copilot, agent.Pi} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			const answer = "PONG after a retry"
			// A daemon and stand-in each: FailFirst counts the stand-in's
			// model calls, whoever makes them.
			c, project := moreAgents(t, standin.Script{Answer: answer, Status: http.StatusTooManyRequests, FailFirst: refused[id], FirstDeltaDelay: firstDelay[id]}, false)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			var mu sync.Mutex
			var evs []api.AgentEvent
			done := make(chan struct{})
			acc, err := c.Stream(ctx, params(id, project), func(ev api.AgentEvent) {
				mu.Lock()
				defer mu.Unlock()
				evs = append(evs, ev)
				if client.Terminal(ev) {
					close(done)
				}
			})
			require.NoError(t, err)
			var seen []api.RunState
			for polling := true; polling; {
				rec, err := c.Run(ctx, acc.RunID)
				require.NoError(t, err)
				if rec.Status != api.StatusRunning {
					break
				}
				if rec.State != "" && (len(seen) == 0 || seen[len(seen)-1] != rec.State) {
					seen = append(seen, rec.State)
				}
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
					polling = false
				}
			}
			select {
			case <-done:
			case <-ctx.Done():
				t.Fatalf("%s: no end", id)
			}
			mu.Lock()
			defer mu.Unlock()
			last := evs[len(evs)-1]
			require.Equal(t, api.EventDone, last.Kind, "%+v", last.Result)
			assert.Contains(t, last.Result.Answer, answer)
			var retries []api.AgentEvent
			for _, ev := range evs {
				if ev.Kind == api.EventRetry {
					retries = append(retries, ev)
				}
			}
			require.NotEmpty(t, retries)
			i := slices.Index(seen, api.StateWaitingAPI)
			require.GreaterOrEqual(t, i, 0, "runs.get never said waiting_api: %v", seen)
			assert.Contains(t, seen[i+1:], api.StateWorking, "working again once the API answered: %v", seen)
			t.Logf("%s: states %v; retry attempt %d delay_ms %d: %s", id, seen, retries[0].Attempt, retries[0].DelayMs, retries[0].Error)
		})
	}
}
