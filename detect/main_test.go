package detect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/internal/testskip"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testskip.Wrap(m)) }

// fakeCLI writes an executable shell script named name into dir.
func fakeCLI(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	must(t, proc.WriteExecutable(p, []byte("#!/bin/sh\n"+body+"\n")))
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testEnv is a minimal probe environment: fake CLIs are /bin/sh scripts and
// need nothing else.
func testEnv(extra ...string) map[string]string {
	return proc.EnvMap(append([]string{"LANG=C"}, extra...))
}

// newTestDetector searches only dirs, with the scratch rule off (temp dirs
// live under /tmp) and short timeouts.
func newTestDetector(t *testing.T, home string, dirs ...string) *Detector {
	t.Helper()
	return newDetectorWith(t, Options{Home: home}, dirs...)
}

func newDetectorWith(t *testing.T, o Options, dirs ...string) *Detector {
	t.Helper()
	o.Search = NewSearchPath(strings.Join(append(dirs, toolsDir(t)), ":"))
	if o.Env == nil {
		o.Env = testEnv()
	}
	if o.ScratchDirs == nil {
		o.ScratchDirs = []string{}
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = 2e9
	}
	if o.HealthTimeout == 0 {
		o.HealthTimeout = 2e9
	}
	if o.Home == "" {
		o.Home = t.TempDir()
	}
	d := New(o)
	t.Cleanup(d.Close)
	return d
}

// counter returns a file path a fake CLI appends a line to on every run, and
// a func reading how many runs there were.
func counter(t *testing.T) (string, func() int) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "count")
	return p, func() int {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			return 0
		}
		must(t, err)
		return strings.Count(string(b), "\n")
	}
}

func specByID(specs []api.ExternalAgentSpec, id string) (api.ExternalAgentSpec, bool) {
	for _, s := range specs {
		if s.ID == id {
			return s, true
		}
	}
	return api.ExternalAgentSpec{}, false
}

// toolsDir holds links to the few utilities fake CLIs use. The probe PATH is
// the search path alone, and putting /usr/bin on it would also put node
// there, which the missing-interpreter case must not see.
func toolsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range []string{"sleep", "env", "cat"} {
		for _, base := range []string{"/bin", "/usr/bin"} {
			if _, err := os.Stat(filepath.Join(base, tool)); err == nil {
				must(t, os.Symlink(filepath.Join(base, tool), filepath.Join(dir, tool)))
				break
			}
		}
	}
	return dir
}
