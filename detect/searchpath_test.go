package detect

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/internal/proc"
)

func TestTheSearchPathKeepsOrderDropsDuplicatesAndRelativeEntriesAndRemembersSources(t *testing.T) {
	s := buildSearchPath("/usr/bin:/bin::.:bin", "/home/u/.nvm/bin:/usr/bin:/opt/x/", []string{"/home/u/.local/bin", "/opt/x"})
	assert.Equal(t, []string{"/usr/bin", "/bin", "/home/u/.nvm/bin", "/opt/x", "/home/u/.local/bin"}, s.Dirs)
	assert.Equal(t, SourcePath, s.SourceOf("/usr/bin"))
	assert.Equal(t, SourceLoginShell, s.SourceOf("/home/u/.nvm/bin"))
	assert.Equal(t, SourceLoginShell, s.SourceOf("/opt/x"), "first source wins")
	assert.Equal(t, SourceWellKnown, s.SourceOf("/home/u/.local/bin"))
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

func TestResolveSearchPathAddsLoginShellAndExistingWellKnownDirs(t *testing.T) {
	home := t.TempDir()
	for _, d := range []string{".local/bin", ".nvm/versions/node/v18.2.0/bin", ".nvm/versions/node/v20.11.1/bin", ".nvm/versions/node/v9.0.0/bin"} {
		must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
	}
	shell := fakeCLI(t, t.TempDir(), "fakesh", `PATH=/from/login; eval "$3"`)
	s := ResolveSearchPath(context.Background(), proc.EnvMap([]string{"SHELL=" + shell, "PATH=/usr/bin:/bin"}), home)

	assert.Equal(t, []string{"/usr/bin", "/bin", "/from/login"}, s.Dirs[:3])
	assert.Equal(t, SourceLoginShell, s.SourceOf("/from/login"))
	local := filepath.Join(home, ".local", "bin")
	assert.Contains(t, s.Dirs, local)
	assert.Equal(t, SourceWellKnown, s.SourceOf(local))
	assert.NotContains(t, s.Dirs, filepath.Join(home, ".volta", "bin"), "directories that do not exist are left out")
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
	assert.Equal(t, SourceWellKnown, spec.Source)
}
