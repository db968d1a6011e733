package sessions_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/e2e/standin"
)

// A card.toml that picks Codex's model with -m, an option of codex exec
// only, used to break every ask run, session and ACP session of Codex
// ("codex exited with status 2 before it finished initialize": codex
// app-server has no -m). With the real Codex: an ask session's two turns
// (over app-server, warm) and a one-shot run (codex exec) each run, and
// every model call the stand-in gets asks for the model the -m named.
func TestARealCodexAskSessionRunsWithTheModelAnOperatorPickedWithDashM(t *testing.T) {
	standin.CLI(t, "codex")
	card(t)
	const model = "gpt-5-operator-pick"
	codex := cli{"codex", "codex", func(t *testing.T, home, path string, script standin.Script) (*standin.Server, []string, map[string]any) {
		s := standin.NewOpenAI(t, script)
		args, env := s.CodexExtras()
		// The stand-in's own -c model="…" gives way to the operator's -m.
		require.Equal(t, "-c", args[len(args)-2])
		args = append(args[:len(args)-2], "-m", model)
		return s, []string{"NO_COLOR=1"}, map[string]any{"args": args, "env": env}
	}}
	conv := start(t, codex, standin.Script{AnswerUserMessages: true}, client.Options{})
	ctx := daemontest.Context(t)
	s, err := conv.proc.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "codex", Cwd: conv.project, PermissionMode: "ask", TimeoutSecs: 180}})
	require.NoError(t, err)
	conv.subscribe(t, s.SessionID, 0)
	one := userMessages(t, conv.turn(t, s.SessionID, "Remember the word avocado."))
	two := userMessages(t, conv.turn(t, s.SessionID, "Which word did I ask you to remember?"))
	assert.Greater(t, two, one, "turn two's request does not carry turn one")
	got, err := conv.proc.Client.Session(ctx, s.SessionID)
	require.NoError(t, err)
	assert.True(t, got.Warm, "the ask session's turns ran on codex app-server, kept warm")

	res, err := conv.proc.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "codex", Cwd: conv.project, TimeoutSecs: 180}, Task: "One-shot, please."})
	require.NoError(t, err)
	require.False(t, res.IsError, "%+v", res.Error)

	calls := conv.server.ModelCalls()
	require.GreaterOrEqual(t, len(calls), 3)
	for i, c := range calls {
		var body struct {
			Model string `json:"model"`
		}
		require.NoError(t, json.Unmarshal(c.Body, &body), "call %d", i)
		assert.Equal(t, model, body.Model, "model call %d did not ask for the operator's model", i)
	}
}
