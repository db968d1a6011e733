package runs

import (
	"github.com/card-dev/card/api"
)

// droppedOf lists the attachments a run did not hand its agent.
func droppedOf(records []api.AttachmentRecord) []api.DroppedAttachment {
	var out []api.DroppedAttachment
	for _, r := range records {
		if r.Dropped != "" {
			out = append(out, api.DroppedAttachment{Index: r.Index, Reason: r.Dropped})
		}
	}
	return out
}
