package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/spawn"
)

// runs.get lists at most MaxApprovalRecords approvals and says when it
// left some out, with how many the run recorded: once, a run past 5,000
// questions had the rest cut silently.
func TestRunsGetSaysWhenItListsOnlyTheFirstApprovals(t *testing.T) {
	m, st := newManager(t, fakeBinaries{bin: "/bin/true"}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	record := func(questions int) string {
		id := st.NewRunID()
		require.NoError(t, st.Create(ctx, api.Run{RunID: id, Adapter: "claude-code", Status: api.StatusSucceeded,
			PermissionMode: string(spawn.ModeAsk)}))
		var evs []store.NewEvent
		now := time.Now().UTC()
		for i := 1; i <= questions; i++ {
			req := fmt.Sprintf("apr_%d", i)
			for _, ev := range []api.AgentEvent{
				{Event: api.Event{Kind: api.EventApprovalRequested, Tool: &api.Tool{Name: "Bash", ID: "toolu_" + req}},
					Approval: &api.Approval{RequestID: req, Summary: "Bash: true", RequestedAt: &now, ExpiresAt: &now}},
				{Event: api.Event{Kind: api.EventApprovalDecided, Tool: &api.Tool{Name: "Bash", ID: "toolu_" + req}},
					Approval: &api.Approval{RequestID: req, Decision: api.DecisionDeny, By: api.ByClient, DecidedAt: &now}},
			} {
				ev.RunID, ev.Seq = id, int64(len(evs)+1)
				raw, err := json.Marshal(ev)
				require.NoError(t, err)
				evs = append(evs, store.NewEvent{Seq: ev.Seq, Kind: ev.Kind, Payload: raw})
			}
		}
		require.NoError(t, st.AppendEvents(ctx, id, evs))
		return id
	}
	for _, c := range []struct {
		name      string
		questions int
		truncated bool
	}{
		{"within the bound", api.MaxApprovalRecords, false},
		{"one past the bound", api.MaxApprovalRecords + 1, true},
		{"past what the store is read for at once", store.MaxEventsLimit/2 + 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, err := m.Get(ctx, record(c.questions))
			require.NoError(t, err)
			require.Len(t, rec.Approvals, api.MaxApprovalRecords)
			assert.Equal(t, "apr_1", rec.Approvals[0].RequestID)
			assert.Equal(t, api.DecisionDeny, rec.Approvals[api.MaxApprovalRecords-1].Decision)
			assert.Equal(t, c.truncated, rec.ApprovalsTruncated)
			if c.truncated {
				assert.Equal(t, c.questions, rec.ApprovalsTotal)
			} else {
				assert.Zero(t, rec.ApprovalsTotal)
			}
		})
	}
}
