package daemon_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/internal/home"
)

// A client that has a run's answer (or, streaming, its last event) and
// asks the history for it at once finds every event there: the answer
// waits for the store, not the other way round. The chatty agent prints
// thousands of lines in a few milliseconds, more than the store writes in
// that time, so an answer sent when the agent exits would come first.
func TestEveryEventOfAChattyRunIsStoredByTheTimeItsAnswerIsSent(t *testing.T) {
	bin, _, _, _ := chattyAgent(t)
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: bin},
	})
	st, err := store.Open(context.Background(), filepath.Join(d.Home, home.RunsDBName), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	stored := func(id string) []store.Event {
		evs, err := st.Events(context.Background(), id, 0, store.MaxEventsLimit)
		require.NoError(t, err)
		return evs
	}
	ctx := daemontest.Context(t)
	p := api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: t.TempDir()}, Task: "talk a lot"}
	for range 3 {
		res, err := d.Client.Invoke(ctx, p)
		require.NoError(t, err)
		require.Equal(t, api.StatusSucceeded, res.Status)
		evs := stored(res.RunID)
		require.Equal(t, strings.Repeat("PONG from fake anthropic", chattyDeltas), storedText(t, evs), "every text delta is in the store at the answer")
		require.Equal(t, api.EventDone, evs[len(evs)-1].Kind, "the terminal event is stored last")
		require.EqualValues(t, len(evs), evs[len(evs)-1].Seq, "no event is missing")

		var got []api.AgentEvent
		done := make(chan []store.Event, 1)
		acc, err := d.Client.Stream(ctx, p, func(ev api.AgentEvent) {
			got = append(got, ev)
			if ev.Kind == api.EventDone || ev.Kind == api.EventRunError {
				done <- stored(ev.RunID) // before anything else: the moment the client learns the end
			}
		})
		require.NoError(t, err)
		select {
		case evs = <-done:
		case <-ctx.Done():
			t.Fatal("the streamed run did not end")
		}
		require.Len(t, evs, len(got), "the history has what the client was sent, when it was sent the end (run %s)", acc.RunID)
		require.Equal(t, api.EventDone, evs[len(evs)-1].Kind)
	}
}

// storedText joins the text of a run's stored text events.
func storedText(t *testing.T, evs []store.Event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range evs {
		if e.Kind != api.EventText {
			continue
		}
		var ev api.AgentEvent
		require.NoError(t, json.Unmarshal(e.Payload, &ev))
		b.WriteString(ev.Text)
	}
	return b.String()
}
