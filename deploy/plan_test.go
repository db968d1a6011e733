package deploy

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/card-dev/card/internal/testskip"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testskip.Wrap(m))
}

// recorder is a Runner that records commands and fails the ones it is told to.
type recorder struct {
	ran   []string
	fails map[string]*CommandError
	out   map[string]string
}

func (r *recorder) Run(_ context.Context, c Command) ([]byte, error) {
	r.ran = append(r.ran, c.String())
	if e, ok := r.fails[c.String()]; ok {
		e.Command = c
		return []byte(e.Output), e
	}
	return []byte(r.out[c.String()]), nil
}

func goldenLinux() Target {
	return Target{GOOS: "linux", Binary: "/home/ada/.local/bin/card", Home: "/home/ada",
		CardHome: "/home/ada/.local/state/card", UID: 1000,
		PATH: []string{"/home/ada/.nvm/versions/node/v22.11.0/bin", "/usr/local/bin", "/usr/bin", "/bin", "node_modules/.bin"}}
}

func TestDryRunOutputIsPinned(t *testing.T) {
	autostart := goldenLinux()
	autostart.Supervisor = Autostart
	autostart.FallbackReason = "systemctl is not installed"
	cases := []struct {
		golden string
		target Target
		action Action
	}{
		{"install-linux-systemd.golden", goldenLinux(), Install},
		{"uninstall-linux-systemd.golden", goldenLinux(), Uninstall},
		{"install-linux-autostart.golden", autostart, Install},
		{"install-darwin.golden", darwinTarget(), Install},
		{"uninstall-darwin.golden", darwinTarget(), Uninstall},
	}
	for _, c := range cases {
		t.Run(c.golden, func(t *testing.T) {
			steps, err := Plan(c.target, c.action)
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, steps.DryRun(&buf))
			path := filepath.Join("testdata", c.golden)
			if *update {
				require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run `go test ./deploy -run TestDryRunOutputIsPinned -update` to create it")
			assert.Equal(t, string(want), buf.String())
		})
	}
}

func TestDryRunPrintsEveryFileInFullAndEveryCommand(t *testing.T) {
	steps, err := Plan(darwinTarget(), Install)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, steps.DryRun(&buf))
	plist, err := RenderPlist(darwinTarget())
	require.NoError(t, err)
	assert.Contains(t, buf.String(), string(plist))
	assert.Contains(t, buf.String(), "\nlaunchctl bootstrap gui/501 /Users/ada/Library/LaunchAgents/dev.card.daemon.plist\n")
	assert.Contains(t, buf.String(), "\nmkdir -p -m 0700 /Users/ada/Library/Logs/card\n")
}

func TestInstallWritesTheUnitThenReloadsAndEnablesIt(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	steps, err := Plan(target, Install)
	require.NoError(t, err)
	r := &recorder{}
	var progress bytes.Buffer
	require.NoError(t, steps.Apply(context.Background(), r, &progress))

	assert.Equal(t, []string{"systemctl --user daemon-reload", "systemctl --user enable --now card.service"}, r.ran)
	written, err := os.ReadFile(filepath.Join(target.Root, "/home/ada/.config/systemd/user/card.service"))
	require.NoError(t, err)
	want, err := RenderUnit(target)
	require.NoError(t, err)
	assert.Equal(t, want, written)
	info, err := os.Stat(filepath.Join(target.Root, "/home/ada/.config/systemd/user/card.service"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
	assert.Contains(t, progress.String(), "wrote /home/ada/.config/systemd/user/card.service")
	assert.Contains(t, progress.String(), "journalctl --user -u card.service")
	leftovers, err := filepath.Glob(filepath.Join(target.Root, "/home/ada/.config/systemd/user/.card.service.*"))
	require.NoError(t, err)
	assert.Empty(t, leftovers, "no temporary file may be left next to the unit")
}

func TestAFailedCommandStopsTheInstallAndNamesTheCommandAndItsOutput(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	steps, err := Plan(target, Install)
	require.NoError(t, err)
	r := &recorder{fails: map[string]*CommandError{
		"systemctl --user daemon-reload": {ExitCode: 1, Output: "Failed to connect to bus: No medium found\n", Err: errors.New("exit status 1")},
	}}
	err = steps.Apply(context.Background(), r, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "`systemctl --user daemon-reload` failed")
	assert.Contains(t, err.Error(), "Failed to connect to bus: No medium found")
	var ce *CommandError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 1, ce.ExitCode)
	assert.Equal(t, []string{"systemctl --user daemon-reload"}, r.ran, "enable must not run after a failed reload")
}

func TestReinstallOnMacOSReplacesALoadedAgentAndToleratesNoneOnFirstInstall(t *testing.T) {
	target := darwinTarget()
	target.Root = t.TempDir()
	steps, err := Plan(target, Install)
	require.NoError(t, err)
	r := &recorder{fails: map[string]*CommandError{
		"launchctl bootout gui/501/dev.card.daemon": {ExitCode: 113, Output: "Could not find service \"dev.card.daemon\" in domain for port", Err: errors.New("exit status 113")},
	}}
	require.NoError(t, steps.Apply(context.Background(), r, nil))
	assert.Equal(t, []string{"launchctl bootout gui/501/dev.card.daemon",
		"launchctl bootstrap gui/501 /Users/ada/Library/LaunchAgents/dev.card.daemon.plist"}, r.ran)
	info, err := os.Stat(filepath.Join(target.Root, target.LogDir()))
	require.NoError(t, err, "launchd needs the log directory to exist before it starts the job")
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	_, err = os.Stat(filepath.Join(target.Root, target.PlistPath()))
	require.NoError(t, err)
}

func TestBootstrapFailureOnMacOSIsReported(t *testing.T) {
	target := darwinTarget()
	target.Root = t.TempDir()
	steps, err := Plan(target, Install)
	require.NoError(t, err)
	r := &recorder{fails: map[string]*CommandError{
		"launchctl bootstrap gui/501 /Users/ada/Library/LaunchAgents/dev.card.daemon.plist": {ExitCode: 5, Output: "Bootstrap failed: 5: Input/output error", Err: errors.New("exit status 5")},
	}}
	err = steps.Apply(context.Background(), r, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "launchctl bootstrap gui/501")
	assert.Contains(t, err.Error(), "Input/output error")
}

func TestUninstallRemovesTheServiceFilesAndSucceedsWhenNothingWasInstalled(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	install, err := Plan(target, Install)
	require.NoError(t, err)
	require.NoError(t, install.Apply(context.Background(), &recorder{}, nil))

	uninstall, err := Plan(target, Uninstall)
	require.NoError(t, err)
	r := &recorder{}
	require.NoError(t, uninstall.Apply(context.Background(), r, nil))
	assert.Equal(t, []string{"systemctl --user disable --now card.service", "systemctl --user daemon-reload"}, r.ran)
	_, err = os.Stat(filepath.Join(target.Root, target.UnitPath()))
	assert.ErrorIs(t, err, os.ErrNotExist)

	// A second uninstall: systemctl says the unit does not exist, files are already gone.
	again := &recorder{fails: map[string]*CommandError{
		"systemctl --user disable --now card.service": {ExitCode: 1, Output: "Failed to disable unit: Unit file card.service does not exist.", Err: errors.New("exit status 1")},
	}}
	require.NoError(t, uninstall.Apply(context.Background(), again, nil))
}

func TestAutostartFallbackWritesTheDesktopEntryAndSaysWhy(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	target.Supervisor = Autostart
	target.FallbackReason = "`systemctl --user` cannot reach a user manager (Failed to connect to bus)"
	steps, err := Plan(target, Install)
	require.NoError(t, err)
	r := &recorder{}
	var progress bytes.Buffer
	require.NoError(t, steps.Apply(context.Background(), r, &progress))
	assert.Empty(t, r.ran, "the fallback runs no command")
	_, err = os.Stat(filepath.Join(target.Root, "/home/ada/.config/autostart/card.desktop"))
	require.NoError(t, err)
	assert.Contains(t, progress.String(), "Failed to connect to bus")
	assert.Contains(t, progress.String(), "card serve")
}

func TestXDGConfigHomeMovesTheUnitAndTheAutostartEntry(t *testing.T) {
	target := goldenLinux()
	target.ConfigHome = "/home/ada/etc"
	assert.Equal(t, "/home/ada/etc/systemd/user/card.service", target.UnitPath())
	assert.Equal(t, "/home/ada/etc/autostart/card.desktop", target.AutostartPath())
}

func TestCancelledContextStopsApplyBeforeTheNextStep(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	steps, err := Plan(target, Install)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &recorder{}
	require.ErrorIs(t, steps.Apply(ctx, r, nil), context.Canceled)
	assert.Empty(t, r.ran)
}

func TestUnknownActionIsRefusedWithTheChoices(t *testing.T) {
	_, err := ParseAction("restart")
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "install") && strings.Contains(err.Error(), "uninstall"))
	_, err = Plan(goldenLinux(), Action("restart"))
	require.Error(t, err)
}
