package runs

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/spawn"
)

// fakeAsker is a client connection. Each question it is sent arrives on
// asked; it is answered with what the test sends on answers, or, for a
// connection that has gone away, with ErrAskerGone.
type fakeAsker struct {
	id      uint64
	done    chan struct{}
	asked   chan api.ApproveParams
	answers chan askResult
	// withdrawn counts questions whose context ended before an answer.
	withdrawn atomic.Int32
}

type askResult struct {
	ans api.ApproveAnswer
	err error
}

func newAsker(id uint64) *fakeAsker {
	return &fakeAsker{id: id, done: make(chan struct{}), asked: make(chan api.ApproveParams, 64), answers: make(chan askResult, 64)}
}

func (f *fakeAsker) ID() uint64            { return f.id }
func (f *fakeAsker) Done() <-chan struct{} { return f.done }

func (f *fakeAsker) Ask(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
	select {
	case f.asked <- q:
	case <-ctx.Done():
		f.withdrawn.Add(1)
		return api.ApproveAnswer{}, ctx.Err()
	}
	select {
	case r := <-f.answers:
		return r.ans, r.err
	case <-f.done:
		return api.ApproveAnswer{}, ErrAskerGone
	case <-ctx.Done():
		f.withdrawn.Add(1)
		return api.ApproveAnswer{}, ctx.Err()
	}
}

func (f *fakeAsker) answer(decision, message string) {
	f.answers <- askResult{ans: api.ApproveAnswer{Decision: decision, Message: message}}
}

func (f *fakeAsker) leave() { close(f.done) }

// question waits for the next question this connection is sent.
func (f *fakeAsker) question(t *testing.T) api.ApproveParams {
	t.Helper()
	select {
	case q := <-f.asked:
		return q
	case <-time.After(5 * time.Second):
		t.Fatalf("connection %d was never asked", f.id)
		return api.ApproveParams{}
	}
}

func (f *fakeAsker) notAsked(t *testing.T) {
	t.Helper()
	select {
	case q := <-f.asked:
		t.Fatalf("connection %d was asked %s", f.id, q.RequestID)
	case <-time.After(100 * time.Millisecond):
	}
}

type brokerTest struct {
	*approvals
	log *eventLog
}

func newBroker(starter Asker, timeout time.Duration) brokerTest {
	return newBrokerBound(starter, timeout, 10)
}

// newBrokerBound is newBroker with a run event bound of max.
func newBrokerBound(starter Asker, timeout time.Duration, max int) brokerTest {
	l := newEventLog("run_1", max)
	b := newApprovals("run_1", "claude-code", timeout, starter, l, zap.NewNop())
	return brokerTest{approvals: b, log: l}
}

// ask runs one Approve in the background, as the agent's permission tool
// does, and returns where its decision arrives.
func (b brokerTest) ask(ctx context.Context, tool, command string) <-chan spawn.Decision {
	out := make(chan spawn.Decision, 1)
	in, _ := json.Marshal(map[string]string{"command": command})
	go func() {
		out <- b.Approve(ctx, spawn.Question{Tool: tool, Input: in, ToolUseID: "toolu_" + command, Summary: tool + ": " + command})
	}()
	return out
}

func decision(t *testing.T, ch <-chan spawn.Decision) spawn.Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no decision")
		return spawn.Decision{}
	}
}

// approvals reads the decisions recorded in the run's events.
func (b brokerTest) records() []api.ApprovalRecord {
	var payloads []json.RawMessage
	for _, e := range b.log.ofKinds(approvalKinds...) {
		payloads = append(payloads, e.raw)
	}
	return approvalRecords(payloads)
}

func TestTheStartersAnswerDecidesAndIsRecorded(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, time.Minute)
	got := b.ask(context.Background(), "Bash", "echo hi > f")
	q := starter.question(t)
	assert.Equal(t, "run_1", q.RunID)
	assert.Equal(t, "apr_1", q.RequestID)
	assert.Equal(t, "claude-code", q.Adapter)
	assert.Equal(t, "Bash", q.Tool.Name)
	assert.Equal(t, "toolu_echo hi > f", q.Tool.ID)
	assert.JSONEq(t, `{"command":"echo hi > f"}`, string(q.Tool.Input))
	assert.Equal(t, "Bash: echo hi > f", q.Summary)
	assert.WithinDuration(t, time.Now().Add(time.Minute), q.ExpiresAt, 2*time.Second)
	starter.answer(api.DecisionAllow, "")
	assert.Equal(t, spawn.Decision{Allow: true}, decision(t, got))

	got = b.ask(context.Background(), "Bash", "rm -rf /")
	starter.question(t)
	starter.answer(api.DecisionDeny, "not that")
	assert.Equal(t, spawn.Decision{Message: "not that"}, decision(t, got))

	recs := b.records()
	require.Len(t, recs, 2)
	assert.Equal(t, "apr_1", recs[0].RequestID)
	assert.Equal(t, "Bash", recs[0].Tool.Name)
	assert.Equal(t, api.DecisionAllow, recs[0].Decision)
	assert.Equal(t, api.ByClient, recs[0].By)
	assert.NotNil(t, recs[0].RequestedAt)
	assert.NotNil(t, recs[0].DecidedAt)
	assert.Equal(t, api.DecisionDeny, recs[1].Decision)
	assert.Equal(t, "not that", recs[1].Message)
}

// A deny without a message still tells the agent something a person wrote.
func TestADenyWithoutAMessageTellsTheAgentTheUserDenied(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, time.Minute)
	got := b.ask(context.Background(), "Write", "x")
	starter.question(t)
	starter.answer(api.DecisionDeny, "")
	assert.Equal(t, "The user denied this tool call.", decision(t, got).Message)
}

func TestNoAnswerWithinTheTimeoutDenies(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, 150*time.Millisecond)
	start := time.Now()
	got := b.ask(context.Background(), "Bash", "sleep")
	starter.question(t)
	d := decision(t, got)
	assert.False(t, d.Allow)
	assert.Contains(t, d.Message, "nobody answered within 150ms")
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	require.Eventually(t, func() bool { return starter.withdrawn.Load() == 1 }, 5*time.Second, 10*time.Millisecond,
		"the client's question is withdrawn")
	recs := b.records()
	require.Len(t, recs, 1)
	assert.Equal(t, api.ByTimeout, recs[0].By)
	assert.Equal(t, api.DecisionDeny, recs[0].Decision)
}

func TestNobodyToAskDeniesAtOnce(t *testing.T) {
	b := newBroker(nil, time.Minute)
	d := decision(t, b.ask(context.Background(), "Bash", "x"))
	assert.False(t, d.Allow)
	assert.Contains(t, d.Message, "nobody could be asked")
	assert.Equal(t, api.ByNoClient, b.records()[0].By)

	gone := newAsker(1)
	gone.leave()
	b = newBroker(gone, time.Minute)
	assert.False(t, decision(t, b.ask(context.Background(), "Bash", "x")).Allow)
}

// While the starter is connected only it is asked; once it is gone, the
// connections following the run are, and the first valid answer wins.
func TestWhenTheStarterIsGoneTheSubscribersAreAskedAndTheFirstAnswerWins(t *testing.T) {
	starter, sub1, sub2 := newAsker(1), newAsker(2), newAsker(3)
	b := newBroker(starter, time.Minute)
	defer b.watch(sub1)()
	defer b.watch(sub2)()
	got := b.ask(context.Background(), "Bash", "x")
	q := starter.question(t)
	sub1.notAsked(t)
	sub2.notAsked(t)

	starter.leave()
	assert.Equal(t, q, sub1.question(t), "the same question goes on to the followers")
	assert.Equal(t, q, sub2.question(t))
	sub2.answer(api.DecisionAllow, "")
	assert.True(t, decision(t, got).Allow)
	require.Eventually(t, func() bool { return sub1.withdrawn.Load() == 1 }, 5*time.Second, 10*time.Millisecond,
		"the other follower's question is withdrawn")

	// A new question goes to the followers straight away.
	got = b.ask(context.Background(), "Bash", "y")
	sub1.question(t)
	sub2.question(t)
	sub1.answer(api.DecisionDeny, "no")
	assert.False(t, decision(t, got).Allow)
	recs := b.records()
	require.Len(t, recs, 2)
	assert.Equal(t, api.DecisionAllow, recs[0].Decision, "the first answer stands")
	assert.Equal(t, api.DecisionDeny, recs[1].Decision)
}

// A connection that follows the run while a question waits (an editor that
// reloaded) is sent it, once the starter is gone.
func TestAConnectionThatSubscribesWhileAQuestionWaitsIsAskedIt(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, time.Minute)
	got := b.ask(context.Background(), "Bash", "x")
	starter.question(t)
	starter.leave()

	late := newAsker(2)
	defer b.watch(late)()
	q := late.question(t)
	assert.Equal(t, "apr_1", q.RequestID)
	late.answer(api.DecisionAllow, "")
	assert.True(t, decision(t, got).Allow)
}

func TestAllowAlwaysAllowsThatToolForTheRestOfTheRunByRule(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, time.Minute)
	first := b.ask(context.Background(), "Bash", "a")
	starter.question(t)
	second := b.ask(context.Background(), "Bash", "b") // waiting at the same time
	starter.question(t)
	starter.answer(api.DecisionAllowAlways, "")
	assert.True(t, decision(t, first).Allow)
	assert.True(t, decision(t, second).Allow, "a waiting question about the same tool is released")

	assert.True(t, decision(t, b.ask(context.Background(), "Bash", "c")).Allow)
	starter.notAsked(t)

	other := b.ask(context.Background(), "Write", "d")
	starter.question(t)
	starter.answer(api.DecisionDeny, "")
	assert.False(t, decision(t, other).Allow, "allow_always is for one tool name")

	var bys []string
	for _, r := range b.records() {
		bys = append(bys, r.Decision+"/"+r.By)
	}
	assert.ElementsMatch(t, []string{"allow_always/client", "allow/rule", "allow/rule", "deny/client"}, bys)
}

// Bad answers leave the run as it was: the question stays open and the
// next valid answer still decides it.
func TestBadAnswersAreRefusedAndLeaveTheQuestionOpen(t *testing.T) {
	starter, sub := newAsker(1), newAsker(2)
	b := newBroker(starter, time.Minute)
	defer b.watch(sub)()
	got := b.ask(context.Background(), "Bash", "x")
	starter.question(t)

	starter.answer("maybe", "") // a response with no valid decision
	time.Sleep(50 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("an invalid answer decided the question")
	default:
	}

	_, err := b.answer(1, "apr_1", "sure", "")
	var bad *BadDecisionError
	assert.ErrorAs(t, err, &bad)
	_, err = b.answer(1, "apr_99", api.DecisionAllow, "")
	var nf *ApprovalNotFoundError
	assert.ErrorAs(t, err, &nf)
	_, err = b.answer(sub.id, "apr_1", api.DecisionAllow, "")
	var notAsked *ApprovalNotAskedError
	require.ErrorAs(t, err, &notAsked, "a follower may not answer while the starter is connected")
	assert.Contains(t, err.Error(), "runs.subscribe")

	res, err := b.answer(1, "apr_1", api.DecisionDeny, "changed my mind")
	require.NoError(t, err)
	assert.Equal(t, api.DecideResult{RunID: "run_1", RequestID: "apr_1", Decision: api.DecisionDeny, By: api.ByClient}, res)
	assert.Equal(t, spawn.Decision{Message: "changed my mind"}, decision(t, got))

	_, err = b.answer(1, "apr_1", api.DecisionAllow, "")
	var closed *ApprovalClosedError
	require.ErrorAs(t, err, &closed, "the first answer won")
	assert.Equal(t, api.DecisionDeny, closed.Decision)
	assert.Equal(t, api.ByClient, closed.By)
	require.Len(t, b.records(), 1)
}

func TestWhenEveryConnectionAskedAnswersWithAnErrorTheQuestionIsDeniedAtOnce(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, time.Minute)
	got := b.ask(context.Background(), "Bash", "x")
	starter.question(t)
	starter.answers <- askResult{err: &DeclinedError{Code: -32601, Message: "method not found"}}
	d := decision(t, got)
	assert.False(t, d.Allow)
	assert.Contains(t, d.Message, "no client could answer")
	assert.Contains(t, d.Message, "-32601")
	assert.Equal(t, api.ByNoClient, b.records()[0].By)
}

// The run's end decides what still waits, before the terminal event, and
// nothing is asked after it.
func TestTheRunsEndDeniesWhatWaitsAndAsksNothingMore(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, time.Minute)
	got := b.ask(context.Background(), "Bash", "x")
	starter.question(t)
	b.end()
	d := decision(t, got)
	assert.False(t, d.Allow)
	assert.Contains(t, d.Message, "the run ended")
	assert.Equal(t, api.ByRunEnd, b.records()[0].By)

	assert.False(t, decision(t, b.ask(context.Background(), "Bash", "y")).Allow)
	starter.notAsked(t)
	assert.Len(t, b.records(), 1, "nothing is recorded after the run ended")
	_, err := b.answer(1, "apr_1", api.DecisionAllow, "")
	var closed *ApprovalClosedError
	assert.ErrorAs(t, err, &closed)
}

func TestAnAgentThatStopsWaitingGetsADenyRecordedAsTheRunsEnd(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	got := b.ask(ctx, "Bash", "x")
	starter.question(t)
	cancel()
	assert.False(t, decision(t, got).Allow)
	assert.Equal(t, api.ByRunEnd, b.records()[0].By)
}

// Approval events count against the run's event bound like every event;
// a question that was kept always keeps its decision, so no kept question
// looks unanswered; and a tool call that could not be recorded is never
// run: past the bound it is denied without asking anyone, an allow_always
// rule included.
func TestApprovalEventsCountAgainstTheEventBoundAndAnUnrecordedCallIsNeverRun(t *testing.T) {
	starter := newAsker(1)
	b := newBroker(starter, time.Minute)
	addN(b.log, 9) // the bound is 10: the question is the tenth
	got := b.ask(context.Background(), "Bash", "kept")
	starter.question(t)
	starter.answer(api.DecisionAllowAlways, "")
	assert.True(t, decision(t, got).Allow)
	recs := b.records()
	require.Len(t, recs, 1)
	assert.Equal(t, api.DecisionAllowAlways, recs[0].Decision, "the decision of a kept question is kept past the bound")
	assert.EqualValues(t, 0, b.log.droppedCount())

	for _, tool := range []string{"Write", "Bash"} { // asked, and matched by the allow_always rule
		d := decision(t, b.ask(context.Background(), tool, "past"))
		assert.False(t, d.Allow, "%s past the bound is denied", tool)
		assert.Contains(t, d.Message, "max_events_per_run")
	}
	starter.notAsked(t)
	assert.Len(t, b.records(), 1, "neither question nor decision past the bound is kept")
	assert.EqualValues(t, 3, b.log.droppedCount(), "and each is counted as dropped")
}

// Many questions answered by many connections at once: each is decided
// exactly once (run with -race).
func TestConcurrentQuestionsAndAnswersDecideEachExactlyOnce(t *testing.T) {
	starter := newAsker(1)
	starter.leave()
	b := newBrokerBound(starter, time.Minute, 100) // every question and decision kept
	subs := []*fakeAsker{newAsker(2), newAsker(3), newAsker(4)}
	stop := make(chan struct{})
	var answering sync.WaitGroup
	for _, s := range subs {
		defer b.watch(s)()
		answering.Add(1)
		go func(s *fakeAsker) {
			defer answering.Done()
			for {
				select {
				case <-s.asked:
					// Answers are not matched to questions here, and one
					// meant for a question decided meanwhile stays queued.
					select {
					case s.answers <- askResult{ans: api.ApproveAnswer{Decision: api.DecisionAllow}}:
					case <-stop:
						return
					}
				case <-stop:
					return
				}
			}
		}(s)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.True(t, decision(t, b.ask(context.Background(), "Bash", "x")).Allow)
		}()
	}
	wg.Wait()
	close(stop)
	answering.Wait()
	recs := b.records()
	require.Len(t, recs, 20)
	for _, r := range recs {
		assert.Equal(t, api.DecisionAllow, r.Decision, r.RequestID)
	}
}

func TestCheckDecisionAcceptsExactlyTheThree(t *testing.T) {
	for _, d := range api.Decisions {
		assert.NoError(t, CheckDecision(d))
	}
	for _, d := range []string{"", "Allow", "yes", "allow_once", "reject"} {
		assert.Error(t, CheckDecision(d), d)
	}
}
