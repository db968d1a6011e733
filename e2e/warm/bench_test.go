package warm_test

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/spawn"
)

// The first text of a follow-up turn on a warm agent against a cold turn
// (a new CLI process resuming the same session), side by side in one run,
// per adapter: the start-up a warm agent saves. Goals: ≤ 0.25× for the
// CLIs whose start-up is over a second, ≤ 0.5× for the rest.
//
//	CARD_BENCH=1 CARD_E2E=1 go test -count=1 -run TestWarmFollowUpAgainstAColdTurn -v ./e2e/warm/
func TestWarmFollowUpAgainstAColdTurn(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		t.Skip("benchmark: set CARD_BENCH=1 (and CARD_E2E=1)")
	}
	const n = 7
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			bin := standin.CLI(t, c.bin)
			home, cwd := t.TempDir(), t.TempDir()
			cwd, _ = filepath.EvalSymlinks(cwd)
			_, env, extra := c.serve(t, standin.Script{Answer: "NOTED"}, home)
			env = append(env, "CAR_INVOKED_BY=card")
			req := spawn.Request{Adapter: c.id, Cwd: cwd, Extras: spawn.Extras{Args: extra}}
			plan, err := spawn.BuildWarm(bin, req)
			require.NoError(t, err)
			w, err := spawn.StartWarm(timeout(t, 90*time.Second), spawn.WarmSpec{Plan: plan, BaseEnv: env})
			require.NoError(t, err)
			defer w.Close()
			_, err = w.Turn(timeout(t, 120*time.Second), spawn.TurnSpec{Prompt: "Remember the word OSPREY."})
			require.NoError(t, err)
			// A cold turn is a new CLI process resuming a session of its
			// own (a warm agent's thread has one writer: Codex refuses a
			// second process on it); Pi and Droid are measured starting
			// afresh (Pi given no session, Droid's one-shot stream-json
			// without one), which costs the same start-up.
			a, _ := spawn.Lookup(c.id)
			if c.id != agent.Pi && c.id != agent.Droid {
				one, err := spawn.Build(bin, req)
				require.NoError(t, err)
				res, err := spawn.Run(timeout(t, 120*time.Second), spawn.RunSpec{Plan: one, Prompt: "Remember the word OSPREY.", BaseEnv: env, Parser: a.NewParser()})
				require.NoError(t, err)
				require.NotEmpty(t, res.SessionID)
				req.Resume = res.SessionID
			}

			firstText := func(run func(onEvent func(spawn.Event)) error) time.Duration {
				var once sync.Once
				var at time.Duration
				start := time.Now()
				require.NoError(t, run(func(e spawn.Event) {
					if e.Kind == api.EventText {
						once.Do(func() { at = time.Since(start) })
					}
				}))
				require.NotZero(t, at, "no text event")
				return at
			}
			var warm, cold []time.Duration
			for i := 0; i < n; i++ {
				warm = append(warm, firstText(func(on func(spawn.Event)) error {
					_, err := w.Turn(timeout(t, 120*time.Second), spawn.TurnSpec{Prompt: "Which word?", OnEvent: on})
					return err
				}))
				cold = append(cold, firstText(func(on func(spawn.Event)) error {
					one, err := spawn.Build(bin, req)
					if err != nil {
						return err
					}
					_, err = spawn.Run(timeout(t, 120*time.Second), spawn.RunSpec{Plan: one, Prompt: "Which word?", BaseEnv: env, Parser: a.NewParser(), OnEvent: on})
					return err
				}))
			}
			mw, mc := median(warm), median(cold)
			load, _ := os.ReadFile("/proc/loadavg")
			t.Logf("%s: warm follow-up first text %v median (%v), cold turn %v median (%v): %.3f×; load %s",
				c.id, mw.Round(time.Millisecond), rounded(warm), mc.Round(time.Millisecond), rounded(cold), float64(mw)/float64(mc), string(load[:14]))
		})
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func rounded(d []time.Duration) []time.Duration {
	out := make([]time.Duration, len(d))
	for i, x := range d {
		out[i] = x.Round(time.Millisecond)
	}
	return out
}
