package warm_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/spawn"
)

// allowing allows every question and keeps what was asked.
type allowing struct {
	mu    sync.Mutex
	asked []spawn.Question
}

func (a *allowing) Approve(_ context.Context, q spawn.Question) spawn.Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, q)
	return spawn.Decision{Allow: true}
}

func (a *allowing) count() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.asked) }

// In ask mode too, once the warm agent is gone, the conversation goes on
// cold: a one-shot ask run resuming the CLI's session by the id the warm
// agent reported (Codex's thread/resume, Copilot's session/load) carries
// turn one and puts its tool call to the approver before it runs. Gemini's
// is refused: its session/load loses the session it loads.
func TestAColdAskTurnResumesTheWarmAgentsSessionAndStillAsks(t *testing.T) {
	for _, c := range clis {
		if c.id != agent.Codex && c.id != agent.Copilot && c.id != agent.Gemini {
			continue
		}
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			bin := standin.CLI(t, c.bin)
			home, cwd := t.TempDir(), t.TempDir()
			cwd, _ = filepath.EvalSymlinks(cwd)
			s, env, extra := c.serve(t, standin.Script{Answer: "FIRST-ANSWER"}, home)
			env = append(env, "CAR_INVOKED_BY=card")
			req := spawn.Request{Adapter: c.id, Cwd: cwd, Mode: spawn.ModeAsk, Extras: spawn.Extras{Args: extra}}
			plan, err := spawn.BuildWarm(bin, req)
			require.NoError(t, err)
			w, err := spawn.StartWarm(timeout(t, 90*time.Second), spawn.WarmSpec{Plan: plan, BaseEnv: env})
			require.NoError(t, err)
			var a allowing
			_, err = w.Turn(timeout(t, 120*time.Second), spawn.TurnSpec{Prompt: "Remember the word HERON-NINE.", Approver: &a})
			require.NoError(t, err)
			sid := w.AgentSessionID()
			require.NotEmpty(t, sid)
			w.Close()

			req.Resume = sid
			one, err := spawn.Build(bin, req)
			if c.id == agent.Gemini {
				var fe *api.FieldError
				require.ErrorAs(t, err, &fe)
				assert.Equal(t, "resume", fe.Field)
				return
			}
			require.NoError(t, err)
			assert.NotContains(t, strings.Join(one.Args, " "), sid, "the session goes inside the protocol")
			file := filepath.Join(cwd, "planted.txt")
			s.SetScript(standin.Script{Answer: "NOTED", ToolCalls: []standin.ToolCall{c.write(file)}})
			ad, _ := spawn.Lookup(c.id)
			var evs []spawn.Event
			res, err := spawn.Run(timeout(t, 120*time.Second), spawn.RunSpec{Plan: one, Prompt: "Which word was it? Write planted.txt too.", BaseEnv: env,
				Parser: ad.NewParser(), Approver: &a, OnEvent: func(e spawn.Event) { evs = append(evs, e) }})
			require.NoError(t, err)
			assert.Contains(t, res.Answer, "NOTED")
			assert.Equal(t, sid, res.SessionID, "the run continued the warm agent's session")
			assert.Equal(t, 1, a.count(), "the cold turn's tool call was asked")
			assert.FileExists(t, file)
			calls := s.ModelCalls()
			last := string(calls[len(calls)-1].Body)
			assert.Contains(t, last, "HERON-NINE", "the cold turn resumed the warm agent's session")
			assert.Contains(t, last, "Which word was it?")
			for _, e := range evs {
				assert.NotContains(t, e.Text, "FIRST-ANSWER", "the loaded history is not the cold turn's output")
			}
		})
	}
}
