package testskip

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// announceEnv makes the test binary, re-executed on a terminal, announce
// its argument and exit.
const announceEnv = "CARD_TESTSKIP_ANNOUNCE"

func TestMain(m *testing.M) {
	if s := os.Getenv(announceEnv); s != "" {
		flag.Parse() // announce asks testing.Verbose, as after m.Run
		announce(s + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeT records what Skip did instead of ending the calling test.
type fakeT struct {
	testing.TB
	name            string
	skipped, failed string
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Name() string      { return f.name }
func (f *fakeT) Skip(args ...any)  { f.skipped = fmt.Sprint(args...) }
func (f *fakeT) Fatal(args ...any) { f.failed = fmt.Sprint(args...) }

func reset(t *testing.T) {
	mu.Lock()
	saved := skipped
	skipped = map[Gap]map[string]bool{}
	mu.Unlock()
	t.Cleanup(func() { mu.Lock(); skipped = saved; mu.Unlock() })
}

func TestTheSummaryCountsTopLevelTestsPerGapAndSaysHowToRunThem(t *testing.T) {
	reset(t)
	t.Setenv(RequiredEnv, "")
	for _, name := range []string{"TestA/claude", "TestA/codex", "TestB"} {
		f := &fakeT{name: name}
		Skip(f, RealCLIsOff, "real-CLI test skipped")
		assert.Equal(t, "real-CLI test skipped — to run it: "+RealCLIsOff.Enable, f.skipped)
	}
	Skip(&fakeT{name: "TestC"}, Bench, "")
	assert.Equal(t, []string{
		"SKIPPED in ./e2e/x: 1 test (measurements, not checks); to run it: set CARD_BENCH=1",
		"SKIPPED in ./e2e/x: 2 tests (real agent CLIs, off by default); to run them: set CARD_E2E=1 (with the CLIs installed: `e2e/agents/install.sh`)",
	}, Summary("./e2e/x"))
}

func TestAMissingInstallFailsUnderCARD_E2E_REQUIREDAndIsNotCounted(t *testing.T) {
	reset(t)
	t.Setenv(RequiredEnv, "1")
	f := &fakeT{name: "TestA"}
	Skip(f, RealCLIsMissing, "REAL CLI MISSING: claude")
	assert.Contains(t, f.failed, "REAL CLI MISSING: claude")
	assert.Contains(t, f.failed, "CARD_E2E_REQUIRED=1")
	assert.Empty(t, Summary("."))

	// A switch nobody set is not a missing install: it still skips.
	f = &fakeT{name: "TestB"}
	Skip(f, Bench, "measurement")
	assert.Empty(t, f.failed)
	assert.NotEmpty(t, f.skipped)
}

func TestWithoutSkipsThereIsNoSummary(t *testing.T) {
	reset(t)
	assert.Empty(t, Summary("."))
}

func TestThePackageIsNamedAsGoTestTakesIt(t *testing.T) {
	assert.Equal(t, "./internal/testskip", packageName())
}

// go test drops a passing package's output; the terminal it was started
// from still shows the line.
func TestTheSummaryReachesTheControllingTerminal(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), announceEnv+"=SKIPPED in ./x: 1 test")
	var stderr bytes.Buffer
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	// The terminal is the child's controlling terminal (a session of its
	// own, the terminal its stdin while it starts) and nothing else: its
	// stdout and stderr go elsewhere, as under go test.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, io.Discard, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	tty.Close()
	got := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 256)
		for !strings.Contains(b.String(), "\n") {
			n, err := ptmx.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.String()
	}()
	require.NoError(t, cmd.Wait(), stderr.String())
	select {
	case s := <-got:
		assert.Contains(t, s, "SKIPPED in ./x: 1 test")
	case <-time.After(10 * time.Second):
		t.Fatal("nothing reached the terminal")
	}
	assert.Contains(t, stderr.String(), "SKIPPED in ./x: 1 test", "stderr has it too, for -v and a failing run")
}
