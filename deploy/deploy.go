// Package deploy installs card as a per-user login service: a systemd user unit on Linux, an XDG
// autostart entry on Linux desktops without a systemd user manager, and a LaunchAgent on macOS.
//
// The work is split so that what would be done can be shown before it is done: Plan turns a Target
// (everything about the machine, gathered once by CurrentTarget) into Steps, which either print
// themselves (DryRun) or run (Apply) through an injectable Runner and filesystem root. Status reads
// the supervisor's view and daemon.json the same way. Only CurrentTarget and ExecRunner touch the
// real machine, so tests pin the exact files and commands for a fixed Target.
package deploy

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// Label is the launchd job label and the reverse-DNS name of the service.
const Label = "dev.card.daemon"

// UnitName is the systemd user unit's name.
const UnitName = "card.service"

// Supervisor is what starts card at login.
type Supervisor string

const (
	// Systemd is a systemd user unit, managed with `systemctl --user`.
	Systemd Supervisor = "systemd"
	// Autostart is an XDG autostart entry, started by the desktop session at login; the Linux
	// fallback when there is no systemctl or no user manager to talk to.
	Autostart Supervisor = "autostart"
	// Launchd is a LaunchAgent in the gui/UID domain.
	Launchd Supervisor = "launchd"
)

// Action is what `card service` was asked to do.
type Action string

const (
	// Install writes the service definition and starts the service.
	Install Action = "install"
	// Uninstall stops the service and removes its definition.
	Uninstall Action = "uninstall"
)

// ParseAction accepts the subcommand names `card service` takes for a plan.
func ParseAction(s string) (Action, error) {
	switch Action(s) {
	case Install, Uninstall:
		return Action(s), nil
	}
	return "", fmt.Errorf("unknown service action %q: use install or uninstall (or status)", s)
}

// Target is everything about the machine and user that the service definitions depend on. It is
// plain data so a test can pin one; CurrentTarget fills it in for the running binary.
type Target struct {
	// GOOS is "linux" or "darwin".
	GOOS string
	// Binary is the absolute path of the card binary the service runs.
	Binary string
	// Home is the user's home directory.
	Home string
	// CardHome is the daemon's home (where token and daemon.json live). When set, the service is
	// started with --home CardHome, so the supervisor's environment cannot point it elsewhere;
	// Status reads daemon.json from it.
	CardHome string
	// Addr, when set, is passed as --addr.
	Addr string
	// UID is the user's numeric id, which names the launchd gui domain.
	UID int
	// ConfigHome is $XDG_CONFIG_HOME; empty means Home/.config.
	ConfigHome string
	// PATH is the installing shell's PATH, in order. Supervisors start services with a bare PATH
	// that misses where agent CLIs are installed; these directories come first in the service's.
	PATH []string
	// Supervisor picks the Linux mechanism (Systemd or Autostart); empty means Systemd on Linux.
	// Darwin always uses Launchd.
	Supervisor Supervisor
	// FallbackReason says why Supervisor is Autostart, shown to the user.
	FallbackReason string
	// Root is prefixed to every path that Apply writes or removes and Status reads; empty means
	// the real filesystem. Printed paths never include it.
	Root string
}

// supervisor resolves the mechanism for the target's OS.
func (t Target) supervisor() Supervisor {
	if t.GOOS == "darwin" {
		return Launchd
	}
	if t.Supervisor == "" {
		return Systemd
	}
	return t.Supervisor
}

func (t Target) configHome() string {
	if t.ConfigHome != "" {
		return t.ConfigHome
	}
	return filepath.Join(t.Home, ".config")
}

// UnitPath is where the systemd user unit is written.
func (t Target) UnitPath() string {
	return filepath.Join(t.configHome(), "systemd", "user", UnitName)
}

// AutostartPath is where the XDG autostart entry is written.
func (t Target) AutostartPath() string {
	return filepath.Join(t.configHome(), "autostart", "card.desktop")
}

// PlistPath is where the LaunchAgent is written.
func (t Target) PlistPath() string {
	return filepath.Join(t.Home, "Library", "LaunchAgents", Label+".plist")
}

// LogDir is where launchd writes the daemon's output on macOS.
func (t Target) LogDir() string {
	return filepath.Join(t.Home, "Library", "Logs", "card")
}

// ServiceFile is the file that defines the service for the target's supervisor.
func (t Target) ServiceFile() string {
	switch t.supervisor() {
	case Launchd:
		return t.PlistPath()
	case Autostart:
		return t.AutostartPath()
	}
	return t.UnitPath()
}

// launchdDomain is the per-login GUI domain LaunchAgents live in.
func (t Target) launchdDomain() string {
	return "gui/" + strconv.Itoa(t.UID)
}

// launchdService names the job inside that domain, for print and bootout.
func (t Target) launchdService() string {
	return t.launchdDomain() + "/" + Label
}

// ServeArgs are the arguments after the binary in every service definition.
func (t Target) ServeArgs() []string {
	args := []string{"serve"}
	if t.CardHome != "" {
		args = append(args, "--home", t.CardHome)
	}
	if t.Addr != "" {
		args = append(args, "--addr", t.Addr)
	}
	return args
}

// ServicePATH is the PATH the service runs with: the installing shell's absolute directories
// first, in their order, so the service finds the same agent CLI the person does, then the places
// agents are usually installed, for a PATH that came from a minimal environment. Relative entries
// are dropped: they would resolve against the service's working directory, not the shell's.
func (t Target) ServicePATH() []string {
	var known []string
	h := func(p string) string { return filepath.Join(t.Home, p) }
	if t.GOOS == "darwin" {
		known = []string{"/opt/homebrew/bin", "/usr/local/bin", h(".local/bin"), h(".npm-global/bin"),
			h(".volta/bin"), h(".bun/bin"), "/usr/bin", "/bin", "/usr/sbin", "/sbin"}
	} else {
		known = []string{h(".local/bin"), h(".npm-global/bin"), h(".volta/bin"), h(".bun/bin"),
			"/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin"}
	}
	seen := map[string]bool{}
	var out []string
	for _, dir := range append(append([]string{}, t.PATH...), known...) {
		if dir == "" || !filepath.IsAbs(dir) || strings.ContainsRune(dir, filepath.ListSeparator) || hasControl(dir) {
			continue
		}
		dir = filepath.Clean(dir)
		if !seen[dir] {
			seen[dir] = true
			out = append(out, dir)
		}
	}
	return out
}

// validate refuses targets that would produce a service that cannot start, before any file is
// written: a relative binary would resolve against the supervisor's cwd, and a newline in a path
// would end the directive it sits in.
func (t Target) validate() error {
	switch t.GOOS {
	case "linux", "darwin":
	default:
		return fmt.Errorf("card service supports linux (systemd or XDG autostart) and darwin (launchd), not %q: run `card serve` from your own login scripts", t.GOOS)
	}
	if t.GOOS == "linux" {
		switch t.supervisor() {
		case Systemd, Autostart:
		default:
			return fmt.Errorf("supervisor %q does not exist on linux: use systemd or autostart", t.Supervisor)
		}
	}
	paths := []struct{ name, value string }{{"binary", t.Binary}, {"home", t.Home}}
	if t.CardHome != "" {
		paths = append(paths, struct{ name, value string }{"card home", t.CardHome})
	}
	if t.ConfigHome != "" {
		paths = append(paths, struct{ name, value string }{"XDG_CONFIG_HOME", t.ConfigHome})
	}
	for _, p := range paths {
		if !filepath.IsAbs(p.value) {
			return fmt.Errorf("the %s path %q must be absolute", p.name, p.value)
		}
		if hasControl(p.value) {
			return fmt.Errorf("the %s path %q contains a control character, which no service definition can carry: move it", p.name, p.value)
		}
	}
	if t.supervisor() == Systemd && strings.ContainsAny(t.Binary, `"'\\`) {
		return fmt.Errorf("systemd refuses to run an executable whose path contains a quote or a backslash (%q): move the card binary to a plain path such as ~/.local/bin/card and install from there", t.Binary)
	}
	if hasControl(t.Addr) {
		return fmt.Errorf("the listen address %q contains a control character", t.Addr)
	}
	if t.GOOS == "darwin" && t.UID <= 0 {
		return fmt.Errorf("a LaunchAgent needs the uid of a logged-in user, got %d: run `card service` as yourself, not as root", t.UID)
	}
	return nil
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
}
