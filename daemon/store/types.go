package store

import (
	"encoding/json"
	"time"

	"github.com/card-dev/card/api"
)

// TaskDigest is the length in bytes and the hex SHA-256 of task
// (api.TaskDigest).
func TaskDigest(task string) (length int, sha256Hex string) { return api.TaskDigest(task) }

// Finish is the outcome of a run, recorded once.
type Finish struct {
	// Status must be terminal.
	Status api.Status
	// EndedAt defaults to the store's clock.
	EndedAt      time.Time
	ExitCode     *int
	SessionID    string
	Answer       string
	Error        *api.RunError
	Usage        *api.Usage
	TotalCostUSD *float64
	Turns        int
	ToolCalls    int
	// RefusalReason is for a run refused after it was created (e.g. by the
	// concurrency cap).
	RefusalReason string
	// EventsDropped is how many of the run's events were left out of the
	// store because the run passed its bound.
	EventsDropped int64
	// SessionUsage is the CLI's running total for its session, where it
	// reports one (Run.SessionUsage).
	SessionUsage *api.Usage
}

// Event is one streamed event of a run, as recorded for runs.subscribe.
type Event struct {
	RunID     string          `json:"run_id"`
	Seq       int64           `json:"seq"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
}

// ListQuery selects runs for runs.list.
type ListQuery struct {
	// Limit is clamped to [1, MaxListLimit]; zero means DefaultListLimit.
	Limit int
	// Before is a run id cursor: only runs older than it are listed. Pass the
	// last run_id of one page to get the next.
	Before string
	// Adapter and Status filter when not empty.
	Adapter string
	Status  api.Status
}
