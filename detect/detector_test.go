package detect

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
)

var ctx = context.Background()

func TestAnAdapterWithNoBinaryIsLeftOutAndBinaryNamesHowToInstallIt(t *testing.T) {
	dir := t.TempDir()
	fakeCLI(t, dir, "codex", `echo "codex-cli 0.171.0"`)
	d := newTestDetector(t, "", dir)

	specs := d.Detect(ctx, false)
	require.Len(t, specs, 1)
	assert.Equal(t, agent.Codex, specs[0].ID)

	_, _, err := d.Binary(ctx, agent.ClaudeCode)
	var ni *NotInstalledError
	require.ErrorAs(t, err, &ni)
	assert.Contains(t, err.Error(), "@anthropic-ai/claude-code")
	assert.Contains(t, err.Error(), "CAR_CLAUDE_CODE_BIN")
}

func TestAFoundBinaryIsRunnableWithItsParsedVersionAndWhereItCameFrom(t *testing.T) {
	dir := t.TempDir()
	p := fakeCLI(t, dir, "claude", `echo "2.1.197 (Claude Code)"`)
	d := newTestDetector(t, "", dir)

	s, ok := specByID(d.Detect(ctx, false), agent.ClaudeCode)
	require.True(t, ok)
	assert.Equal(t, p, s.BinaryPath)
	assert.Equal(t, "2.1.197", s.Version)
	assert.Equal(t, "Claude Code", s.DisplayName)
	assert.True(t, s.Execution.IsRunnable())
	assert.Equal(t, api.SourcePath, s.Source)
	assert.Equal(t, api.EnforcedByAllowlist, s.ReadOnlyEnforcement)
	assert.NotZero(t, s.DetectedAt)

	bin, _, err := d.Binary(ctx, agent.ClaudeCode)
	require.NoError(t, err)
	assert.Equal(t, p, bin)
}

func TestAPinWinsOverTheSearchPath(t *testing.T) {
	onPath, pinned := t.TempDir(), t.TempDir()
	fakeCLI(t, onPath, "codex", `echo "codex-cli 0.1.0"`)
	pin := fakeCLI(t, pinned, "codex-nightly", `echo "codex-cli 9.9.9"`)
	d := newDetectorWith(t, Options{Env: testEnv("CAR_CODEX_BIN=" + pin)}, onPath)

	s, ok := specByID(d.Detect(ctx, false), agent.Codex)
	require.True(t, ok)
	assert.Equal(t, pin, s.BinaryPath)
	assert.Equal(t, "9.9.9", s.Version)
	assert.Equal(t, api.SourcePin, s.Source)
}

func TestAPinThatDoesNotResolveIsUnusableNamingThePinWithNoPathFallback(t *testing.T) {
	onPath := t.TempDir()
	fakeCLI(t, onPath, "codex", `echo "codex-cli 0.1.0"`)
	missing := filepath.Join(t.TempDir(), "gone", "codex")
	d := newDetectorWith(t, Options{Env: testEnv("CAR_CODEX_BIN=" + missing)}, onPath)

	s, ok := specByID(d.Detect(ctx, false), agent.Codex)
	require.True(t, ok)
	reason, bad := s.UnusableReason()
	require.True(t, bad, "a broken pin must not fall back to the codex on PATH")
	assert.Contains(t, reason, "CAR_CODEX_BIN")
	assert.Contains(t, reason, missing)
	assert.Equal(t, missing, s.BinaryPath)
	assert.Equal(t, api.SourcePin, s.Source)

	_, _, err := d.Binary(ctx, agent.Codex)
	var ue *UnusableError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "CAR_CODEX_BIN")
}

func TestAPinThatExistsButDoesNotRunNamesThePinAndTheCause(t *testing.T) {
	dir := t.TempDir()
	pin := filepath.Join(dir, "codex")
	must(t, os.WriteFile(pin, []byte("#!/bin/sh\necho hi\n"), 0o644))
	d := newDetectorWith(t, Options{Env: testEnv("CAR_CODEX_BIN=" + pin)})
	s, _ := specByID(d.Detect(ctx, false), agent.Codex)
	reason, bad := s.UnusableReason()
	require.True(t, bad)
	assert.Contains(t, reason, "CAR_CODEX_BIN")
	assert.Contains(t, reason, "permission denied")
}

func TestAConfigPinIsUsedAndTheEnvironmentPinWinsOverIt(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	fromConfig := fakeCLI(t, a, "gemini", `echo 0.61.0`)
	fromEnv := fakeCLI(t, b, "gemini", `echo 0.62.0`)

	d := newDetectorWith(t, Options{Pins: map[string]string{agent.Gemini: fromConfig}})
	s, ok := specByID(d.Detect(ctx, false), agent.Gemini)
	require.True(t, ok)
	assert.Equal(t, fromConfig, s.BinaryPath)
	assert.Equal(t, api.SourcePin, s.Source)

	d2 := newDetectorWith(t, Options{Pins: map[string]string{agent.Gemini: fromConfig}, Env: testEnv("CAR_GEMINI_BIN=" + fromEnv)})
	s2, _ := specByID(d2.Detect(ctx, false), agent.Gemini)
	assert.Equal(t, fromEnv, s2.BinaryPath)
	assert.Equal(t, "0.62.0", s2.Version)
}

func TestABrokenConfigPinNamesTheConfigSetting(t *testing.T) {
	d := newDetectorWith(t, Options{Pins: map[string]string{agent.Gemini: "/nonexistent/gemini"}})
	s, ok := specByID(d.Detect(ctx, false), agent.Gemini)
	require.True(t, ok)
	reason, _ := s.UnusableReason()
	assert.Contains(t, reason, `pinned by bin = "/nonexistent/gemini" under [adapters.gemini] in card.toml`)
	assert.Contains(t, reason, "fix or remove bin under [adapters.gemini] in card.toml")
}

func TestAPinBypassesTheScratchDirectoryRule(t *testing.T) {
	dir := t.TempDir()
	pin := fakeCLI(t, dir, "claude", `echo "2.1.197 (Claude Code)"`)
	d := newDetectorWith(t, Options{Env: testEnv("CAR_CLAUDE_CODE_BIN=" + pin), ScratchDirs: []string{dir}})
	s, ok := specByID(d.Detect(ctx, false), agent.ClaudeCode)
	require.True(t, ok)
	assert.True(t, s.Execution.IsRunnable())
	assert.Equal(t, "2.1.197", s.Version)
}

func TestABinaryInAScratchDirectoryOnThePathIsNeverPicked(t *testing.T) {
	scratch, safe := t.TempDir(), t.TempDir()
	fakeCLI(t, scratch, "claude", `echo "6.6.6 (planted)"`)
	real := fakeCLI(t, safe, "claude", `echo "2.1.197 (Claude Code)"`)
	d := newDetectorWith(t, Options{ScratchDirs: []string{scratch + "/"}}, scratch, safe)

	s, ok := specByID(d.Detect(ctx, false), agent.ClaudeCode)
	require.True(t, ok)
	assert.Equal(t, real, s.BinaryPath)
	assert.Equal(t, "2.1.197", s.Version)
}

func TestASymlinkFromASafeDirectoryIntoAScratchDirectoryIsNotPicked(t *testing.T) {
	scratch, safe := t.TempDir(), t.TempDir()
	planted := fakeCLI(t, scratch, "claude-planted", `echo "6.6.6"`)
	must(t, os.Symlink(planted, filepath.Join(safe, "claude")))
	d := newDetectorWith(t, Options{ScratchDirs: []string{scratch}}, safe)
	_, ok := specByID(d.Detect(ctx, false), agent.ClaudeCode)
	assert.False(t, ok)
}

func TestTheDefaultScratchDirectoriesAreSkipped(t *testing.T) {
	for _, p := range []string{"/tmp/x/claude", "/tmp/claude", "/private/tmp/claude", "/var/tmp/a/claude", "/dev/shm/claude"} {
		assert.True(t, inScratch(p, DefaultScratchDirs), p)
	}
	for _, p := range []string{"/tmpfoo/claude", "/usr/local/bin/claude", "/home/u/tmp/claude", "/var/tmpx/claude"} {
		assert.False(t, inScratch(p, DefaultScratchDirs), p)
	}

	// With Options.ScratchDirs left nil, the defaults apply: a CLI in a temp
	// dir under /tmp is not found.
	dir := t.TempDir()
	if !strings.HasPrefix(dir, "/tmp/") {
		t.Skipf("temp dir %s is not under /tmp; the table above covers the default list", dir)
	}
	fakeCLI(t, dir, "codex", `echo "codex-cli 0.171.0"`)
	d := New(Options{Search: NewSearchPath(dir), Env: testEnv(), Home: t.TempDir(), ProbeTimeout: time.Second})
	t.Cleanup(d.Close)
	assert.Empty(t, d.Detect(ctx, false))
}

func TestBrokenBinaryEarlierOnPathDoesNotShadowAWorkingOne(t *testing.T) {
	broken, working := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(broken, "codex"), []byte("#!/bin/sh\necho 1\n"), 0o644))
	good := fakeCLI(t, working, "codex", `echo "codex-cli 0.171.0"`)
	d := newTestDetector(t, "", broken, working)

	s, ok := specByID(d.Detect(ctx, false), agent.Codex)
	require.True(t, ok)
	assert.Equal(t, good, s.BinaryPath)
	assert.True(t, s.Execution.IsRunnable())
	assert.Equal(t, "0.171.0", s.Version)
}

func TestAWorkingBinaryEarlierOnPathWinsEvenWhenALaterOneIsFaster(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	slow := fakeCLI(t, first, "codex", "sleep 0.3; echo 'codex-cli 1.0.0'")
	fakeCLI(t, second, "codex", `echo "codex-cli 2.0.0"`)
	d := newTestDetector(t, "", first, second)
	s, _ := specByID(d.Detect(ctx, false), agent.Codex)
	assert.Equal(t, slow, s.BinaryPath)
	assert.Equal(t, "1.0.0", s.Version)
}

func TestTheSameInstallReachedTwiceOnThePathIsProbedOnce(t *testing.T) {
	real, linkDir := t.TempDir(), t.TempDir()
	cnt, runs := counter(t)
	target := fakeCLI(t, real, "codex", "echo x >> "+cnt+"; exit 3")
	must(t, os.Symlink(target, filepath.Join(linkDir, "codex")))
	d := newTestDetector(t, "", linkDir, real, real)

	s, ok := specByID(d.Detect(ctx, false), agent.Codex)
	require.True(t, ok)
	assert.Equal(t, 1, runs(), "a symlink and its target are one install")
	reason, _ := s.UnusableReason()
	assert.NotContains(t, reason, "none of", "only one install, so no list of failures")
}

func TestEachReasonABinaryCannotRunIsReportedInWords(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"permission denied", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "claude"), []byte("#!/bin/sh\necho 1\n"), 0o644))
		}, []string{"permission denied"}},
		{"exec format error", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "claude"), []byte("\x7fELF\x02\x01\x01garbage-not-a-real-program"), 0o755))
		}, []string{"exec format error", "wrong architecture"}},
		{"dangling symlink", func(t *testing.T, dir string) {
			must(t, os.Symlink(filepath.Join(dir, "removed-install", "claude.exe"), filepath.Join(dir, "claude")))
		}, []string{"dangling symlink", "removed-install"}},
		{"interpreter missing from the daemon's PATH", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "claude"), []byte("#!/usr/bin/env node\nconsole.log('2.1.197')\n"), 0o755))
		}, []string{"interpreter missing", "node not found on PATH"}},
		{"interpreter path does not exist", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "claude"), []byte("#!/nonexistent/bin/node\n"), 0o755))
		}, []string{"interpreter missing", "/nonexistent/bin/node"}},
		{"killed by a signal", func(t *testing.T, dir string) {
			fakeCLI(t, dir, "claude", "kill -9 $$")
		}, []string{"killed by signal 9"}},
		{"launcher that cannot find its platform binary", func(t *testing.T, dir string) {
			fakeCLI(t, dir, "claude", "echo 'Could not find the droid binary for linux-x64' >&2; exit 1")
		}, []string{"exited with status 1", "Could not find the droid binary for linux-x64"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.setup(t, dir)
			d := newTestDetector(t, "", dir)
			s, ok := specByID(d.Detect(ctx, false), agent.ClaudeCode)
			require.True(t, ok, "a broken install is still reported so a person can find it")
			reason, bad := s.UnusableReason()
			require.True(t, bad)
			assert.Contains(t, reason, filepath.Join(dir, "claude"), "the reason names the path")
			for _, w := range c.want {
				assert.Contains(t, reason, w)
			}
			assert.NotZero(t, s.Execution.CheckedAt())
			assert.Empty(t, s.Version)
		})
	}
}

func TestWhenNoInstallRunsTheFirstIsReportedWithEveryCause(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(a, "gemini"), []byte("#!/bin/sh\n"), 0o644))
	fakeCLI(t, b, "gemini", "kill -9 $$")
	d := newTestDetector(t, "", a, b)
	s, _ := specByID(d.Detect(ctx, false), agent.Gemini)
	assert.Equal(t, filepath.Join(a, "gemini"), s.BinaryPath)
	reason, bad := s.UnusableReason()
	require.True(t, bad)
	assert.Contains(t, reason, "permission denied")
	assert.Contains(t, reason, "killed by signal")
}

func TestASlowVersionProbeStillReportsTheVersion(t *testing.T) {
	dir := t.TempDir()
	fakeCLI(t, dir, "gemini", "sleep 0.5; echo 0.61.0")
	d := newTestDetector(t, "", dir)
	s, _ := specByID(d.Detect(ctx, false), agent.Gemini)
	assert.Equal(t, "0.61.0", s.Version)
}

func TestAHangingVersionProbeIsKilledWholeAndLeavesTheBinaryRunnableWithoutAVersion(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	// The script starts a helper in its own group, as Node launchers do, and
	// then hangs; both must be gone when detection returns.
	fakeCLI(t, dir, "gemini", "sleep 60 & echo $! > "+pidFile+"; wait")
	d := newDetectorWith(t, Options{ProbeTimeout: 300 * time.Millisecond}, dir)

	start := time.Now()
	s, ok := specByID(d.Detect(ctx, false), agent.Gemini)
	elapsed := time.Since(start)
	t.Logf("detect took %v", elapsed)
	require.True(t, ok)
	assert.Less(t, elapsed, 3*time.Second)
	assert.True(t, s.Execution.IsRunnable(), "slow is not broken")
	assert.Empty(t, s.Version)

	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return !proc.Alive(pid) }, 2*time.Second, 20*time.Millisecond, "the probe's helper process must not outlive it")
}

func TestGarbageVersionOutputLeavesTheVersionAbsentButTheBinaryRunnable(t *testing.T) {
	dir := t.TempDir()
	fakeCLI(t, dir, "codex", `printf '\001\002 welcome to codex! build ok\n'`)
	d := newTestDetector(t, "", dir)
	s, _ := specByID(d.Detect(ctx, false), agent.Codex)
	assert.True(t, s.Execution.IsRunnable())
	assert.Empty(t, s.Version)
}

func TestAVersionPrintedOnStderrIsFound(t *testing.T) {
	dir := t.TempDir()
	fakeCLI(t, dir, "codex", `echo "codex-cli 0.9.0" >&2`)
	d := newTestDetector(t, "", dir)
	s, _ := specByID(d.Detect(ctx, false), agent.Codex)
	assert.Equal(t, "0.9.0", s.Version)
}

func TestAllAdaptersAreProbedConcurrently(t *testing.T) {
	dir := t.TempDir()
	for _, b := range []string{"claude", "codex", "gemini"} {
		fakeCLI(t, dir, b, "sleep 0.6; echo 1.0.0")
	}
	d := newTestDetector(t, "", dir)
	start := time.Now()
	specs := d.Detect(ctx, false)
	assert.Len(t, specs, 3)
	assert.Less(t, time.Since(start), 1500*time.Millisecond, "three 0.6 s probes run side by side")
}

func TestDetectionIsCachedRefreshedOnRequestAndSharedByConcurrentCallers(t *testing.T) {
	dir := t.TempDir()
	cnt, runs := counter(t)
	fakeCLI(t, dir, "codex", "echo x >> "+cnt+"; sleep 0.2; echo 'codex-cli 0.171.0'")
	d := newTestDetector(t, "", dir)

	_, have := d.Cached()
	assert.False(t, have)

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); assert.Len(t, d.Detect(ctx, false), 1) }()
	}
	wg.Wait()
	assert.Equal(t, 1, runs(), "eight concurrent callers share one detection")

	d.Detect(ctx, false)
	assert.Equal(t, 1, runs(), "the second call is served from cache")
	cached, have := d.Cached()
	assert.True(t, have)
	assert.Len(t, cached, 1)

	d.Detect(ctx, true)
	assert.Equal(t, 2, runs(), "refresh re-detects")
}

func TestProbesAreNotAgentHopsAndCarryTheResolvedPathAndHome(t *testing.T) {
	dir, home := t.TempDir(), t.TempDir()
	envFile := filepath.Join(t.TempDir(), "env")
	fakeCLI(t, dir, "codex", "env > "+envFile+"; pwd >> "+envFile+"; echo 'codex-cli 1.0.0'")
	d := newDetectorWith(t, Options{Home: home, Env: testEnv("CAR_INVOKED_BY=claude-code", "PATH=/usr/bin", "HOME=/elsewhere",
		"NOTIFY_SOCKET=/run/systemd/notify", "CARD_RUN_ID=run_1", "GIT_DIR=/elsewhere/.git", "KEEP_ME=1")}, dir)
	d.Detect(ctx, false)

	b, err := os.ReadFile(envFile)
	require.NoError(t, err)
	env := string(b)
	assert.NotContains(t, env, "CAR_INVOKED_BY", "a version probe must not look like an agent hop")
	for _, k := range []string{"NOTIFY_SOCKET", "CARD_RUN_ID", "GIT_DIR"} {
		assert.NotContains(t, env, k+"=", "a probe does not inherit the daemon's %s", k)
	}
	assert.Contains(t, env, "KEEP_ME=1\n")
	assert.Contains(t, env, "PATH="+d.SearchPath().PATH()+"\n")
	assert.True(t, strings.HasPrefix(d.SearchPath().PATH(), dir+":"))
	assert.Contains(t, env, "HOME="+home+"\n")
	assert.True(t, strings.HasSuffix(strings.TrimSpace(env), home), "probes run in the home, not the daemon's cwd")
}

func TestCanceledCallerGetsWhatIsCachedWhileDetectionFinishes(t *testing.T) {
	dir := t.TempDir()
	fakeCLI(t, dir, "codex", "sleep 0.3; echo 'codex-cli 1.0.0'")
	d := newTestDetector(t, "", dir)
	c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	assert.Nil(t, d.Detect(c, false))
	assert.Len(t, d.Detect(ctx, false), 1, "the shared detection was not killed by the first caller leaving")
}

func TestOnlyTheProbeTagOfTheDaemonsEnvironmentOutlivesTheStripAndNoAdapterSettingReplacesIt(t *testing.T) {
	base := map[string]string{"PATH": "/bin", proc.ProbeEnv: "1.a /home/u/.card", proc.RunIDEnv: "run_1", "KEEP": "yes"}
	d := New(Options{Env: base, Adapters: map[string]AdapterSettings{
		"codex":  {Env: map[string]string{proc.ProbeEnv: "operator", "EXTRA": "1"}},
		"claude": {},
	}})
	defer d.Close()
	cases := []struct {
		name string
		base map[string]string
		want string
	}{
		{"the daemon's environment", base, "1.a /home/u/.card"},
		{"an adapter with card.toml env naming the tag", d.adapterEnv("codex"), "1.a /home/u/.card"},
		{"an adapter with no env of its own", d.adapterEnv("claude"), "1.a /home/u/.card"},
		{"an environment without a tag", map[string]string{"PATH": "/bin"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := proc.EnvMap(probeEnv(tc.base, "/usr/bin", "/home/u"))
			assert.Equal(t, tc.want, got[proc.ProbeEnv])
			assert.NotContains(t, got, proc.RunIDEnv, "the rest of the strip still holds")
			assert.Equal(t, "/usr/bin", got["PATH"])
		})
	}
	assert.Equal(t, "1", d.adapterEnv("codex")["EXTRA"], "the adapter's other settings stay")
}
