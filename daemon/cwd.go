package daemon

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// AllowedEditDirsKey is the card.toml key that lets writing runs use a
// working directory card refuses by default.
const AllowedEditDirsKey = "allowed_edit_dirs"

// systemTrees are directories the operating system and installed software
// own, refused as a writing run's cwd together with everything under them:
// no project lives there, and a write there changes the machine for every
// program and user on it (a binary on PATH, a library, a boot file, a
// service's state). macOS's are here too; on Linux they do not exist, and
// a path that does not exist is never a cwd.
var systemTrees = []string{
	"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/snap", "/sys", "/usr",
	"/var/cache", "/var/db", "/var/lib", "/var/log", "/var/mail", "/var/spool",
	"/opt/homebrew",
	"/Applications", "/Library", "/System", "/cores",
	"/private/etc", "/private/var/db", "/private/var/log",
}

// containers hold many places a person works (every user's home, every
// mount, every temp dir, every /opt or /srv app), so each is refused as a
// writing run's cwd itself, where the agent would reach all of them at once,
// while one project below it is fine.
var containers = []string{
	"/", "/home", "/Users", "/mnt", "/media", "/Volumes", "/opt", "/srv", "/tmp", "/var", "/var/tmp",
	"/private", "/private/tmp", "/private/var",
}

// homeTrees are the parts of the user's home where credentials and what
// runs at login live: an agent that writes there can plant a key, a token
// or a login item. They are refused with everything under them.
var homeTrees = []string{".ssh", ".gnupg", ".aws", ".config", ".local", "Library"}

// cwdPolicy is what decides whether a writing run may use a directory: the
// user's home, card's own home and the operator's allowed_edit_dirs, all
// resolved (symlinks followed, cleaned).
type cwdPolicy struct {
	Home     string
	CardHome string
	Allowed  []string
}

// newCwdPolicy resolves the directories the policy compares against. An
// allowed_edit_dirs entry that does not resolve is an error at startup: a
// typo there would otherwise allow nothing and say nothing.
func newCwdPolicy(cfg Config, userHome, cardHome string) (cwdPolicy, error) {
	p := cwdPolicy{Home: filepath.Clean(userHome), CardHome: filepath.Clean(cardHome)}
	if userHome == "" {
		p.Home = ""
	} else if r, err := resolveDir(userHome); err == nil {
		p.Home = r
	}
	if r, err := resolveDir(cardHome); err == nil {
		p.CardHome = r
	}
	for _, dir := range cfg.AllowedEditDirs {
		r, err := resolveDir(dir)
		if err != nil {
			return cwdPolicy{}, fmt.Errorf("%s in %s: %q: %w", AllowedEditDirsKey, ConfigFileName, dir, err)
		}
		p.Allowed = append(p.Allowed, r)
	}
	return p, nil
}

// refusal says why a run that writes must not use dir (resolved) as its
// cwd, or "" when it may. The operator's allowed dirs win over every rule
// but one: card's own home, where an agent could rewrite card.toml or read
// the token, is never a cwd.
func (c cwdPolicy) refusal(dir string) string {
	if c.CardHome != "" && within(dir, c.CardHome) {
		return "card's own home (its token and card.toml), which no run may change"
	}
	for _, a := range c.Allowed {
		if within(dir, a) {
			return ""
		}
	}
	if dir == "/" {
		return "the root of the filesystem"
	}
	if c.Home != "" && dir == c.Home {
		return "your home directory itself, which holds every project and your settings"
	}
	if c.CardHome != "" && within(c.CardHome, dir) {
		return fmt.Sprintf("a directory that holds card's own home (%s)", c.CardHome)
	}
	if c.Home != "" {
		for _, h := range homeTrees {
			if t := filepath.Join(c.Home, h); within(dir, t) {
				return fmt.Sprintf("inside %s, where credentials and login items live", t)
			}
		}
	}
	for _, s := range systemTrees {
		if within(dir, s) {
			return fmt.Sprintf("inside %s, which the system owns", s)
		}
	}
	for _, s := range containers {
		if dir == s {
			return fmt.Sprintf("%s itself, which holds many projects; use one of them", s)
		}
	}
	return ""
}

// within reports whether dir is root or below it (both clean and absolute).
func within(dir, root string) bool {
	if root == "/" {
		return true
	}
	return dir == root || strings.HasPrefix(dir, root+"/")
}

// writesUnderCwd reports whether a run in mode can change files under its
// working directory: every mode but read_only.
func writesUnderCwd(m spawn.Mode) bool { return m != "" && m != spawn.ModeReadOnly }

// resolveDir follows every symlink of an absolute dir and cleans it, so a
// rule about "/" cannot be walked around with a link to it or with "..".
func resolveDir(dir string) (string, error) {
	r, err := filepath.EvalSymlinks(filepath.Clean(dir))
	if err != nil {
		return "", err
	}
	return filepath.Abs(r)
}

// cwdRefused is the -32602 for a writing run's cwd the policy refuses.
func cwdRefused(asked, resolved string, mode spawn.Mode, why string) error {
	shown := fmt.Sprintf("%q", asked)
	if resolved != filepath.Clean(asked) {
		shown += fmt.Sprintf(" (resolved: %s)", resolved)
	}
	return &rpc.Error{Code: rpc.CodeInvalidParams,
		Message: fmt.Sprintf("invalid params: cwd: %s is %s; permission_mode %s lets the agent change everything under its cwd. "+
			"Use the project's own directory, or have the operator list this one in %s in %s", shown, why, mode, AllowedEditDirsKey, ConfigFileName),
		Data: map[string]any{"field": "cwd", "resolved": resolved, "config_key": AllowedEditDirsKey}}
}
