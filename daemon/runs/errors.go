package runs

import (
	"errors"
	"fmt"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

// Why a run's context was cancelled; the recorded status follows from it.
var (
	// ErrShutdown ends runs when the daemon stops: recorded interrupted.
	ErrShutdown = errors.New("card is shutting down")
	// ErrCancelled is a cancel asked for by a client: recorded cancelled.
	// Its text follows the status "cancelled" wherever a run's end is
	// shown, so it says who, not "cancelled" again.
	ErrCancelled = errors.New("a client asked to stop it")
	// ErrDisconnected ends a run whose client went away, when the operator
	// set cancel_on_disconnect: recorded cancelled.
	ErrDisconnected = errors.New("the client that started it disconnected (cancel_on_disconnect = true)")
)

// The gates' refusals, besides the guard's *guard.Refusal, spawn's
// *spawn.BypassRefusedError and detection's *detect.NotInstalledError and
// *detect.UnusableError, which travel as they are.

// ErrShuttingDown refuses a run asked for while the daemon shuts down.
var ErrShuttingDown = errors.New("the daemon is shutting down and starts no new runs; retry once it is back")

// UnenforcedReadOnlyError refuses a read_only run of an adapter that cannot
// enforce it, unless the request acknowledged that.
// Mode is the mode refused: read_only (also when empty), or edit for an
// adapter whose edit mode card cannot hold either.
type UnenforcedReadOnlyError struct {
	Adapter     string
	Enforcement api.ReadOnlyEnforcement
	Mode        spawn.Mode
}

// Field is the request param that acknowledges the refused mode.
func (e *UnenforcedReadOnlyError) Field() string {
	if e.Mode == spawn.ModeEdit {
		return "acknowledge_unenforced_edit"
	}
	return "acknowledge_unenforced_read_only"
}

func (e *UnenforcedReadOnlyError) Error() string {
	if e.Mode == spawn.ModeEdit {
		return fmt.Sprintf("%s cannot enforce edit: the agent may write files without asking, so card sees only the writes it is asked about "+
			"and \"only under the working dir\" is not held for the rest. Pass acknowledge_unenforced_edit = true to run it anyway, "+
			"or use permission_mode ask", e.Adapter)
	}
	return fmt.Sprintf("%s cannot enforce read_only: nothing stops the agent from writing files or running commands, "+
		"so read_only is only a request to the model. Pass acknowledge_unenforced_read_only = true to run it anyway, "+
		"or use an adapter whose read_only is enforced", e.Adapter)
}

// TooManyRunsError refuses a run over max_concurrent_runs: refused, never
// queued, because a queue would hide from the caller that nothing runs yet.
type TooManyRunsError struct{ Running, Max int }

func (e *TooManyRunsError) Error() string {
	return fmt.Sprintf("card is already running %d agents (max_concurrent_runs = %d); the run was refused, not queued: "+
		"retry when one ends, or raise max_concurrent_runs in card.toml", e.Running, e.Max)
}

// RefusedError is a gate's refusal of a run that was recorded (status
// refused) as RunID; Err is the refusal.
type RefusedError struct {
	RunID string
	Err   error
}

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// NotFoundError is an unknown run id.
type NotFoundError struct{ RunID string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no run %q: runs.list shows the recorded runs", e.RunID)
}

// WaitEndedError is a wait for a run's outcome that ended before the run
// did: the request was withdrawn or its connection closed. The run goes on:
// it belongs to the daemon.
type WaitEndedError struct {
	RunID string
	Err   error
}

func (e *WaitEndedError) Error() string {
	return fmt.Sprintf("request cancelled: the client withdrew it with $/cancelRequest; run %s goes on (agents.cancel ends it, runs.subscribe follows it)", e.RunID)
}

func (e *WaitEndedError) Unwrap() error { return e.Err }

// BehindError cuts off a subscriber that fell too far behind its run: the
// run added more than Limit bytes of events it has yet to be sent. The run
// goes on; the subscriber may subscribe again after NextSeq-1.
type BehindError struct {
	RunID   string
	NextSeq int64
	Behind  int64
	Limit   int64
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("run %s: this subscriber was cut off %d bytes behind the run (max_subscriber_queue_bytes = %d); "+
		"the run goes on: runs.subscribe with after_seq = %d continues from where it stopped", e.RunID, e.Behind, e.Limit, e.NextSeq-1)
}
