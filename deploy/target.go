package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// CurrentTarget describes this machine, this user and the running binary: the one place that
// reads the environment. cardHome is the daemon home the CLI resolved (flag, CARD_HOME or the
// default); r is used to ask whether a systemd user manager is reachable.
func CurrentTarget(ctx context.Context, cardHome string, r Runner) (Target, error) {
	exe, err := os.Executable()
	if err != nil {
		return Target{}, fmt.Errorf("find the card binary to install: %w", err)
	}
	bin, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return Target{}, fmt.Errorf("resolve the card binary %s: %w", exe, err)
	}
	if err := CheckInstallableBinary(bin); err != nil {
		return Target{}, err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return Target{}, fmt.Errorf("find your home directory: %w", err)
	}
	uid := os.Getuid()
	if uid == 0 && os.Getenv("SUDO_USER") != "" {
		return Target{}, errors.New("card service installs a per-user service: run it as yourself, without sudo")
	}
	t := Target{
		GOOS:     runtime.GOOS,
		Binary:   bin,
		Home:     home,
		CardHome: cardHome,
		UID:      uid,
		PATH:     filepath.SplitList(os.Getenv("PATH")),
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		t.ConfigHome = x
	}
	if t.GOOS == "linux" {
		t.Supervisor, t.FallbackReason = DetectSupervisor(ctx, r, exec.LookPath)
	}
	return t, nil
}

// CheckInstallableBinary refuses binaries that will not be there when the service starts: `go run`
// builds into a temporary go-build directory that is deleted when it exits, and a service pointing
// there fails at the next login with "No such file".
func CheckInstallableBinary(path string) error {
	if strings.Contains(path, string(filepath.Separator)+"go-build") {
		return fmt.Errorf("%s is a temporary `go run` build that will be deleted: build a real binary with `go install ./cmd/card` and run `card service install` from it", path)
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("the card binary path %q is not absolute", path)
	}
	return nil
}

// DetectSupervisor picks systemd when `systemctl --user` can reach a user manager, and the XDG
// autostart fallback otherwise, with the reason in words. Having systemctl installed is not enough:
// containers, WSL without systemd and SSH sessions without a user bus have the binary but no
// manager, and `enable --now` would fail there after the unit was written.
func DetectSupervisor(ctx context.Context, r Runner, lookPath func(string) (string, error)) (Supervisor, string) {
	if _, err := lookPath("systemctl"); err != nil {
		return Autostart, "systemctl is not installed"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.Run(ctx, Command{Name: "systemctl", Args: []string{"--user", "show-environment"}}); err != nil {
		msg := err.Error()
		var ce *CommandError
		if errors.As(err, &ce) {
			msg = strings.TrimSpace(ce.Output)
			if msg == "" {
				msg = ce.Err.Error()
			}
		}
		return Autostart, "`systemctl --user` cannot reach a user manager (" + msg + ")"
	}
	return Systemd, ""
}
