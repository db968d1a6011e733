package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/runs"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// CAR's timeout_secs defaults to 300 and is clamped to [1, 3600], as CAR
// documents agents.invoke_external's (agents.invoke refuses such a value:
// TestATimeoutOrAListLimitOutsideItsDocumentedRangeIsRefusedNamingTheField).
func TestTimeoutDefaultsAndIsClamped(t *testing.T) {
	for in, want := range map[int]int{0: 300, -5: 1, 1: 1, 90: 90, 3600: 3600, 99999: 3600, 1_000_000_000_000: 3600} {
		p := invokeParamsOf(&ExternalInvokeParams{TimeoutSecs: in})
		assert.Equal(t, want, int(p.Timeout().Seconds()), "timeout_secs %d", in)
	}
}

func TestEveryArgvShapingParamReachesTheSpawnRequest(t *testing.T) {
	p := InvokeParams{ID: "claude-code", Task: "t", PermissionMode: "edit", AllowedTools: []string{"Read"},
		Model: "m", MaxTurns: 2, Effort: "high", SystemPrompt: "sp", SystemPromptAppend: true,
		DiscardSession: true, Cwd: "/x"}
	req := spawnRequestOf(&p)
	assert.Equal(t, spawn.Request{Adapter: "claude-code", Mode: spawn.ModeEdit, AllowedTools: []string{"Read"},
		Model: "m", MaxTurns: 2, Effort: "high", SystemPrompt: "sp", SystemPromptAppend: true, NoSession: true, Cwd: "/x"}, req)

	plan, err := spawn.Build("/bin/claude", spawn.Request{Adapter: "claude-code", Cwd: "/", SystemPrompt: "sp", SystemPromptAppend: true, NoSession: true})
	require.NoError(t, err)
	assert.Contains(t, plan.Args, "--append-system-prompt-file")
}

// Each refusal of the gate becomes its code, with the recorded run's id in
// data, and its message is the reason recorded on the run.
func TestEveryRefusalMapsOntoItsCodeAndNamesTheRecordedRun(t *testing.T) {
	cases := []struct {
		err  error
		code int64
	}{
		{&guard.Refusal{Adapter: "pi", Ancestry: []string{"pi"}, MaxChain: 3, Reason: guard.ReasonCycle}, CodeGuardRefused},
		{runs.ErrShuttingDown, rpc.CodeShuttingDown},
		{&spawn.BypassRefusedError{Adapter: "pi"}, CodeBypassNotAllowed},
		{&detect.NotInstalledError{ID: "pi", Binary: "pi"}, CodeAgentNotInstalled},
		{&detect.UnusableError{ID: "pi", Path: "/x/pi", Reason: "not executable"}, CodeAgentUnusable},
		{&runs.UnenforcedReadOnlyError{Adapter: "pi", Enforcement: detect.NotEnforced}, CodeUnenforcedReadOnly},
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
	assert.ErrorIs(t, nf, &rpc.Error{Code: CodeRunNotFound})
}

// prepare decides every bad-params answer itself and builds the plan once,
// with no binary in it: the gate supplies the one detection resolved.
func TestPrepareBuildsThePlanOnceWithoutABinary(t *testing.T) {
	d := &Daemon{cfg: DefaultConfig(), env: map[string]string{"HOME": t.TempDir()}}
	req, err := d.prepare(InvokeParams{ID: "claude-code", Task: "t", Model: "m", MaxTurns: 2})
	require.NoError(t, err)
	assert.Empty(t, req.Plan.Program)
	assert.Equal(t, d.env["HOME"], req.Plan.Dir, "read_only without cwd runs in the home")
	assert.Contains(t, req.Plan.Args, "--max-turns")
	assert.Equal(t, spawn.ModeReadOnly, req.Mode)

	_, err = d.prepare(InvokeParams{ID: "droid", Task: "t", PermissionMode: "edit", Cwd: t.TempDir()})
	var fe *spawn.FieldError
	require.ErrorAs(t, err, &fe, "an adapter's own refusal is a field error before any record")
	_, err = d.prepare(InvokeParams{ID: "claude-code", Task: "t", PermissionMode: "bypass", Cwd: t.TempDir()})
	assert.NoError(t, err, "bypass is the gate's to refuse, after the guard")
}
