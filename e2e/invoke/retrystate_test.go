package invoke_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

// watchStates polls runs.get for the run's state until it has ended, and
// returns each state it saw, in order, without repeats.
func watchStates(ctx context.Context, c *client.Client, runID string) <-chan []api.RunState {
	out := make(chan []api.RunState, 1)
	go func() {
		var seen []api.RunState
		defer func() { out <- seen }()
		for ctx.Err() == nil {
			rec, err := c.Run(ctx, runID)
			if err != nil || rec.Status != api.StatusRunning {
				return
			}
			if rec.State != "" && (len(seen) == 0 || seen[len(seen)-1] != rec.State) {
				seen = append(seen, rec.State)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return out
}

// An API that answers the first model call 529 (Claude Code) or 429
// (Codex, Gemini) and then answers: each CLI announces its retry, the
// run's state says waiting_api while it waits, then working, and the run
// succeeds with the answer. The CLIs keep their own retry defaults.
func TestAnAPIThatFailsOnceThenAnswersShowsTheRunWaitingForTheAPI(t *testing.T) {
	statuses := map[string]int{"claude-code": 529, "codex": http.StatusTooManyRequests, "gemini": http.StatusTooManyRequests}
	for _, tc := range cases() {
		t.Run(tc.adapter, func(t *testing.T) {
			bin := standin.CLI(t, tc.bin)
			t.Parallel()
			const answer = "PONG after a retry"
			sess := startDaemon(t, tc.newServer(t, bin, standin.Script{Answer: answer, Status: statuses[tc.adapter], FailFirst: 1, RetryAfter: time.Second}, true))
			ctx := daemontest.Context(t)
			acc, err := sess.c.Stream(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: tc.adapter, Cwd: sess.cwd, TimeoutSecs: 120}, Task: "say pong"}, nil)
			require.NoError(t, err)
			states := watchStates(ctx, sess.c, acc.RunID)
			evs := sess.events.WaitEnd(t, acc.RunID, 150*time.Second)
			seen := <-states
			last := evs[len(evs)-1]
			require.Equal(t, api.EventDone, last.Kind, "%s: %+v", daemontest.Kinds(evs), last.Result.Error)
			assert.Equal(t, answer, last.Result.Answer)
			retries := ofKind(evs, api.EventRetry)
			require.NotEmpty(t, retries, daemontest.Kinds(evs))
			i := slices.Index(seen, api.StateWaitingAPI)
			require.GreaterOrEqual(t, i, 0, "runs.get never said waiting_api: %v", seen)
			assert.Contains(t, seen[i+1:], api.StateWorking, "working again once the API answered: %v", seen)
			t.Logf("%s: states %v; retry %+v", tc.adapter, seen, retries[0])
		})
	}
}
