package daemon

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// The refusals come in one documented order: with everything wrong at once,
// each check is reported only once those before it pass.
func TestGateRefusesInTheDocumentedOrder(t *testing.T) {
	all := gateInput{
		Adapter: "pi", InvokedBy: "pi", Mode: spawn.ModeBypass,
		Guard:     guard.Snapshot{MaxChain: 3},
		BinaryErr: &detect.UnusableError{ID: "pi", Path: "/x/pi", Reason: "not executable"},
		ReadOnly:  detect.NotEnforced, Running: 8, MaxRuns: 8,
	}
	steps := []struct {
		code int64
		fix  func(*gateInput)
	}{
		{CodeGuardRefused, func(in *gateInput) { in.InvokedBy = "" }},
		{CodeBypassNotAllowed, func(in *gateInput) { in.Mode = spawn.ModeReadOnly }},
		{CodeAgentUnusable, func(in *gateInput) { in.BinaryErr = nil }},
		{CodeUnenforcedReadOnly, func(in *gateInput) { in.Acknowledge = true }},
		{CodeTooManyRuns, func(in *gateInput) { in.Running = 7 }},
	}
	in := all
	for _, s := range steps {
		_, ref := gate(in)
		require.Error(t, ref, "want code %d", s.code)
		e := rpc.ToError(wireError(ref))
		assert.Equal(t, s.code, e.Code, e.Message)
		assert.Equal(t, ref.Error(), e.Message, "the recorded reason is the answer's message")
		s.fix(&in)
	}
	seeded, ref := gate(in)
	assert.NoError(t, ref)
	assert.Empty(t, seeded)
}

func TestAnUnenforcedReadOnlyNeedsTheAcknowledgementOnlyInReadOnlyMode(t *testing.T) {
	base := gateInput{Adapter: "pi", Guard: guard.Snapshot{MaxChain: 3}, ReadOnly: detect.NotEnforced, MaxRuns: 8}
	_, ref := gate(base)
	require.Error(t, ref)
	e := rpc.ToError(wireError(ref))
	assert.Equal(t, CodeUnenforcedReadOnly, e.Code)
	assert.Contains(t, e.Message, "acknowledge_unenforced_read_only")
	assert.Contains(t, e.Message, "only a request to the model")

	edit := base
	edit.Mode = spawn.ModeEdit
	_, ref = gate(edit)
	assert.NoError(t, ref, "edit mode promises no read-only, so there is nothing to acknowledge")

	enforced := base
	enforced.ReadOnly = detect.EnforcedByOSSandbox
	_, ref = gate(enforced)
	assert.NoError(t, ref)
}

func TestTimeoutDefaultsAndIsClamped(t *testing.T) {
	for in, want := range map[int]int{0: 300, -5: 1, 1: 1, 90: 90, 3600: 3600, 99999: 3600} {
		p := InvokeParams{TimeoutSecs: in}
		assert.Equal(t, want, int(p.Timeout().Seconds()), "timeout_secs %d", in)
	}
}

func TestTheChildEnvironmentIsStampedAndCleaned(t *testing.T) {
	base := map[string]string{"HOME": "/h", "PATH": "/usr/bin", "NOTIFY_SOCKET": "/run/sd", "CAR_INVOKED_BY": "stale", "CARD_RUN_ID": "old"}
	env := envMap(childEnv(base, "/opt/node/bin:/usr/bin", []string{"claude-code", "codex"}, "run_1"))
	assert.Equal(t, "/h", env["HOME"])
	assert.Equal(t, "/opt/node/bin:/usr/bin", env["PATH"])
	assert.Equal(t, "claude-code,codex", env["CAR_INVOKED_BY"])
	assert.Equal(t, "run_1", env[RunIDEnv])
	assert.NotContains(t, env, "NOTIFY_SOCKET")
}

func TestHowASpawnEndedMapsOntoTheRecordedStatus(t *testing.T) {
	cases := []struct {
		err   error
		cause error
		want  store.Status
	}{
		{nil, nil, store.StatusSucceeded},
		{&spawn.Error{Kind: spawn.KindTimeout}, nil, store.StatusTimedOut},
		{&spawn.Error{Kind: spawn.KindCancelled}, errUserCancel, store.StatusCancelled},
		{&spawn.Error{Kind: spawn.KindCancelled}, errDisconnected, store.StatusCancelled},
		{&spawn.Error{Kind: spawn.KindCancelled}, errShutdown, store.StatusInterrupted},
		{&spawn.Error{Kind: spawn.KindAuth}, nil, store.StatusFailed},
		{errors.New("other"), nil, store.StatusFailed},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, outcome(tc.err, tc.cause), "%v / %v", tc.err, tc.cause)
	}
}

func TestEveryArgvShapingParamReachesTheSpawnRequest(t *testing.T) {
	p := InvokeParams{ID: "claude-code", Task: "t", PermissionMode: "edit", AllowedTools: []string{"Read"},
		Model: "m", MaxTurns: 2, Effort: "high", SystemPrompt: "sp", SystemPromptAppend: true,
		DiscardSession: true, Cwd: "/x"}
	req := p.spawnRequest()
	assert.Equal(t, spawn.Request{Adapter: "claude-code", Mode: spawn.ModeEdit, AllowedTools: []string{"Read"},
		Model: "m", MaxTurns: 2, Effort: "high", SystemPrompt: "sp", SystemPromptAppend: true, NoSession: true, Cwd: "/x"}, req)

	plan, err := spawn.Build("/bin/claude", spawn.Request{Adapter: "claude-code", Cwd: "/", SystemPrompt: "sp", SystemPromptAppend: true, NoSession: true})
	require.NoError(t, err)
	assert.Contains(t, plan.Args, "--append-system-prompt-file")
}
