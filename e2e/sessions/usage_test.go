package sessions_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

// usageTurn is one turn of the usage test: the tokens the stand-in reports
// for each model call the turn makes, a figure no sum of the turns before
// it can make.
type usageTurn struct {
	in, out int64
}

var usageTurns = []usageTurn{{10, 5}, {100, 50}, {1000, 500}}

// Each real CLI's turns are charged what they used, not what the CLI's
// session has used so far: turn two runs over the warm agent (or, with no
// warm agents, as a new process resuming the CLI's session), turn three
// as a new process resuming it after the warm agent idled out or after a
// SIGKILL of the daemon (its base then read back from the store), and each
// turn's usage is its own model calls' tokens, whatever the CLI reports
// (some report the session's running total). The sessions' and the usage
// summary's figures are the sums of the turns'.
func TestEachRealCLIsTurnIsChargedOnlyItsOwnUsage(t *testing.T) {
	standin.CLI(t, "claude")
	card(t)
	// A warm agent speaks one protocol whatever the mode, so the warm and
	// idle paths run in one mode each; a cold turn's protocol depends on
	// the mode (print mode for read_only, the ask conversation for ask),
	// so the cold path runs in both.
	paths := []struct{ mode, path string }{
		{"read_only", "warm"}, {"ask", "idle"}, {"read_only", "cold"}, {"ask", "cold"},
	}
	for _, c := range clis {
		for _, p := range paths {
			mode, path := p.mode, p.path
			warm := path != "cold"
			name := c.id + "/" + mode + "/" + path
			t.Run(name, func(t *testing.T) {
				var a asked
				copts := client.Options{OnApprove: a.approve}
				var sessionsCfg map[string]any
				switch path {
				case "cold":
					sessionsCfg = map[string]any{"max_warm": 0}
				case "idle":
					sessionsCfg = map[string]any{"idle_secs": 2}
				}
				script := func(u usageTurn) standin.Script {
					return standin.Script{AnswerUserMessages: true, InputTokens: int(u.in), OutputTokens: int(u.out)}
				}
				conv := startWith(t, c, script(usageTurns[0]), copts, sessionsCfg)
				t.Cleanup(func() { conv.awaitUnpacked(t) })
				ctx := daemontest.Context(t)
				s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{
					AgentSettings: api.AgentSettings{ID: c.id, Cwd: conv.project, PermissionMode: mode, TimeoutSecs: 180, AcknowledgeUnenforcedReadOnly: c.id == "pi" && mode == "read_only"},
				})
				require.NoError(t, err)
				conv.subscribe(t, s.SessionID, 0)
				var sum api.Usage
				var cost float64
				for i, u := range usageTurns {
					if i == 2 || (i == 1 && !warm) {
						if c.id == "gemini" && mode == "ask" {
							// Gemini's ask-mode conversation lives only in its
							// warm agent: card refuses a cold turn.
							break
						}
					}
					if i == 2 && path == "idle" {
						require.Eventually(t, func() bool {
							got, err := conv.proc.Client.Session(ctx, s.SessionID)
							return err == nil && !got.Warm
						}, time.Minute, 100*time.Millisecond, "the idle warm agent was not ended")
					} else if i == 2 {
						got, err := conv.proc.Client.Session(ctx, s.SessionID)
						require.NoError(t, err)
						// The CLI writes its history just after it prints
						// the answer (see the SIGKILL test).
						time.Sleep(time.Second)
						conv.killQuietly(t)
						conv.events = &collected{}
						conv.subscribe(t, s.SessionID, got.NextSeq-1)
					}
					conv.server.SetScript(script(u))
					before := len(conv.server.ModelCalls())
					end := conv.turn(t, s.SessionID, []string{"Remember the word avocado.", "Which word?", "And once more: which word?"}[i])
					calls := int64(len(conv.server.ModelCalls()) - before)
					got := end.Event.Result.Usage
					var costText string
					if cu := end.Event.Result.CostUSD; cu != nil {
						cost += *cu
						costText = " cost " + formatCost(*cu)
					}
					t.Logf("%s turn %d (%s): %d model calls, usage %d/%d cached %d%s", name, i+1, turnPath(i, path), calls,
						got.InputTokens, got.OutputTokens, got.CachedInputTokens, costText)
					require.Positive(t, calls, "turn %d made no model call", i+1)
					if c.id == "copilot" && mode == "read_only" && path == "cold" {
						// Copilot 1.0.102's one-shot JSON output (-p) says
						// nothing of tokens: its result has premium
						// requests and durations only.
						assert.Equal(t, api.Usage{}, got, "turn %d", i+1)
						continue
					}
					assert.Equal(t, calls*u.in, got.InputTokens, "turn %d's input tokens are not its own %d calls'", i+1, calls)
					assert.Equal(t, calls*u.out, got.OutputTokens, "turn %d's output tokens are not its own %d calls'", i+1, calls)
					sum.InputTokens += got.InputTokens
					sum.OutputTokens += got.OutputTokens
					sum.CachedInputTokens += got.CachedInputTokens
				}
				view, err := conv.proc.Client.Session(ctx, s.SessionID)
				require.NoError(t, err)
				assert.Equal(t, sum, view.Usage, "the session's usage is not the sum of its turns'")
				assert.InDelta(t, cost, view.TotalCostUSD, 1e-9, "the session's cost is not the sum of its turns'")
				summary, err := conv.proc.Client.UsageSummary(ctx, api.UsageParams{Adapter: c.id})
				require.NoError(t, err)
				assert.Equal(t, sum.InputTokens, summary.Totals.InputTokens, "usage.summary's input tokens are not the turns' sum")
				assert.Equal(t, sum.OutputTokens, summary.Totals.OutputTokens, "usage.summary's output tokens are not the turns' sum")
			})
		}
	}
}

func turnPath(i int, path string) string {
	switch {
	case i == 0:
		return "first"
	case i == 1 && path != "cold":
		return "warm"
	case i == 1:
		return "one-shot resume"
	case path == "idle":
		return "a new agent after the warm one idled out"
	default:
		return "cold after a daemon SIGKILL"
	}
}

func formatCost(c float64) string { return strconv.FormatFloat(c, 'g', 6, 64) }
