package runs

import (
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/spawn"
)

// gateInput is everything the pre-run checks look at, as values, so the
// order of refusals is a pure function a test can walk.
type gateInput struct {
	Adapter     string
	InvokedBy   string
	Mode        spawn.Mode
	Acknowledge bool
	Guard       guard.Snapshot
	AllowBypass bool
	// BinaryErr is detection's answer for the adapter (nil: runnable).
	BinaryErr error
	ReadOnly  api.ReadOnlyEnforcement
	// Edit is how the adapter's edit mode is held ("" as documented), and
	// AcknowledgeEdit the request's acknowledgement that it is not.
	Edit            api.ReadOnlyEnforcement
	AcknowledgeEdit bool
	Running         int
	MaxRuns         int
	ShuttingDown    bool
	// Budget is the budget gate's refusal (nil: within every budget).
	Budget error
}

// gate applies the checks in their documented order — guard, shutting down,
// bypass, installed/usable, unenforced read-only, concurrency, budgets —
// and returns
// the seeded ancestry (recorded on the run either way) and the first
// refusal. The guard comes first because a looping call must be stopped
// whatever else is wrong with it, and the cap last because it is the only
// transient ones
// with the budgets, which reset by the calendar.
func gate(in gateInput) ([]string, error) {
	ref, seeded := in.Guard.Check(in.Adapter, in.InvokedBy)
	if ref != nil {
		return seeded, ref
	}
	if in.ShuttingDown {
		return seeded, ErrShuttingDown
	}
	if in.Mode == spawn.ModeBypass && !in.AllowBypass {
		return seeded, &spawn.BypassRefusedError{Adapter: in.Adapter}
	}
	if in.BinaryErr != nil {
		return seeded, in.BinaryErr
	}
	if in.ReadOnly == api.NotEnforced && (in.Mode == "" || in.Mode == spawn.ModeReadOnly) && !in.Acknowledge {
		return seeded, &UnenforcedReadOnlyError{Adapter: in.Adapter, Enforcement: in.ReadOnly}
	}
	if in.Edit == api.NotEnforced && in.Mode == spawn.ModeEdit && !in.AcknowledgeEdit {
		return seeded, &UnenforcedReadOnlyError{Adapter: in.Adapter, Enforcement: in.Edit, Mode: spawn.ModeEdit}
	}
	if in.Running >= in.MaxRuns {
		return seeded, &TooManyRunsError{Running: in.Running, Max: in.MaxRuns}
	}
	if in.Budget != nil {
		return seeded, in.Budget
	}
	return seeded, nil
}
