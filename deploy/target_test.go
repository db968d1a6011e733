package deploy

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDetectSupervisor(t *testing.T) {
	found := func(string) (string, error) { return "/usr/bin/systemctl", nil }
	missing := func(string) (string, error) { return "", exec.ErrNotFound }
	noBus := &recorder{fails: map[string]*CommandError{"systemctl --user show-environment": {
		ExitCode: 1, Output: "Failed to connect to bus: No medium found\n", Err: errors.New("exit status 1")}}}

	cases := []struct {
		name       string
		lookPath   func(string) (string, error)
		runner     *recorder
		want       Supervisor
		reasonHas  string
		mustNotRun bool
	}{
		{"a reachable user manager means systemd", found, &recorder{}, Systemd, "", false},
		{"no systemctl falls back to autostart without asking", missing, &recorder{}, Autostart, "systemctl is not installed", true},
		{"systemctl without a user bus falls back to autostart", found, noBus, Autostart, "Failed to connect to bus", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, reason := DetectSupervisor(context.Background(), c.runner, c.lookPath)
			assert.Equal(t, c.want, got)
			if c.reasonHas == "" {
				assert.Empty(t, reason)
			} else {
				assert.Contains(t, reason, c.reasonHas)
			}
			if c.mustNotRun {
				assert.Empty(t, c.runner.ran)
			}
		})
	}
}

func TestGoRunBinariesAreRefusedBecauseTheyAreDeletedOnExit(t *testing.T) {
	err := CheckInstallableBinary("/tmp/go-build1234567/b001/exe/card")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "go install ./cmd/card")
	assert.NoError(t, CheckInstallableBinary("/home/ada/go/bin/card"))
}

func TestCurrentTargetRefusesTheBinaryOfAGoBuildDirectory(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)
	_, err = CurrentTarget(context.Background(), "/tmp/card-home", &recorder{})
	if strings.Contains(exe, "/go-build") {
		// `go test` runs from a go-build directory, exactly what a `go run` install would pin.
		require.Error(t, err)
		assert.Contains(t, err.Error(), exe)
		return
	}
	require.NoError(t, err)
}
