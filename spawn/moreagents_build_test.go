package spawn

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
)

// The whole argv of Copilot, Droid and Pi per mode: this is their boundary,
// so a change here is a change to what the agent may do. The first three
// adapters are pinned in build_test.go.
func TestTheWholeArgvOfCopilotDroidAndPiIsPinnedPerMode(t *testing.T) {
	const copilotBase = `--output-format json --no-ask-user --no-auto-update --no-custom-instructions --disable-builtin-mcps --disallow-temp-dir --no-color`
	const piBase = `-p --mode json --no-session -nc --no-extensions --no-skills --no-prompt-templates --no-themes --offline`
	cases := []struct {
		adapter string
		mode    Mode
		want    string
	}{
		{"copilot", ModeReadOnly, copilotBase + ` --deny-tool write --deny-tool shell --allow-tool read`},
		{"copilot", ModeEdit, copilotBase + ` --deny-tool shell --allow-tool read --allow-tool write`},
		{"copilot", ModeBypass, copilotBase + ` --allow-tool read --allow-tool write --allow-tool shell`},
		{"droid", ModeReadOnly, `exec -o stream-json`},
		{"droid", ModeBypass, `exec -o stream-json --skip-permissions-unsafe`},
		{"pi", ModeReadOnly, piBase + ` --tools read,grep,find,ls`},
		{"pi", ModeEdit, piBase + ` --tools read,grep,find,ls,edit,write`},
		{"pi", ModeBypass, piBase + ` --tools read,grep,find,ls,edit,write,bash`},
	}
	for _, c := range cases {
		t.Run(c.adapter+"/"+string(c.mode), func(t *testing.T) {
			p, err := Build("/usr/bin/"+c.adapter, Request{Adapter: c.adapter, Mode: c.mode, Cwd: cwd, AllowBypass: true})
			require.NoError(t, err)
			assert.Equal(t, c.want, strings.Join(p.Args, " "))
			assert.Equal(t, "/usr/bin/"+c.adapter, p.Program)
			assert.Equal(t, cwd, p.Dir)
			assert.Empty(t, p.Files)
		})
	}
}

func TestDroidEditIsRefusedBecauseItsOnlyEditLevelIsAuto(t *testing.T) {
	_, err := Build("/bin/droid", Request{Adapter: "droid", Mode: ModeEdit, Cwd: cwd})
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "permission_mode", fe.Field)
	assert.Contains(t, fe.Message, "--auto")
}

// Copilot ignores piped input when -p is given, so the prompt is stdin and
// never -p; and a read-only run denies write even though write is not on the
// allowlist.
func TestCopilotReadsThePromptFromStdinAndDeniesWriteInReadOnly(t *testing.T) {
	p, err := Build("/bin/copilot", Request{Adapter: "copilot", Cwd: cwd})
	require.NoError(t, err)
	assert.NotContains(t, p.Args, "-p")
	assert.NotContains(t, p.Args, "--prompt")
	assert.NotContains(t, p.Args, "-s", "-s/--silent drops the JSON events")
	i := indexOf(p.Args, "--deny-tool")
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, "write", p.Args[i+1])
	assert.Equal(t, "false", p.Env["COPILOT_ALLOW_ALL"], "an inherited COPILOT_ALLOW_ALL must not grant every tool")
}

func TestEveryRequestOptionLandsOnTheNewAdaptersArgv(t *testing.T) {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	p, err := Build("/bin/copilot", Request{Adapter: "copilot", Cwd: cwd, Mode: ModeEdit, AllowedTools: []string{"read", "write"},
		Model: "claude-sonnet-4-5", Effort: "high", SessionID: id})
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(strings.Join(p.Args, " "), "--deny-tool shell --allow-tool read --allow-tool write --model claude-sonnet-4-5 --reasoning-effort high --session-id "+id))
	p, err = Build("/bin/copilot", Request{Adapter: "copilot", Cwd: cwd, Resume: "abc1234"})
	require.NoError(t, err)
	assert.Contains(t, p.Args, "--resume=abc1234", "--resume takes an optional value, bound only by =")

	p, err = Build("/bin/droid", Request{Adapter: "droid", Cwd: cwd, AllowedTools: []string{"Read", "Grep"}, Model: "custom:x-0",
		Effort: "low", Resume: "0b6ac262-e252-479b-b742-908a5f1addfb", SystemPrompt: "be terse", SystemPromptAppend: true})
	require.NoError(t, err)
	assert.Equal(t, "exec -o stream-json --only-tools Read,Grep -m custom:x-0 -r low -s 0b6ac262-e252-479b-b742-908a5f1addfb --append-system-prompt-file {{card-file:append-system-prompt.md}}",
		strings.Join(p.Args, " "))
	require.Len(t, p.Files, 1)
	assert.Equal(t, "be terse", string(p.Files[0].Content))

	for _, appendIt := range []bool{false, true} {
		p, err = Build("/bin/pi", Request{Adapter: "pi", Cwd: cwd, AllowedTools: []string{"read"}, Model: "cardstandin/m", Effort: "xhigh",
			SystemPrompt: "rules", SystemPromptAppend: appendIt})
		require.NoError(t, err)
		flag := "--system-prompt"
		if appendIt {
			flag = "--append-system-prompt"
		}
		assert.True(t, strings.HasSuffix(strings.Join(p.Args, " "), "--tools read --model cardstandin/m --thinking xhigh "+flag+" {{card-file:system-prompt.md}}"), p.Args)
		assert.EqualValues(t, 0o600, p.Files[0].Mode)
	}
	p, err = Build("/bin/pi", Request{Adapter: "pi", Cwd: cwd, AllowedTools: []string{}})
	require.NoError(t, err)
	assert.Contains(t, p.Args, "--no-tools", "an empty allowed_tools is no tools at all, not Pi's defaults")
	assert.NotContains(t, p.Args, "--tools")
}

func TestTheNewAdaptersRefuseWhatTheirCLICannotHonour(t *testing.T) {
	cases := []struct {
		req   Request
		field string
	}{
		{Request{Adapter: "copilot", MaxTurns: 3}, "max_turns"},
		{Request{Adapter: "copilot", NoSession: true}, "session_id"},
		{Request{Adapter: "copilot", SystemPrompt: "x"}, "system_prompt"},
		{Request{Adapter: "copilot", AllowedTools: []string{"shell(git:*)"}}, "allowed_tools"},
		{Request{Adapter: "copilot", Mode: ModeEdit, AllowedTools: []string{"shell"}}, "allowed_tools"},
		{Request{Adapter: "droid", Mode: ModeEdit}, "permission_mode"},
		{Request{Adapter: "droid", MaxTurns: 3}, "max_turns"},
		{Request{Adapter: "droid", SessionID: "123e4567-e89b-12d3-a456-426614174000"}, "session_id"},
		{Request{Adapter: "droid", NoSession: true}, "session_id"},
		{Request{Adapter: "droid", SystemPrompt: "replace me"}, "system_prompt"},
		{Request{Adapter: "droid", AllowedTools: []string{"MCP:slack"}}, "allowed_tools"},
		{Request{Adapter: "droid", AllowedTools: []string{}}, "allowed_tools"},
		{Request{Adapter: "pi", MaxTurns: 3}, "max_turns"},
		{Request{Adapter: "pi", Resume: "01a22954"}, "resume"},
		{Request{Adapter: "pi", SessionID: "123e4567-e89b-12d3-a456-426614174000"}, "session_id"},
		{Request{Adapter: "pi", Effort: "max"}, "effort"},
		{Request{Adapter: "pi", AllowedTools: []string{"bash"}}, "allowed_tools"},
		{Request{Adapter: "pi", Mode: ModeEdit, AllowedTools: []string{"read", "bash"}}, "allowed_tools"},
	}
	for _, c := range cases {
		c.req.Cwd = cwd
		_, err := Build("/bin/x", c.req)
		var fe *FieldError
		require.ErrorAs(t, err, &fe, "%+v", c.req)
		assert.Equal(t, c.field, fe.Field, "%+v", c.req)
	}
}

// bypassMappings are the forbidden flags an adapter may carry, and only as
// the mapping of an operator-allowed bypass.
var bypassMappings = map[string]string{"claude-code": "bypassPermissions", "droid": "--skip-permissions-unsafe"}

// The forbidden-flag property over all six adapters: every adapter × mode ×
// a request carrying the options, built or refused. A build never carries a
// forbidden flag outside an operator-allowed bypass mapping, nor the system
// prompt; a refusal is a request error naming a field (Droid's edit, or an
// option a CLI cannot honour), never a silent downgrade.
func TestNoneOfTheSixAdaptersInAnyModeGetsAForbiddenFlagOrThePrompt(t *testing.T) {
	const secret = "SYSTEM-PROMPT-SECRET do not leak"
	require.Subset(t, IDs(), []string{"claude-code", "codex", "gemini", "copilot", "droid", "pi"})
	built := map[string]int{}
	for _, id := range IDs() {
		for _, mode := range Modes {
			for _, req := range []Request{
				{Model: "m"},
				{Model: "m", SystemPrompt: secret},
				{Model: "m", SystemPrompt: secret, SystemPromptAppend: true},
			} {
				req.Adapter, req.Mode, req.Cwd, req.AllowBypass = id, mode, cwd, true
				p, err := Build("/opt/bin/"+id, req)
				if err != nil {
					var fe *FieldError
					require.True(t, errors.As(err, &fe), "%s/%s: %v", id, mode, err)
					continue
				}
				built[id]++
				argv := strings.Join(append([]string{p.Program}, p.Args...), " ")
				assert.NotContains(t, argv, secret, "%s/%s: system prompt on argv", id, mode)
				for _, v := range p.Env {
					assert.NotContains(t, v, secret, "%s/%s: system prompt in env", id, mode)
				}
				for _, a := range p.Args {
					for _, tok := range argTokens(a) {
						for _, f := range ForbiddenFlags {
							if tok == f {
								assert.True(t, mode == ModeBypass && bypassMappings[id] == f, "%s/%s must never be given %s: %s", id, mode, f, argv)
							}
						}
					}
				}
				if mode != ModeBypass {
					assert.NotContains(t, argv, "yolo", "%s/%s", id, mode)
					assert.NotContains(t, argv, "danger-full-access", "%s/%s", id, mode)
				}
				for _, flag := range []string{"--cwd", "--workspace", "-C ", "--cd", "--allow-all", "--yolo"} {
					assert.NotContains(t, argv, flag, "%s/%s", id, mode)
				}
			}
		}
	}
	for _, id := range IDs() {
		assert.Positive(t, built[id], "%s builds in at least one mode", id)
	}
	// read_only must build for every adapter: it is the default mode.
	for _, id := range IDs() {
		_, err := Build("/opt/bin/"+id, Request{Adapter: id, Cwd: cwd})
		assert.NoError(t, err, id)
	}
}

func TestExtrasThatSetANewAdaptersOwnFlagsAreRefusedAtConfigLoad(t *testing.T) {
	bad := []struct {
		adapter string
		args    []string
	}{
		{"copilot", []string{"--allow-tool", "shell"}},
		{"copilot", []string{"--deny-tool=write"}},
		{"copilot", []string{"--allow-all"}},
		{"copilot", []string{"-p", "hi"}},
		{"copilot", []string{"--add-dir", "/"}},
		{"droid", []string{"--auto", "low"}},
		{"droid", []string{"--only-tools", "Execute"}},
		{"droid", []string{"--settings", "/x.json"}},
		{"pi", []string{"--tools", "bash"}},
		{"pi", []string{"-e", "/ext.js"}},
		{"pi", []string{"--system-prompt", "x"}},
	}
	for _, c := range bad {
		err := CheckExtras(c.adapter, Extras{Args: c.args})
		require.Error(t, err, "%s %q", c.adapter, c.args)
		assert.Contains(t, err.Error(), "card.toml [adapters."+c.adapter+"]")
	}
	for _, c := range []struct {
		adapter string
		e       Extras
	}{
		{"copilot", Extras{Env: map[string]string{"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:9", "COPILOT_MODEL": "m"}}},
		{"droid", Extras{Args: []string{"-m", "custom:cardstandin-0"}}},
		{"pi", Extras{Args: []string{"--provider", "cardstandin", "--model", "m"}}},
	} {
		assert.NoError(t, CheckExtras(c.adapter, c.e), "%s %+v", c.adapter, c.e)
	}
}

func TestTheNewAdaptersDiscloseHowReadOnlyIsEnforced(t *testing.T) {
	for id, want := range map[string]agent.ReadOnlyEnforcement{"copilot": agent.EnforcedByAllowlist, "droid": agent.EnforcedByAgentDefault, "pi": agent.NotEnforced} {
		a, ok := Lookup(id)
		require.True(t, ok)
		assert.Equal(t, want, a.ReadOnly, id)
	}
}
