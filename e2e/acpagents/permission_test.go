package acpagents

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/e2e/standin"
)

// openCodeAsksAll is the OpenCode config that makes it ask its client
// before every tool call. Each permission is named, not only "*": its
// rules are ordered and the last match wins, so a repository's own
// opencode.json that lists "*" first keeps that key's place in the
// merged table, and a bash rule of its after it would win over a "*"
// that came later; a named key is overwritten in place. The table is set
// for every primary agent as well as at the top, because an agent's own
// table (which a repository may also set) is merged after the top one.
func openCodeAsksAll() map[string]any {
	ask := map[string]any{"*": "ask"}
	for _, p := range []string{"read", "edit", "glob", "grep", "list", "bash", "task", "external_directory",
		"todowrite", "webfetch", "websearch", "codesearch", "lsp", "skill", "doom_loop"} {
		ask[p] = "ask"
	}
	return map[string]any{"permission": ask, "agent": map[string]any{
		"build": map[string]any{"permission": ask}, "plan": map[string]any{"permission": ask}}}
}

// The model asks for one write inside the session's cwd, one outside it,
// or one shell command that writes a file in the cwd; the client denies
// every question (reject_once) and, where it declares fs, refuses every
// fs/write_text_file. What each agent asked and what is on disk after the
// turn says, per mode, whether card could hold its permission modes by
// answering the agent: a row with no question and a file is a mode in
// which the agent acts on its own.
func TestWhereEachAgentAsksAndWhereItActsOnItsOwn(t *testing.T) {
	type target int
	const (
		inside target = iota
		outside
		shell
	)
	names := map[target]string{inside: "write inside", outside: "write outside", shell: "shell"}
	for _, tc := range []struct {
		cli  agentCLI
		mode string // "" leaves the session in its first mode
		// extra is OpenCode's config on top of the stand-in's.
		extra  map[string]any
		pol    policy
		target target
		// asked are the kinds of the questions asked; file says the
		// target file exists after the turn.
		asked []acp.ToolKind
		file  bool
		// viaClient says the write came to the client as
		// fs/write_text_file (which refused it).
		viaClient bool
	}{
		// OpenCode's build mode (its default) runs every tool unasked
		// inside the cwd, and asks (kind "other": its external_directory
		// rule) before it touches a path outside it.
		{cli: opencode, target: inside, file: true},
		{cli: opencode, target: outside, asked: []acp.ToolKind{acp.ToolOther}},
		{cli: opencode, target: shell, file: true},
		// Plan mode refuses edits by its own rule, unasked, but runs
		// shell commands as build does: a command can write anything.
		{cli: opencode, mode: "plan", target: inside},
		{cli: opencode, mode: "plan", target: outside, asked: []acp.ToolKind{acp.ToolOther}},
		{cli: opencode, mode: "plan", target: shell, file: true},
		// With every permission set to ask, every call asks first: an
		// edit as "edit" (with its path), a path outside the cwd as
		// "other" before the "edit", a command as "execute".
		{cli: opencode, extra: openCodeAsksAll(), target: inside, asked: []acp.ToolKind{acp.ToolEdit}},
		{cli: opencode, extra: openCodeAsksAll(), target: outside, asked: []acp.ToolKind{acp.ToolOther}},
		{cli: opencode, extra: openCodeAsksAll(), target: shell, asked: []acp.ToolKind{acp.ToolExecute}},
		// OpenCode does its own writes even where its client declares fs:
		// after an allowed edit it sends fs/write_text_file as well, and a
		// refusal of it does not stop its own write.
		{cli: opencode, extra: openCodeAsksAll(), pol: policy{answer: acp.PermissionAllowOnce, fs: true, terminal: true}, target: inside,
			asked: []acp.ToolKind{acp.ToolEdit}, file: true, viaClient: true},
		{cli: opencode, pol: policy{fs: true, terminal: true}, target: shell, file: true},

		// Qwen Code's plan mode refuses writes and commands it judges to
		// change state, unasked.
		{cli: qwen, mode: "plan", target: inside},
		{cli: qwen, mode: "plan", target: outside},
		{cli: qwen, mode: "plan", target: shell},
		// default asks before every write and every command it does not
		// judge read-only.
		{cli: qwen, mode: "default", target: inside, asked: []acp.ToolKind{acp.ToolEdit}},
		{cli: qwen, mode: "default", target: outside, asked: []acp.ToolKind{acp.ToolEdit}},
		{cli: qwen, mode: "default", target: shell, asked: []acp.ToolKind{acp.ToolExecute}},
		// auto-edit writes anywhere, outside the cwd too, unasked.
		{cli: qwen, mode: "auto-edit", target: inside, file: true},
		{cli: qwen, mode: "auto-edit", target: outside, file: true},
		{cli: qwen, mode: "auto-edit", target: shell, asked: []acp.ToolKind{acp.ToolExecute}},
		// auto (a new session's mode) writes inside the cwd unasked and
		// puts commands to an LLM classifier: the stand-in's answer to it
		// is no verdict, so it asks; a real model may let one run.
		{cli: qwen, target: inside, file: true},
		{cli: qwen, target: outside, asked: []acp.ToolKind{acp.ToolEdit}},
		{cli: qwen, target: shell, asked: []acp.ToolKind{acp.ToolExecute}},
		{cli: qwen, mode: "yolo", target: inside, file: true},
		{cli: qwen, mode: "yolo", target: outside, file: true},
		{cli: qwen, mode: "yolo", target: shell, file: true},
		// With fs declared, Qwen Code writes through its client in every
		// mode, yolo too, so the client's refusal leaves no file; its
		// commands still run themselves (no terminal/create).
		{cli: qwen, mode: "yolo", pol: policy{fs: true, terminal: true}, target: outside, viaClient: true},
		{cli: qwen, mode: "default", pol: policy{answer: acp.PermissionAllowOnce, fs: true, terminal: true}, target: inside,
			asked: []acp.ToolKind{acp.ToolEdit}, viaClient: true},
		{cli: qwen, mode: "yolo", pol: policy{fs: true, terminal: true}, target: shell, file: true},
	} {
		name := tc.cli.name + "/" + tc.mode + "/" + names[tc.target]
		if tc.extra != nil {
			name += "/all-ask"
		}
		if tc.pol.fs {
			name += "/fs"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pl := newPlace(t)
			var call standin.ToolCall
			var file string
			switch tc.target {
			case inside:
				file = filepath.Join(pl.cwd, "planted.txt")
				call = tc.cli.write(file)
			case outside:
				file = filepath.Join(pl.outside, "planted.txt")
				call = tc.cli.write(file)
			case shell:
				file = filepath.Join(pl.cwd, "made-by-shell.txt")
				call = tc.cli.shell("echo planted > made-by-shell.txt")
			}
			s := standin.NewOpenAI(t, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{call}})
			pol := tc.pol
			if pol.answer == "" {
				pol.answer = acp.PermissionRejectOnce
			}
			a := tc.cli.run(t, s, pl, tc.extra, pol)
			a.initialize()
			sid := a.newSession(pl.cwd).SessionID
			if tc.mode != "" {
				require.NoError(t, tc.cli.setMode(a, sid, tc.mode))
			}
			res := a.prompt(sid, "do it")
			assert.Equal(t, acp.StopEndTurn, res.StopReason)
			_, asked := a.snapshot()
			assert.Equal(t, tc.asked, permissionKinds(asked), "the questions asked")
			assert.Equal(t, tc.file, exists(file), "the file %s after the turn", file)
			if tc.viaClient {
				assert.Positive(t, requested(asked, acp.MethodFSWriteTextFile), "the write came to the client")
			} else {
				assert.Zero(t, requested(asked, acp.MethodFSWriteTextFile))
			}
			assert.Zero(t, requested(asked, acp.MethodTerminalCreate), "no command runs through the client's terminal")
			if tc.target == shell && tc.mode == "" && tc.extra == nil && !tc.pol.fs {
				a.capture(tc.cli.name + "-acp-shell-default-mode")
			}
			if tc.target == outside && tc.mode == "" && tc.extra == nil && !tc.pol.fs {
				a.capture(tc.cli.name + "-acp-write-outside-default-mode")
			}
		})
	}
}
