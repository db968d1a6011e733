package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode"

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

// homeTrees are the parts of the user's home, other than its dot
// directories, where what runs at login lives (macOS's LaunchAgents, its
// application support): refused with everything under them.
var homeTrees = []string{"Library"}

// The rules a cwd is refused by, named in the error's data.rule so a
// client can tell them apart without reading the message.
const (
	ruleCardHome      = "card_home"
	ruleHoldsCardHome = "holds_card_home"
	ruleRoot          = "root"
	ruleHome          = "home"
	ruleHomeDotDir    = "home_dot_dir"
	ruleHomeTree      = "home_tree"
	ruleAgentPath     = "agent_path"
	ruleAgentInstall  = "agent_install"
	ruleOtherHome     = "other_user_home"
	ruleSystem        = "system"
	ruleContainer     = "container"
)

// CwdPolicy is what decides whether a writing run may use a directory. Its
// inputs are explicit and already resolved (symlinks followed, cleaned):
// the user's home, card's own home, the operator's allowed_edit_dirs, the
// homes of the machine's other users (when the daemon runs as root, so
// could write them) and the agents' search path. refusal reads nothing:
// newCwdPolicy and withPath resolve what it compares against, and judge
// asks a pathModel for the directory's real name and its volume's case
// rule.
type CwdPolicy struct {
	Home     string
	CardHome string
	Allowed  []string
	// OtherHomes are the other users' homes: an agent working there as
	// root plants a key or a login script for that user.
	OtherHomes []string
	// Path is every directory on the agent's PATH: a program written
	// there runs the next time any agent, or the user, types its name.
	Path []string
	// Installs are where the agents' own programs are, each with the
	// adapter it runs: the directory of the binary card runs for it, that
	// binary's through its links, and the node_modules its package is
	// in. A file written there runs as the agent the next time card
	// starts it, PATH or not (a bin = pin, or the package a link on PATH
	// points into).
	Installs []installDir
	// Own is the one run's own worktree (resolved), which the run may use
	// though it lies in card's home: card made it, for this run, and it
	// holds nothing but a checkout of the user's repository. Set per run
	// by the planner (withOwn), never from the configuration.
	Own string
}

// installDir is a directory an agent is installed in.
type installDir struct {
	Dir, Adapter string
}

// NewCwdPolicy resolves the directories the policy compares against. An
// allowed_edit_dirs entry that does not resolve is an error at startup: a
// typo there would otherwise allow nothing and say nothing. otherHomes are
// the other users' homes as the passwd database lists them.
func NewCwdPolicy(allowedEditDirs []string, userHome, cardHome string, otherHomes []string) (CwdPolicy, error) {
	p := CwdPolicy{Home: filepath.Clean(userHome), CardHome: filepath.Clean(cardHome)}
	if userHome == "" {
		p.Home = ""
	} else if r, err := resolveDir(userHome); err == nil {
		p.Home = r
	}
	if r, err := resolveDir(cardHome); err == nil {
		p.CardHome = r
	}
	for _, dir := range allowedEditDirs {
		r, err := resolveDir(dir)
		if err != nil {
			return CwdPolicy{}, fmt.Errorf("%s in %s: %q: %w", AllowedEditDirsKey, configFile, dir, err)
		}
		p.Allowed = append(p.Allowed, r)
	}
	for _, h := range otherHomes {
		if p.broad(resolveLoose(h)) {
			continue
		}
		p.OtherHomes = append(p.OtherHomes, resolveLoose(h))
	}
	return p, nil
}

// withPath is the policy with the agents' search path (each entry
// resolved), taken at each check: the path grows when the login shell
// answers and when a CLI is installed.
func (c CwdPolicy) withPath(dirs []string) CwdPolicy {
	c.Path = nil
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			continue // never searched: the runner drops relative entries
		}
		if r := resolveLoose(d); !c.broad(r) {
			c.Path = append(c.Path, r)
		}
	}
	return c
}

// withOwn is the policy for a run whose own worktree is top ("" for a run
// that has none).
func (c CwdPolicy) withOwn(top string) CwdPolicy {
	c.Own = ""
	if top != "" && filepath.IsAbs(top) {
		c.Own = resolveLoose(top)
	}
	return c
}

// withInstalls is the policy with the agents' install directories: bins
// are the binaries card runs for each adapter (detection's, and a card.toml
// bin = pin), by adapter id.
func (c CwdPolicy) withInstalls(bins map[string][]string) CwdPolicy {
	c.Installs = nil
	seen := map[string]bool{}
	add := func(dir, adapter string) {
		if dir == "" || !filepath.IsAbs(dir) || c.broad(dir) || seen[dir] {
			return
		}
		seen[dir] = true
		c.Installs = append(c.Installs, installDir{Dir: dir, Adapter: adapter})
	}
	ids := make([]string, 0, len(bins))
	for id := range bins {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for _, bin := range bins[id] {
			for _, d := range installDirsOf(bin) {
				add(d, id)
			}
		}
	}
	return c
}

// installDirsOf are the directories that hold what runs for the binary at
// bin: its directory as named (links in the path followed), the directory
// of the file it resolves to, and the node_modules that file's package is
// in, which holds the packages it loads (Codex's and Copilot's platform
// binaries are packages beside theirs).
func installDirsOf(bin string) []string {
	if bin == "" || !filepath.IsAbs(bin) {
		return nil
	}
	named := resolveLoose(filepath.Dir(bin))
	out := []string{named}
	file, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return out
	}
	if file, err = filepath.Abs(file); err != nil {
		return out
	}
	out = append(out, filepath.Dir(file))
	for d := filepath.Dir(file); d != filepath.Dir(d); d = filepath.Dir(d) {
		if filepath.Base(d) == "node_modules" {
			out = append(out, d)
			break
		}
	}
	return out
}

// broad reports whether dir is too wide to refuse with everything under
// it: the root, the user's own home or a directory of many projects (a
// PATH entry of "/", a service account whose home is "/", a home holding
// the user's). Those are refused as themselves by their own rules, and an
// agent below them cannot write them.
func (c CwdPolicy) broad(dir string) bool {
	if dir == "/" || (c.Home != "" && within(c.Home, dir, false)) {
		return true
	}
	return slices.Contains(containers, dir)
}

// refusal says why a run that writes must not use dir (resolved) as its
// cwd, and by which rule, or "" when it may. fold says the volume holding
// dir finds names whatever their case (macOS's default), so "~/.SSH" is
// "~/.ssh" there and the rules compare names the same way. The operator's
// allowed dirs win over every rule but one: card's own home, where an agent
// could rewrite card.toml or read the token, is never a cwd.
func (c CwdPolicy) refusal(dir string, fold bool) (rule, why string) {
	if c.Own != "" && within(dir, c.Own, fold) {
		return "", ""
	}
	if c.CardHome != "" && within(dir, c.CardHome, fold) {
		return ruleCardHome, "card's own home (its token and card.toml), which no run may change"
	}
	for _, a := range c.Allowed {
		if within(dir, a, fold) {
			return "", ""
		}
	}
	if dir == "/" {
		return ruleRoot, "the root of the filesystem"
	}
	if c.Home != "" && same(dir, c.Home, fold) {
		return ruleHome, "your home directory itself, which holds every project and your settings"
	}
	if c.CardHome != "" && within(c.CardHome, dir, fold) {
		return ruleHoldsCardHome, fmt.Sprintf("a directory that holds card's own home (%s)", c.CardHome)
	}
	if c.Home != "" {
		if first, ok := below(dir, c.Home, fold); ok {
			if strings.HasPrefix(first, ".") {
				return ruleHomeDotDir, fmt.Sprintf("inside %s: every directory directly under your home whose name begins with a dot "+
					"holds settings, credentials or programs something runs by itself", filepath.Join(c.Home, first))
			}
			for _, h := range homeTrees {
				if strings.EqualFold(first, h) && (fold || first == h) {
					return ruleHomeTree, fmt.Sprintf("inside %s, where login items live", filepath.Join(c.Home, h))
				}
			}
		}
	}
	for _, p := range c.Path {
		if within(dir, p, fold) {
			return ruleAgentPath, fmt.Sprintf("inside %s, a directory on the agents' PATH, where a program written runs in place of a command", p)
		}
		if within(p, dir, fold) {
			return ruleAgentPath, fmt.Sprintf("a directory that holds %s, which is on the agents' PATH", p)
		}
	}
	for _, in := range c.Installs {
		if within(dir, in.Dir, fold) {
			return ruleAgentInstall, fmt.Sprintf("inside %s, where %s is installed (the program card runs for it, through its links), so a file written there runs as the agent", in.Dir, in.Adapter)
		}
		if within(in.Dir, dir, fold) {
			return ruleAgentInstall, fmt.Sprintf("a directory that holds %s, where %s is installed", in.Dir, in.Adapter)
		}
	}
	for _, h := range c.OtherHomes {
		if within(dir, h, fold) {
			return ruleOtherHome, fmt.Sprintf("inside %s, another user's home", h)
		}
		if within(h, dir, fold) {
			return ruleOtherHome, fmt.Sprintf("a directory that holds %s, another user's home", h)
		}
	}
	for _, s := range systemTrees {
		if within(dir, s, fold) {
			return ruleSystem, fmt.Sprintf("inside %s, which the system owns", s)
		}
	}
	for _, s := range containers {
		if same(dir, s, fold) {
			return ruleContainer, fmt.Sprintf("%s itself, which holds many projects; use one of them", s)
		}
	}
	return "", ""
}

// within reports whether dir is root or below it (both clean and
// absolute), comparing names as a volume that folds case does when fold.
func within(dir, root string, fold bool) bool {
	if root == "/" {
		return true
	}
	if !fold {
		return dir == root || strings.HasPrefix(dir, root+"/")
	}
	ds, rs := strings.Split(dir, "/"), strings.Split(root, "/")
	if len(ds) < len(rs) {
		return false
	}
	for i, r := range rs {
		if !strings.EqualFold(ds[i], r) {
			return false
		}
	}
	return true
}

// same reports whether a and b name one directory.
func same(a, b string, fold bool) bool {
	if fold {
		return within(a, b, true) && within(b, a, true)
	}
	return a == b
}

// below is the first name of dir under root, when dir is strictly below
// root.
func below(dir, root string, fold bool) (string, bool) {
	if !within(dir, root, fold) || same(dir, root, fold) {
		return "", false
	}
	n := strings.Count(root, "/")
	if root == "/" {
		n = 0
	}
	return strings.Split(dir, "/")[n+1], true
}

// WritesUnderCwd reports whether a run in mode can change files under its
// working directory: every mode but read_only.
func WritesUnderCwd(m spawn.Mode) bool { return m != "" && m != spawn.ModeReadOnly }

// pathModel is how the file system names a directory: what a name
// resolves to, and whether the volume holding it finds names whatever
// their case. Tests give the policy a case-insensitive model on a
// case-sensitive machine.
type pathModel interface {
	resolve(dir string) (string, error)
	foldsCase(dir string) bool
}

// judge resolves dir through m and says why a writing run may not use it
// (rule and why empty when it may).
func (c CwdPolicy) judge(m pathModel, dir string) (resolved, rule, why string, err error) {
	if resolved, err = m.resolve(dir); err != nil {
		return "", "", "", err
	}
	rule, why = c.refusal(resolved, m.foldsCase(resolved))
	return resolved, rule, why, nil
}

// osPaths is the file system itself.
type osPaths struct{}

func (osPaths) resolve(dir string) (string, error) { return resolveDir(dir) }

// foldsCase asks the file system: dir spelled with every letter's case
// swapped is the same directory only where lookups ignore case (macOS's
// default APFS, a FAT or casefolded volume), on every component of the
// path. A name with no letters has nothing to fold.
func (osPaths) foldsCase(dir string) bool {
	other := swapCase(dir)
	if other == dir {
		return false
	}
	a, err := os.Stat(dir)
	if err != nil {
		return false
	}
	b, err := os.Stat(other)
	return err == nil && os.SameFile(a, b)
}

func swapCase(s string) string {
	return strings.Map(func(r rune) rune {
		if u := unicode.ToUpper(r); u != r {
			return u
		}
		return unicode.ToLower(r)
	}, s)
}

// resolveDir follows every symlink of an absolute dir and cleans it, so a
// rule about "/" cannot be walked around with a link to it or with "..".
func resolveDir(dir string) (string, error) {
	r, err := filepath.EvalSymlinks(filepath.Clean(dir))
	if err != nil {
		return "", err
	}
	return filepath.Abs(r)
}

// resolveLoose resolves the longest part of dir that exists and keeps the
// rest as named: a PATH entry or a home not made yet still names where it
// will be (a link on its way included).
func resolveLoose(dir string) string {
	dir = filepath.Clean(dir)
	rest := ""
	for d := dir; ; d = filepath.Dir(d) {
		if r, err := resolveDir(d); err == nil {
			return filepath.Join(r, rest)
		}
		if d == filepath.Dir(d) {
			return dir
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}

// otherUsersHomes lists, from a passwd file's text, the homes of every
// account but uid's. The daemon asks only when it runs as root: another
// user's home is otherwise not its to write.
func otherUsersHomes(passwd string, uid int) []string {
	var homes []string
	for _, line := range strings.Split(passwd, "\n") {
		f := strings.Split(line, ":")
		if len(f) < 7 || strings.HasPrefix(line, "#") {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil || id == uid || !filepath.IsAbs(f[5]) {
			continue
		}
		homes = append(homes, filepath.Clean(f[5]))
	}
	return homes
}

// ReadOtherHomes is otherUsersHomes over /etc/passwd, for a daemon running
// as root, and on macOS the homes under /Users too (its accounts live in
// its directory service, not in the file). Not root: none.
func ReadOtherHomes(home, passwdFile string) []string {
	uid := os.Geteuid()
	if uid != 0 {
		return nil
	}
	b, _ := os.ReadFile(passwdFile)
	homes := otherUsersHomes(string(b), uid)
	if runtime.GOOS == "darwin" {
		ents, _ := os.ReadDir("/Users")
		for _, e := range ents {
			if p := filepath.Join("/Users", e.Name()); e.IsDir() && e.Name() != "Shared" && !strings.HasPrefix(e.Name(), ".") && p != home {
				homes = append(homes, p)
			}
		}
	}
	return homes
}

// CwdRefusedError is a writing run's cwd the policy refuses: the daemon
// answers it -32602 naming cwd, with the rule and the directory it
// resolved to.
type CwdRefusedError struct {
	Asked, Resolved string
	Mode            spawn.Mode
	// Rule names the refusal (home, card_home, system, …); Why says it in
	// words.
	Rule, Why string
}

func (e *CwdRefusedError) Error() string {
	shown := fmt.Sprintf("%q", e.Asked)
	if e.Resolved != filepath.Clean(e.Asked) {
		shown += fmt.Sprintf(" (resolved: %s)", e.Resolved)
	}
	return fmt.Sprintf("cwd: %s is %s; permission_mode %s lets the agent change everything under its cwd. "+
		"Use the project's own directory, or have the operator list this one in %s in %s", shown, e.Why, e.Mode, AllowedEditDirsKey, configFile)
}

// configFile is the operator's file, named in what the planner says.
const configFile = "card.toml"
