package detect

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/card-dev/card/api"
)

// DefaultScratchDirs are world-writable directories detection never takes a
// binary from. Anyone on the machine can drop an executable named `claude`
// there, and a PATH that happens to include one would hand it the user's
// agent credentials.
var DefaultScratchDirs = []string{"/tmp/", "/private/tmp/", "/var/tmp/", "/dev/shm/"}

// candidate is one file on the search path that might be the adapter's binary.
type candidate struct {
	path   string
	source api.Source
}

// findCandidates lists every match for binary on the search path, in order,
// collapsing matches that resolve to the same real file (a symlink in
// ~/.local/bin to the npm global bin is one install, not two) and skipping
// scratch directories. The skipped matches are returned too: a person whose
// only install sits under /tmp must be told it was seen and why it was not
// used, not that nothing is installed.
func findCandidates(binary string, search SearchPath, scratch []string) (cands []candidate, skipped []string) {
	seen := map[string]bool{}
	for _, dir := range search.Dirs {
		p := filepath.Join(dir, binary)
		li, err := os.Lstat(p)
		if err != nil || li.IsDir() {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			real = p // dangling: still a candidate, so its breakage is reported
		} else if fi, err := os.Stat(real); err == nil && fi.IsDir() {
			continue
		}
		if inScratch(p, scratch) || inScratch(real, scratch) {
			if !seen[real] {
				seen[real] = true
				skipped = append(skipped, p)
			}
			continue
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		cands = append(cands, candidate{path: p, source: search.SourceOf(dir)})
	}
	return cands, skipped
}

// inScratch also checks the symlink target: a link from a trusted directory
// into /tmp is the same planted binary with one more hop.
func inScratch(p string, scratch []string) bool {
	p = filepath.Clean(p)
	for _, s := range scratch {
		prefix := strings.TrimSuffix(s, "/") + "/"
		if strings.HasPrefix(p+"/", prefix) {
			return true
		}
	}
	return false
}

// resolvePin turns a pin value into a path. A bare name is looked up on the
// search path (still a pin: the scratch rule does not apply, the person chose
// it); "~/" is expanded. The error text names the pin so the person knows
// which setting to fix.
func resolvePin(pin pinSetting, value, home string, search SearchPath) (string, error) {
	v := value
	if strings.HasPrefix(v, "~/") && home != "" {
		v = filepath.Join(home, v[2:])
	}
	if !strings.ContainsRune(v, '/') {
		for _, dir := range search.Dirs {
			p := filepath.Join(dir, v)
			if _, err := os.Lstat(p); err == nil {
				return p, nil
			}
		}
		return "", fmt.Errorf("pinned by %s, but no %q is on the search path; make %s an absolute path or remove it", pin.set(value), v, pin.name())
	}
	if !filepath.IsAbs(v) {
		return "", fmt.Errorf("pinned by %s, which is a relative path; make %s an absolute path", pin.set(value), pin.name())
	}
	li, err := os.Lstat(v)
	if err != nil {
		return "", fmt.Errorf("pinned by %s, but that file does not exist; fix or remove %s (card does not fall back to PATH when a pin is set)", pin.set(value), pin.name())
	}
	if li.IsDir() {
		return "", fmt.Errorf("pinned by %s, which is a directory; point %s at the executable", pin.set(value), pin.name())
	}
	return v, nil
}

// preflight catches what is visible without running the file: a dangling
// symlink would otherwise surface as an ambiguous "no such file".
func preflight(path string) (reason string, ok bool) {
	li, err := os.Lstat(path)
	if err != nil {
		return fmt.Sprintf("%s: cannot be read (%v)", path, err), false
	}
	if li.Mode()&fs.ModeSymlink != 0 {
		if _, err := os.Stat(path); err != nil {
			target, _ := os.Readlink(path)
			return fmt.Sprintf("%s: dangling symlink to %s, which does not exist; reinstall the CLI or remove the link", path, target), false
		}
	}
	return "", true
}

// classifyVersionProbe decides whether a `--version` run proves the binary
// runs, and if not, says why in words a person can act on. pathValue is the
// PATH the probe ran with, used to tell a missing `node` from other exit-127s.
// A timeout counts as runnable: slow is not broken, and the version is just
// left absent.
func classifyVersionProbe(path string, out ProbeOutput, pathValue string) (reason string, runs bool) {
	if out.TimedOut {
		return "", true
	}
	if out.StartErr != nil {
		return classifyStartError(path, out.StartErr), false
	}
	if out.Signal != 0 {
		return fmt.Sprintf("%s: killed by signal %d (%s) while printing its version; the OS (code signing, quarantine, memory limits) or a crash stopped it; reinstall it", path, int(out.Signal), out.Signal), false
	}
	if out.ExitCode == 0 {
		return "", true
	}
	if interp, ok := envInterpreter(path); ok && out.ExitCode == 127 && !onPath(interp, pathValue) {
		return fmt.Sprintf("%s: interpreter missing: %s not found on PATH (%s); the script starts with `#!/usr/bin/env %s`; install %s or add its directory to the daemon's PATH", path, interp, pathValue, interp, interp), false
	}
	return fmt.Sprintf("%s: `--version` exited with status %d: %s", path, out.ExitCode, firstLine(out.Stderr, out.Stdout)), false
}

func classifyStartError(path string, err error) string {
	switch {
	case errors.Is(err, syscall.EACCES):
		return fmt.Sprintf("%s: permission denied; the daemon's user cannot execute it (chmod +x it, or check the filesystem is not mounted noexec)", path)
	case errors.Is(err, syscall.ENOEXEC):
		return fmt.Sprintf("%s: exec format error (wrong architecture or not a program); reinstall the build for this machine", path)
	case errors.Is(err, syscall.ENOENT):
		if interp, ok := shebangInterpreter(path); ok {
			return fmt.Sprintf("%s: interpreter missing: its first line asks for %s, which does not exist; reinstall the CLI or install that interpreter", path, interp)
		}
		return fmt.Sprintf("%s: no such file (dangling symlink or a missing loader); reinstall the CLI", path)
	default:
		return fmt.Sprintf("%s: the OS refused to start it: %v", path, err)
	}
}

// readShebang returns the words of a "#!" first line, or nil.
func readShebang(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return nil
	}
	if !strings.HasPrefix(line, "#!") {
		return nil
	}
	return strings.Fields(strings.TrimPrefix(line, "#!"))
}

func shebangInterpreter(path string) (string, bool) {
	w := readShebang(path)
	if len(w) == 0 {
		return "", false
	}
	return w[0], true
}

// envInterpreter returns X for a "#!/usr/bin/env [-S] X" script: the common
// shape of npm-installed CLIs, which fail when the daemon's PATH lacks node.
func envInterpreter(path string) (string, bool) {
	w := readShebang(path)
	if len(w) < 2 || filepath.Base(w[0]) != "env" {
		return "", false
	}
	for _, a := range w[1:] {
		if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
			continue
		}
		return a, true
	}
	return "", false
}

func onPath(name, pathValue string) bool {
	for _, dir := range filepath.SplitList(pathValue) {
		if dir == "" {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, name))
		if err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// firstLine returns the first non-empty line of the first non-empty text,
// truncated so a reason stays readable.
func firstLine(texts ...string) string {
	for _, t := range texts {
		for _, l := range strings.Split(t, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				if len(l) > 200 {
					l = l[:200] + "…"
				}
				return l
			}
		}
	}
	return "(no output)"
}
