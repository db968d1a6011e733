package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/deploy"
)

// pinMachine replaces the machine `card service` sees with a fixed user on
// this platform, so the dry run can be checked exactly; the runner fails
// the test if anything is run.
func pinMachine(t *testing.T, userHome string, runner deploy.Runner) {
	t.Helper()
	prev := serviceMachine
	t.Cleanup(func() { serviceMachine = prev })
	serviceMachine = func(ctx context.Context, cardHome string) (deploy.Target, deploy.Runner, error) {
		return deploy.Target{
			GOOS:       runtime.GOOS,
			Binary:     "/opt/card/bin/card",
			Home:       userHome,
			CardHome:   cardHome,
			UID:        501,
			PATH:       []string{"/opt/agents/bin"},
			Supervisor: deploy.Systemd,
		}, runner, nil
	}
}

func noCommands(t *testing.T) deploy.Runner {
	return deploy.RunnerFunc(func(ctx context.Context, c deploy.Command) ([]byte, error) {
		t.Errorf("a dry run ran %s", c)
		return nil, nil
	})
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestServiceInstallDryRunPrintsTheFilledInDefinitionAndCommandsAndDoesNothing(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("card service supports linux and darwin only")
	}
	userHome := t.TempDir()
	cardHome := filepath.Join(t.TempDir(), "card home")
	pinMachine(t, userHome, noCommands(t))

	code, out, errOut := runCLI("service", "install", "--dry-run", "--home", cardHome)
	require.Equal(t, exitOK, code, errOut)

	var want []string
	switch runtime.GOOS {
	case "linux":
		unit := filepath.Join(userHome, ".config", "systemd", "user", "card.service")
		want = []string{
			"# card service install (dry run, systemd): nothing below has been done",
			"----- begin " + unit + " -----",
			"Type=notify",
			// The service is pinned to the home the CLI resolved, quoted
			// for systemd because it has a space.
			`ExecStart=/opt/card/bin/card serve --home "` + cardHome + `"`,
			"/opt/agents/bin",
			"systemctl --user daemon-reload",
			"systemctl --user enable --now card.service",
		}
		_, err := os.Stat(unit)
		assert.ErrorIs(t, err, os.ErrNotExist, "a dry run must not write the unit")
	case "darwin":
		plist := filepath.Join(userHome, "Library", "LaunchAgents", "dev.card.daemon.plist")
		want = []string{
			"# card service install (dry run, launchd): nothing below has been done",
			"----- begin " + plist + " -----",
			"<string>/opt/card/bin/card</string>",
			"<string>" + cardHome + "</string>",
			"launchctl bootstrap gui/501",
		}
		_, err := os.Stat(plist)
		assert.ErrorIs(t, err, os.ErrNotExist, "a dry run must not write the plist")
	}
	for _, w := range want {
		assert.Contains(t, out, w)
	}
	_, err := os.Stat(cardHome)
	assert.ErrorIs(t, err, os.ErrNotExist, "a dry run must not create the card home")
}

func TestServiceUninstallDryRunNamesTheStopCommand(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("card service supports linux and darwin only")
	}
	pinMachine(t, t.TempDir(), noCommands(t))
	code, out, errOut := runCLI("service", "uninstall", "--dry-run", "--home", t.TempDir())
	require.Equal(t, exitOK, code, errOut)
	if runtime.GOOS == "linux" {
		assert.Contains(t, out, "systemctl --user disable --now card.service")
	} else {
		assert.Contains(t, out, "launchctl bootout gui/501/dev.card.daemon")
	}
}

func TestServiceStatusShowsTheSupervisorsViewAndDaemonJSON(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the pinned supervisor output is systemd's")
	}
	cardHome := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(cardHome, "daemon.json"),
		[]byte(`{"url":"ws://127.0.0.1:4711/rpc","pid":4242,"version":"0.1.0","protocol_version":"1.0","started_at":"2026-11-29T22:00:00Z"}`), 0o600))
	var asked []string
	pinMachine(t, t.TempDir(), deploy.RunnerFunc(func(ctx context.Context, c deploy.Command) ([]byte, error) {
		asked = append(asked, c.String())
		return []byte("LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\n"), nil
	}))
	code, out, errOut := runCLI("service", "status", "--home", cardHome)
	require.Equal(t, exitOK, code, errOut)
	assert.Len(t, asked, 1)
	assert.Contains(t, out, "loaded, active (running)")
	assert.Contains(t, out, "pid:       4242")
	assert.Contains(t, out, "ws://127.0.0.1:4711/rpc pid 4242")
}

func TestServiceInstallFromAGoTestBuildIsRefusedWithWhatToDo(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("card service supports linux and darwin only")
	}
	// The real machine: this test binary lives in a go-build directory,
	// which is exactly what `go run ./cmd/card service install` would pin.
	exe, err := os.Executable()
	require.NoError(t, err)
	if !strings.Contains(exe, "go-build") {
		t.Skipf("test binary %s is not in a go-build directory", exe)
	}
	code, _, errOut := runCLI("service", "install", "--dry-run", "--home", t.TempDir())
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "go install ./cmd/card")
}

func TestServiceRefusesUnknownVerbsAndArguments(t *testing.T) {
	pinMachine(t, t.TempDir(), noCommands(t))
	for _, args := range [][]string{
		{"service"},
		{"service", "restart"},
		{"service", "install", "extra"},
		{"service", "status", "--dry-run"},
	} {
		code, _, errOut := runCLI(args...)
		assert.Equal(t, exitUsage, code, "%v", args)
		assert.NotEmpty(t, errOut, "%v says nothing", args)
	}
}
