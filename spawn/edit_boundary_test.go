package spawn

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// claudeAllowRules returns the entries of --allowedTools in a Claude argv
// (the values after it up to the next flag).
func claudeAllowRules(args []string) []string {
	i := indexOf(args, "--allowedTools")
	if i < 0 {
		return nil
	}
	var out []string
	for _, a := range args[i+1:] {
		if strings.HasPrefix(a, "-") {
			break
		}
		out = append(out, a)
	}
	return out
}

// isWriteRule says whether an allow rule names a tool that changes files,
// bare or with a specifier.
func isWriteRule(rule string) bool {
	base, _, _ := strings.Cut(rule, "(")
	for _, w := range []string{"Edit", "Write", "NotebookEdit", "MultiEdit"} {
		if strings.EqualFold(base, w) {
			return true
		}
	}
	return false
}

// An allow rule for Edit or Write is applied before acceptEdits, so with
// one in the argv edit mode writes anywhere the user can; the file tools
// must be offered (--tools) and never allowed (--allowedTools), in every
// mode but bypass, whatever allowed_tools narrows to.
func TestClaudeNeverAllowListsAToolThatWritesFiles(t *testing.T) {
	for _, mode := range []Mode{ModeReadOnly, ModeEdit, ModeAsk} {
		for _, allowed := range [][]string{nil, {"Read"}, {"Read(src/**)", "Grep", "Glob"}, {}} {
			t.Run(string(mode)+"/"+strings.Join(allowed, ","), func(t *testing.T) {
				p, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Mode: mode, AllowedTools: allowed,
					MCPEndpoint: "http://127.0.0.1:9/mcp"})
				require.NoError(t, err)
				for _, r := range claudeAllowRules(p.Args) {
					assert.False(t, isWriteRule(r), "--allowedTools holds %q in %s mode: %q", r, mode, p.Args)
				}
				tools := strings.Split(p.Args[indexOf(p.Args, "--tools")+1], ",")
				if mode == ModeEdit {
					assert.Subset(t, tools, []string{"Edit", "Write", "NotebookEdit"}, "edit mode offers the file tools")
					assert.Equal(t, "acceptEdits", p.Args[indexOf(p.Args, "--permission-mode")+1])
				}
				if mode == ModeReadOnly {
					assert.NotContains(t, tools, "Edit")
					assert.NotContains(t, tools, "Write")
				}
			})
		}
	}
}

func TestClaudeEditModeArgvOffersTheFileToolsAndAllowsOnlyTheReadOnes(t *testing.T) {
	p, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Mode: ModeEdit})
	require.NoError(t, err)
	args := strings.Join(p.Args, " ")
	assert.Contains(t, args, "--permission-mode acceptEdits")
	assert.Contains(t, args, "--tools Read,Grep,Glob,Edit,Write,NotebookEdit --allowedTools Read Grep Glob")
	assert.NotContains(t, args, "Glob Edit", "no allow rule for a file tool")
	assert.Equal(t, []string{"Read", "Grep", "Glob"}, claudeAllowRules(p.Args))
}

// In edit mode an allowed_tools entry naming a tool that writes files,
// bare or with any specifier, is refused: a specifier inside the working
// dir gains nothing (acceptEdits already allows it there), and one outside
// is the hole itself.
func TestClaudeEditModeRefusesAllowRulesForWritingFiles(t *testing.T) {
	cases := []struct {
		name    string
		allowed []string
		field   string
	}{
		{"bare Write", []string{"Write"}, "allowed_tools[0]"},
		{"bare Edit after a read tool", []string{"Read", "Edit"}, "allowed_tools[1]"},
		{"bare NotebookEdit", []string{"Glob", "Grep", "NotebookEdit"}, "allowed_tools[2]"},
		{"MultiEdit, which is not even offered", []string{"MultiEdit"}, "allowed_tools[0]"},
		{"Write of a system dir", []string{"Write(/etc/**)"}, "allowed_tools[0]"},
		{"Edit of a parent", []string{"Edit(../x)"}, "allowed_tools[0]"},
		{"Write of the home", []string{"Write(~/.bashrc)"}, "allowed_tools[0]"},
		{"Edit of an absolute path by Claude's // form", []string{"Edit(//home/u/.profile)"}, "allowed_tools[0]"},
		{"Write inside the cwd, which acceptEdits already allows", []string{"Write(src/**)"}, "allowed_tools[0]"},
		{"a file tool in another case", []string{"write"}, "allowed_tools[0]"},
		{"an empty specifier", []string{"Edit()"}, "allowed_tools[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := Request{Adapter: "claude-code", Cwd: cwd, Mode: ModeEdit, AllowedTools: c.allowed}
			require.NoError(t, req.Validate(), "the shape is fine; the mode is what refuses it")
			_, err := Build("/bin/claude", req)
			var fe *api.FieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.field, fe.Field)
			assert.Contains(t, fe.Message, "outside the working dir")
			assert.Contains(t, fe.Message, "leave it out")
		})
	}
}

func TestClaudeEditModeStillTakesReadToolsAndTheirPatterns(t *testing.T) {
	p, err := Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Mode: ModeEdit, AllowedTools: []string{"Read(src/**)", "Grep"}})
	require.NoError(t, err)
	assert.Equal(t, "Read,Grep,Edit,Write,NotebookEdit", p.Args[indexOf(p.Args, "--tools")+1])
	assert.Equal(t, []string{"Read(src/**)", "Grep"}, claudeAllowRules(p.Args))

	// Outside edit mode the file tools keep their old meaning: asked about
	// in ask mode (no allow rule), allowed in bypass.
	p, err = Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Mode: ModeAsk, AllowedTools: []string{"Read", "Write"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"Read"}, claudeAllowRules(p.Args))
	p, err = Build("/bin/claude", Request{Adapter: "claude-code", Cwd: cwd, Mode: ModeBypass, AllowBypass: true, AllowedTools: []string{"Write"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"Write"}, claudeAllowRules(p.Args))
}

// Codex's workspace-write adds /tmp and $TMPDIR to the writable roots
// unless told not to; edit mode writes the working dir only, resumed or not.
func TestCodexEditModeTakesTheTempDirsOutOfTheSandbox(t *testing.T) {
	for _, req := range []Request{
		{Adapter: "codex", Cwd: cwd, Mode: ModeEdit},
		{Adapter: "codex", Cwd: cwd, Mode: ModeEdit, Resume: "019a0000-0000-7000-8000-000000000000"},
	} {
		p, err := Build("/bin/codex", req)
		require.NoError(t, err)
		args := strings.Join(p.Args, " ")
		assert.Contains(t, args, "-c sandbox_workspace_write.exclude_slash_tmp=true")
		assert.Contains(t, args, "-c sandbox_workspace_write.exclude_tmpdir_env_var=true")
		if req.Resume != "" {
			assert.Less(t, strings.Index(args, "exclude_tmpdir_env_var"), strings.Index(args, " resume "), "exec-level, before the subcommand")
		}
	}
	p, err := Build("/bin/codex", Request{Adapter: "codex", Cwd: cwd, Extras: Extras{Args: []string{"-c", "model=x"}}, Mode: ModeEdit})
	require.NoError(t, err)
	assert.Greater(t, indexOf(p.Args, "sandbox_workspace_write.exclude_slash_tmp=true"), indexOf(p.Args, "model=x"), "after the operator's extras, so the last -c is card's")
	assert.Error(t, CheckExtras("codex", Extras{Args: []string{"-c", "sandbox_workspace_write.exclude_slash_tmp=false"}}),
		"an operator line cannot put /tmp back")
}

// Pi writes wherever its model says; in edit mode card's gate extension
// is what keeps edit and write inside the working dir, and it is loaded
// even though every other extension is not.
func TestPiEditModeLoadsCardsGateAndOnlyThere(t *testing.T) {
	for _, mode := range Modes {
		p, err := Build("/bin/pi", Request{Adapter: "pi", Cwd: cwd, Mode: mode, AllowBypass: true})
		require.NoError(t, err)
		hasGate := false
		for _, f := range p.Files {
			if f.Path == piEditGateFile {
				hasGate = true
				assert.EqualValues(t, 0o600, f.Mode)
				gate := string(f.Content)
				assert.Contains(t, gate, `pi.on("tool_call"`)
				assert.Contains(t, gate, `new Set(["edit","write"])`)
				assert.Contains(t, gate, "realpathSync")
			}
		}
		assert.Equal(t, mode == ModeEdit, hasGate, "%s mode", mode)
		if mode == ModeEdit {
			i := indexOf(p.Args, "-e")
			require.Greater(t, i, indexOf(p.Args, "--no-extensions"))
			assert.Equal(t, FileRef(piEditGateFile), p.Args[i+1])
		}
	}
}
