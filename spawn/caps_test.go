package spawn

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

// capRun runs a fake agent that prints lines, one every 50 ms, then waits
// a minute (a run left to itself would hit the test's deadline), and
// parses them with adapter's parser under the request's caps.
func capRun(t *testing.T, adapter string, lines []string, cost *float64, tokens *int64) (api.Result, []Event, time.Duration, error) {
	t.Helper()
	a, ok := Lookup(adapter)
	require.True(t, ok)
	script := filepath.Join(t.TempDir(), "stream")
	require.NoError(t, os.WriteFile(script, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	p := shPlan(t, `while IFS= read -r l; do printf '%s\n' "$l"; sleep 0.05; done < `+script+`; sleep 60`)
	require.NoError(t, withCaps(&p, a, Request{Adapter: adapter, MaxCostUSD: cost, MaxTokens: tokens}))
	var evs []Event
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, RunSpec{Plan: p, Parser: a.NewParser(), OnEvent: func(ev Event) { evs = append(evs, ev) },
		Limits: Limits{KillGrace: 200 * time.Millisecond}})
	return res, evs, time.Since(start), err
}

func piMessageLine(in, out int, cost string) string {
	return `{"type":"message_end","message":{"role":"assistant","model":"m","content":[{"type":"text","text":"step"}],"usage":{"input":` + itoa(in) +
		`,"output":` + itoa(out) + `,"cacheRead":0,"cost":{"total":` + cost + `}},"stopReason":"toolUse"}}`
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestATokenCapPassedMidRunKillsTheAgentAndEndsBudgetWithItsUsage(t *testing.T) {
	lines := []string{
		`{"type":"session","version":3,"id":"p1","cwd":"/w"}`,
		piMessageLine(400, 100, "0"), piMessageLine(600, 134, "0"), piMessageLine(5000, 5000, "0"),
	}
	res, evs, took, err := capRun(t, "pi", lines, nil, i64(1000))
	e := runErr(t, err)
	assert.Equal(t, api.KindBudget, e.Kind)
	assert.Equal(t, "max_tokens 1000 passed: the agent reported 1,234 tokens (input 1,000, output 234)", e.Message)
	require.NotNil(t, res.Error)
	assert.Equal(t, api.KindBudget, res.Error.Kind)
	assert.Equal(t, api.Usage{InputTokens: 1000, OutputTokens: 234}, res.Usage, "the usage up to the cap is recorded")
	assert.Less(t, took, 20*time.Second, "the agent's group was ended, not waited out")
	n := 0
	for _, ev := range evs {
		if ev.Kind == api.EventUsage {
			n++
		}
	}
	assert.Equal(t, 2, n, "the client sees the usage that passed the cap and nothing after it")
}

func TestACostCapOnAnAgentThatReportsCostIsAddedUpPerModelCall(t *testing.T) {
	lines := []string{
		`{"type":"session","version":3,"id":"p1","cwd":"/w"}`,
		piMessageLine(10, 5, "0.02"), piMessageLine(10, 5, "0.02"), piMessageLine(10, 5, "0.02"),
	}
	res, _, _, err := capRun(t, "pi", lines, f64(0.05), nil)
	e := runErr(t, err)
	assert.Equal(t, api.KindBudget, e.Kind)
	assert.Equal(t, "max_cost_usd 0.05 passed: pi reported $0.0600 spent (input 30, output 15 tokens)", e.Message)
	assert.Equal(t, api.Usage{InputTokens: 30, OutputTokens: 15}, res.Usage)
}

func TestAnAgentUnderItsCapsIsNotStopped(t *testing.T) {
	lines := []string{
		`{"type":"session","version":3,"id":"p1","cwd":"/w"}`,
		piMessageLine(10, 5, "0.01"),
		`{"type":"agent_end","messages":[]}`,
	}
	a, _ := Lookup("pi")
	p := shPlan(t, `printf '%s\n' '`+strings.Join(lines, `' '`)+`'`)
	require.NoError(t, withCaps(&p, a, Request{Adapter: "pi", MaxCostUSD: f64(1), MaxTokens: i64(1000)}))
	res, err := Run(context.Background(), RunSpec{Plan: p, Parser: a.NewParser()})
	if err != nil {
		assert.NotEqual(t, api.KindBudget, runErr(t, err).Kind, "%v", err)
	}
	assert.NotEqual(t, api.KindBudget, kindOf(res))
}

func kindOf(r api.Result) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Kind
}

func TestATokenCapReportedOnlyAtTurnEndEndsTheRunBudgetWithTheAnswerKept(t *testing.T) {
	lines := []string{
		`{"type":"thread.started","thread_id":"t1"}`,
		`{"type":"turn.started"}`,
		`{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"the answer"}}`,
		`{"type":"turn.completed","usage":{"input_tokens":900,"cached_input_tokens":0,"output_tokens":200}}`,
	}
	res, _, _, err := capRun(t, "codex", lines, nil, i64(1000))
	e := runErr(t, err)
	assert.Equal(t, api.KindBudget, e.Kind)
	assert.Equal(t, "max_tokens 1000 passed: the agent reported 1,100 tokens (input 900, output 200)", e.Message)
	assert.Equal(t, "the answer", res.Answer, "the answer that came with the usage is recorded")
	assert.Equal(t, api.Usage{InputTokens: 900, OutputTokens: 200}, res.Usage)
}

func TestClaudesOwnSpendingCapIsPassedOnAndItsEndingIsBudget(t *testing.T) {
	a, _ := Lookup("claude-code")
	p, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: "/tmp", MaxCostUSD: f64(0.01)})
	require.NoError(t, err)
	assert.Contains(t, p.Command(), " --max-budget-usd 0.01")
	// A real capture: Claude Code 2.1.197 against a stand-in whose model
	// call cost $3.015, run with --max-budget-usd 0.01.
	stream := filepath.Join("testdata", "claude-stream-budget.jsonl")
	abs, err := filepath.Abs(stream)
	require.NoError(t, err)
	sh := shPlan(t, `cat `+abs+`; exit 1`)
	sh.Caps = p.Caps
	res, err := Run(context.Background(), RunSpec{Plan: sh, Parser: a.NewParser()})
	e := runErr(t, err)
	assert.Equal(t, api.KindBudget, e.Kind)
	assert.Equal(t, "max_cost_usd 0.01 passed: claude-code reported $3.0150 spent (input 1,000,000, output 1,000 tokens); claude-code said: Reached maximum budget ($0.01)", e.Message)
	assert.Equal(t, api.Usage{InputTokens: 1_000_000, OutputTokens: 1000}, res.Usage, "Claude zeroes usage here; its modelUsage keeps the counts")
}

func TestCapsThatAreNotALimitAreRefusedNamingTheField(t *testing.T) {
	cases := []struct {
		name   string
		cost   *float64
		tokens *int64
		field  string
	}{
		{"a negative cost", f64(-1), nil, "max_cost_usd"},
		{"a zero cost", f64(0), nil, "max_cost_usd"},
		{"a NaN cost", f64(math.NaN()), nil, "max_cost_usd"},
		{"an infinite cost", f64(math.Inf(1)), nil, "max_cost_usd"},
		{"an absurd cost", f64(1e9), nil, "max_cost_usd"},
		{"a negative token cap", nil, i64(-5), "max_tokens"},
		{"a zero token cap", nil, i64(0), "max_tokens"},
		{"an absurd token cap", nil, i64(MaxTokensLimit + 1), "max_tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: "/tmp", MaxCostUSD: c.cost, MaxTokens: c.tokens})
			var fe *api.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.field, fe.Field)
		})
	}
}

func TestACostCapIsRefusedByAnAdapterThatNeitherCapsNorReportsCost(t *testing.T) {
	for _, id := range IDs() {
		a, _ := Lookup(id)
		_, err := Build("/bin/"+id, Request{Adapter: id, Cwd: "/tmp", MaxCostUSD: f64(1)})
		if a.Caps.NoCost == "" {
			assert.NoError(t, err, id)
			continue
		}
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe, id)
		assert.Equal(t, "max_cost_usd", fe.Field)
		assert.Contains(t, fe.Message, a.Caps.NoCost)
	}
}

func TestATokenCapIsRefusedExactlyByAnAdapterThatReportsNoTokens(t *testing.T) {
	for _, id := range IDs() {
		a, _ := Lookup(id)
		_, err := Build("/bin/"+id, Request{Adapter: id, Cwd: "/tmp", MaxTokens: i64(1000)})
		if a.Caps.NoTokens == "" {
			assert.NoError(t, err, id)
			continue
		}
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe, id)
		assert.Equal(t, "max_tokens", fe.Field)
	}
}

// A run whose conversation card named reports card's id, in its session
// event and its result, not the one the CLI prints for itself: card's id
// is the one that finds the conversation again. A run that keeps no
// session reports none.
func TestARunCardNamedReportsCardsSessionIDNotTheCLIsOwn(t *testing.T) {
	script := filepath.Join(t.TempDir(), "stream")
	require.NoError(t, os.WriteFile(script, []byte(strings.Join([]string{
		`{"type":"session","version":3,"id":"01a23495-pi-own","cwd":"/w"}`,
		`{"type":"message_end","message":{"role":"assistant","model":"m","content":[{"type":"text","text":"Hi."}],"usage":{"input":7,"output":3,"cost":{"total":0}},"stopReason":"stop"}}`,
		`{"type":"agent_end","messages":[]}`,
	}, "\n")+"\n"), 0o600))
	for _, named := range []string{"", "123e4567-e89b-12d3-a456-426614174000", "none"} {
		p := shPlan(t, `cat `+script)
		p.SessionID = named
		if named == "none" {
			p.SessionID, p.NoSessionID = "", true
		}
		a, _ := Lookup("pi")
		var evs []Event
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := Run(ctx, RunSpec{Plan: p, Parser: a.NewParser(), OnEvent: func(ev Event) { evs = append(evs, ev) }})
		cancel()
		require.NoError(t, err)
		want := named
		switch named {
		case "":
			want = "01a23495-pi-own"
		case "none":
			// A run that keeps no session names none.
			assert.Empty(t, res.SessionID)
			assert.NotContains(t, kinds(evs), api.EventSession)
			assert.Equal(t, "Hi.", res.Answer)
			continue
		}
		assert.Equal(t, want, res.SessionID)
		require.NotEmpty(t, evs)
		assert.Equal(t, Event{Kind: api.EventSession, SessionID: want}, evs[0])
	}
}
