package detect

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

func TestTheSearchPathKeepsOrderDropsDuplicatesAndRelativeEntriesAndRemembersSources(t *testing.T) {
	s := buildSearchPath("/usr/bin:/bin::.:bin", "/home/u/.nvm/bin:/usr/bin:/opt/x/", []string{"/home/u/.local/bin", "/opt/x"})
	assert.Equal(t, []string{"/usr/bin", "/bin", "/home/u/.nvm/bin", "/opt/x", "/home/u/.local/bin"}, s.Dirs)
	assert.Equal(t, api.SourcePath, s.SourceOf("/usr/bin"))
	assert.Equal(t, api.SourceLoginShell, s.SourceOf("/home/u/.nvm/bin"))
	assert.Equal(t, api.SourceLoginShell, s.SourceOf("/opt/x"), "first source wins")
	assert.Equal(t, api.SourceWellKnown, s.SourceOf("/home/u/.local/bin"))
	assert.Equal(t, "/usr/bin:/bin:/home/u/.nvm/bin:/opt/x:/home/u/.local/bin", s.PATH())
}

func TestTheLoginShellPATHIsReadPastProfileBanners(t *testing.T) {
	shell := fakeCLI(t, t.TempDir(), "fakesh", `echo "Welcome back!"; PATH=/from/login:/usr/bin; export PATH; eval "$3"; echo "bye"`)
	got := loginShellPATH(context.Background(), proc.EnvMap([]string{"SHELL=" + shell, "PATH=/usr/bin:/bin"}), t.TempDir(), 2*time.Second)
	assert.Equal(t, "/from/login:/usr/bin", got)
}

func TestAHangingLoginShellIsKilledAndIgnored(t *testing.T) {
	shell := fakeCLI(t, t.TempDir(), "fakesh", `exec /bin/sleep 30`)
	start := time.Now()
	got := loginShellPATH(context.Background(), proc.EnvMap([]string{"SHELL=" + shell}), t.TempDir(), 200*time.Millisecond)
	assert.Empty(t, got)
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestAFailingLoginShellIsIgnored(t *testing.T) {
	shell := fakeCLI(t, t.TempDir(), "fakesh", `echo oops >&2; exit 1`)
	assert.Empty(t, loginShellPATH(context.Background(), proc.EnvMap([]string{"SHELL=" + shell}), t.TempDir(), time.Second))
	assert.Empty(t, loginShellPATH(context.Background(), proc.EnvMap([]string{"SHELL=/nonexistent/zsh"}), t.TempDir(), time.Second))
}

func TestResolveSearchPathAddsLoginShellAndTheWellKnownDirs(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{".local/bin", ".nvm/versions/node/v18.2.0/bin", ".nvm/versions/node/v20.11.1/bin", ".nvm/versions/node/v9.0.0/bin"} {
		must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
	}
	shell := fakeCLI(t, t.TempDir(), "fakesh", `PATH=/from/login; eval "$3"`)
	s := ResolveSearchPath(context.Background(), proc.EnvMap([]string{"SHELL=" + shell, "PATH=/usr/bin:/bin"}), home)

	assert.Equal(t, []string{"/usr/bin", "/bin", "/from/login"}, s.Dirs[:3])
	assert.Equal(t, api.SourceLoginShell, s.SourceOf("/from/login"))
	local := filepath.Join(home, ".local", "bin")
	assert.Contains(t, s.Dirs, local)
	assert.Equal(t, api.SourceWellKnown, s.SourceOf(local))
	assert.Contains(t, s.Dirs, filepath.Join(home, ".volta", "bin"), "a well-known dir that does not exist yet is searched too, for a CLI installed there later")
	nvm := func(v string) string { return filepath.Join(home, ".nvm/versions/node", v, "bin") }
	idx := func(p string) int {
		for i, d := range s.Dirs {
			if d == p {
				return i
			}
		}
		return -1
	}
	require.GreaterOrEqual(t, idx(nvm("v9.0.0")), 0)
	assert.Less(t, idx(nvm("v20.11.1")), idx(nvm("v18.2.0")), "the newest node wins")
	assert.Less(t, idx(nvm("v18.2.0")), idx(nvm("v9.0.0")))
}

func TestASpecSaysItsBinaryCameFromAWellKnownDir(t *testing.T) {
	dir := t.TempDir()
	fakeCLI(t, dir, "claude", `echo 2.1.197`)
	s := buildSearchPath("/nonexistent", "", []string{dir, toolsDir(t)})
	d := New(Options{Search: s, Env: testEnv(), Home: t.TempDir(), ScratchDirs: []string{}})
	t.Cleanup(d.Close)
	spec, ok := specByID(d.Detect(ctx, false), agent.ClaudeCode)
	require.True(t, ok)
	assert.Equal(t, api.SourceWellKnown, spec.Source)
}

// An install skipped for being in a scratch directory is named in the
// "not installed" reason, with how to pin it, instead of being hidden.
func TestAnInstallSkippedInAScratchDirIsNamedWithHowToPinIt(t *testing.T) {
	scratch := t.TempDir()
	planted := fakeCLI(t, scratch, "claude", `echo "2.1.197 (Claude Code)"`)
	d := newDetectorWith(t, Options{ScratchDirs: []string{scratch}}, scratch)
	_, found := specByID(d.Detect(ctx, false), agent.ClaudeCode)
	assert.False(t, found, "a binary in a scratch dir is never taken")

	h, err := d.Health(ctx, agent.ClaudeCode, false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusNotExecutable, h.Status)
	for _, want := range []string{planted, "skipped", "scratch", "CAR_CLAUDE_CODE_BIN=" + planted, "[adapters.claude-code]", `bin = "` + planted + `"`} {
		assert.Contains(t, h.Reason, want)
	}
	_, _, err = d.Binary(ctx, agent.ClaudeCode)
	var ni *NotInstalledError
	require.ErrorAs(t, err, &ni)
	assert.Equal(t, []string{planted}, ni.Skipped)

	// Without a skipped install the reason names the pin too.
	h, err = d.Health(ctx, agent.Codex, false)
	require.NoError(t, err)
	assert.Contains(t, h.Reason, "CAR_CODEX_BIN")
	assert.Contains(t, h.Reason, "[adapters.codex]")
	assert.NotContains(t, h.Reason, "skipped")
}

// A well-known directory that did not exist when the detector was made is
// searched on every refresh: a CLI installed there later is found without
// a restart, and it is on the PATH probes and spawns get.
func TestAWellKnownDirCreatedAfterStartIsSearchedOnRefresh(t *testing.T) {
	home := t.TempDir()
	getenv := func(string) string { return "" }
	userDirs := func() []string { // the per-user ones: /usr/local/bin may hold real CLIs
		var out []string
		for _, d := range WellKnownDirs(home, getenv) {
			if strings.HasPrefix(d, home) {
				out = append(out, d)
			}
		}
		return out
	}
	d := New(Options{Search: NewSearchPath(toolsDir(t)), WellKnown: userDirs, Env: testEnv(), Home: home, ScratchDirs: []string{}, ProbeTimeout: 2 * time.Second})
	t.Cleanup(d.Close)
	assert.Empty(t, d.Detect(ctx, false))

	local := filepath.Join(home, ".local", "bin")
	must(t, os.MkdirAll(local, 0o755))
	fakeCLI(t, local, "claude", `echo "2.1.197 (Claude Code)"`)
	nvm := filepath.Join(home, ".nvm", "versions", "node", "v22.1.0", "bin")
	must(t, os.MkdirAll(nvm, 0o755))
	fakeCLI(t, nvm, "codex", `echo "codex-cli 0.171.0"`)

	specs := d.Detect(ctx, true)
	c, ok := specByID(specs, agent.ClaudeCode)
	require.True(t, ok, "%+v", specs)
	assert.Equal(t, api.SourceWellKnown, c.Source)
	assert.Equal(t, filepath.Join(local, "claude"), c.BinaryPath)
	x, ok := specByID(specs, agent.Codex)
	require.True(t, ok, "a node version installed after start is searched too")
	assert.Equal(t, "0.171.0", x.Version)
	assert.Contains(t, filepath.SplitList(d.SearchPath().PATH()), nvm)
}

// login_shell_path = false drops the login shell's PATH, not card's own
// list of well-known directories.
func TestTheBareSearchPathKeepsTheWellKnownDirs(t *testing.T) {
	home := t.TempDir()
	s := BareSearchPath(proc.EnvMap([]string{"PATH=/usr/bin:/bin", "SHELL=/nonexistent"}), home)
	assert.Equal(t, []string{"/usr/bin", "/bin"}, s.Dirs[:2])
	assert.Contains(t, s.Dirs, filepath.Join(home, ".local", "bin"))
	assert.Equal(t, api.SourceWellKnown, s.SourceOf(filepath.Join(home, ".local", "bin")))
	for _, d := range s.Dirs {
		assert.NotEqual(t, api.SourceLoginShell, s.SourceOf(d))
	}
}

// npm's global prefix, moved with `npm config set prefix` or
// NPM_CONFIG_PREFIX, is where `npm install -g` puts the CLIs.
func TestNpmsGlobalPrefixIsAWellKnownDir(t *testing.T) {
	home := t.TempDir()
	writeFile(t, filepath.Join(home, ".npmrc"), "//registry.npmjs.org/:_authToken="+fakeSecret+"\nprefix=~/npm-global-custom\n")
	dirs := WellKnownDirs(home, envOf("NPM_CONFIG_PREFIX=/opt/npm"))
	assert.Contains(t, dirs, filepath.Join(home, "npm-global-custom", "bin"))
	assert.Contains(t, dirs, "/opt/npm/bin")
	assert.Contains(t, dirs, filepath.Join(home, ".npm-global", "bin"))
	for _, d := range dirs {
		assert.NotContains(t, d, "SECRETVALUE")
	}
}
