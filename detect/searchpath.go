package detect

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/card-dev/card/api"
)

// SearchPath is the ordered list of directories detection searches and later
// spawns put on PATH, with where each one came from.
//
// A daemon started by launchd or systemd sees PATH=/usr/bin:/bin, while the
// agent CLIs live in ~/.local/bin, nvm or Homebrew directories that only the
// user's login shell adds. Resolving this once at startup, and using the same
// list for probes and spawns, means a CLI found by detection also finds its
// `node` when it runs.
type SearchPath struct {
	Dirs    []string
	Sources map[string]api.Source // dir → where it came from
}

// PATH renders the directories as a PATH value.
func (s SearchPath) PATH() string { return strings.Join(s.Dirs, string(os.PathListSeparator)) }

// SourceOf says where dir came from; SourcePath when it is not known.
func (s SearchPath) SourceOf(dir string) api.Source {
	if src, ok := s.Sources[filepath.Clean(dir)]; ok {
		return src
	}
	return api.SourcePath
}

// add appends dir once. Relative and empty entries are dropped: they resolve
// against whatever the daemon's working directory is, which lets a project
// directory plant a binary named `claude`.
func (s *SearchPath) add(dir string, src api.Source) {
	if dir == "" || !filepath.IsAbs(dir) {
		return
	}
	dir = filepath.Clean(dir)
	if s.Sources == nil {
		s.Sources = map[string]api.Source{}
	}
	if _, dup := s.Sources[dir]; dup {
		return
	}
	s.Sources[dir] = src
	s.Dirs = append(s.Dirs, dir)
}

// NewSearchPath builds a search path from a PATH value, every entry tagged
// SourcePath. Useful for tests and for a daemon told not to consult the login
// shell.
func NewSearchPath(pathValue string) SearchPath {
	var s SearchPath
	for _, d := range filepath.SplitList(pathValue) {
		s.add(d, api.SourcePath)
	}
	return s
}

// loginShellTimeout bounds the login-shell query. A profile that runs a
// network command or waits for input must not delay startup by more.
const loginShellTimeout = 2500 * time.Millisecond

// ResolveSearchPath builds the daemon's search path: its own PATH, then what
// the user's login shell adds, then the well-known per-user install
// directories. The login shell is asked once, bounded by a timeout, its
// process group killed on timeout, and any failure is ignored (the other two
// parts still apply). env is the daemon's environment as read at startup
// (also the base of the login shell's environment); home is the user's home
// directory.
func ResolveSearchPath(ctx context.Context, env map[string]string, home string) SearchPath {
	getenv := func(k string) string { return env[k] }
	shellPath := loginShellPATH(ctx, env, home, loginShellTimeout)
	return buildSearchPath(env["PATH"], shellPath, WellKnownDirs(home, getenv))
}

// BareSearchPath is the search path without the login shell: its own PATH,
// then the well-known directories, which are card's own list and do not
// depend on any shell. It is the whole path for a daemon told
// login_shell_path = false, and the path known at once, before the login
// shell has answered, for the others.
func BareSearchPath(env map[string]string, home string) SearchPath {
	getenv := func(k string) string { return env[k] }
	return buildSearchPath(env["PATH"], "", WellKnownDirs(home, getenv))
}

// buildSearchPath is the pure core of ResolveSearchPath.
func buildSearchPath(daemonPATH, shellPATH string, wellKnown []string) SearchPath {
	s := NewSearchPath(daemonPATH)
	for _, d := range filepath.SplitList(shellPATH) {
		s.add(d, api.SourceLoginShell)
	}
	s.AddWellKnown(wellKnown)
	return s
}

// AddWellKnown appends the well-known directories the path lacks. The
// detector calls it with a fresh list before each detection, so a node
// version installed after startup is searched too.
func (s *SearchPath) AddWellKnown(dirs []string) {
	for _, d := range dirs {
		s.add(d, api.SourceWellKnown)
	}
}

// clone copies s, so a detection can search one path while the next
// refresh extends another.
func (s SearchPath) clone() SearchPath {
	out := SearchPath{Dirs: append([]string(nil), s.Dirs...), Sources: make(map[string]api.Source, len(s.Sources))}
	for k, v := range s.Sources {
		out.Sources[k] = v
	}
	return out
}

const (
	pathMarkerStart = "__CARD_PATH_START__"
	pathMarkerEnd   = "__CARD_PATH_END__"
)

// loginShellPATH asks $SHELL (or /bin/sh) for the PATH a login session gets.
// Profiles often print banners, so the value is fenced by markers and only
// what lies between them is used.
func loginShellPATH(ctx context.Context, env map[string]string, home string, timeout time.Duration) string {
	shell := env["SHELL"]
	if shell == "" || !filepath.IsAbs(shell) {
		shell = "/bin/sh"
	}
	script := `printf '` + pathMarkerStart + `%s` + pathMarkerEnd + `' "$PATH"`
	out := runProbe(ctx, shell, []string{"-l", "-c", script}, probeEnv(env, env["PATH"], home), probeDir(home, env), timeout)
	if out.StartErr != nil || out.TimedOut {
		return ""
	}
	return extractMarked(out.Stdout)
}

func extractMarked(s string) string {
	_, rest, ok := strings.Cut(s, pathMarkerStart)
	if !ok {
		return ""
	}
	val, _, ok := strings.Cut(rest, pathMarkerEnd)
	if !ok {
		return ""
	}
	return val
}

// WellKnownDirs lists the per-user and vendor directories agent CLIs are
// installed into by their official installers, npm's global prefix and the
// common Node version managers, in the order a person would expect to win.
//
// A directory is listed whether or not it exists yet: a person who installs
// their first CLI with `npm install -g` after the daemon started creates
// ~/.local/bin or ~/.npm-global/bin then, and a refresh must find it without
// a restart (searching a missing directory costs one failed stat). Only the
// version managers' per-version directories are listed as they are found,
// because their names are not known in advance.
func WellKnownDirs(home string, getenv func(string) string) []string {
	var dirs []string
	if home != "" {
		dirs = append(dirs,
			filepath.Join(home, ".local", "bin"),
			filepath.Join(home, ".claude", "local"),
			filepath.Join(home, ".npm-global", "bin"),
		)
	}
	dirs = append(dirs, npmPrefixBins(home, getenv)...)
	if home != "" {
		dirs = append(dirs,
			filepath.Join(home, ".volta", "bin"),
			filepath.Join(home, ".bun", "bin"),
		)
		if nvmBin := getenv("NVM_BIN"); nvmBin != "" {
			dirs = append(dirs, nvmBin)
		}
		dirs = append(dirs, nvmNodeBins(filepath.Join(home, ".nvm", "versions", "node"))...)
		dirs = append(dirs, filepath.Join(home, ".yarn", "bin"))
		if pnpm := getenv("PNPM_HOME"); pnpm != "" {
			dirs = append(dirs, pnpm)
		}
		dirs = append(dirs,
			filepath.Join(home, ".local", "share", "pnpm"),
			filepath.Join(home, "Library", "pnpm"),
		)
	}
	return append(dirs, "/opt/homebrew/bin", "/usr/local/bin")
}

// npmPrefixBins is npm's global bin directory when the user moved npm's
// prefix (`npm config set prefix ~/.npm-global`, or NPM_CONFIG_PREFIX):
// `npm install -g` puts the CLIs there. Only the prefix line of ~/.npmrc is
// read; the file can also hold registry tokens, which are never looked at.
func npmPrefixBins(home string, getenv func(string) string) []string {
	var prefixes []string
	for _, n := range []string{"NPM_CONFIG_PREFIX", "npm_config_prefix"} {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			prefixes = append(prefixes, v)
		}
	}
	if home != "" {
		if f, err := os.Open(filepath.Join(home, ".npmrc")); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				k, v, ok := strings.Cut(sc.Text(), "=")
				if ok && strings.TrimSpace(k) == "prefix" {
					prefixes = append(prefixes, strings.Trim(strings.TrimSpace(v), `"'`))
				}
			}
			f.Close()
		}
	}
	var out []string
	for _, p := range prefixes {
		if strings.HasPrefix(p, "~/") && home != "" {
			p = filepath.Join(home, p[2:])
		}
		if filepath.IsAbs(p) {
			out = append(out, filepath.Join(p, "bin"))
		}
	}
	return out
}

// nvmNodeBins returns nvm's installed node bin dirs, newest version first, so
// a CLI installed under the current node wins over a stale one.
func nvmNodeBins(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Slice(names, func(i, j int) bool { return versionLess(names[j], names[i]) })
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, filepath.Join(root, n, "bin"))
	}
	return out
}

// versionLess compares "v20.11.1"-style names numerically.
func versionLess(a, b string) bool {
	pa := strings.Split(strings.TrimPrefix(a, "v"), ".")
	pb := strings.Split(strings.TrimPrefix(b, "v"), ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea != nil || eb != nil {
			if pa[i] != pb[i] {
				return pa[i] < pb[i]
			}
			continue
		}
		if na != nb {
			return na < nb
		}
	}
	return len(pa) < len(pb)
}
