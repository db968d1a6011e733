package spawn

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

const cwd = "/home/user/project"

// The whole argv, per adapter × mode. This is the boundary: a change here is
// a change to what an agent may do on someone's machine, and must show up in
// review as a change to this table.
func TestTheWholeArgvIsPinnedPerAdapterAndMode(t *testing.T) {
	const copilotBase = `--output-format json --no-ask-user --no-auto-update --no-custom-instructions --disable-builtin-mcps --disallow-temp-dir --no-color`
	const piBase = `-p --mode json --no-session -nc --no-extensions --no-skills --no-prompt-templates --no-themes --offline`
	cases := []struct {
		adapter string
		mode    Mode
		want    string
	}{
		{"claude-code", ModeReadOnly, `-p --output-format stream-json --verbose --include-partial-messages --permission-mode dontAsk --disallowedTools Task --setting-sources  --strict-mcp-config --tools Read,Grep,Glob --allowedTools Read Grep Glob`},
		{"claude-code", ModeEdit, `-p --output-format stream-json --verbose --include-partial-messages --permission-mode acceptEdits --disallowedTools Task --setting-sources  --strict-mcp-config --tools Read,Grep,Glob,Edit,Write,NotebookEdit --allowedTools Read Grep Glob`},
		{"claude-code", ModeBypass, `-p --output-format stream-json --verbose --include-partial-messages --permission-mode bypassPermissions --disallowedTools Task --setting-sources  --strict-mcp-config --tools default`},
		{"codex", ModeReadOnly, `exec --json --ignore-user-config --ignore-rules --color never --skip-git-repo-check --sandbox read-only -c approval_policy="never" -`},
		{"codex", ModeEdit, `exec --json --ignore-user-config --ignore-rules --color never --skip-git-repo-check --sandbox workspace-write -c approval_policy="never" -c sandbox_workspace_write.exclude_slash_tmp=true -c sandbox_workspace_write.exclude_tmpdir_env_var=true -`},
		{"codex", ModeBypass, `exec --json --ignore-user-config --ignore-rules --color never --skip-git-repo-check --sandbox danger-full-access -c approval_policy="never" -`},
		{"gemini", ModeReadOnly, `--output-format stream-json --approval-mode plan`},
		{"gemini", ModeEdit, `--output-format stream-json --approval-mode auto_edit`},
		{"gemini", ModeBypass, `--output-format stream-json --approval-mode yolo`},
		{"gemini", ModeAsk, `--acp --approval-mode default`},
		{"copilot", ModeReadOnly, copilotBase + ` --deny-tool write --deny-tool shell --allow-tool read`},
		{"copilot", ModeEdit, copilotBase + ` --deny-tool shell --allow-tool read --allow-tool write`},
		{"copilot", ModeBypass, copilotBase + ` --allow-tool read --allow-tool write --allow-tool shell`},
		{"copilot", ModeAsk, `--acp --no-ask-user --no-auto-update --no-custom-instructions --disable-builtin-mcps --disallow-temp-dir --no-color`},
		{"droid", ModeReadOnly, `exec -o stream-json`},
		{"droid", ModeBypass, `exec -o stream-json --skip-permissions-unsafe`},
		{"pi", ModeReadOnly, piBase + ` --tools read,grep,find,ls`},
		{"pi", ModeEdit, `-p --mode json --no-session -nc --no-extensions -e {{card-file:card-edit-gate.ts}} --no-skills --no-prompt-templates --no-themes --offline --tools read,grep,find,ls,edit,write`},
		{"pi", ModeBypass, piBase + ` --tools read,grep,find,ls,edit,write,bash`},
		{"opencode", ModeReadOnly, `acp --pure`},
		{"opencode", ModeEdit, `acp --pure`},
		{"opencode", ModeBypass, `acp --pure`},
		{"opencode", ModeAsk, `acp --pure`},
		{"qwen-code", ModeReadOnly, `--acp --approval-mode default`},
		{"qwen-code", ModeEdit, `--acp --approval-mode default`},
		{"qwen-code", ModeBypass, `--acp --approval-mode yolo`},
		{"qwen-code", ModeAsk, `--acp --approval-mode default`},
	}
	for _, c := range cases {
		t.Run(c.adapter+"/"+string(c.mode), func(t *testing.T) {
			p, err := Build("/usr/bin/"+c.adapter, Request{Adapter: c.adapter, Mode: c.mode, Cwd: cwd, AllowBypass: true})
			require.NoError(t, err)
			assert.Equal(t, c.want, strings.Join(p.Args, " "))
			assert.Equal(t, "/usr/bin/"+c.adapter, p.Program)
			assert.Equal(t, cwd, p.Dir)
			if c.adapter == "pi" && c.mode == ModeEdit {
				require.Len(t, p.Files, 1, "Pi's edit gate is the run's one private file")
				assert.Equal(t, piEditGateFile, p.Files[0].Path)
				return
			}
			assert.Empty(t, p.Files)
		})
	}
}

func TestClaudeEmptyToolsIsAnExplicitEmptyArgument(t *testing.T) {
	p, err := Build("claude", Request{Adapter: "claude-code", Cwd: cwd, AllowedTools: []string{}})
	require.NoError(t, err)
	i := indexOf(p.Args, "--tools")
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, "", p.Args[i+1], "--tools must be set even when empty, so ambient tools are not inherited")
	assert.NotContains(t, p.Args, "--allowedTools")
	assert.Equal(t, "", p.Args[indexOf(p.Args, "--setting-sources")+1])
}

func TestEveryRequestOptionLandsOnClaudesArgv(t *testing.T) {
	p, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Mode: ModeEdit, AllowedTools: []string{"Read", "Grep(src/**)"},
		Model: "opus", MaxTurns: 7, Effort: "xhigh", SystemPrompt: "You are terse.", SystemPromptAppend: true,
		SessionID: "123e4567-e89b-12d3-a456-426614174000"})
	require.NoError(t, err)
	assert.Equal(t, `-p --output-format stream-json --verbose --include-partial-messages --permission-mode acceptEdits --disallowedTools Task --setting-sources  --strict-mcp-config --tools Read,Grep,Edit,Write,NotebookEdit --allowedTools Read Grep(src/**) --model opus --effort xhigh --max-turns 7 --session-id 123e4567-e89b-12d3-a456-426614174000 --append-system-prompt-file {{card-file:system-prompt.txt}}`,
		strings.Join(p.Args, " "))
	require.Len(t, p.Files, 1)
	assert.Equal(t, "You are terse.", string(p.Files[0].Content))
	assert.EqualValues(t, 0o600, p.Files[0].Mode)

	p, err = Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Resume: "942c07c4-8230-4293-9685-338fbcab211c", SystemPrompt: "replace"})
	require.NoError(t, err)
	assert.Contains(t, strings.Join(p.Args, " "), "--resume 942c07c4-8230-4293-9685-338fbcab211c --system-prompt-file {{card-file:system-prompt.txt}}")

	p, err = Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, NoSession: true})
	require.NoError(t, err)
	assert.Contains(t, p.Args, "--no-session-persistence")
}

func TestCodexResumeKeepsTheSandboxAndStdinPrompt(t *testing.T) {
	p, err := Build("/bin/codex", Request{Adapter: "codex", Cwd: cwd, Resume: "01a22933-78e1-7402-8487-514b5febcff9",
		Model: "gpt-5", Effort: "high", SystemPrompt: "rules", Extras: Extras{Args: []string{"-c", `model_provider="fake"`}}})
	require.NoError(t, err)
	assert.Equal(t, `exec -c model_provider="fake" --json --ignore-user-config --ignore-rules --color never --skip-git-repo-check --sandbox read-only -c approval_policy="never" --model gpt-5 -c model_reasoning_effort="high" -c model_instructions_file="{{card-file:instructions.md}}" -c sandbox_mode="read-only" resume 01a22933-78e1-7402-8487-514b5febcff9 -`,
		strings.Join(p.Args, " "))
}

func TestGeminiSystemPromptTravelsAsAFileNamedInTheEnv(t *testing.T) {
	p, err := Build("/bin/gemini", Request{Adapter: "gemini", Cwd: cwd, SystemPrompt: "be brief", Model: "gemini-2.5-flash",
		SessionID: "123e4567-e89b-12d3-a456-426614174000", Extras: Extras{Args: []string{"--skip-trust"}, Env: map[string]string{"GEMINI_API_KEY": "k"}}})
	require.NoError(t, err)
	assert.Equal(t, "--skip-trust --output-format stream-json --approval-mode plan --model gemini-2.5-flash --session-id 123e4567-e89b-12d3-a456-426614174000", strings.Join(p.Args, " "))
	assert.Equal(t, FileRef("system.md"), p.Env["GEMINI_SYSTEM_MD"])
	assert.Equal(t, "k", p.Env["GEMINI_API_KEY"])
}

func TestBypassIsRefusedUnlessTheOperatorAllowedIt(t *testing.T) {
	for _, id := range IDs() {
		_, err := Build("/bin/x", Request{Adapter: id, Mode: ModeBypass, Cwd: cwd})
		var be *BypassRefusedError
		require.ErrorAs(t, err, &be, id)
		assert.Contains(t, err.Error(), "allow_bypass")
	}
}

func TestRequestValidationNamesTheField(t *testing.T) {
	cases := []struct {
		name  string
		req   Request
		field string
		msg   string
	}{
		{"unknown effort", Request{Effort: "ultra"}, "effort", "low, medium, high, xhigh, max"},
		{"unknown mode", Request{Mode: "yolo"}, "permission_mode", "read_only"},
		{"negative turns", Request{MaxTurns: -1}, "max_turns", "positive"},
		{"model that is a flag", Request{Model: "--yolo"}, "model", "not a model"},
		{"tool with a comma", Request{AllowedTools: []string{"Read,Write"}}, "allowed_tools", "comma"},
		{"session id not a uuid", Request{SessionID: "abc"}, "session_id", "UUID"},
		{"resume that is a flag", Request{Resume: "--dangerously-skip-permissions"}, "resume", "session id"},
		{"two session choices", Request{Resume: "abc", NoSession: true}, "session_id", "one of"},
		{"append with no prompt", Request{SystemPromptAppend: true}, "system_prompt", "empty"},
		{"tool entry that is two", Request{AllowedTools: []string{"Read(/) Bash"}}, "allowed_tools", "outside parentheses"},
		{"tool entry with a tab", Request{AllowedTools: []string{"Read\tBash"}}, "allowed_tools", "outside parentheses"},
		{"tool entry with an unclosed pattern", Request{AllowedTools: []string{"Read(/ Bash"}}, "allowed_tools", "without its ')'"},
		{"tool entry closing what it never opened", Request{AllowedTools: []string{"Read) (Bash"}}, "allowed_tools", "without its '('"},
		{"placeholder in the model", Request{Model: "{{card-file:../../etc/passwd}}"}, "model", "private-file placeholder"},
		{"placeholder in a tool", Request{AllowedTools: []string{"Read({{card-file:x}})"}}, "allowed_tools", "private-file placeholder"},
		{"placeholder in the effort", Request{Effort: "{{card-file:x}}"}, "effort", "private-file placeholder"},
		{"placeholder in the resume id", Request{Resume: "{{card-file:x}}"}, "resume", "private-file placeholder"},
		{"placeholder in the cwd", Request{Cwd: "/tmp/{{card-file:x}}"}, "cwd", "private-file placeholder"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.Adapter = "claude-code"
			err := c.req.Validate()
			var fe *api.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.field, fe.Field)
			assert.Contains(t, fe.Message, c.msg)
		})
	}
	assert.NoError(t, Request{Adapter: "claude-code", Effort: "max"}.Validate())
}

func TestAllowedToolsMayOnlyNarrowTheMode(t *testing.T) {
	_, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, AllowedTools: []string{"Read", "Bash(git log:*)"}})
	var fe *api.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "allowed_tools[1]", fe.Field)
	assert.Contains(t, fe.Message, "Bash is not available in read_only")

	_, err = Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Mode: ModeBypass, AllowBypass: true, AllowedTools: []string{"Task"}})
	require.ErrorAs(t, err, &fe)
	assert.Contains(t, fe.Message, "Task is never allowed")

	p, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Mode: ModeBypass, AllowBypass: true, AllowedTools: []string{"Bash(git *)", "Read"}})
	// Whitespace inside a pattern's parentheses is the pattern's own.
	require.NoError(t, err)
	assert.Equal(t, "Bash,Read", p.Args[indexOf(p.Args, "--tools")+1])
	assert.Equal(t, []string{"Bash(git *)", "Read"}, p.Args[indexOf(p.Args, "--allowedTools")+1:])
}

func TestFieldsACLICannotHonourAreRefusedNotDropped(t *testing.T) {
	cases := []struct {
		req   Request
		field string
	}{
		{Request{Adapter: "codex", AllowedTools: []string{"Read"}}, "allowed_tools"},
		{Request{Adapter: "codex", MaxTurns: 3}, "max_turns"},
		{Request{Adapter: "codex", SessionID: "123e4567-e89b-12d3-a456-426614174000"}, "session_id"},
		{Request{Adapter: "codex", SystemPrompt: "x", SystemPromptAppend: true}, "system_prompt"},
		{Request{Adapter: "gemini", AllowedTools: []string{}}, "allowed_tools"},
		{Request{Adapter: "gemini", MaxTurns: 3}, "max_turns"},
		{Request{Adapter: "gemini", Effort: "low"}, "effort"},
		{Request{Adapter: "gemini", NoSession: true}, "session_id"},
		{Request{Adapter: "gemini", SystemPrompt: "x", SystemPromptAppend: true}, "system_prompt"},
		{Request{Adapter: "copilot", MaxTurns: 3}, "max_turns"},
		{Request{Adapter: "copilot", NoSession: true}, "session_id"},
		{Request{Adapter: "copilot", SystemPrompt: "x"}, "system_prompt"},
		{Request{Adapter: "copilot", AllowedTools: []string{"shell(git:*)"}}, "allowed_tools"},
		{Request{Adapter: "copilot", Mode: ModeEdit, AllowedTools: []string{"shell"}}, "allowed_tools"},
		{Request{Adapter: "copilot", Mode: ModeAsk, AllowedTools: []string{"read"}}, "allowed_tools"},
		{Request{Adapter: "copilot", Mode: ModeAsk, SessionID: "123e4567-e89b-12d3-a456-426614174000"}, "session_id"},
		{Request{Adapter: "gemini", Mode: ModeAsk, SessionID: "123e4567-e89b-12d3-a456-426614174000"}, "session_id"},
		{Request{Adapter: "gemini", Mode: ModeAsk, Resume: "latest"}, "resume"},
		{Request{Adapter: "gemini", Mode: ModeAsk, AllowedTools: []string{"read_file"}}, "allowed_tools"},
		{Request{Adapter: "droid", Mode: ModeEdit}, "permission_mode"},
		{Request{Adapter: "droid", MaxTurns: 3}, "max_turns"},
		{Request{Adapter: "droid", SessionID: "123e4567-e89b-12d3-a456-426614174000"}, "session_id"},
		{Request{Adapter: "droid", NoSession: true}, "session_id"},
		{Request{Adapter: "droid", SystemPrompt: "replace me"}, "system_prompt"},
		{Request{Adapter: "droid", AllowedTools: []string{"MCP:slack"}}, "allowed_tools"},
		{Request{Adapter: "droid", AllowedTools: []string{}}, "allowed_tools"},
		{Request{Adapter: "pi", MaxTurns: 3}, "max_turns"},
		{Request{Adapter: "pi", Resume: "01a22954", AgentSessionDir: "/home/user/.card/agent-sessions"}, "resume"}, // not an id card gave
		{Request{Adapter: "pi", SessionID: "123e4567-e89b-12d3-a456-426614174000"}, "session_id"},                  // no directory to keep it in
		{Request{Adapter: "pi", Effort: "max"}, "effort"},
		{Request{Adapter: "pi", AllowedTools: []string{"bash"}}, "allowed_tools"},
		{Request{Adapter: "pi", Mode: ModeEdit, AllowedTools: []string{"read", "bash"}}, "allowed_tools"},
		{Request{Adapter: "nope"}, "id"},
	}
	for _, c := range cases {
		c.req.Cwd = cwd
		_, err := Build("/bin/x", c.req)
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe, "%+v", c.req)
		assert.Equal(t, c.field, fe.Field, "%+v", c.req)
	}
}

func TestExtrasThatWidenTheBoundaryAreRefusedAtConfigLoad(t *testing.T) {
	bad := []struct {
		adapter string
		args    []string
	}{
		{"claude-code", []string{"--dangerously-skip-permissions"}},
		{"claude-code", []string{"--permission-mode=bypassPermissions"}},
		{"claude-code", []string{"--permission-mode", "acceptEdits"}},
		{"claude-code", []string{"--tools", "default"}},
		{"claude-code", []string{"--verbose --dangerously-skip-permissions"}},
		{"codex", []string{"--full-auto"}},
		{"codex", []string{"--dangerously-bypass-approvals-and-sandbox"}},
		{"codex", []string{"--yolo"}},
		{"codex", []string{"-c", "sandbox_mode=danger-full-access"}},
		{"codex", []string{"-c", `approval_policy="on-request"`}},
		{"codex", []string{"--config=sandbox_workspace_write.network_access=true"}},
		{"codex", []string{"-csandbox_mode=danger-full-access"}},
		{"codex", []string{"--sandbox=danger-full-access"}},
		{"gemini", []string{"--approval-mode yolo"}},
		{"gemini", []string{"--approval-mode=yolo"}},
		{"gemini", []string{"-y"}},
		{"gemini", []string{"--yolo"}},
		{"copilot", []string{"--allow-all-tools"}},
		{"copilot", []string{"--allow-all-paths"}},
		{"droid", []string{"--auto", "high"}},
		{"droid", []string{"--skip-permissions-unsafe"}},
		{"copilot", []string{"--dangerously-allow-all"}},
		{"claude-code", []string{"{{card-file:x}}"}},
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
	assert.Error(t, CheckExtras("codex", Extras{Env: map[string]string{"CAR_INVOKED_BY": "x"}}), "the guard stamp is not the operator's")

	good := []struct {
		adapter string
		e       Extras
	}{
		{"codex", Extras{Args: []string{"-c", `model_providers.fake={name="fake",base_url="http://127.0.0.1:9/v1",wire_api="responses"}`, "-c", `model_provider="fake"`}}},
		{"gemini", Extras{Args: []string{"--skip-trust"}, Env: map[string]string{"GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:9"}}},
		{"claude-code", Extras{Env: map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}}},
		{"copilot", Extras{Env: map[string]string{"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:9", "COPILOT_MODEL": "m"}}},
		{"droid", Extras{Args: []string{"-m", "custom:cardstandin-0"}}},
		{"pi", Extras{Args: []string{"--provider", "cardstandin", "--model", "m"}}},
	}
	for _, c := range good {
		assert.NoError(t, CheckExtras(c.adapter, c.e), "%s %+v", c.adapter, c.e)
	}
}

func TestTheRegistryListsEveryAdapterOnce(t *testing.T) {
	assert.Equal(t, []string{"claude-code", "codex", "copilot", "droid", "gemini", "opencode", "pi", "qwen-code"}, IDs())
	for _, id := range IDs() {
		a, ok := Lookup(id)
		require.True(t, ok)
		assert.Equal(t, id, a.ID)
		if id == agent.OpenCode || id == agent.QwenCode {
			// Every plan of theirs runs over ACP: no stdout is parsed.
			for _, m := range []Mode{ModeReadOnly, ModeEdit, ModeAsk} {
				p, err := Build("/bin/"+id, Request{Adapter: id, Mode: m, Cwd: "/tmp"})
				require.NoError(t, err, "%s %s", id, m)
				require.NotNil(t, p.Session, "%s %s", id, m)
				assert.Equal(t, ProtocolACP, p.Session.Protocol)
			}
			continue
		}
		assert.NotNil(t, a.NewParser())
	}
}

// An adapter spawn has no driver for, a driver with any field unset (a
// builder, a parser, an extra-arg check, an MCP hand-over or its refusal, a
// session protocol or why it needs none), or a driver for an adapter that
// does not exist, stops the program when the package initialises.
func TestADriverMissingAnyFieldPanicsWhenTheRegistryIsBuilt(t *testing.T) {
	assert.NotPanics(t, func() { mustJoin(agent.All(), drivers) })
	with := func(id string, change func(*Driver)) []Driver {
		out := slices.Clone(drivers)
		for i := range out {
			if out[i].For == id {
				change(&out[i])
			}
		}
		return out
	}
	for _, c := range []struct {
		name    string
		drivers []Driver
		panic   string
	}{
		{"no driver", slices.DeleteFunc(slices.Clone(drivers), func(d Driver) bool { return d.For == agent.Pi }),
			`spawn: adapter "pi" has no driver in drivers`},
		{"no builder", with(agent.Gemini, func(d *Driver) { d.Build = nil }), `spawn: the driver for "gemini" has no Build`},
		{"no parser", with(agent.Codex, func(d *Driver) { d.NewParser = nil }), `spawn: the driver for "codex" has no NewParser`},
		{"no extra-arg check", with(agent.Droid, func(d *Driver) { d.CheckExtraArg = nil }),
			`spawn: the driver for "droid" has no CheckExtraArg (noExtraArgCheck when it has none)`},
		{"no MCP hand-over and no refusal", with(agent.Copilot, func(d *Driver) { d.MCP = MCPHandover{} }),
			`spawn: the driver for "copilot" must either hand over an MCP server (MCP.Add) or say why it cannot (MCP.Refused), not both or neither`},
		{"an MCP hand-over and a refusal", with(agent.Pi, func(d *Driver) { d.MCP.Add = claudeDriver.MCP.Add }),
			`spawn: the driver for "pi" must either hand over an MCP server (MCP.Add) or say why it cannot (MCP.Refused), not both or neither`},
		{"a protocol without its side", with(agent.Droid, func(d *Driver) { d.Protocols = map[Protocol]func(Plan) protocol{ProtocolDroidRPC: nil} }),
			`spawn: the driver for "droid" has a protocol without its name or its side (Protocols)`},
		{"no warm channel and no reason", with(agent.Gemini, func(d *Driver) { d.Warm = WarmDriver{} }),
			`spawn: the driver for "gemini" must either keep its CLI warm (Warm.Build, speaking one of its Protocols) or say why not (Warm.None), not both or neither`},
		{"a warm builder without a protocol", with(agent.ClaudeCode, func(d *Driver) { d.Protocols = nil }),
			`spawn: the driver for "claude-code" must either keep its CLI warm (Warm.Build, speaking one of its Protocols) or say why not (Warm.None), not both or neither`},
		{"an unnamed channel", with(agent.Codex, func(d *Driver) { d.Channels.Session = ArgChannel{} }),
			`spawn: the driver for "codex" must name both its channels (Channels.OneShot and Channels.Session), as a refusal of an operator arg names them`},
		{"two drivers for one adapter", append(slices.Clone(drivers), codexDriver), `spawn: two drivers for "codex"`},
		{"a driver for no adapter", append(slices.Clone(drivers), Driver{For: "cursor"}), `spawn: driver for "cursor", which is not an agent adapter`},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.PanicsWithValue(t, c.panic, func() { mustJoin(agent.All(), c.drivers) })
		})
	}
}

// The MCP refusal a client gets is the driver's reason, for every adapter
// whose driver refuses, and a driver that hands a server over builds a plan.
func TestEveryDriversMCPHandOverOrRefusalReachesTheRequest(t *testing.T) {
	for _, d := range drivers {
		t.Run(d.For, func(t *testing.T) {
			_, err := Build("/bin/x", Request{Adapter: d.For, Cwd: cwd, MCPEndpoint: "http://127.0.0.1:1/mcp"})
			if d.MCP.Refused != "" {
				var fe *api.FieldError
				require.ErrorAs(t, err, &fe)
				assert.Equal(t, "mcp_endpoint", fe.Field)
				assert.Contains(t, fe.Message, d.MCP.Refused)
				return
			}
			require.NoError(t, err)
		})
	}
}

// A word that turns a CLI's protection off is refused wherever it stands in
// an operator arg, for the adapter whose driver names it, and only there.
func TestABypassWordInAnOperatorArgIsRefusedForTheAdapterWhoseDriverNamesIt(t *testing.T) {
	err := CheckExtras(agent.Gemini, Extras{Args: []string{"--flag-card-does-not-know", "yolo"}})
	require.Error(t, err)
	assert.Equal(t, `card.toml [adapters.gemini] args[1]: "yolo" sets Gemini's yolo mode; remove it — bypass is a per-request mode the operator enables with allow_bypass = true`, err.Error())
	assert.NoError(t, CheckExtras(agent.Codex, Extras{Args: []string{"-m", "yolo"}}))
}

func indexOf(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}

func TestDroidEditIsRefusedBecauseItsOnlyEditLevelIsAuto(t *testing.T) {
	_, err := Build("/bin/droid", Request{Adapter: "droid", Mode: ModeEdit, Cwd: cwd})
	var fe *api.FieldError
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
					var fe *api.FieldError
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

func TestTheNewAdaptersDiscloseHowReadOnlyIsEnforced(t *testing.T) {
	for id, want := range map[string]api.ReadOnlyEnforcement{"copilot": api.EnforcedByAllowlist, "droid": api.EnforcedByAgentDefault, "pi": api.NotEnforced} {
		a, ok := Lookup(id)
		require.True(t, ok)
		assert.Equal(t, want, a.ReadOnly, id)
	}
}

// max_api_retries reaches Claude Code's own retry setting, and every plan
// carries it for the runner's bound (default 3); out of range is refused
// naming the field.
func TestTheRetryBoundReachesClaudesOwnSettingAndEveryPlan(t *testing.T) {
	one := 1
	p, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, MaxAPIRetries: &one})
	require.NoError(t, err)
	assert.Equal(t, "1", p.Env["CLAUDE_CODE_MAX_RETRIES"])
	assert.Equal(t, 1, p.MaxAPIRetries)

	p, err = Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Extras: Extras{Env: map[string]string{"CLAUDE_CODE_MAX_RETRIES": "10"}}})
	require.NoError(t, err)
	assert.Equal(t, "3", p.Env["CLAUDE_CODE_MAX_RETRIES"], "the request's bound (default 3) wins over an operator env")

	for _, id := range IDs() {
		mode := ModeReadOnly
		p, err := Build("/bin/"+id, Request{Adapter: id, Cwd: cwd, Mode: mode})
		require.NoError(t, err, id)
		assert.Equal(t, DefaultMaxAPIRetries, p.MaxAPIRetries, id)
	}
	for _, n := range []int{-1, 11} {
		_, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, MaxAPIRetries: &n})
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe, "%d", n)
		assert.Equal(t, "max_api_retries", fe.Field)
	}
}

// A Pi run keeps no session file unless it has a session, and then keeps
// it in a file card names under its own directory, the same for a one-shot
// run, an ask-mode run and a warm agent; the run reports card's id, not
// the one Pi gives itself.
func TestAPiSessionIsAFileCardNamesInItsOwnDirectory(t *testing.T) {
	const dir = "/home/user/.card/agent-sessions"
	const id = "123e4567-e89b-12d3-a456-426614174000"
	p, err := Build("/bin/pi", Request{Adapter: "pi", Cwd: cwd, AgentSessionDir: dir})
	require.NoError(t, err)
	assert.Contains(t, p.Args, "--no-session", "a run without a session leaves no file")
	assert.Empty(t, p.SessionID)
	assert.True(t, p.NoSessionID, "nor reports an id nothing could resume")

	file := func(args []string) string {
		i := slices.Index(args, "--session")
		require.GreaterOrEqual(t, i, 0, args)
		return args[i+1]
	}
	var first string
	for _, req := range []Request{
		{SessionID: id},
		{Resume: id},
		{Resume: strings.ToUpper(id), Mode: ModeAsk},
		{Resume: id, Mode: ModeEdit},
	} {
		req.Adapter, req.Cwd, req.AgentSessionDir = "pi", cwd, dir
		p, err := Build("/bin/pi", req)
		require.NoError(t, err, "%+v", req)
		assert.NotContains(t, p.Args, "--no-session")
		f := file(p.Args)
		assert.True(t, strings.HasPrefix(f, dir+"/pi/"), f)
		assert.Equal(t, id+".jsonl", filepath.Base(f))
		assert.Equal(t, []string{"--session-dir", filepath.Dir(f)}, p.Args[slices.Index(p.Args, "--session-dir"):][:2], "Pi looks nothing up elsewhere")
		assert.Equal(t, id, p.SessionID)
		assert.False(t, p.NoSessionID)
		if first == "" {
			first = f
		}
		assert.Equal(t, first, f, "every turn of a conversation resumes the one file")
		w, err := BuildWarm("/bin/pi", req)
		require.NoError(t, err)
		assert.Equal(t, f, file(w.Args), "the warm agent writes the file a cold turn resumes")
		assert.Equal(t, id, w.SessionID)
	}
	other, err := Build("/bin/pi", Request{Adapter: "pi", Cwd: "/home/user/other", AgentSessionDir: dir, Resume: id})
	require.NoError(t, err)
	assert.NotEqual(t, first, file(other.Args), "a resume from another cwd does not open a session Pi would run in the first cwd")

	for _, bad := range []string{"../../etc/passwd", "/tmp/x.jsonl", "abc.jsonl"} {
		_, err := Build("/bin/pi", Request{Adapter: "pi", Cwd: cwd, AgentSessionDir: dir, Resume: bad})
		var fe *api.FieldError
		require.ErrorAs(t, err, &fe, bad)
		assert.Equal(t, "resume", fe.Field)
	}
}
