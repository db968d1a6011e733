package standin

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The npm package @factory/cli is only a launcher; the binary comes from a
// platform package (@factory/cli-linux-x64). When that is missing, as with
// the pinned 0.225.1 whose linux-x64 package was never published, the
// launcher exits 1 with this text: detection must report the install as
// unusable with that cause. Reproduced here from a copy of the launcher in a
// node_modules that holds nothing else, so it does not depend on what npm
// managed to install next to it.
func TestDroidLauncherWithoutItsPlatformPackageNamesTheMissingBinary(t *testing.T) {
	launcher := cliPath(t, "droid")
	pkg, err := filepath.EvalSymlinks(launcher)
	require.NoError(t, err)
	pkgDir := filepath.Dir(filepath.Dir(pkg)) // .../@factory/cli
	copyRoot := filepath.Join(t.TempDir(), "node_modules", "@factory", "cli")
	require.NoError(t, os.CopyFS(copyRoot, os.DirFS(pkgDir)))

	home, project := sandbox(t)
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is needed to run the droid launcher")
	res := runCLI(t, 30*time.Second, project, []string{"HOME=" + home, "PATH=" + nodePath()}, "", node,
		filepath.Join(copyRoot, "bin", "droid"), "--version")
	t.Log(res)
	capture(t, "droid-missing-platform-binary", home, res)
	assert.Equal(t, 1, res.Exit)
	assert.Empty(t, res.Stdout)
	assert.Contains(t, res.Stderr, "Error: Could not find the droid binary for linux-x64.")
	assert.Contains(t, res.Stderr, `the optional dependency "@factory/cli-linux-x64" was not installed`)
}

// droidBinary is a working droid: CARD_E2E_DROID_BIN (the platform package's
// bin/droid), else the launcher if its platform package is there.
func droidBinary(t *testing.T) string {
	launcher := cliPath(t, "droid")
	if p := os.Getenv("CARD_E2E_DROID_BIN"); p != "" {
		return p
	}
	if out, err := exec.Command(launcher, "--version").CombinedOutput(); err != nil {
		t.Skipf("DROID NOT RUNNABLE: %s --version: %v: %s; set CARD_E2E_DROID_BIN to a platform binary "+
			"(npm install @factory/cli-linux-x64 into a temp prefix) to run this test", launcher, err, out)
	}
	return launcher
}

// droidArgs is close to card's argv for Droid: exec in its default
// read-only autonomy (never --auto or --skip-permissions-unsafe), stream-json
// output, prompt on stdin.
func droidArgs(sel []string) []string {
	return append([]string{"exec", "-o", "stream-json"}, sel...)
}

func TestDroidExecAnswersThroughACustomModel(t *testing.T) {
	bin := droidBinary(t)
	s := NewAnthropic(t, Script{Answer: "PONG from the anthropic stand-in via droid"})
	home, project := sandbox(t)
	env, sel, err := s.DroidSetup(home, nodePath())
	require.NoError(t, err)
	res := runCLI(t, 120*time.Second, project, env, "say pong", bin, droidArgs(sel)...)
	t.Log(res)
	capture(t, "droid-exec-stream-json-success", home, res)
	require.Equal(t, 0, res.Exit, res.String())
	done := lastOfType(jsonLines(t, res.Stdout), "completion")
	require.NotNil(t, done, res.String())
	assert.Equal(t, "PONG from the anthropic stand-in via droid", done["finalText"])
	calls := s.ModelCalls()
	require.NotEmpty(t, calls, "droid never called the stand-in")
	assert.Contains(t, string(calls[0].Body), "say pong")
}

func TestDroidExecReportsAScriptedAPIErrorAsAFailedRun(t *testing.T) {
	bin := droidBinary(t)
	// Only 401: Droid 0.225.2 retries a 429 with backoff for about 80 s before
	// failing the same way, and no retry knob was found (docs/e2e-notes.md).
	for _, status := range []int{http.StatusUnauthorized} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			s := NewAnthropic(t, Script{Status: status})
			home, project := sandbox(t)
			env, sel, err := s.DroidSetup(home, nodePath())
			require.NoError(t, err)
			res := runCLI(t, 120*time.Second, project, env, "say pong", bin, droidArgs(sel)...)
			t.Log(res)
			capture(t, "droid-exec-stream-json-"+strconv.Itoa(status), home, res)
			assert.Equal(t, 1, res.Exit, "an API %d must not look like success", status)
			objs := jsonLines(t, res.Stdout)
			var loopErr string
			for _, o := range objs {
				if o["type"] == "error" && o["source"] == "agent_loop" {
					loopErr, _ = o["message"].(string)
				}
			}
			assert.True(t, strings.HasPrefix(loopErr, strconv.Itoa(status)+" "), "agent_loop error names the status: %q", loopErr)
			assert.Nil(t, lastOfType(objs, "completion"), "a failed run has no completion line")
			assert.NotEmpty(t, s.ModelCalls())
		})
	}
}
