package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
	"github.com/card-dev/card/spawn"
)

// CAR's timeout_secs defaults to 300 and is clamped to [1, 3600], as CAR
// documents agents.invoke_external's (agents.invoke refuses such a value:
// TestATimeoutOrAListLimitOutsideItsDocumentedRangeIsRefusedNamingTheField).
func TestTimeoutDefaultsAndIsClamped(t *testing.T) {
	for in, want := range map[int]int{0: 300, -5: 1, 1: 1, 90: 90, 3600: 3600, 99999: 3600, 1_000_000_000_000: 3600} {
		p := invokeParamsOf(&api.ExternalInvokeParams{TimeoutSecs: in})
		assert.Equal(t, want, int(p.Timeout().Seconds()), "timeout_secs %d", in)
	}
}

// Each refusal of the gate becomes its code, with the recorded run's id in
// data, and its message is the reason recorded on the run.
func TestEveryRefusalMapsOntoItsCodeAndNamesTheRecordedRun(t *testing.T) {
	cases := []struct {
		err  error
		code int64
	}{
		{&guard.Refusal{Adapter: "pi", Ancestry: []string{"pi"}, MaxChain: 3, Reason: guard.ReasonCycle}, CodeGuardRefused},
		{runs.ErrShuttingDown, rpcclient.CodeShuttingDown},
		{&spawn.BypassRefusedError{Adapter: "pi"}, CodeBypassNotAllowed},
		{&detect.NotInstalledError{ID: "pi", Binary: "pi"}, CodeAgentNotInstalled},
		{&detect.UnusableError{ID: "pi", Path: "/x/pi", Reason: "not executable"}, CodeAgentUnusable},
		{&runs.UnenforcedReadOnlyError{Adapter: "pi", Enforcement: api.NotEnforced}, CodeUnenforcedReadOnly},
		{&runs.TooManyRunsError{Running: 8, Max: 8}, CodeTooManyRuns},
	}
	for _, tc := range cases {
		e := rpc.ToError(wireError(&runs.RefusedError{RunID: "run_1", Err: tc.err}))
		assert.Equal(t, tc.code, e.Code, "%T", tc.err)
		assert.Equal(t, tc.err.Error(), e.Message)
		data, _ := e.Data.(map[string]any)
		assert.Equal(t, "run_1", data["run_id"], "%T", tc.err)
	}
	nf := rpc.ToError(wireError(&runs.NotFoundError{RunID: "run_x"}))
	assert.Equal(t, CodeRunNotFound, nf.Code)
	assert.ErrorIs(t, nf, &rpcclient.Error{Code: CodeRunNotFound})
}
