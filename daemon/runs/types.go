package runs

import (
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
)

// The run subsystem's wire types live in package api; these aliases keep
// the run code and its callers compiling under the old names.
type (
	AgentEvent        = api.AgentEvent
	InvokeResult      = api.InvokeResult
	DroppedAttachment = api.DroppedAttachment
	InvokeAccepted    = api.InvokeAccepted
	CancelResult      = api.CancelResult
	SubscribeResult   = api.SubscribeResult
)

// The terminal event kinds, from package api; kept for the same reason.
const (
	EventDone       = api.EventDone
	EventRunError   = api.EventRunError
	EventAgentError = api.EventAgentError
)

// droppedOf lists the attachments a run did not hand its agent.
func droppedOf(records []store.Attachment) []DroppedAttachment {
	var out []DroppedAttachment
	for _, r := range records {
		if r.Dropped != "" {
			out = append(out, DroppedAttachment{Index: r.Index, Reason: r.Dropped})
		}
	}
	return out
}
