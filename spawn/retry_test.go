package spawn

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

func retryEv(attempt int, cause, why string) Event {
	return Event{Kind: api.EventRetry, Attempt: attempt, Error: why, cause: cause}
}

func TestTheRetryGuardEndsARunOnlyWhenTheAgentsRetryingMustStop(t *testing.T) {
	cases := []struct {
		name   string
		max    int
		events []Event
		// endAt is the index of the event that ends the run (-1: none),
		// kind the error kind it ends with.
		endAt int
		kind  string
	}{
		{"a refused key gets one retry", 3, []Event{retryEv(1, api.KindAuth, "authentication_failed (HTTP 401)")}, -1, ""},
		{"a key refused again ends the run", 10, []Event{retryEv(1, api.KindAuth, "authentication_failed (HTTP 401)"), retryEv(2, api.KindAuth, "authentication_failed (HTTP 401)")}, 1, api.KindAuth},
		{"a refresh that worked starts the count again", 10, []Event{retryEv(1, api.KindAuth, "401"), {Kind: api.EventText, Text: "hi"}, retryEv(1, api.KindAuth, "401")}, -1, ""},
		{"a refused key with no retries allowed ends at once", 0, []Event{retryEv(1, api.KindAuth, "401")}, 0, api.KindAuth},
		{"retries within the bound go on", 3, []Event{retryEv(1, api.KindRateLimit, "429"), retryEv(2, api.KindRateLimit, "429"), retryEv(3, api.KindRateLimit, "429")}, -1, ""},
		{"the retry past the bound ends it", 2, []Event{retryEv(1, api.KindRateLimit, "429"), retryEv(2, api.KindRateLimit, "429"), retryEv(3, api.KindRateLimit, "429")}, 2, api.KindRateLimit},
		{"no retries allowed", 0, []Event{retryEv(1, api.KindAPI, "overloaded (HTTP 529)")}, 0, api.KindAPI},
		{"an agent that gives no attempt is counted", 1, []Event{retryEv(0, api.KindNetwork, "refused"), retryEv(0, api.KindNetwork, "refused")}, 1, api.KindNetwork},
		{"progress starts the count again", 1, []Event{retryEv(0, api.KindRateLimit, "429"), {Kind: api.EventText, Text: "hi"}, retryEv(0, api.KindRateLimit, "429"), {Kind: api.EventToolUse}, retryEv(0, api.KindRateLimit, "429")}, -1, ""},
		{"a session or other event is not progress", 1, []Event{retryEv(0, api.KindRateLimit, "429"), {Kind: api.EventOther}, {Kind: api.EventWarning}, retryEv(0, api.KindRateLimit, "429")}, 3, api.KindRateLimit},
		{"a retry without a cause past the bound is api", 0, []Event{retryEv(1, "", "")}, 0, api.KindAPI},
		{"an agent that will wait without end is stopped", 10, []Event{{Kind: api.EventRetry, Error: "Connection failed", cause: api.KindNetwork, unbounded: true}}, 0, api.KindNetwork},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newRetryGuard(c.max)
			end := -1
			var got *api.RunError
			for i := range c.events {
				if v := g.observe(&c.events[i]); v.end != nil && end < 0 {
					end, got = i, v.end
				}
			}
			require.Equal(t, c.endAt, end)
			if got != nil {
				assert.Equal(t, c.kind, got.Kind)
				if why := c.events[end].Error; why != "" {
					assert.True(t, strings.HasPrefix(got.Message, why), "the agent's own words first: %q", got.Message)
				}
			}
		})
	}
}

func TestARetryEventCarriesItsAttemptAndTheBoundItRunsUnder(t *testing.T) {
	g := newRetryGuard(3)
	ev := Event{Kind: api.EventRetry, Attempt: 1, MaxAttempts: 10, cause: api.KindRateLimit}
	g.observe(&ev)
	assert.Equal(t, 1, ev.Attempt)
	assert.Equal(t, 3, ev.MaxAttempts, "card's bound, not the agent's own ten")

	ev = Event{Kind: api.EventRetry, cause: api.KindRateLimit}
	g.observe(&ev)
	assert.Equal(t, 2, ev.Attempt, "counted when the agent gives none")
	assert.Equal(t, 3, ev.MaxAttempts)

	ev = Event{Kind: api.EventRetry, Attempt: 1, MaxAttempts: 2, cause: api.KindRateLimit}
	newRetryGuard(5).observe(&ev)
	assert.Equal(t, 2, ev.MaxAttempts, "the agent's own bound when it is the smaller")

	// Claude Code says "attempt 3 of 10" of a 401 after two rate limits;
	// the run ends at the next refusal, so the one retry it gets is 1 of 1.
	g = newRetryGuard(3)
	for range 2 {
		g.observe(&Event{Kind: api.EventRetry, cause: api.KindRateLimit})
	}
	ev = Event{Kind: api.EventRetry, Attempt: 3, MaxAttempts: 10, cause: api.KindAuth}
	g.observe(&ev)
	assert.Equal(t, 1, ev.Attempt, "a refused credential counts its own retries")
	assert.Equal(t, 1, ev.MaxAttempts, "and runs under its own bound of one")
}

// emitRecorder collects a run's events and how the emitter ended it.
type emitRecorder struct {
	mu   sync.Mutex
	evs  []Event
	ends []*api.RunError
	at   time.Time
}

func (r *emitRecorder) event(ev Event) { r.mu.Lock(); r.evs = append(r.evs, ev); r.mu.Unlock() }
func (r *emitRecorder) end(f *api.RunError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ends == nil {
		r.at = time.Now()
	}
	r.ends = append(r.ends, f)
}
func (r *emitRecorder) ended() []*api.RunError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*api.RunError(nil), r.ends...)
}

func TestAnAPIOutOfReachEndsTheRunAfterTheGraceUnlessItComesBack(t *testing.T) {
	rec := &emitRecorder{}
	e := newEmitter(rec.event, nil, 10, nil, rec.end)
	e.grace = 100 * time.Millisecond
	start := time.Now()
	e.emit([]Event{retryEv(1, api.KindNetwork, "Connection error.")})
	e.emit([]Event{retryEv(2, api.KindNetwork, "Connection error.")})
	require.Eventually(t, func() bool { return len(rec.ended()) == 1 }, 5*time.Second, 5*time.Millisecond)
	f := rec.ended()[0]
	assert.Equal(t, api.KindNetwork, f.Kind)
	assert.True(t, strings.HasPrefix(f.Message, "Connection error."), f.Message)
	assert.GreaterOrEqual(t, rec.at.Sub(start), e.grace, "not before the grace is over")
	e.stop()

	// Progress stops the clock: the API answered after all.
	rec = &emitRecorder{}
	e = newEmitter(rec.event, nil, 10, nil, rec.end)
	e.grace = 100 * time.Millisecond
	e.emit([]Event{retryEv(1, api.KindNetwork, "Connection error."), {Kind: api.EventText, Text: "back", Delta: true}})
	time.Sleep(3 * e.grace)
	assert.Empty(t, rec.ended(), "an API that answered again does not end the run")
	e.stop()

	// A run that ends first stops the clock too.
	rec = &emitRecorder{}
	e = newEmitter(rec.event, nil, 10, nil, rec.end)
	e.grace = 100 * time.Millisecond
	e.emit([]Event{retryEv(1, api.KindNetwork, "Connection error.")})
	e.stop()
	time.Sleep(3 * e.grace)
	assert.Empty(t, rec.ended())
}

// replayPlan is a fake agent that prints a capture (stdout and, when given,
// stderr) and then, like the real CLI still retrying, stays alive.
func replayPlan(t *testing.T, stdout, stderr string, maxRetries int) Plan {
	t.Helper()
	abs := func(name string) string {
		p, err := filepath.Abs(name)
		require.NoError(t, err)
		return p
	}
	script := "cat " + abs(stdout)
	if stderr != "" {
		script += "; cat " + abs(stderr) + " >&2"
	}
	script += "; exec sleep 60"
	p := shPlan(t, script)
	p.MaxAPIRetries = maxRetries
	return p
}

func runCapture(t *testing.T, adapter string, plan Plan) (api.Result, *Error, []Event, time.Duration) {
	t.Helper()
	a, _ := Lookup(adapter)
	rec := &emitRecorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var pgid int
	start := time.Now()
	res, err := Run(ctx, RunSpec{Plan: plan, Parser: a.NewParser(), OnEvent: rec.event, OnStart: func(_, g int) { pgid = g }})
	took := time.Since(start)
	require.NoError(t, ctx.Err(), "the run was ended by card, not by the test's deadline")
	members, _ := proc.GroupMembers(pgid)
	assert.Empty(t, members, "the agent's whole group is gone")
	return res, runErr(t, err), rec.evs, took
}

// The real first seconds of a Claude Code run whose API answers 401: card
// ends it when the key is refused a second time, instead of waiting out
// Claude's ten retries.
func TestARefusedKeyEndsTheRunWhenItIsRefusedAgain(t *testing.T) {
	res, e, evs, took := runCapture(t, "claude-code", replayPlan(t, "testdata/claude-stream-401-retrying.jsonl", "", 3))
	assert.Equal(t, api.KindAuth, e.Kind)
	assert.Less(t, took, 5*time.Second)
	require.NotNil(t, res.Error)
	assert.Equal(t, api.KindAuth, res.Error.Kind)
	assert.Contains(t, res.Error.Message, "authentication_failed (HTTP 401)")
	assert.Equal(t, "56c43050-8590-4abf-97d1-807436f5e7e0", res.SessionID)
	retries := eventsOf(evs, api.EventRetry)
	require.Len(t, retries, 1, "one retry; the refusal after it ends the run and is not sent as a retry")
	assert.Equal(t, 1, retries[0].Attempt)
	assert.Equal(t, 1, retries[0].MaxAttempts, "a refused key's own bound of one retry, not max_api_retries")
}

// Codex's real "Reconnecting... n/m" lines past max_api_retries end the run
// with the kind and the words of the retry that went over.
func TestRetriesPastTheBoundEndTheRunWithTheAgentsOwnMessage(t *testing.T) {
	res, e, evs, took := runCapture(t, "codex", replayPlan(t, "../e2e/fixtures/cli/codex-exec-json-429-reconnecting.jsonl", "", 1))
	assert.Equal(t, api.KindRateLimit, e.Kind)
	assert.Less(t, took, 5*time.Second)
	assert.True(t, strings.HasPrefix(res.Error.Message, "exceeded retry limit, last status: 429 Too Many Requests"), res.Error.Message)
	assert.Contains(t, res.Error.Message, "after 1 retries")
	retries := eventsOf(evs, api.EventRetry)
	require.Len(t, retries, 1, "the retry that went over the bound ends the run and is not sent")
	assert.Equal(t, 1, retries[0].Attempt)
	assert.Equal(t, 1, retries[0].MaxAttempts)
	assert.Len(t, eventsOf(evs, api.EventWarning), 1, "Codex's model-metadata notice is a warning")
}

// Gemini announces retries only on stderr; card reads them there.
func TestRetriesAnnouncedOnStderrAreBoundedToo(t *testing.T) {
	res, e, evs, _ := runCapture(t, "gemini", replayPlan(t, "../e2e/fixtures/cli/gemini-stream-429-retrying.jsonl",
		"../e2e/fixtures/cli/gemini-stream-429-retrying.stderr", 1))
	assert.Equal(t, api.KindRateLimit, e.Kind)
	assert.Contains(t, res.Error.Message, "You exceeded your current quota")
	retries := eventsOf(evs, api.EventRetry)
	require.Len(t, retries, 1, "the retry that went over the bound ends the run and is not sent")
	assert.Equal(t, 1, retries[0].Attempt)
	assert.Equal(t, 1, retries[0].MaxAttempts)
	assert.NotContains(t, res.Error.StderrExcerpt, "\x1b")
}

// Codex's "waiting for network" comes after its own request retries, and
// then it waits without end: card ends the run there.
func TestAnAgentWaitingForTheNetworkWithoutEndIsEnded(t *testing.T) {
	res, e, _, took := runCapture(t, "codex", replayPlan(t, "../e2e/fixtures/cli/codex-exec-json-unreachable.jsonl", "", 3))
	assert.Equal(t, api.KindNetwork, e.Kind)
	assert.Less(t, took, 5*time.Second)
	assert.True(t, strings.HasPrefix(res.Error.Message, "Connection failed: error sending request"), res.Error.Message)
}

// Gemini in an untrusted folder writes its message in red; the excerpt a
// person reads has no escape codes, whichever adapter ran.
func TestTheStderrExcerptHasNoTerminalEscapes(t *testing.T) {
	src, err := filepath.Abs("testdata/gemini-untrusted.stderr")
	require.NoError(t, err)
	raw, err := os.ReadFile(src)
	require.NoError(t, err)
	require.Contains(t, string(raw), "\x1b[31m", "the capture has colour codes")
	_, err = Run(context.Background(), RunSpec{Plan: shPlan(t, "cat "+src+" >&2; exit 55")})
	e := runErr(t, err)
	assert.Contains(t, e.StderrExcerpt, "Gemini CLI is not running in a trusted directory")
	assert.NotContains(t, e.StderrExcerpt, "\x1b")
}

func TestStripANSIRemovesEveryKindOfEscape(t *testing.T) {
	cases := map[string]string{
		"\x1b[31mred\x1b[0m":                            "red",
		"\x1b[1;38;5;208mbold orange\x1b[m":             "bold orange",
		"\x1b]8;;https://x.example\x07link\x1b]8;;\x07": "link",
		"\x1b]0;title\x1b\\text":                        "text",
		"\x1b(Bplain\x1bc":                              "plain",
		"trailing \x1b":                                 "trailing ",
		"no escapes, ünïcode":                           "no escapes, ünïcode",
	}
	for in, want := range cases {
		assert.Equal(t, want, stripANSI(in), "%q", in)
	}
}

// Once card has ended a run, what the dying agent still prints (a retry it
// had already scheduled) is not sent: the client heard the end. The retry
// that went over the bound is not sent either: "attempt 2 of 1" counts
// past its own bound, and the run's error says what happened.
func TestNothingIsSentAfterTheGuardEndsTheRun(t *testing.T) {
	rec := &emitRecorder{}
	e := newEmitter(rec.event, nil, 1, nil, rec.end)
	e.emit([]Event{retryEv(1, api.KindRateLimit, "429"), retryEv(2, api.KindRateLimit, "429"), retryEv(3, api.KindRateLimit, "429")})
	e.emit([]Event{{Kind: api.EventText, Text: "late"}})
	e.stop()
	require.Len(t, rec.ended(), 1)
	assert.Equal(t, []string{api.EventRetry}, kinds(rec.evs), "the retry within the bound is the last event sent")
	assert.Equal(t, 1, rec.evs[0].Attempt)
	assert.Equal(t, 1, rec.evs[0].MaxAttempts)
}
