package plan

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/card-dev/card/api"
)

// readCARAttachments applies CAR's rule to a request's attachments: each
// one card cannot send (unreadable, not an image by its bytes, over the
// size cap, past the count cap) is skipped and recorded as dropped with
// the reason, and the agent still runs with the others. A host written for
// CAR counts on the run happening; what it was not given it learns from
// dropped_attachments. The checks themselves are agents.invoke's, one by
// one, so the two methods never disagree about what an image is.
func readCARAttachments(list []api.ExternalAttachment, lim AttachmentLimits) (checked []attachment, skipped []api.AttachmentRecord) {
	for i, a := range list {
		name := filepath.Base(a.Path)
		if a.Path == "" {
			name = ""
		}
		if i >= lim.MaxCount {
			skipped = append(skipped, api.AttachmentRecord{Index: i, Name: name,
				Dropped: fmt.Sprintf("past the %d attachments a run may have ([attachments] max_count in card.toml)", lim.MaxCount)})
			continue
		}
		// media_type is not handed on: agents.invoke refuses a claimed type
		// the bytes contradict, and for CAR the claim is only advice.
		at, err := readAttachment(i, api.Attachment{Path: a.Path}, lim.MaxBytes)
		if err != nil {
			skipped = append(skipped, api.AttachmentRecord{Index: i, Name: name, Dropped: skipReason(err)})
			continue
		}
		checked = append(checked, at)
	}
	return checked, skipped
}

// skipReason is what a dropped attachment's record says: the refusal
// agents.invoke would have answered, without the field name it would
// have carried (the index is the record's own).
func skipReason(err error) string {
	var fe *api.FieldError
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}

// withSkipped adds the skipped attachments' records to the sent ones', in
// request order, so the run's record lists every attachment it was asked
// to take.
func withSkipped(records, skipped []api.AttachmentRecord) []api.AttachmentRecord {
	if len(skipped) == 0 {
		return records
	}
	out := append(append([]api.AttachmentRecord(nil), records...), skipped...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}
