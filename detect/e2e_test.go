package detect

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/internal/testskip"
)

// realBinDir finds the agent CLIs installed from npm by e2e/agents/install.sh, or skips
// loudly (fails when CARD_E2E_REQUIRED=1, as in CI).
func realBinDir(t *testing.T) string {
	t.Helper()
	if testing.Short() && !testskip.Required() {
		testskip.Skip(t, testskip.RealCLIsShort, "SKIPPING real-CLI test in -short mode (it takes tens of seconds: gemini --version alone is ~3 s)")
	}
	dir := os.Getenv("CARD_E2E_BIN_DIR")
	if dir == "" {
		abs, err := filepath.Abs(filepath.Join("..", "e2e", "agents", "node_modules", ".bin"))
		require.NoError(t, err)
		dir = abs
	}
	var missing []string
	for _, b := range []string{"claude", "codex", "gemini"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		testskip.Skip(t, testskip.RealCLIsMissing, "REAL AGENT CLIs MISSING ("+strings.Join(missing, ", ")+") in "+dir)
	}
	return dir
}

// realSearchPath is the CLIs' dir plus the dir of node (the Node CLIs are
// `#!/usr/bin/env node` scripts) and the system dirs.
func realSearchPath(t *testing.T, binDir string) SearchPath {
	t.Helper()
	parts := []string{binDir}
	if node, err := exec.LookPath("node"); err == nil {
		parts = append(parts, filepath.Dir(node))
	}
	return NewSearchPath(strings.Join(append(parts, "/usr/local/bin", "/usr/bin", "/bin"), ":"))
}

// realDetector runs with an empty HOME and an environment holding nothing
// but PATH, HOME and extra. The scratch rule is off because CI may clone the
// repository under /tmp; generous timeouts because a loaded CI machine makes
// gemini's 3 s version probe slower still.
func realDetector(t *testing.T, extra ...string) (*Detector, SearchPath) {
	binDir := realBinDir(t)
	search := realSearchPath(t, binDir)
	home := t.TempDir()
	env := append([]string{"PATH=" + search.PATH(), "HOME=" + home}, extra...)
	d := New(Options{Search: search, Home: home, Env: proc.EnvMap(env), ScratchDirs: []string{},
		ProbeTimeout: 60 * time.Second, HealthTimeout: 60 * time.Second})
	t.Cleanup(d.Close)
	return d, search
}

func directVersion(t *testing.T, bin string, search SearchPath, home string) string {
	t.Helper()
	cmd := exec.Command(bin, "--version")
	cmd.Env = []string{"PATH=" + search.PATH(), "HOME=" + home}
	cmd.Dir = home
	// CombinedOutput: pi prints its version on stderr.
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s --version", bin)
	return string(out)
}

func TestRealCLIsAreDetectedWithTheVersionTheyPrintAndAreNotSignedInWithAnEmptyHome(t *testing.T) {
	d, search := realDetector(t)
	specs := d.Detect(context.Background(), false)
	require.Len(t, specs, len(agent.IDs()), "%+v", specs)
	for _, s := range specs {
		assert.True(t, s.Execution.IsRunnable(), "%s: %+v", s.ID, s.Execution)
		printed := directVersion(t, s.BinaryPath, search, t.TempDir())
		assert.NotEmpty(t, s.Version, s.ID)
		assert.Equal(t, ParseVersion(printed), s.Version, s.ID)
		assert.Contains(t, printed, s.Version, s.ID)
		t.Logf("%s %s at %s", s.ID, s.Version, s.BinaryPath)
	}
	for _, h := range d.HealthAll(context.Background(), false) {
		assert.Equal(t, StatusNotConfigured, h.Status, "%s: %s", h.ID, h.Reason)
		assert.NotEmpty(t, h.Reason)
	}
}

func TestRealClaudeIsReadyWithAnAPIKeyInTheEnvironment(t *testing.T) {
	d, _ := realDetector(t, "ANTHROPIC_API_KEY=sk-ant-fake")
	h, err := d.Health(context.Background(), agent.ClaudeCode, false)
	require.NoError(t, err)
	assert.Equal(t, StatusReady, h.Status, h.Reason)
	assert.Equal(t, "ANTHROPIC_API_KEY", h.Details["apiKeySource"])
}

// TestColdDetectCostsNoMoreThanTheSlowestVersionProbe is the measurement for
// docs/performance.md: cold detection of the three real CLIs against the
// slowest single `--version` run alone, side by side, median of rounds.
// CARD_BENCH=1 go test -run TestColdDetectCostsNoMoreThanTheSlowestVersionProbe -v ./detect/
func TestColdDetectCostsNoMoreThanTheSlowestVersionProbe(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Bench, "measurement")
	}
	// The goal names the first three CLIs: a directory holding only them
	// keeps the later adapters out of the comparison.
	realDir := realBinDir(t)
	binDir := t.TempDir()
	for _, b := range []string{"claude", "codex", "gemini"} {
		require.NoError(t, os.Symlink(filepath.Join(realDir, b), filepath.Join(binDir, b)))
	}
	search := realSearchPath(t, binDir)
	home := t.TempDir()
	env := []string{"PATH=" + search.PATH(), "HOME=" + home}
	const rounds = 5
	var slowest, cold []time.Duration
	for range rounds {
		var worst time.Duration
		for _, b := range []string{"claude", "codex", "gemini"} {
			start := time.Now()
			out := runProbe(context.Background(), filepath.Join(binDir, b), []string{"--version"}, env, home, time.Minute)
			el := time.Since(start)
			require.True(t, out.Ran(), b)
			if el > worst {
				worst = el
			}
		}
		slowest = append(slowest, worst)

		d := New(Options{Search: search, Home: home, Env: proc.EnvMap(env), ScratchDirs: []string{}, ProbeTimeout: time.Minute})
		start := time.Now()
		specs := d.Detect(context.Background(), false)
		cold = append(cold, time.Since(start))
		d.Close()
		require.Len(t, specs, 3)
	}
	med := func(x []time.Duration) time.Duration {
		s := append([]time.Duration(nil), x...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	ms, mc := med(slowest), med(cold)
	ratio := float64(mc) / float64(ms)
	t.Logf("rounds=%d slowest single --version median=%v (all %v); cold Detect median=%v (all %v); ratio=%.3f (goal <= 1.15)", rounds, ms, slowest, mc, cold, ratio)
	// The goal is 1.15; on a shared 2-CPU machine three Node processes
	// contend, so the hard failure is kept for what only a regression
	// (probing one after another, about 2x or more) would produce.
	if ratio > 1.15 {
		t.Logf("ABOVE GOAL: ratio %.3f > 1.15 (check machine load before blaming detection)", ratio)
	}
	assert.LessOrEqual(t, ratio, 1.5)
}
