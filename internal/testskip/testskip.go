// Package testskip makes a skipped test visible in the output of the
// README's own test command. `go test ./...` prints nothing but "ok" for a
// package whose tests pass, however many of them skipped, and drops whatever
// the test binary wrote; so a test that needs something this machine lacks
// (the real agent CLIs, Node, Chromium, a validator, root) or a switch this
// run did not set records why it skipped here, and the package's TestMain
// (Wrap) ends with one line per reason naming the package, how many tests,
// and what runs them.
//
// That line goes to the test binary's stderr, which `go test -v`, `go test`
// in a package's directory and a failing package show. A passing package in
// `go test ./...` shows none of it (go test keeps the binary's output and
// prints only "ok"), so the line also goes where the person who ran go test
// reads: go test's own stderr (on Linux, through /proc; CI's log, with no
// terminal), and the terminal go test was started from (/dev/tty), each
// once.
package testskip

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// RequiredEnv, set to 1 (as CI does), makes a missing install fail the test
// instead of skipping it, so a CI image that lost a package cannot go green.
const RequiredEnv = "CARD_E2E_REQUIRED"

// A Gap is what a group of skipped tests lacks and what would run them.
type Gap struct {
	// Why they skip, as a short phrase: "real agent CLIs not installed".
	Why string
	// Enable says what runs them: a switch, an install command.
	Enable string
	// Install marks a missing install (as opposed to a switch this run did
	// not set): it fails the test under CARD_E2E_REQUIRED=1.
	Install bool
}

// The gaps more than one package has, worded once.
var (
	// RealCLIsOff: the real-CLI end-to-end tests take seconds each and
	// run only when asked.
	RealCLIsOff = Gap{
		Why:    "real agent CLIs, off by default",
		Enable: "set CARD_E2E=1 (with the CLIs installed: " + InstallCLIs + ")",
	}
	// RealCLIsMissing: the CLIs are not installed where the tests look.
	RealCLIsMissing = Gap{
		Why:     "real agent CLIs not installed",
		Enable:  "install them with " + InstallCLIs + " (or set CARD_E2E_BIN_DIR to a directory holding them)",
		Install: true,
	}
	// RealCLIsShort: -short leaves out the tests that start the real CLIs.
	RealCLIsShort = Gap{Why: "real agent CLIs, left out by -short", Enable: "run without -short"}
	// Bench: measurements, not checks.
	Bench = Gap{Why: "measurements, not checks", Enable: "set CARD_BENCH=1"}
	// DocsCapture: tools that write docs/protocol.md's examples.
	DocsCapture = Gap{Why: "capture of docs/protocol.md examples, a tool rather than a check", Enable: "set its CARD_DOCS_CAPTURE… variable (see the test's comment)"}
)

// InstallCLIs is the one command that installs the real agent CLIs the way
// CI does.
const InstallCLIs = "`e2e/agents/install.sh`"

// Skip skips t for gap, with detail as the test's own skip message (what
// exactly is missing). A missing install fails t instead under
// CARD_E2E_REQUIRED=1.
func Skip(t testing.TB, gap Gap, detail string) {
	t.Helper()
	msg := detail
	if msg == "" {
		msg = "skipped: " + gap.Why
	}
	msg += " — to run it: " + gap.Enable
	if gap.Install && os.Getenv(RequiredEnv) == "1" {
		t.Fatal(msg + " (" + RequiredEnv + "=1 makes this a failure)")
		return
	}
	record(t.Name(), gap)
	t.Skip(msg)
}

// Required reports whether CARD_E2E_REQUIRED=1 asks that nothing be skipped
// for a missing install.
func Required() bool { return os.Getenv(RequiredEnv) == "1" }

var (
	mu      sync.Mutex
	skipped = map[Gap]map[string]bool{} // gap → top-level test names
)

func record(name string, gap Gap) {
	top, _, _ := strings.Cut(name, "/")
	mu.Lock()
	defer mu.Unlock()
	if skipped[gap] == nil {
		skipped[gap] = map[string]bool{}
	}
	skipped[gap][top] = true
}

// M runs a package's tests and then says what skipped; goleak's
// VerifyTestMain takes it in place of *testing.M.
type M struct{ m *testing.M }

// Wrap is m with the skip summary after its run.
func Wrap(m *testing.M) M { return M{m} }

// Run runs the tests and then writes the summary.
func (w M) Run() int {
	code := w.m.Run()
	if lines := Summary(packageName()); len(lines) > 0 {
		announce(strings.Join(lines, "\n") + "\n")
	}
	return code
}

// Summary is one line per gap that skipped tests in pkg, in a stable order.
func Summary(pkg string) []string {
	mu.Lock()
	defer mu.Unlock()
	var lines []string
	for gap, tests := range skipped {
		n, them := "1 test", "it"
		if len(tests) > 1 {
			n, them = fmt.Sprintf("%d tests", len(tests)), "them"
		}
		lines = append(lines, fmt.Sprintf("SKIPPED in %s: %s (%s); to run %s: %s", pkg, n, gap.Why, them, gap.Enable))
	}
	sort.Strings(lines)
	return lines
}

// packageName is the package's directory relative to the module root (go
// test runs a package's tests in its directory), as `go test` takes it.
func packageName() string {
	wd, err := os.Getwd()
	if err != nil {
		return "this package"
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			rel, err := filepath.Rel(d, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(d) == d {
			return wd
		}
	}
}

// announce writes s to stderr and, unless that already reaches the person
// (-v, or go test streaming the binary's output), to go test's own stderr
// and to the controlling terminal, skipping the terminal when go test's
// stderr is that terminal. Both are opened with syscall.Open, not os.Open:
// go test records the files a test binary opens through package os and
// would then never cache this package's result (a terminal's modification
// time changes with every keystroke).
func announce(s string) {
	fmt.Fprint(os.Stderr, s)
	if testing.Verbose() || streamed() {
		return
	}
	if wrote := writeParentStderr(s); wrote != nil && isControllingTerminal(*wrote) {
		return
	}
	fd, err := syscall.Open("/dev/tty", syscall.O_WRONLY|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	tty := os.NewFile(uintptr(fd), "/dev/tty")
	defer tty.Close()
	_, _ = io.WriteString(tty, s)
}

// sameFile reports whether two stats are of one file (a terminal is one
// device, whichever path opened it).
func sameFile(a, b syscall.Stat_t) bool {
	if a.Mode&syscall.S_IFMT == syscall.S_IFCHR && b.Mode&syscall.S_IFMT == syscall.S_IFCHR {
		return a.Rdev == b.Rdev
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
