package spawn

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// openCodeEnvConfig decodes the OPENCODE_CONFIG_CONTENT a plan carries.
func openCodeEnvConfig(t *testing.T, p Plan) map[string]any {
	t.Helper()
	var cfg map[string]any
	require.NoError(t, json.Unmarshal([]byte(p.Env["OPENCODE_CONFIG_CONTENT"]), &cfg))
	return cfg
}

// OpenCode asks about nothing but writes outside the project unless told
// otherwise, so every plan hands it a table under which every permission,
// at the top level and for every agent a session reaches, is "ask".
func TestEveryOpenCodePlanMakesEveryToolAskInEveryAgent(t *testing.T) {
	for _, m := range []Mode{ModeReadOnly, ModeEdit, ModeAsk, ModeBypass} {
		p, err := Build("/bin/opencode", Request{Adapter: agent.OpenCode, Mode: m, Cwd: cwd, AllowBypass: true})
		require.NoError(t, err, m)
		cfg := openCodeEnvConfig(t, p)
		tables := []any{cfg["permission"]}
		agents := cfg["agent"].(map[string]any)
		for _, name := range []string{"build", "plan", "general", "explore"} {
			require.Contains(t, agents, name, m)
			tables = append(tables, agents[name].(map[string]any)["permission"])
		}
		var perm map[string]any
		require.NoError(t, json.Unmarshal([]byte(p.Env["OPENCODE_PERMISSION"]), &perm))
		tables = append(tables, perm)
		for _, tab := range tables {
			tab := tab.(map[string]any)
			for _, k := range []string{"*", "read", "edit", "bash", "task", "external_directory", "webfetch", "skill", "doom_loop"} {
				assert.Equal(t, "ask", tab[k], "%s: %s", m, k)
			}
			for k, v := range tab {
				assert.Equal(t, "ask", v, "%s: %s allows or denies where it must ask", m, k)
			}
		}
		assert.Equal(t, "1", p.Env["OPENCODE_DISABLE_PROJECT_CONFIG"], "a repository's opencode.json would beat card's table")
		assert.Contains(t, p.Args, "--pure", "a repository's plugins run whatever card answers")
		assert.Equal(t, "disabled", cfg["share"])
		assert.Nil(t, p.Files)
		assert.Equal(t, m == ModeAsk, p.Ask != nil)
	}
}

// OpenCode's loopback API takes a password per process: without one any
// local process can drive it; a password that repeats is one a process
// that saw it once could use again.
func TestEachOpenCodeProcessGetsItsOwnServerPassword(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		p, err := Build("/bin/opencode", Request{Adapter: agent.OpenCode, Cwd: cwd})
		require.NoError(t, err)
		pw := p.Env["OPENCODE_SERVER_PASSWORD"]
		assert.Len(t, pw, 48)
		assert.False(t, seen[pw], "a password given twice")
		seen[pw] = true
		assert.NotContains(t, p.Command(), pw, "the password is not on argv")
	}
}

// The operator points OpenCode at a provider with its own config in
// card.toml; card keeps it and lays its permission table over it, so a
// permission the operator wrote cannot widen a mode.
func TestTheOperatorsOpenCodeConfigIsKeptUnderCardsPermissions(t *testing.T) {
	op := `{"provider":{"mine":{"npm":"@ai-sdk/openai-compatible","options":{"baseURL":"http://127.0.0.1:9/v1"}}},` +
		`"model":"mine/m","permission":{"bash":"allow"},"agent":{"build":{"model":"mine/other","permission":{"*":"allow"}}}}`
	p, err := Build("/bin/opencode", Request{Adapter: agent.OpenCode, Cwd: cwd, Mode: ModeEdit,
		Extras: Extras{Env: map[string]string{"OPENCODE_CONFIG_CONTENT": op}}})
	require.NoError(t, err)
	cfg := openCodeEnvConfig(t, p)
	assert.Contains(t, cfg["provider"], "mine")
	assert.Equal(t, "mine/m", cfg["model"])
	assert.Equal(t, "ask", cfg["permission"].(map[string]any)["bash"])
	build := cfg["agent"].(map[string]any)["build"].(map[string]any)
	assert.Equal(t, "mine/other", build["model"], "the operator's agent settings stay")
	assert.Equal(t, "ask", build["permission"].(map[string]any)["*"])

	p, err = Build("/bin/opencode", Request{Adapter: agent.OpenCode, Cwd: cwd, Model: "mine/big",
		Extras: Extras{Env: map[string]string{"OPENCODE_CONFIG_CONTENT": op}}})
	require.NoError(t, err)
	assert.Equal(t, "mine/big", openCodeEnvConfig(t, p)["model"], "the request's model goes in the config")

	_, err = Build("/bin/opencode", Request{Adapter: agent.OpenCode, Cwd: cwd,
		Extras: Extras{Env: map[string]string{"OPENCODE_CONFIG_CONTENT": `["not", "an", "object"]`}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "[adapters.opencode] env OPENCODE_CONFIG_CONTENT")
}

// Qwen Code's own yolo, and the flags card sets from the mode, are not
// the operator's to pass: each would run every call unasked in every mode.
func TestQwenCodesApprovalModeIsCardsAlone(t *testing.T) {
	for _, arg := range []string{"--yolo", "-y", "--approval-mode=auto-edit", "--approval-mode yolo"} {
		assert.Error(t, CheckExtras(agent.QwenCode, Extras{Args: []string{arg}}), arg)
	}
	for _, arg := range []string{"--pure", "--port=4096", "--hostname", "--mdns"} {
		assert.Error(t, CheckExtras(agent.OpenCode, Extras{Args: []string{arg}}), arg)
	}
	assert.NoError(t, CheckExtras(agent.QwenCode, Extras{Args: []string{"--openai-logging"}, Env: map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}}))

	p, err := Build("/bin/qwen", Request{Adapter: agent.QwenCode, Cwd: cwd, Model: "qwen3-coder", Resume: "s-1", Mode: ModeEdit})
	require.NoError(t, err)
	assert.Equal(t, []string{"--acp", "--approval-mode", "default", "--model", "qwen3-coder"}, p.Args)
	assert.Equal(t, "s-1", p.Session.resume, "the session to continue goes inside ACP, never on argv")
	assert.Equal(t, ModeEdit, p.Session.mode)
}

// What ACP cannot carry is refused naming the field, for both.
func TestTheACPBuiltInsRefuseWhatACPCannotCarry(t *testing.T) {
	for _, id := range []string{agent.OpenCode, agent.QwenCode} {
		for _, c := range []struct {
			field string
			req   Request
		}{
			{"allowed_tools", Request{AllowedTools: []string{"read"}}},
			{"max_turns", Request{MaxTurns: 3}},
			{"effort", Request{Effort: "high"}},
			{"system_prompt", Request{SystemPrompt: "be brief"}},
			{"session_id", Request{SessionID: "0b0e8f6c-9a51-4f39-9a8e-1c3e5b7c2d10"}},
		} {
			c.req.Adapter, c.req.Cwd = id, cwd
			_, err := Build("/bin/"+id, c.req)
			var fe *api.FieldError
			require.ErrorAs(t, err, &fe, "%s %s", id, c.field)
			assert.Equal(t, c.field, fe.Field, id)
		}
	}
}

// Qwen Code names the tool in each call's _meta; without it the call's
// kind is its name.
func TestQwenCodesToolNameComesFromItsMeta(t *testing.T) {
	assert.Equal(t, "write_file", acpMetaToolName(acp.ToolCallUpdate{Kind: acp.ToolEdit, Meta: json.RawMessage(`{"toolName":"write_file"}`)}))
	assert.Equal(t, "edit", acpMetaToolName(acp.ToolCallUpdate{Kind: acp.ToolEdit}))
	assert.Equal(t, "execute", acpMetaToolName(acp.ToolCallUpdate{Kind: acp.ToolExecute, Meta: json.RawMessage(`[]`)}))
}
