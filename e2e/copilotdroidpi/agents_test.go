package copilotdroidpi

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/rpc/rpcclient"
	"github.com/card-dev/card/spawn"
)

// The daemon runs as a child and the stand-ins are closed by t.Cleanup, so
// nothing of ours may outlive the tests.
func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// Copilot, Droid and Pi, with the versions e2e/agents/package.json pins
// (Droid's working binary is the 0.225.2 platform package).
var newCLIs = []struct{ id, bin, version string }{
	{agent.Copilot, "copilot", "1.0.102"},
	{agent.Droid, "droid", "0.225.2"},
	{agent.Pi, "pi", "0.73.1"},
}

// binDir finds the real CLIs (skip/require rules of standin.CLI) and the
// directory of node, which the npm launchers need on PATH.
func binDir(t *testing.T) (dir, pathValue string) {
	t.Helper()
	for _, c := range newCLIs {
		dir = filepath.Dir(standin.CLI(t, c.bin))
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node must be on PATH to run the npm-installed CLIs")
	return dir, strings.Join([]string{dir, filepath.Dir(node), "/usr/local/bin", "/usr/bin", "/bin"}, ":")
}

// printedVersion runs `<bin> --version` the way a person would and keeps
// both streams: Pi prints its version on stderr.
func printedVersion(t *testing.T, bin, pathValue string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"HOME=" + cmd.Dir, "PATH=" + pathValue}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s --version: %s", bin, out)
	return string(out)
}

func newDetector(t *testing.T, home, pathValue string, extraEnv ...string) *detect.Detector {
	t.Helper()
	d := detect.New(detect.Options{
		Search: detect.NewSearchPath(pathValue), Home: home,
		Env: proc.EnvMap(append([]string{"HOME=" + home, "PATH=" + pathValue}, extraEnv...)),
		// t.TempDir lives under /tmp; the scratch-dir rule is detect's own
		// business and tested there.
		ScratchDirs:  []string{},
		ProbeTimeout: 90 * time.Second, HealthTimeout: 30 * time.Second,
	})
	t.Cleanup(d.Close)
	return d
}

func TestTheRealCopilotDroidAndPiAreDetectedWithTheirTrueVersionsAndAreNotReadyInAnEmptyHome(t *testing.T) {
	_, pathValue := binDir(t)
	home := t.TempDir()
	d := newDetector(t, home, pathValue)
	specs := d.Detect(context.Background(), false)
	for _, c := range newCLIs {
		var spec *api.ExternalAgentSpec
		for i := range specs {
			if specs[i].ID == c.id {
				spec = &specs[i]
			}
		}
		require.NotNil(t, spec, "%s not detected in %+v", c.id, specs)
		assert.True(t, spec.Execution.IsRunnable(), "%s: %+v", c.id, spec.Execution)
		printed := printedVersion(t, spec.BinaryPath, pathValue)
		assert.Equal(t, detect.ParseVersion(printed), spec.Version, "%s printed %q", c.id, printed)
		assert.Equal(t, c.version, spec.Version, c.id)

		h, err := d.Health(context.Background(), c.id, true)
		require.NoError(t, err)
		assert.NotEqual(t, api.StatusReady, h.Status, "%s in an empty HOME: %s", c.id, h.Reason)
		assert.Equal(t, api.StatusNotConfigured, h.Status, "%s: %s", c.id, h.Reason)
		assert.Contains(t, h.Reason, "decided from")
		t.Logf("%s %s at %s; health %s: %s", c.id, spec.Version, spec.BinaryPath, h.Status, h.Reason)
	}
}

// A copy of the @factory/cli launcher alone (its platform package not
// reachable) is what a machine gets when npm skipped the optional
// dependency: detection must say it cannot run, with the launcher's words.
func TestTheRealDroidLauncherWithoutItsPlatformBinaryIsDetectedUnusableWithItsCause(t *testing.T) {
	dir, pathValue := binDir(t)
	pkg, err := filepath.EvalSymlinks(filepath.Join(dir, "droid"))
	require.NoError(t, err)
	pkgDir := filepath.Dir(filepath.Dir(pkg)) // .../@factory/cli or the platform package
	if filepath.Base(pkgDir) != "cli" {
		pkgDir = filepath.Join(filepath.Dir(pkgDir), "cli")
	}
	root := t.TempDir()
	copyRoot := filepath.Join(root, "node_modules", "@factory", "cli")
	require.NoError(t, os.CopyFS(copyRoot, os.DirFS(pkgDir)))
	lonely := filepath.Join(root, "bin")
	require.NoError(t, os.MkdirAll(lonely, 0o755))
	require.NoError(t, os.Symlink(filepath.Join(copyRoot, "bin", "droid"), filepath.Join(lonely, "droid")))

	// Only the lonely launcher is on this search path (plus node).
	search := lonely + ":" + strings.Join(strings.Split(pathValue, ":")[1:], ":")
	d := newDetector(t, t.TempDir(), search)
	var spec *api.ExternalAgentSpec
	for _, s := range d.Detect(context.Background(), false) {
		if s.ID == agent.Droid {
			spec = &s
		}
	}
	require.NotNil(t, spec, "the broken install must still be reported")
	reason, bad := spec.UnusableReason()
	require.True(t, bad, "a launcher without its binary is not runnable: %+v", spec)
	assert.Contains(t, reason, "Could not find the droid binary for linux-x64")
	assert.Contains(t, reason, filepath.Join(lonely, "droid"))
	h, err := d.Health(context.Background(), agent.Droid, false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusNotExecutable, h.Status)
	t.Logf("reason: %s", reason)
}

// pinsOnPath pins every agent CLI found on pathValue. Detection skips
// scratch directories such as /tmp on the search path, and CI may clone the
// repository under one; a pin is exempt from that rule.
func pinsOnPath(pathValue string) map[string]string {
	pins := map[string]string{}
	for _, a := range agent.All() {
		for _, dir := range filepath.SplitList(pathValue) {
			p := filepath.Join(dir, a.Binary)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				pins[a.ID] = p
				break
			}
		}
	}
	return pins
}

// startDaemon runs `card serve` with a clean environment: HOME is userHome
// (where the agents' own config lives), PATH holds the CLIs and node, and
// nothing of the operator's (no real API key reaches a stand-in run).
func startDaemon(t *testing.T, userHome, pathValue string, cfg map[string]any) *client.Client {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	return daemontest.Serve(t, daemontest.Build(t), daemontest.Options{
		Config:  buf.String(),
		Agents:  pinsOnPath(pathValue),
		Environ: []string{"HOME=" + userHome, "PATH=" + pathValue, "LANG=C.UTF-8"},
	}).Client
}

// One real daemon, one loopback Anthropic stand-in, and the three CLIs
// pointed at it the way an operator would: Copilot through BYOK env in
// card.toml, Pi and Droid through a custom provider/model in their own
// config under HOME plus a model selection in card.toml args.
func TestInvokeThroughTheRealDaemonReachesALoopbackStandInForCopilotDroidAndPi(t *testing.T) {
	_, pathValue := binDir(t)
	userHome := t.TempDir()
	project := filepath.Join(userHome, "project")
	require.NoError(t, os.MkdirAll(project, 0o755))
	const answer = "PONG from the anthropic stand-in via card"
	srv := standin.NewAnthropic(t, standin.Script{Answer: answer})

	piEnv, piArgs, err := srv.PiSetup(userHome, pathValue)
	require.NoError(t, err)
	droidEnv, droidArgs, err := srv.DroidSetup(userHome, pathValue)
	require.NoError(t, err)
	cfg := map[string]any{
		"login_shell_path":   false,
		"probe_timeout_secs": 90,
		"adapters": map[string]any{
			"copilot": map[string]any{"env": standin.AdapterEnv(srv.CopilotEnv(userHome, pathValue))},
			"pi":      map[string]any{"args": piArgs, "env": standin.AdapterEnv(piEnv)},
			"droid":   map[string]any{"args": droidArgs, "env": standin.AdapterEnv(droidEnv)},
		},
	}
	c := startDaemon(t, userHome, pathValue, cfg)

	// agents.detect lists all six adapters, each disclosing its boundary.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	specs, err := c.Detect(ctx, api.DetectParams{IncludeHealth: true})
	require.NoError(t, err)
	got := map[string]api.ExternalAgentSpec{}
	for _, s := range specs {
		got[s.ID] = s
	}
	wantRO := map[string]api.ReadOnlyEnforcement{
		agent.ClaudeCode: api.EnforcedByAllowlist, agent.Codex: api.EnforcedByOSSandbox, agent.Gemini: api.EnforcedByAgentDefault,
		agent.Copilot: api.EnforcedByAllowlist, agent.Droid: api.EnforcedByAgentDefault, agent.Pi: api.NotEnforced,
	}
	for id, ro := range wantRO {
		s, ok := got[id]
		require.True(t, ok, "agents.detect lacks %s: %+v", id, specs)
		assert.Equal(t, ro, s.ReadOnlyEnforcement, id)
		assert.True(t, s.Execution.IsRunnable(), "%s: %+v", id, s.Execution)
	}
	assert.Len(t, specs, len(agent.IDs()))

	// Pi's read_only is not enforced: refused until the caller says it knows.
	_, err = c.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.Pi, Cwd: project}, Task: "say pong"})
	var re *rpcclient.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, daemon.CodeUnenforcedReadOnly, re.Code)
	assert.Contains(t, re.Message, "acknowledge_unenforced_read_only")

	for _, id := range []string{agent.Copilot, agent.Droid, agent.Pi} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			start := time.Now()
			res, err := c.Invoke(ctx, api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: id, Cwd: project, TimeoutSecs: 240, AcknowledgeUnenforcedReadOnly: id == agent.Pi},
				Task:          "say pong",
			})
			require.NoError(t, err)
			t.Logf("%s: status %s in %v, answer %q, error %+v", id, res.Status, time.Since(start).Round(time.Millisecond), res.Answer, res.Error)
			require.False(t, res.IsError, "%+v", res.Error)
			assert.Equal(t, "succeeded", string(res.Status))
			assert.Equal(t, answer, res.Answer)
			if id == agent.Pi {
				assert.Empty(t, res.SessionID, "a Pi run without a session keeps none, so it names none")
			} else {
				assert.NotEmpty(t, res.SessionID)
			}
			assert.Equal(t, id, res.Adapter)
		})
	}
	t.Cleanup(func() {
		// Registered after the subtests' parents: runs once they are done.
		assert.GreaterOrEqual(t, len(srv.ModelCalls()), 3, "each CLI called the stand-in")
	})
}

// Pi exits 0 when the API refuses it. Build + Run + the parser against the
// real Pi and a stand-in answering 401 must still end as an auth failure.
func TestTheRealPiAgainstA401ExitsZeroAndIsStillAnAuthFailure(t *testing.T) {
	dir, pathValue := binDir(t)
	home := t.TempDir()
	work := filepath.Join(home, "project")
	require.NoError(t, os.MkdirAll(work, 0o755))
	srv := standin.NewAnthropic(t, standin.Script{Status: 401})
	env, args, err := srv.PiSetup(home, pathValue)
	require.NoError(t, err)
	plan, err := spawn.Build(filepath.Join(dir, "pi"), spawn.Request{Adapter: "pi", Cwd: work, Extras: spawn.Extras{Args: args}})
	require.NoError(t, err)
	a, _ := spawn.Lookup("pi")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var evs []spawn.Event
	res, err := spawn.Run(ctx, spawn.RunSpec{Plan: plan, Prompt: "say pong", BaseEnv: append(env, "CAR_INVOKED_BY=card"),
		Parser: a.NewParser(), OnEvent: func(ev spawn.Event) { evs = append(evs, ev) }})
	var e *spawn.Error
	require.ErrorAs(t, err, &e, "result %+v", res)
	assert.Equal(t, api.KindAuth, e.Kind)
	assert.Equal(t, 0, e.ExitCode, "Pi's own exit status on an API error")
	require.NotNil(t, res.Error)
	assert.Contains(t, res.Error.Message, "401")
	assert.NotEmpty(t, srv.ModelCalls())
}
