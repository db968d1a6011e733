package testskip

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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

// goTestEnv makes the test binary stand in for go test: it runs itself to
// announce (announceEnv) with its output kept in descriptor 3 ("keep"), as
// go test keeps a package's output, or on its own stderr ("stream"), as go
// test in a package's directory passes it on. (A shell would not do: dash
// applies a command's redirections to itself while the command runs.)
const goTestEnv = "CARD_TESTSKIP_AS_GO_TEST"

func TestMain(m *testing.M) {
	if mode := os.Getenv(goTestEnv); mode != "" {
		os.Unsetenv(goTestEnv)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Stdin = os.Stdin
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if mode == "keep" {
			kept := os.NewFile(3, "kept")
			cmd.Stdout, cmd.Stderr = kept, kept
		}
		if err := cmd.Run(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
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
// from still shows the line, once, also when go test's own stderr is that
// terminal.
func TestTheSummaryReachesTheControllingTerminalOnce(t *testing.T) {
	for _, goTestsStderrIsTheTerminal := range []bool{false, true} {
		t.Run(fmt.Sprintf("go test's stderr the terminal: %v", goTestsStderrIsTheTerminal), func(t *testing.T) {
			exe, err := os.Executable()
			require.NoError(t, err)
			// The stand-in go test keeps the announcing binary's output in
			// a pipe of this test's (fd 3).
			pr, pw, err := os.Pipe()
			require.NoError(t, err)
			defer pr.Close()
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), announceEnv+"=SKIPPED in ./x: 1 test", goTestEnv+"=keep")
			cmd.ExtraFiles = []*os.File{pw}
			var stderr bytes.Buffer
			copied := make(chan struct{})
			go func() { _, _ = io.Copy(&stderr, pr); close(copied) }()
			ptmx, tty, err := pty.Open()
			require.NoError(t, err)
			defer ptmx.Close()
			// The terminal is the child's controlling terminal (a session of
			// its own, the terminal its stdin while it starts); its stdout
			// and stderr go elsewhere, as under go test.
			cmd.Stdin, cmd.Stdout = tty, io.Discard
			if goTestsStderrIsTheTerminal {
				cmd.Stderr = tty
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			require.NoError(t, cmd.Start())
			pw.Close()
			tty.Close()
			got := make(chan string, 1)
			go func() {
				// Everything until the terminal's last holder is gone.
				var b bytes.Buffer
				_, _ = io.Copy(&b, ptmx)
				got <- b.String()
			}()
			require.NoError(t, cmd.Wait())
			<-copied
			select {
			case s := <-got:
				assert.Equal(t, 1, strings.Count(s, "SKIPPED in ./x: 1 test"), "the terminal: %q", s)
			case <-time.After(10 * time.Second):
				t.Fatal("the terminal was not let go")
			}
			assert.Contains(t, stderr.String(), "SKIPPED in ./x: 1 test", "stderr has it too, for -v and a failing run")
		})
	}
}

// Without a terminal (CI), go test's own stderr is where a passing
// package's line can still be read.
func TestWithoutATerminalTheSummaryReachesGoTestsOwnStderr(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("go test's descriptors are reached through /proc")
	}
	const line = "SKIPPED in ./x: 1 test"
	for _, tc := range []struct {
		name string
		// parentErr is go test's stderr; nil: the binary's own (go test
		// streaming its output, or the binary run by hand).
		parentErr func(t *testing.T) (*os.File, func() string)
		want      int // times the line is in go test's stderr
	}{
		{"a pipe, as CI's log", pipeFile, 1},
		{"a file opened to append", func(t *testing.T) (*os.File, func() string) { return regularFile(t, os.O_APPEND) }, 1},
		// go test's next write, at its own offset, would land on the line.
		{"a file opened to overwrite", func(t *testing.T) (*os.File, func() string) { return regularFile(t, os.O_TRUNC) }, 0},
		{"the binary's own stderr, streamed", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe, err := os.Executable()
			require.NoError(t, err)
			var cmd *exec.Cmd
			var parentOut func() string
			var own bytes.Buffer
			cmd = exec.Command(exe, "-test.run=^$")
			if tc.parentErr == nil {
				cmd.Env = append(os.Environ(), goTestEnv+"=stream")
				cmd.Stderr = &own
				parentOut = own.String
			} else {
				var f *os.File
				f, parentOut = tc.parentErr(t)
				cmd.Env = append(os.Environ(), goTestEnv+"=keep")
				cmd.Stderr = f
				pr, pw, err := os.Pipe()
				require.NoError(t, err)
				cmd.ExtraFiles = []*os.File{pw}
				done := make(chan struct{})
				go func() { _, _ = io.Copy(&own, pr); pr.Close(); close(done) }()
				t.Cleanup(func() { <-done })
				defer pw.Close()
			}
			cmd.Env = append(cmd.Env, announceEnv+"="+line)
			// A session without a terminal, as CI's.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			require.NoError(t, cmd.Run())
			if tc.parentErr != nil {
				for _, f := range cmd.ExtraFiles {
					f.Close()
				}
			}
			require.Eventually(t, func() bool { return strings.Count(parentOut(), line) >= tc.want }, 5*time.Second, 10*time.Millisecond)
			assert.Equal(t, tc.want, strings.Count(parentOut(), line), "go test's stderr: %q", parentOut())
		})
	}
}

func pipeFile(t *testing.T) (*os.File, func() string) {
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	var mu sync.Mutex
	var b bytes.Buffer
	go func() {
		buf := make([]byte, 512)
		for {
			n, err := pr.Read(buf)
			mu.Lock()
			b.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				pr.Close()
				return
			}
		}
	}()
	t.Cleanup(func() { pw.Close() })
	return pw, func() string { mu.Lock(); defer mu.Unlock(); return b.String() }
}

func regularFile(t *testing.T, mode int) (*os.File, func() string) {
	path := filepath.Join(t.TempDir(), "stderr")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|mode, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f, func() string { b, _ := os.ReadFile(path); return string(b) }
}
