package spawn

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/fakeacp"
	"github.com/card-dev/card/internal/proc"
)

// The hooks a driver switches on for an ACP agent card has checked (the
// file system card serves, the agent's own modes, resume, usage in _meta,
// cancel before the kill), each run against internal/fakeacp through the
// real runner, under a test adapter whose dialect turns it on.

// fakeGeneric is the test adapter's id.
const fakeGeneric = "fake-generic"

// withDialect makes fakeGeneric an adapter run over ACP in dialect d, for
// the test.
func withDialect(t *testing.T, d acpDialect) {
	t.Helper()
	prev := lookupDriver
	lookupDriver = func(id string) (Adapter, bool) {
		if id == fakeGeneric {
			return Adapter{Adapter: agent.Adapter{ID: id, Capabilities: api.Capabilities{Images: true, Sessions: true}},
				Driver: Driver{For: id, Protocols: map[Protocol]func(Plan) protocol{ProtocolACP: acpClientOf(d)},
					Warm: WarmDriver{Build: func(string, Request) (Plan, error) { return Plan{}, nil }}}}, true
		}
		return prev(id)
	}
	t.Cleanup(func() { lookupDriver = prev })
}

// genericDialect is the declared agents' dialect with changes.
func genericDialect(change func(*acpDialect)) acpDialect {
	d := declaredACP
	change(&d)
	return d
}

// fakeAgent is one fake ACP agent's world: its home (where it keeps its
// sessions), its cwd and its environment.
type fakeAgent struct {
	home, cwd string
	env       map[string]string
}

func newFakeAgent(t *testing.T, env map[string]string) *fakeAgent {
	f := &fakeAgent{home: t.TempDir(), cwd: t.TempDir(), env: map[string]string{fakeacp.EnvVar: "1"}}
	f.env["HOME"] = f.home
	for k, v := range env {
		f.env[k] = v
	}
	return f
}

func (f *fakeAgent) plan(mode Mode, resume string) Plan {
	p := Plan{Program: os.Args[0], Dir: f.cwd, Env: f.env,
		Session: &SessionPlan{Protocol: ProtocolACP, Adapter: fakeGeneric, mode: mode, resume: resume}}
	if mode == ModeAsk {
		p.Ask = &AskPlan{Channel: AskViaSession}
	}
	return p
}

// run runs one prompt one-shot in mode, continuing resume when set.
func (f *fakeAgent) run(t *testing.T, mode Mode, resume, prompt string, approver Approver, lim Limits) (api.Result, []Event, error) {
	t.Helper()
	return f.runCtx(t, context.Background(), mode, resume, prompt, approver, lim)
}

func (f *fakeAgent) runCtx(t *testing.T, ctx context.Context, mode Mode, resume, prompt string, approver Approver, lim Limits) (api.Result, []Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var evs []Event
	res, err := Run(ctx, RunSpec{Plan: f.plan(mode, resume), Prompt: prompt, Approver: approver, Limits: lim,
		BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
		OnEvent: func(e Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() }})
	mu.Lock()
	defer mu.Unlock()
	return res, append([]Event(nil), evs...), err
}

// A driver that declares the file system gets the agent's reads and
// writes, and holds the session's mode on each write: read_only refuses
// it, edit writes inside the cwd only (a symlink out of it refused), ask
// puts it to the client, bypass writes it. Reads go through in every mode.
// A dialect that does not declare it is never asked.
func TestCardServesTheAgentsFileReadsAndWritesUnderTheSessionsMode(t *testing.T) {
	out := t.TempDir()
	outside := filepath.Join(out, "outside.txt")
	require.NoError(t, os.WriteFile(filepath.Join(out, "readable.txt"), []byte("from outside"), 0o600))
	allow := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
	deny := &recorder{answer: func(Question) Decision { return Decision{Message: "not today"} }}
	for _, tc := range []struct {
		name      string
		fs        bool
		mode      Mode
		approver  *recorder
		file      string // relative to the cwd; "" for outside
		link      bool   // the file's directory is a symlink out of the cwd
		written   bool
		answerHas string
	}{
		{"read_only refuses a write inside", true, ModeReadOnly, nil, "in.txt", false, false, "FSWRITE error: card's read_only mode refused"},
		{"edit writes inside", true, ModeEdit, nil, "in.txt", false, true, "FSWRITE ok"},
		{"edit writes a new file in a new directory inside", true, ModeEdit, nil, "sub/dir/in.txt", false, true, "FSWRITE ok"},
		{"edit refuses a write outside", true, ModeEdit, nil, "", false, false, "outside the working dir"},
		{"edit refuses a write through a symlink out", true, ModeEdit, nil, "escape/in.txt", true, false, "outside the working dir"},
		{"ask writes what the client allows", true, ModeAsk, allow, "in.txt", false, true, "FSWRITE ok"},
		{"ask does not write what the client denies", true, ModeAsk, deny, "in.txt", false, false, "the client denied the agent's write"},
		{"bypass writes outside", true, ModeBypass, nil, "", false, true, "FSWRITE ok"},
		{"no fs declared: the agent is never asked to", false, ModeBypass, nil, "in.txt", false, false, "FSWRITE skipped: the client declared no fs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withDialect(t, genericDialect(func(d *acpDialect) { d.fs = tc.fs }))
			f := newFakeAgent(t, nil)
			target := outside
			if tc.file != "" {
				target = filepath.Join(f.cwd, tc.file)
			}
			if tc.link {
				require.NoError(t, os.Symlink(out, filepath.Join(f.cwd, "escape")))
			}
			_ = os.Remove(outside)
			var approver Approver
			if tc.approver != nil {
				tc.approver.asked = nil
				approver = tc.approver
			}
			res, _, err := f.run(t, tc.mode, "", "READ "+filepath.Join(out, "readable.txt")+"\nFSWRITE "+target+" hello there\nwrite it", approver, Limits{})
			require.NoError(t, err)
			assert.Contains(t, res.Answer, tc.answerHas)
			if tc.fs {
				assert.Contains(t, res.Answer, "READ from outside", "a read goes through in every mode")
			}
			if tc.written {
				b, err := os.ReadFile(target)
				require.NoError(t, err)
				assert.Equal(t, "hello there", string(b))
			} else {
				assert.NoFileExists(t, target)
				if tc.link {
					assert.NoFileExists(t, filepath.Join(out, "in.txt"))
				}
			}
			if tc.mode == ModeAsk {
				require.Len(t, tc.approver.asked, 1)
				assert.Equal(t, "write_text_file", tc.approver.asked[0].Tool)
				assert.Contains(t, tc.approver.asked[0].Summary, target)
			}
		})
	}
}

// An agent that asks to edit a file and then writes it through card's fs
// (as Qwen Code does) puts one question to the person, not two; the answer
// covers that one write of that path only: a second write of it, or a write
// of another path, is asked again.
func TestAnEditTheClientAllowedIsWrittenThroughCardsFSWithoutASecondQuestion(t *testing.T) {
	withDialect(t, genericDialect(func(d *acpDialect) { d.fs = true }))
	for _, tc := range []struct {
		name    string
		script  func(a, b string) string
		asked   int
		written []string
	}{
		{"one edit asked once and written", func(a, _ string) string {
			return "ASKFSWRITE " + a + " hello\nedit it"
		}, 1, []string{"a"}},
		{"a second write of the same path is asked again", func(a, _ string) string {
			return "ASKFSWRITE " + a + " hello\nFSWRITE " + a + " again\nedit it"
		}, 2, []string{"a"}},
		{"an answer about one path does not cover another", func(a, b string) string {
			return "ASKFSWRITE " + a + " hello\nFSWRITE " + b + " other\nedit it"
		}, 2, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAgent(t, nil)
			a, b := filepath.Join(f.cwd, "a.txt"), filepath.Join(f.cwd, "b.txt")
			allow := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
			res, _, err := f.run(t, ModeAsk, "", tc.script(a, b), allow, Limits{})
			require.NoError(t, err)
			assert.Len(t, allow.asked, tc.asked, "questions put to the client")
			for _, name := range tc.written {
				assert.FileExists(t, filepath.Join(f.cwd, name+".txt"))
			}
			assert.NotContains(t, res.Answer, "error")
		})
	}

	t.Run("a denied edit is not written and its write is asked again", func(t *testing.T) {
		f := newFakeAgent(t, nil)
		a := filepath.Join(f.cwd, "a.txt")
		deny := &recorder{answer: func(Question) Decision { return Decision{} }}
		res, _, err := f.run(t, ModeAsk, "", "ASKFSWRITE "+a+" hello\nFSWRITE "+a+" sneaky\nedit it", deny, Limits{})
		require.NoError(t, err)
		assert.Len(t, deny.asked, 2)
		assert.NoFileExists(t, a)
		assert.Contains(t, res.Answer, "ASKFSWRITE denied")
	})
}

// A missing file is ACP's resource-not-found, which agents read as "no
// such file"; a relative path is refused naming the field; a line window
// reads the lines asked for.
func TestAnFSReadOfAMissingFileIsNotFoundAndALineWindowIsHonoured(t *testing.T) {
	withDialect(t, genericDialect(func(d *acpDialect) { d.fs = true }))
	f := newFakeAgent(t, nil)
	res, _, err := f.run(t, ModeReadOnly, "", "READ "+filepath.Join(f.cwd, "nope.txt")+"\nREAD relative.txt\nread", nil, Limits{})
	require.NoError(t, err)
	assert.Contains(t, res.Answer, "READ error: no such file: "+filepath.Join(f.cwd, "nope.txt"))
	assert.Contains(t, res.Answer, `READ error: path: "relative.txt" is not absolute`)

	one, two := uint32(2), uint32(2)
	assert.Equal(t, "b\nc\n", lineWindow("a\nb\nc\nd\n", &one, &two))
	assert.Equal(t, "", lineWindow("a\n", &two, nil))
}

// A write past the bound is refused, and the file is left as it was.
func TestAnFSWritePastTheBoundIsRefused(t *testing.T) {
	c := &acpClient{mode: ModeBypass}
	path := filepath.Join(t.TempDir(), "big.txt")
	r := c.writeFile(context.Background(), readingTurn(func(...Event) {}, nil), acp.WriteTextFileRequest{Path: path, Content: string(make([]byte, maxFSWrite+1))})
	require.NotNil(t, r.err)
	assert.Contains(t, r.err.Message, "at most")
	assert.NoFileExists(t, path)
}

// fakeModes are the fake agent's modes, the first its current one, as
// Qwen Code offers them.
const fakeModes = "auto,plan,default,yolo"

// modeDialect maps card's modes onto the fake's, ask left unmapped.
func modeDialect(d *acpDialect) {
	d.modes = map[Mode]string{ModeReadOnly: "plan", ModeEdit: "default", ModeBypass: "yolo"}
}

// Where a driver maps card's mode to one the agent offers, the session is
// put in it with session/set_mode once opened, new, loaded or resumed
// (an agent may open a continued session in its default mode); a mode the
// driver leaves unmapped keeps the agent's own.
func TestTheAgentsOwnModeIsSetAfterEveryOpening(t *testing.T) {
	for _, tc := range []struct {
		mode   Mode
		resume bool // advertised
		want   string
	}{
		{ModeReadOnly, false, "MODE plan"},
		{ModeEdit, false, "MODE default"},
		{ModeBypass, false, "MODE yolo"},
		{ModeAsk, false, "MODE auto"},
		{ModeReadOnly, true, "MODE plan"},
		{ModeEdit, true, "MODE default"},
	} {
		how := "load"
		if tc.resume {
			how = "resume"
		}
		t.Run(string(tc.mode)+" after "+how, func(t *testing.T) {
			withDialect(t, genericDialect(modeDialect))
			env := map[string]string{"FAKEACP_MODES": fakeModes}
			if tc.resume {
				env["FAKEACP_RESUME"] = "1"
			}
			f := newFakeAgent(t, env)
			approver := &recorder{answer: func(Question) Decision { return Decision{Allow: true} }}
			res, _, err := f.run(t, tc.mode, "", "HOW\nMODE\nfirst", approver, Limits{})
			require.NoError(t, err)
			assert.Contains(t, res.Answer, tc.want)
			assert.Contains(t, res.Answer, "HOW new")
			require.NotEmpty(t, res.SessionID)

			res, _, err = f.run(t, tc.mode, res.SessionID, "HOW\nMODE\nsecond", approver, Limits{})
			require.NoError(t, err)
			assert.Contains(t, res.Answer, "turn 2: second", "the second turn carries the first")
			assert.Contains(t, res.Answer, "HOW "+how)
			assert.Contains(t, res.Answer, tc.want)
		})
	}
}

// A mode the driver maps to one the agent does not offer fails the run
// before any prompt: the mode card was to hold through it would not be.
func TestAMappedModeTheAgentDoesNotOfferFailsTheOpening(t *testing.T) {
	withDialect(t, genericDialect(modeDialect))
	f := newFakeAgent(t, map[string]string{"FAKEACP_MODES": "auto,default"})
	res, _, err := f.run(t, ModeReadOnly, "", "MODE\nx", nil, Limits{})
	e := runErr(t, err)
	assert.Equal(t, api.KindBadOutput, e.Kind)
	assert.Contains(t, e.Message, `does not offer its mode "plan"`)
	assert.Empty(t, res.Answer)

	f = newFakeAgent(t, nil)
	_, _, err = f.run(t, ModeEdit, "", "MODE\nx", nil, Limits{})
	assert.Contains(t, runErr(t, err).Message, "does not offer its mode", "an agent that offers no modes at all")
}

// startWarm starts the fake kept across turns in mode.
func (f *fakeAgent) startWarm(t *testing.T, mode Mode, lim Limits) *Warm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := StartWarm(ctx, WarmSpec{Plan: f.plan(mode, ""), BaseEnv: []string{"PATH=" + os.Getenv("PATH")}, Limits: lim})
	require.NoError(t, err)
	t.Cleanup(func() { w.Close(); <-w.Done() })
	return w
}

// A usage_update's cost is the session's running total: a run's cost is
// its part since its prompt, reported in its result and fed to its budget
// as it comes (the run ends once it passes max_cost_usd); a warm turn's is
// its own part. Its token counts are the context window's and are not
// counted as spent, nor sent as a usage of zero tokens.
func TestAUsageUpdatesCostIsTheTurnsPartAndHeldByTheBudget(t *testing.T) {
	withDialect(t, genericDialect(func(*acpDialect) {}))
	f := newFakeAgent(t, nil)
	res, evs, err := f.run(t, ModeReadOnly, "", "COST 0.25\nCOST 0.75\nx", nil, Limits{})
	require.NoError(t, err)
	require.NotNil(t, res.CostUSD)
	assert.InDelta(t, 0.75, *res.CostUSD, 1e-9)
	assert.Equal(t, api.Usage{InputTokens: 10, OutputTokens: 5}, res.Usage, "tokens from the result, not the context fill")
	var usages []api.Usage
	for _, ev := range evs {
		if ev.Kind == api.EventUsage {
			usages = append(usages, *ev.Usage)
		}
	}
	assert.Equal(t, []api.Usage{{InputTokens: 10, OutputTokens: 5}}, usages,
		"one usage event, the turn's: a usage_update tells the budget its cost, not the client a usage of nothing")

	p := f.plan(ModeReadOnly, "")
	p.Caps = &PlanCaps{MaxCostUSD: 0.5, Program: "fake"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Run(ctx, RunSpec{Plan: p, Prompt: "COST 0.25\nCOST 0.75\nSLEEP 20\nx", BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
		Limits: Limits{KillGrace: 500 * time.Millisecond}})
	e := runErr(t, err)
	assert.Equal(t, api.KindBudget, e.Kind)
	assert.Contains(t, e.Message, "max_cost_usd 0.5 passed")

	w := f.startWarm(t, ModeReadOnly, Limits{})
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r1, err := w.Turn(ctx, TurnSpec{Prompt: "COST 0.25\none"})
	require.NoError(t, err)
	r2, err := w.Turn(ctx, TurnSpec{Prompt: "COST 0.75\ntwo"})
	require.NoError(t, err)
	require.NotNil(t, r1.CostUSD)
	require.NotNil(t, r2.CostUSD)
	assert.InDelta(t, 0.25, *r1.CostUSD, 1e-9)
	assert.InDelta(t, 0.5, *r2.CostUSD, 1e-9, "the second turn's part of the session's total")
}

// A driver that reads tokens from _meta (Qwen Code's last chunk) reports
// them as the turn's usage; one that does not leaves them unread.
func TestADriverCanReadATurnsTokensFromTheLastChunksMeta(t *testing.T) {
	for _, reads := range []bool{true, false} {
		withDialect(t, genericDialect(func(d *acpDialect) {
			if reads {
				d.metaUsage = acpMetaUsage
			}
		}))
		f := newFakeAgent(t, nil)
		res, _, err := f.run(t, ModeReadOnly, "", "METAUSAGE\nx", nil, Limits{})
		require.NoError(t, err)
		want := api.Usage{}
		if reads {
			want = api.Usage{InputTokens: 10, OutputTokens: 5}
		}
		assert.Equal(t, want, res.Usage, "reads %v", reads)
	}
	u, ok := acpMetaUsage(json.RawMessage(`{"usage":{"inputTokens":7,"outputTokens":3,"cachedReadTokens":2},"durationMs":1}`))
	assert.True(t, ok)
	assert.Equal(t, api.Usage{InputTokens: 7, OutputTokens: 3, CachedInputTokens: 2}, u)
	_, ok = acpMetaUsage(json.RawMessage(`{"qwen.branchPoint":1}`))
	assert.False(t, ok)
}

// A cancelled one-shot run of a driver that cancels first sends
// session/cancel, gets the agent's cancelled answer within the grace, then
// ends the agent's process group; one that does not is ended at once. A
// cancelled warm turn sends session/cancel and the agent takes the next.
func TestACancelSendsSessionCancelBeforeTheGroupIsEnded(t *testing.T) {
	for _, first := range []bool{true, false} {
		withDialect(t, genericDialect(func(d *acpDialect) { d.cancelFirst = first }))
		f := newFakeAgent(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		var pgid int
		p := f.plan(ModeReadOnly, "")
		done := make(chan struct{})
		var err error
		var res api.Result
		go func() {
			defer close(done)
			res, err = Run(ctx, RunSpec{Plan: p, Prompt: "SLEEP 20\nx", BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
				Limits:  Limits{KillGrace: 2 * time.Second},
				OnStart: func(_, g int) { pgid = g },
				OnEvent: func(e Event) {
					if e.Kind == api.EventSession {
						// The prompt goes out right after; let it arrive.
						time.AfterFunc(300*time.Millisecond, cancel)
					}
				}})
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the cancelled run did not end")
		}
		cancel()
		assert.Equal(t, api.KindCancelled, runErr(t, err).Kind, "cancel first %v", first)
		assert.True(t, res.IsError)
		cancelled, _ := filepath.Glob(filepath.Join(f.home, ".fakeacp", "cancelled-*"))
		if first {
			assert.Len(t, cancelled, 1, "session/cancel came before the group was ended")
		} else {
			assert.Empty(t, cancelled, "ended at once")
		}
		assert.False(t, proc.GroupAlive(pgid), "the agent's group outlived the run")
	}

	withDialect(t, declaredACP)
	f := newFakeAgent(t, nil)
	w := f.startWarm(t, ModeReadOnly, Limits{KillGrace: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(time.Second, cancel)
	_, err := w.Turn(ctx, TurnSpec{Prompt: "SLEEP 20\nx"})
	assert.Equal(t, api.KindCancelled, runErr(t, err).Kind)
	cancelled, _ := filepath.Glob(filepath.Join(f.home, ".fakeacp", "cancelled-*"))
	assert.Len(t, cancelled, 1)
	assert.True(t, w.Alive(), "the agent answered cancelled and stays up")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	res, err := w.Turn(ctx2, TurnSpec{Prompt: "next"})
	require.NoError(t, err)
	assert.Contains(t, res.Answer, "turn 2: next")
}
