package daemontest

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// gitSafe are the settings of a test's own git calls: no hook, filter or
// fsmonitor of the repository runs (so a marker a hostile repository's
// hook writes can only come from card), nothing of the machine's global
// or system config, and a fixed identity.
var gitSafe = []string{
	"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "commit.gpgSign=false",
	"-c", "user.name=Test User", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main",
	"-c", "gc.auto=0", "-c", "core.pager=cat", "-c", "color.ui=false",
}

// Git runs git in dir as the test's user would, minus the repository's
// programs (gitSafe), and returns what it printed. It does not write the
// index to refresh it (GIT_OPTIONAL_LOCKS=0), so a status between two
// snapshots of a checkout changes nothing in it.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git is not installed")
	}
	cmd := exec.Command(git, append(append([]string{}, gitSafe...), args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_OPTIONAL_LOCKS=0",
		"GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s in %s: %s", strings.Join(args, " "), dir, out)
	return string(out)
}

// GitRepo makes a git repository in a new directory named name (under a
// temp dir), with one commit of README.md, and returns its top.
func GitRepo(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	Git(t, dir, "init", "--quiet")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# "+name+"\n\nA project.\n"), 0o644))
	Git(t, dir, "add", "README.md")
	Git(t, dir, "commit", "--quiet", "-m", "first")
	return dir
}

// checkoutGitFiles are the files of a checkout's .git that are the user's
// state, as a snapshot of the checkout reads them: what is staged, what is
// checked out, the branch's commit, the settings and the hooks.
var checkoutGitFiles = []string{".git/index", ".git/HEAD", ".git/config", ".git/refs/heads/main", ".git/packed-refs", ".git/hooks"}

// Snapshot is every file of the checkout at top, and the user's state in
// its .git (the index, HEAD, the main branch, config, hooks), each by its
// mode and a digest of its content: two snapshots are equal only when not
// one byte of them changed. git's own bookkeeping of other worktrees and
// branches (.git/worktrees, refs/heads/card, objects, logs) is left out.
func Snapshot(t testing.TB, top string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(top, path)
		if d.IsDir() && rel == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		out[rel] = digest(t, path)
		return nil
	})
	require.NoError(t, err)
	for _, rel := range checkoutGitFiles {
		path := filepath.Join(top, rel)
		st, err := os.Stat(path)
		if err != nil {
			continue
		}
		if !st.IsDir() {
			out[rel] = digest(t, path)
			continue
		}
		ents, err := os.ReadDir(path)
		require.NoError(t, err)
		for _, e := range ents {
			out[filepath.Join(rel, e.Name())] = digest(t, filepath.Join(path, e.Name()))
		}
	}
	return out
}

func digest(t testing.TB, path string) string {
	t.Helper()
	st, err := os.Lstat(path)
	require.NoError(t, err)
	if st.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		require.NoError(t, err)
		return "link " + target
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return st.Mode().String() + " " + hex.EncodeToString(sum[:])
}
