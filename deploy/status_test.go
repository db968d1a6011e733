package deploy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const systemctlShow = "systemctl --user show --property=LoadState,ActiveState,SubState,MainPID card.service"

func writeDaemonJSON(t *testing.T, target Target, body string) {
	t.Helper()
	path := filepath.Join(target.Root, target.CardHome, "daemon.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
}

func TestStatusOfARunningSystemdServiceShowsItsPidAndDaemonJSON(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(target.Root, filepath.Dir(target.UnitPath())), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(target.Root, target.UnitPath()), []byte("[Unit]\n"), 0o644))
	writeDaemonJSON(t, target, `{"url":"ws://127.0.0.1:41234/rpc","pid":4242,"version":"0.1.0","protocol_version":"1","started_at":"2026-05-01T10:00:00Z"}`)
	r := &recorder{out: map[string]string{systemctlShow: "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\n"}}

	rep, err := Status(context.Background(), target, r)
	require.NoError(t, err)
	assert.True(t, rep.Installed)
	assert.True(t, rep.Loaded)
	assert.Equal(t, "active (running)", rep.State)
	assert.Equal(t, 4242, rep.PID)
	require.NotNil(t, rep.Daemon)
	assert.Equal(t, "ws://127.0.0.1:41234/rpc", rep.Daemon.URL)
	assert.Empty(t, rep.DaemonProblem)

	var buf bytes.Buffer
	require.NoError(t, rep.WriteText(&buf))
	assert.Contains(t, buf.String(), "pid:       4242")
	assert.Contains(t, buf.String(), "ws://127.0.0.1:41234/rpc pid 4242, version 0.1.0, protocol 1, started 2026-05-01T10:00:00Z")
}

func TestStatusOfAMissingUnitIsAReportNotAnError(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	r := &recorder{out: map[string]string{systemctlShow: "LoadState=not-found\nActiveState=inactive\nSubState=dead\nMainPID=0\n"}}
	rep, err := Status(context.Background(), target, r)
	require.NoError(t, err)
	assert.False(t, rep.Installed)
	assert.False(t, rep.Loaded)
	assert.Equal(t, "not-found", rep.State)
	assert.Zero(t, rep.PID)
	assert.Nil(t, rep.Daemon)
	assert.Contains(t, rep.DaemonProblem, "no daemon is running for home /home/ada/.local/state/card")
}

func TestStatusNamesTheCommandWhenSystemdCannotBeAsked(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	r := &recorder{fails: map[string]*CommandError{systemctlShow: {ExitCode: 1, Output: "Failed to connect to bus", Err: errors.New("exit status 1")}}}
	_, err := Status(context.Background(), target, r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "systemctl --user show")
	assert.Contains(t, err.Error(), "Failed to connect to bus")
}

func TestStatusFlagsADaemonJSONThatBelongsToAnotherProcess(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	writeDaemonJSON(t, target, `{"url":"ws://127.0.0.1:1/rpc","pid":99,"version":"0.1.0","protocol_version":"1","started_at":"2026-05-01T10:00:00Z"}`)
	r := &recorder{out: map[string]string{systemctlShow: "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4242\n"}}
	rep, err := Status(context.Background(), target, r)
	require.NoError(t, err)
	assert.Contains(t, rep.DaemonProblem, "daemon.json names pid 99 but the service runs pid 4242")
}

func TestStatusReportsAnUnreadableDaemonJSONWithoutFailing(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	writeDaemonJSON(t, target, `{"url":`)
	r := &recorder{out: map[string]string{systemctlShow: "LoadState=loaded\nActiveState=activating\nSubState=start\nMainPID=7\n"}}
	rep, err := Status(context.Background(), target, r)
	require.NoError(t, err)
	assert.Nil(t, rep.Daemon)
	assert.Contains(t, rep.DaemonProblem, "not valid JSON")
}

// A trimmed capture of `launchctl print gui/501/dev.card.daemon` with nested blocks whose own
// "state" and "pid" lines must not be mistaken for the job's.
const launchctlPrintRunning = `gui/501/dev.card.daemon = {
	active count = 1
	path = /Users/ada/Library/LaunchAgents/dev.card.daemon.plist
	type = LaunchAgent
	state = running

	program = /Users/ada/go/bin/card
	arguments = {
		/Users/ada/go/bin/card
		serve
	}

	environment = {
		PATH => /opt/homebrew/bin:/usr/bin
		state = not-the-job
	}

	pid = 812
	immediate reason = speculative
	last exit code = (never exited)
}
`

func TestStatusOfALoadedLaunchAgentReadsItsStateAndPid(t *testing.T) {
	target := darwinTarget()
	target.Root = t.TempDir()
	writeDaemonJSON(t, target, `{"url":"ws://127.0.0.1:5/rpc","pid":812,"version":"0.1.0","protocol_version":"1","started_at":"2026-05-01T10:00:00Z"}`)
	r := &recorder{out: map[string]string{"launchctl print gui/501/dev.card.daemon": launchctlPrintRunning}}
	rep, err := Status(context.Background(), target, r)
	require.NoError(t, err)
	assert.True(t, rep.Loaded)
	assert.Equal(t, "running", rep.State)
	assert.Equal(t, 812, rep.PID)
	assert.Empty(t, rep.DaemonProblem)
	assert.Equal(t, "/Users/ada/Library/Application Support/card/daemon.json", rep.DaemonFile)
}

func TestStatusOfAnUnloadedLaunchAgentIsNotLoaded(t *testing.T) {
	target := darwinTarget()
	target.Root = t.TempDir()
	r := &recorder{fails: map[string]*CommandError{"launchctl print gui/501/dev.card.daemon": {
		ExitCode: 113, Output: "Bad request.\nCould not find service \"dev.card.daemon\" in domain for port", Err: errors.New("exit status 113")}}}
	rep, err := Status(context.Background(), target, r)
	require.NoError(t, err)
	assert.False(t, rep.Loaded)
	assert.Equal(t, "not loaded", rep.State)
}

func TestStatusOfAnAutostartInstallAsksNoSupervisor(t *testing.T) {
	target := goldenLinux()
	target.Root = t.TempDir()
	target.Supervisor = Autostart
	r := &recorder{}
	rep, err := Status(context.Background(), target, r)
	require.NoError(t, err)
	assert.Empty(t, r.ran)
	assert.Equal(t, "not installed", rep.State)
	assert.Equal(t, "/home/ada/.config/autostart/card.desktop", rep.ServiceFile)
}
