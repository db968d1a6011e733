package detect

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
)

// The package.json fields below are the real packages' (e2e/agents,
// installed from npm): name, version and bin, as published.
const (
	geminiManifest      = `{"name":"@google/gemini-cli","version":"0.61.0","bin":{"gemini":"bundle/gemini.js"}}`
	piManifest          = `{"name":"@mariozechner/pi-coding-agent","version":"0.73.1","type":"module","bin":{"pi":"dist/cli.js"}}`
	codexManifest       = `{"name":"@openai/codex","version":"0.171.0","bin":{"codex":"bin/codex.js"},"type":"module"}`
	codexPlatManifest   = `{"name":"@openai/codex","version":"0.171.0-linux-x64","files":["vendor"]}`
	copilotManifest     = `{"name":"@github/copilot","version":"1.0.102","type":"module","bin":{"copilot":"npm-loader.js"}}`
	copilotPlatManifest = `{"name":"@github/copilot-linux-x64","version":"1.0.102","bin":{"copilot-linux-x64":"copilot"}}`
	droidManifest       = `{"name":"@factory/cli","version":"0.225.1","bin":{"droid":"bin/droid"},"main":"platform.js"}`
	droidPlatManifest   = `{"name":"@factory/cli-linux-x64","version":"0.225.2","main":"bin/droid"}`
	claudeManifest      = `{"name":"@anthropic-ai/claude-code","version":"2.1.197","bin":{"claude":"bin/claude.exe"},"type":"module"}`
	nodeScript          = "#!/usr/bin/env node\nrequire('./x')\n"
)

// layout builds an install tree under a temp root. Entries map a path
// (slash-separated, under the root) to what it is.
type layout map[string]entry

type entry struct {
	text   string // a file with this text, mode 0755 unless plain
	plain  bool   // mode 0644
	native bool   // a copy of a program for this machine
	alien  bool   // a program for another architecture
	link   string // a symlink to this target (relative to the link's dir)
	hard   string // a hard link to this other entry
}

// nativeProgram is a small real executable for this machine.
func nativeProgram(t *testing.T) []byte {
	t.Helper()
	p, err := exec.LookPath("true")
	require.NoError(t, err)
	p, err = filepath.EvalSymlinks(p)
	require.NoError(t, err)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

// alienProgram is the same program with its ELF machine field changed to
// another architecture's.
func alienProgram(t *testing.T) []byte {
	t.Helper()
	b := append([]byte(nil), nativeProgram(t)...)
	if len(b) < 20 || string(b[:4]) != "\x7fELF" {
		t.Skip("SKIPPING the wrong-architecture case: this machine's programs are not ELF")
	}
	other := uint16(62) // EM_X86_64
	if runtime.GOARCH == "amd64" {
		other = 183 // EM_AARCH64
	}
	binary.LittleEndian.PutUint16(b[18:20], other)
	return b
}

func (l layout) build(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	var hards []string
	for rel, e := range l {
		p := filepath.Join(root, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case e.link != "":
			require.NoError(t, os.Symlink(filepath.FromSlash(e.link), p))
		case e.hard != "":
			hards = append(hards, rel)
		case e.native, e.alien:
			b := nativeProgram(t)
			if e.alien {
				b = alienProgram(t)
			}
			require.NoError(t, os.WriteFile(p, b, 0o755))
		default:
			mode := os.FileMode(0o755)
			if e.plain {
				mode = 0o644
			}
			require.NoError(t, os.WriteFile(p, []byte(e.text), mode))
		}
	}
	for _, rel := range hards {
		require.NoError(t, os.Link(filepath.Join(root, filepath.FromSlash(l[rel].hard)), filepath.Join(root, filepath.FromSlash(rel))))
	}
	return root
}

func TestVersionsAreReadFromTheRealPackagesLayouts(t *testing.T) {
	goos, goarch := runtime.GOOS, runtime.GOARCH
	plat := nodePlatform[goos] + "-" + nodeArch[goarch]
	codexBin := codexPackage.Platform(goos, goarch)
	if len(codexBin) == 0 {
		t.Skip("SKIPPING: no Codex platform package for " + goos + "/" + goarch)
	}
	nm := "lib/node_modules/"
	cases := []struct {
		name    string
		adapter string
		command string // the command on the search path, under the root
		layout  layout
		node    bool // node on PATH
		want    string
		// alsoDependsOn are files, beyond the command and its manifest,
		// whose change must invalidate a cached answer.
		alsoDependsOn []string
	}{
		{"gemini: a Node script, the package's own version", agent.Gemini, "bin/gemini", layout{
			nm + "@google/gemini-cli/package.json":     {text: geminiManifest, plain: true},
			nm + "@google/gemini-cli/bundle/gemini.js": {text: nodeScript},
			"bin/gemini": {link: "../" + nm + "@google/gemini-cli/bundle/gemini.js"},
		}, true, "0.61.0", nil},
		{"gemini without node on PATH would not start", agent.Gemini, "bin/gemini", layout{
			nm + "@google/gemini-cli/package.json":     {text: geminiManifest, plain: true},
			nm + "@google/gemini-cli/bundle/gemini.js": {text: nodeScript},
			"bin/gemini": {link: "../" + nm + "@google/gemini-cli/bundle/gemini.js"},
		}, false, "", nil},
		{"gemini's script not executable", agent.Gemini, "bin/gemini", layout{
			nm + "@google/gemini-cli/package.json":     {text: geminiManifest, plain: true},
			nm + "@google/gemini-cli/bundle/gemini.js": {text: nodeScript, plain: true},
			"bin/gemini": {link: "../" + nm + "@google/gemini-cli/bundle/gemini.js"},
		}, true, "", nil},
		{"pi: a build's own package.json on the way up is passed over", agent.Pi, "bin/pi", layout{
			nm + "@mariozechner/pi-coding-agent/package.json":      {text: piManifest, plain: true},
			nm + "@mariozechner/pi-coding-agent/dist/package.json": {text: `{"type":"module"}`, plain: true},
			nm + "@mariozechner/pi-coding-agent/dist/cli.js":       {text: nodeScript},
			"bin/pi": {link: "../" + nm + "@mariozechner/pi-coding-agent/dist/cli.js"},
		}, true, "0.73.1", nil},
		{"a package.json whose bin names another file says nothing", agent.Pi, "bin/pi", layout{
			nm + "@mariozechner/pi-coding-agent/package.json":  {text: piManifest, plain: true},
			nm + "@mariozechner/pi-coding-agent/dist/other.js": {text: nodeScript},
			"bin/pi": {link: "../" + nm + "@mariozechner/pi-coding-agent/dist/other.js"},
		}, true, "", nil},
		{"codex: the launcher's version, its platform package present", agent.Codex, "bin/codex", layout{
			nm + "@openai/codex/package.json":                   {text: codexManifest, plain: true},
			nm + "@openai/codex/bin/codex.js":                   {text: nodeScript},
			nm + codexBin[0].Package + "/package.json":          {text: codexPlatManifest, plain: true},
			nm + codexBin[0].Package + "/" + codexBin[0].Binary: {native: true},
			"bin/codex": {link: "../" + nm + "@openai/codex/bin/codex.js"},
		}, true, "0.171.0", []string{nm + codexBin[0].Package + "/" + codexBin[0].Binary}},
		{"codex without its platform package would fail", agent.Codex, "bin/codex", layout{
			nm + "@openai/codex/package.json": {text: codexManifest, plain: true},
			nm + "@openai/codex/bin/codex.js": {text: nodeScript},
			"bin/codex":                       {link: "../" + nm + "@openai/codex/bin/codex.js"},
		}, true, "", nil},
		{"copilot: the platform package's version", agent.Copilot, "bin/copilot", layout{
			nm + "@github/copilot/package.json":              {text: copilotManifest, plain: true},
			nm + "@github/copilot/npm-loader.js":             {text: nodeScript},
			nm + "@github/copilot-" + plat + "/package.json": {text: copilotPlatManifest, plain: true},
			nm + "@github/copilot-" + plat + "/copilot":      {native: true},
			"bin/copilot": {link: "../" + nm + "@github/copilot/npm-loader.js"},
		}, true, "1.0.102", []string{nm + "@github/copilot-" + plat + "/copilot", nm + "@github/copilot-" + plat + "/package.json"}},
		{"droid: the binary's version (0.225.2), not the launcher's (0.225.1)", agent.Droid, "bin/droid", layout{
			nm + "@factory/cli/package.json":              {text: droidManifest, plain: true},
			nm + "@factory/cli/bin/droid":                 {text: nodeScript},
			nm + "@factory/cli-" + plat + "/package.json": {text: droidPlatManifest, plain: true},
			nm + "@factory/cli-" + plat + "/bin/droid":    {native: true},
			"bin/droid": {link: "../" + nm + "@factory/cli/bin/droid"},
		}, true, "0.225.2", []string{nm + "@factory/cli-" + plat + "/bin/droid", nm + "@factory/cli-" + plat + "/package.json"}},
		{"droid's launcher without its platform package would fail", agent.Droid, "bin/droid", layout{
			nm + "@factory/cli/package.json": {text: droidManifest, plain: true},
			nm + "@factory/cli/bin/droid":    {text: nodeScript},
			"bin/droid":                      {link: "../" + nm + "@factory/cli/bin/droid"},
		}, true, "", nil},
		{"droid with only the baseline binary", agent.Droid, "bin/droid", layout{
			nm + "@factory/cli/package.json":                       {text: droidManifest, plain: true},
			nm + "@factory/cli/bin/droid":                          {text: nodeScript},
			nm + "@factory/cli-" + plat + "-baseline/package.json": {text: droidPlatManifest, plain: true},
			nm + "@factory/cli-" + plat + "-baseline/bin/droid":    {native: true},
			"bin/droid": {link: "../" + nm + "@factory/cli/bin/droid"},
		}, true, "0.225.2", nil},
		{"droid's optimized install: the launcher is a hard link to the binary", agent.Droid, "bin/droid", layout{
			nm + "@factory/cli/package.json":              {text: droidManifest, plain: true},
			nm + "@factory/cli/bin/droid":                 {hard: nm + "@factory/cli-" + plat + "/bin/droid"},
			nm + "@factory/cli-" + plat + "/package.json": {text: droidPlatManifest, plain: true},
			nm + "@factory/cli-" + plat + "/bin/droid":    {native: true},
			"bin/droid": {link: "../" + nm + "@factory/cli/bin/droid"},
		}, false, "0.225.2", nil},
		{"droid installed by pnpm: the platform package is a sibling in the store", agent.Droid, "bin/droid", layout{
			"store/.pnpm/@factory+cli@0.225.1/node_modules/@factory/cli/package.json":                           {text: droidManifest, plain: true},
			"store/.pnpm/@factory+cli@0.225.1/node_modules/@factory/cli/bin/droid":                              {text: nodeScript},
			"store/.pnpm/@factory+cli@0.225.1/node_modules/@factory/cli-" + plat:                                {link: "../../../@factory+cli-" + plat + "@0.225.2/node_modules/@factory/cli-" + plat},
			"store/.pnpm/@factory+cli-" + plat + "@0.225.2/node_modules/@factory/cli-" + plat + "/package.json": {text: droidPlatManifest, plain: true},
			"store/.pnpm/@factory+cli-" + plat + "@0.225.2/node_modules/@factory/cli-" + plat + "/bin/droid":    {native: true},
			"bin/droid": {link: "../store/.pnpm/@factory+cli@0.225.1/node_modules/@factory/cli/bin/droid"},
		}, true, "0.225.2", nil},
		{"claude: the native binary the install script put in place", agent.ClaudeCode, "bin/claude", layout{
			nm + "@anthropic-ai/claude-code/package.json":   {text: claudeManifest, plain: true},
			nm + "@anthropic-ai/claude-code/bin/claude.exe": {native: true},
			"bin/claude": {link: "../" + nm + "@anthropic-ai/claude-code/bin/claude.exe"},
		}, false, "2.1.197", nil},
		{"claude's placeholder, its install script never ran", agent.ClaudeCode, "bin/claude", layout{
			nm + "@anthropic-ai/claude-code/package.json":   {text: claudeManifest, plain: true},
			nm + "@anthropic-ai/claude-code/bin/claude.exe": {text: "#!/bin/sh\necho 'run the install script' >&2; exit 1\n"},
			"bin/claude": {link: "../" + nm + "@anthropic-ai/claude-code/bin/claude.exe"},
		}, true, "", nil},
		{"claude built for another architecture", agent.ClaudeCode, "bin/claude", layout{
			nm + "@anthropic-ai/claude-code/package.json":   {text: claudeManifest, plain: true},
			nm + "@anthropic-ai/claude-code/bin/claude.exe": {alien: true},
			"bin/claude": {link: "../" + nm + "@anthropic-ai/claude-code/bin/claude.exe"},
		}, false, "", nil},
		{"claude's native installer names the file for its version", agent.ClaudeCode, "home/.local/bin/claude", layout{
			"home/.local/share/claude/versions/2.1.197": {native: true},
			"home/.local/share/claude/versions/2.1.190": {native: true},
			"home/.local/bin/claude":                    {link: "../share/claude/versions/2.1.197"},
		}, false, "2.1.197", nil},
		{"a command outside any package: only running it tells", agent.Gemini, "bin/gemini", layout{
			"bin/gemini": {text: "#!/bin/sh\necho 0.61.0\n"},
		}, true, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := tc.layout.build(t)
			pathValue := "/nonexistent"
			if tc.node {
				nodeDir := t.TempDir()
				fakeCLI(t, nodeDir, "node", "exit 0")
				pathValue = nodeDir
			}
			desc, ok := Lookup(tc.adapter)
			require.True(t, ok)
			facts := readInstall(desc, filepath.Join(root, filepath.FromSlash(tc.command)), pathValue, goos, goarch)
			assert.Equal(t, tc.want, facts.version)
			real, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(tc.command)))
			require.NoError(t, err)
			assert.Contains(t, facts.files, real, "the command itself")
			for _, f := range tc.alsoDependsOn {
				p, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(f)))
				require.NoError(t, err)
				assert.Contains(t, facts.files, p, "a cached answer must depend on %s", f)
			}
			for _, f := range facts.files {
				assert.True(t, strings.HasPrefix(f, root), "%s is outside the install", f)
			}
		})
	}
}
