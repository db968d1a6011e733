package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// daemonEnv is a startup environment carrying every variable a child must not
// inherit, next to ordinary ones it must.
func daemonEnv() map[string]string {
	m := map[string]string{"HOME": "/home/u", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "KEEP_ME": "yes"}
	for _, k := range Stripped {
		m[k] = "inherited-" + k
	}
	return m
}

func TestNewEnvStripsEveryDaemonOnlyVariableAndKeepsTheRest(t *testing.T) {
	base := daemonEnv()
	got := EnvMap(NewEnv(base).List())
	for _, k := range Stripped {
		assert.NotContains(t, got, k, "%s describes the daemon, not the child", k)
	}
	for _, k := range []string{"HOME", "PATH", "LANG", "KEEP_ME"} {
		assert.Equal(t, base[k], got[k], k)
	}
	assert.Equal(t, "inherited-NOTIFY_SOCKET", base["NOTIFY_SOCKET"], "the base map is not modified")
}

func TestTheStripListNamesTheVariablesThatLeakTheDaemon(t *testing.T) {
	for _, k := range []string{"NOTIFY_SOCKET", "CARD_RUN_ID", "CARD_PROBE", "CAR_INVOKED_BY", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"} {
		assert.Contains(t, Stripped, k)
	}
	assert.NotContains(t, Stripped, "PATH")
	assert.NotContains(t, Stripped, "HOME")
}

func TestSetWinsOverTheBaseAndSetDefaultDoesNot(t *testing.T) {
	e := NewEnv(map[string]string{"TERM": "dumb", "A": "1", "EMPTY": ""}).
		Set("A", "2").SetDefault("TERM", "xterm").SetDefault("EMPTY", "filled").SetDefault("NEW", "n").
		SetAll(map[string]string{"B": "3"}).Unset("LANG")
	assert.Equal(t, Env{"TERM": "dumb", "A": "2", "EMPTY": "filled", "NEW": "n", "B": "3"}, e)
}

func TestListIsSortedAndNeverNil(t *testing.T) {
	l := NewEnv(map[string]string{"Z": "1", "A": "2", "M": "3"}).List()
	assert.Equal(t, []string{"A=2", "M=3", "Z=1"}, l)
	assert.True(t, sort.StringsAreSorted(l))
	empty := NewEnv(nil).List()
	assert.NotNil(t, empty, "a nil exec.Cmd.Env would hand the child the daemon's live environment")
	assert.Empty(t, empty)
}

func TestAgentEnvCarriesItsOwnRunIDChainAndPathOverInheritedOnes(t *testing.T) {
	got := EnvMap(AgentEnv(daemonEnv(), "/opt/node/bin:/usr/bin", []string{"claude-code", "codex"}, "run_1"))
	assert.Equal(t, "run_1", got[RunIDEnv])
	assert.Equal(t, "claude-code,codex", got["CAR_INVOKED_BY"])
	assert.Equal(t, "/opt/node/bin:/usr/bin", got["PATH"])
	assert.NotContains(t, got, "NOTIFY_SOCKET")
	assert.NotContains(t, got, "GIT_DIR")
	assert.Equal(t, "yes", got["KEEP_ME"])
}

func TestAgentEnvDropsTheDaemonsPathWhenNoneWasResolved(t *testing.T) {
	got := EnvMap(AgentEnv(daemonEnv(), "", []string{"codex"}, "run_2"))
	assert.NotContains(t, got, "PATH")
}

func TestEnvMapKeepsTheLastValueOfARepeatedName(t *testing.T) {
	assert.Equal(t, map[string]string{"A": "2", "B": "x=y"}, EnvMap([]string{"A=1", "B=x=y", "A=2", "junk", "=v"}))
}

func TestTempDirComesFromTheGivenEnvironment(t *testing.T) {
	t.Setenv("TMPDIR", "/daemon/live/tmp")
	assert.Equal(t, "/srv/tmp", TempDir(map[string]string{"TMPDIR": "/srv/tmp"}))
	assert.Equal(t, "/tmp", TempDir(map[string]string{"TMPDIR": "relative/tmp"}))
	assert.Equal(t, "/tmp", TempDir(nil))
}

func TestLookPathSearchesTheGivenPathNotTheDaemons(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	tool := filepath.Join(dir, "card-test-tool")
	require.NoError(t, os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(other, "card-test-tool"), []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", other)

	got, err := LookPath("card-test-tool", "relative/bin:"+dir+":"+other)
	require.NoError(t, err)
	assert.Equal(t, tool, got, "the first absolute directory of the given PATH wins")

	_, err = LookPath("card-test-tool", "")
	require.ErrorIs(t, err, exec.ErrNotFound, "the daemon's live PATH is not consulted")
}

func TestLookPathRefusesDirectoriesAndFilesWithoutExecuteBit(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plain"), []byte("x"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	for _, name := range []string{"plain", "sub", "missing"} {
		_, err := LookPath(name, dir)
		assert.Error(t, err, name)
	}
	_, err := LookPath(filepath.Join(dir, "plain"), "")
	assert.Error(t, err, "a path with a slash is checked as it is")
	got, err := LookPath("/bin/sh", "")
	require.NoError(t, err)
	assert.Equal(t, "/bin/sh", got)
}
