package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon/daemontest"
)

type jsonServers struct {
	AgentServers map[string]struct {
		Type    string            `json:"type"`
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
	} `json:"agent_servers"`
}

func decodeServers(t *testing.T, out string) jsonServers {
	t.Helper()
	var s jsonServers
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&s), out)
	return s
}

// The entry runs this very binary by its absolute path: an editor started
// from a desktop menu has none of the shell's PATH to find `card` on.
func TestPrintConfigRunsThisBinaryByItsAbsolutePath(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)

	for _, editor := range []string{"zed", "jetbrains"} {
		t.Run(editor, func(t *testing.T) {
			code, out, errOut := runCLI("acp", "claude-code", "--print-config", editor)
			require.Equal(t, exitOK, code, errOut)
			s := decodeServers(t, out)
			require.Len(t, s.AgentServers, 1)
			e, ok := s.AgentServers["card: Claude Code"]
			require.True(t, ok, out)
			assert.True(t, filepath.IsAbs(e.Command))
			assert.Equal(t, exe, e.Command)
			assert.Equal(t, []string{"acp", "claude-code"}, e.Args)
			if editor == "zed" {
				assert.Equal(t, "custom", e.Type)
			} else {
				assert.NotNil(t, e.Env, "JetBrains' entry carries env")
			}
			// go test's binary is in a go-build directory, as go run's is:
			// that path goes away, and the command says so.
			assert.Contains(t, errOut, "go run")
		})
	}
	for _, editor := range []string{"neovim", "emacs"} {
		t.Run(editor, func(t *testing.T) {
			code, out, errOut := runCLI("acp", "codex", "--print-config", editor)
			require.Equal(t, exitOK, code, errOut)
			assert.Contains(t, out, luaString(exe))
			assert.Contains(t, out, `"acp"`)
			assert.Contains(t, out, `"codex"`)
		})
	}
}

// A card on PATH is usually a link (a package manager's bin directory);
// the entry names the file it leads to, which stays put when PATH changes.
func TestPrintConfigResolvesTheLinkCardWasRunThrough(t *testing.T) {
	bin := daemontest.Build(t)
	real, err := filepath.EvalSymlinks(bin)
	require.NoError(t, err)
	link := filepath.Join(t.TempDir(), "bin", "card")
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(bin, link))

	out, err := exec.Command(link, "acp", "gemini", "--print-config", "zed").Output()
	require.NoError(t, err)
	s := decodeServers(t, string(out))
	assert.Equal(t, real, s.AgentServers["card: Gemini CLI"].Command)
	assert.NotEqual(t, link, s.AgentServers["card: Gemini CLI"].Command)
}

// --npx entries run the npm package: nothing to install, the same entry on
// every machine.
func TestPrintConfigWithNpxRunsTheNpmPackage(t *testing.T) {
	want := []string{"-y", "@card-dev/card", "acp", "pi", "--mode", "edit"}
	for _, editor := range []string{"zed", "jetbrains"} {
		code, out, errOut := runCLI("acp", "pi", "--print-config", editor, "--npx", "--mode", "edit")
		require.Equal(t, exitOK, code, errOut)
		assert.Empty(t, errOut, "no note: npx's entry does not depend on where this card is")
		e := decodeServers(t, out).AgentServers["card: Pi"]
		assert.Equal(t, "npx", e.Command, editor)
		assert.Equal(t, want, e.Args, editor)
	}
	code, out, _ := runCLI("acp", "pi", "--print-config", "neovim", "--npx")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, `commands = { default = { "npx", "-y", "@card-dev/card", "acp", "pi" } }`)
	code, out, _ = runCLI("acp", "pi", "--print-config", "emacs", "--npx")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, `(acp-make-client :command "npx"`)
	assert.Contains(t, out, `:command-params '("-y" "@card-dev/card" "acp" "pi")`)
}

func TestPrintConfigWithoutAnAdapterHasAnEntryForEach(t *testing.T) {
	code, out, errOut := runCLI("acp", "--print-config", "zed", "--npx")
	require.Equal(t, exitOK, code, errOut)
	s := decodeServers(t, out)
	require.Len(t, s.AgentServers, len(agent.All()))
	for _, a := range agent.All() {
		e, ok := s.AgentServers["card: "+a.DisplayName]
		require.True(t, ok, a.ID)
		assert.Equal(t, []string{"-y", "@card-dev/card", "acp", a.ID}, e.Args)
	}
	code, out, _ = runCLI("acp", "--print-config", "emacs", "--npx")
	require.Equal(t, exitOK, code)
	assert.Equal(t, len(agent.All()), strings.Count(out, "(add-to-list 'agent-shell-agent-configs"))
}

// A home given to the command goes into the entry, absolute: the editor
// starts card in a directory of its own.
func TestPrintConfigKeepsTheHomeAbsolute(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, errOut := runCLI("acp", "codex", "--print-config", "jetbrains", "--npx", "--home", "state/card")
	require.Equal(t, exitOK, code, errOut)
	wd, err := os.Getwd()
	require.NoError(t, err)
	args := decodeServers(t, out).AgentServers["card: Codex CLI"].Args
	assert.Equal(t, []string{"-y", "@card-dev/card", "acp", "codex", "--home", filepath.Join(wd, "state", "card")}, args)
}

func TestPrintConfigRefusesWhatItCannotWrite(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"acp", "claude-code", "--print-config", "vscode"}, `no editor "vscode" for --print-config; the editors are emacs, jetbrains, neovim, zed`},
		{[]string{"acp", "nope", "--print-config", "zed"}, `no adapter "nope"`},
		{[]string{"acp", "claude-code", "codex", "--print-config", "zed"}, `unexpected argument "codex"`},
		{[]string{"acp", "claude-code", "--npx"}, "--npx goes with --print-config EDITOR"},
	} {
		code, out, errOut := runCLI(tc.args...)
		assert.Equal(t, exitUsage, code, tc.args)
		assert.Empty(t, out)
		assert.Contains(t, errOut, tc.want, tc.args)
	}
}

// A path may hold what each language's string literal treats specially.
func TestEditorStringsQuoteWhatTheirLanguageNeeds(t *testing.T) {
	path := `/Users/Zoë O"Neil/bin\x/card` + "\n"
	assert.Equal(t, `"/Users/Zoë O\"Neil/bin\\x/card\n"`, luaString(path))
	assert.Equal(t, "\"/Users/Zoë O\\\"Neil/bin\\\\x/card\n\"", elispString(path))
	assert.Equal(t, `Copilot CLI\?> `, regexpQuoteElisp("Copilot CLI?> "))
	// JSON is encoding/json's: a path with a quote stays one string.
	var s jsonServers
	require.NoError(t, json.Unmarshal([]byte(zedConfig([]acpEntry{{ID: "pi", Title: "card: Pi", Command: path, Args: []string{"acp", "pi"}}})), &s))
	assert.Equal(t, path, s.AgentServers["card: Pi"].Command)
}

// The README's editor entries are what --print-config prints, with card
// installed at the path the README names.
func TestTheREADMEsEditorEntriesAreWhatPrintConfigPrints(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	lines := strings.Split(string(raw), "\n")
	seen := 0
	for i, line := range lines {
		spec, ok := strings.CutPrefix(line, "<!-- print-config: ")
		if !ok {
			continue
		}
		seen++
		words := strings.Fields(strings.TrimSuffix(spec, " -->"))
		require.GreaterOrEqual(t, len(words), 2, line)
		editor, adapter := words[0], words[1]
		var entries []acpEntry
		if len(words) > 2 && words[2] == "--npx" {
			entries = acpEntries([]string{adapter}, "npx", []string{"-y", npmPackage}, nil)
		} else {
			entries = acpEntries([]string{adapter}, "/home/me/go/bin/card", nil, nil)
		}
		require.True(t, strings.HasPrefix(lines[i+1], "```"), "README.md:%d: a code block follows the marker", i+2)
		end := i + 2
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		got := strings.Join(lines[i+2:end], "\n") + "\n"
		assert.Equal(t, editors[editor](entries), got, "README.md:%d (%s)", i+1, spec)
	}
	assert.Equal(t, len(editors), seen, "one README entry per editor")
}
