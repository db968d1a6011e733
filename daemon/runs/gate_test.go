package runs

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/spawn"
)

// The refusals come in one documented order: with everything wrong at once,
// each check is reported only once those before it pass.
func TestGateRefusesInTheDocumentedOrder(t *testing.T) {
	in := gateInput{
		Adapter: "pi", InvokedBy: "pi", Mode: spawn.ModeBypass,
		Guard:     guard.Snapshot{MaxChain: 3},
		BinaryErr: &detect.UnusableError{ID: "pi", Path: "/x/pi", Reason: "not executable"},
		ReadOnly:  api.NotEnforced, Running: 8, MaxRuns: 8, ShuttingDown: true,
		Budget: &BudgetExceededError{Budget: "daily_usd", Scope: "all", Period: "day"},
	}
	steps := []struct {
		is  func(error) bool
		fix func(*gateInput)
	}{
		{isA[*guard.Refusal], func(in *gateInput) { in.InvokedBy = "" }},
		{func(err error) bool { return errors.Is(err, ErrShuttingDown) }, func(in *gateInput) { in.ShuttingDown = false }},
		{isA[*spawn.BypassRefusedError], func(in *gateInput) { in.Mode = spawn.ModeReadOnly }},
		{isA[*detect.UnusableError], func(in *gateInput) { in.BinaryErr = nil }},
		{isA[*UnenforcedReadOnlyError], func(in *gateInput) { in.Acknowledge = true }},
		{isA[*TooManyRunsError], func(in *gateInput) { in.Running = 7 }},
		{isA[*BudgetExceededError], func(in *gateInput) { in.Budget = nil }},
	}
	for i, s := range steps {
		_, ref := gate(in)
		require.Error(t, ref, "step %d", i)
		assert.True(t, s.is(ref), "step %d: got %T: %v", i, ref, ref)
		s.fix(&in)
	}
	seeded, ref := gate(in)
	assert.NoError(t, ref)
	assert.Empty(t, seeded)
}

func isA[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

func TestAnUnenforcedReadOnlyNeedsTheAcknowledgementOnlyInReadOnlyMode(t *testing.T) {
	base := gateInput{Adapter: "pi", Guard: guard.Snapshot{MaxChain: 3}, ReadOnly: api.NotEnforced, MaxRuns: 8}
	_, ref := gate(base)
	require.Error(t, ref)
	assert.True(t, isA[*UnenforcedReadOnlyError](ref))
	assert.Contains(t, ref.Error(), "acknowledge_unenforced_read_only")
	assert.Contains(t, ref.Error(), "only a request to the model")

	edit := base
	edit.Mode = spawn.ModeEdit
	_, ref = gate(edit)
	assert.NoError(t, ref, "edit mode promises no read-only, so there is nothing to acknowledge")

	enforced := base
	enforced.ReadOnly = api.EnforcedByOSSandbox
	_, ref = gate(enforced)
	assert.NoError(t, ref)
}

func TestTheChildEnvironmentIsStampedAndCleaned(t *testing.T) {
	base := map[string]string{"HOME": "/h", "PATH": "/usr/bin", "NOTIFY_SOCKET": "/run/sd", "CAR_INVOKED_BY": "stale", "CARD_RUN_ID": "old"}
	env := map[string]string{}
	for _, kv := range childEnv(base, "/opt/node/bin:/usr/bin", []string{"claude-code", "codex"}, "run_1") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	assert.Equal(t, "/h", env["HOME"])
	assert.Equal(t, "/opt/node/bin:/usr/bin", env["PATH"])
	assert.Equal(t, "claude-code,codex", env["CAR_INVOKED_BY"])
	assert.Equal(t, "run_1", env[proc.RunIDEnv])
	assert.NotContains(t, env, "NOTIFY_SOCKET")
}

func TestHowASpawnEndedMapsOntoTheRecordedStatus(t *testing.T) {
	cases := []struct {
		err   error
		cause error
		want  api.Status
	}{
		{nil, nil, api.StatusSucceeded},
		{&spawn.Error{Kind: api.KindTimeout}, nil, api.StatusTimedOut},
		{&spawn.Error{Kind: api.KindCancelled}, ErrCancelled, api.StatusCancelled},
		{&spawn.Error{Kind: api.KindCancelled}, ErrDisconnected, api.StatusCancelled},
		{&spawn.Error{Kind: api.KindCancelled}, ErrShutdown, api.StatusInterrupted},
		{&spawn.Error{Kind: api.KindAuth}, nil, api.StatusFailed},
		{errors.New("other"), nil, api.StatusFailed},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, outcome(tc.err, tc.cause), "%v / %v", tc.err, tc.cause)
	}
}

// An adapter whose edit mode card cannot hold (an agent declared in
// card.toml) runs edit only with its own acknowledgement; read_only's does
// not cover it, nor it read_only, and the other modes need neither.
func TestAnUnenforcedEditNeedsItsOwnAcknowledgementOnlyInEditMode(t *testing.T) {
	base := gateInput{Adapter: "mine", Guard: guard.Snapshot{MaxChain: 3}, ReadOnly: api.NotEnforced, Edit: api.NotEnforced,
		MaxRuns: 8, Mode: spawn.ModeEdit, Acknowledge: true, AllowBypass: true}
	_, ref := gate(base)
	var e *UnenforcedReadOnlyError
	require.ErrorAs(t, ref, &e)
	assert.Equal(t, "acknowledge_unenforced_edit", e.Field())
	assert.Contains(t, ref.Error(), "cannot enforce edit")
	assert.Contains(t, ref.Error(), "acknowledge_unenforced_edit = true")

	acked := base
	acked.AcknowledgeEdit = true
	_, ref = gate(acked)
	assert.NoError(t, ref)

	ro := acked
	ro.Mode = spawn.ModeReadOnly
	ro.Acknowledge = false
	_, ref = gate(ro)
	require.ErrorAs(t, ref, &e)
	assert.Equal(t, "acknowledge_unenforced_read_only", e.Field(), "the edit acknowledgement does not cover read_only")

	for _, m := range []spawn.Mode{spawn.ModeAsk, spawn.ModeBypass} {
		other := base
		other.Mode = m
		_, ref = gate(other)
		assert.NoError(t, ref, "%s", m)
	}
	held := base
	held.Edit = ""
	_, ref = gate(held)
	assert.NoError(t, ref, "an adapter that holds edit needs nothing")
}
