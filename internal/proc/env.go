// Package proc is how card starts and ends the processes it runs for
// clients: agents, detection probes, substrate commands and terminals, the
// MCP bridge, and `card service`'s systemctl/launchctl calls.
//
//   - A child leads its own process group (Start, NewGroup), so the child and
//     everything it starts can be ended together.
//   - Ending is always SIGTERM, a grace period, SIGKILL, and a wait until the
//     group (or a terminal's whole session) is really gone, bounded so that
//     no caller can hang on a process the kernel will not let go of
//     (EndGroup, EndSession, Wait).
//   - What a child prints is kept within a bound (Capped).
//   - A child's environment is built from the environment the daemon read
//     once at startup, never from the live process environment, minus one
//     list of variables that describe the daemon rather than the child (Env).
package proc

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/card-dev/card/guard"
)

// RunIDEnv is set in every agent's environment to its run id. A daemon
// restarted after a crash ends a leftover process only when it carries its
// run's id (see EndTaggedGroup): a recorded process group id is only a number
// the kernel may have given to someone else since.
const RunIDEnv = "CARD_RUN_ID"

// ProbeEnv is set in the environment of every probe a daemon runs (a
// `--version`, a sign-in check, the login shell it asks for PATH) to a tag
// naming the daemon's home and that daemon's start. A probe's leader dies
// with the daemon, but what it started does not: Copilot's launcher runs its
// native binary as a child, which unpacks itself into the home for seconds.
// The next daemon on the same home ends whatever still carries an earlier
// start's tag (EndTagged).
const ProbeEnv = "CARD_PROBE"

// Stripped are the variables no child inherits from the daemon's
// environment. A builder that needs one of them (an agent's run id and
// ancestry) sets its own value after the strip.
var Stripped = []string{
	// systemd's notification socket belongs to the daemon's own unit: a child
	// that inherits it can tell systemd the service is ready, stopping, or
	// that its main pid is now the child's (any sd_notify-aware program does
	// so when it sees the variable).
	"NOTIFY_SOCKET",
	// The run id marks a process as part of one run, and the crash cleanup
	// ends what carries it. The daemon may itself have been started from
	// inside a run (of another card); a probe, a shell command or a different
	// run's agent must not carry that id, or a cleanup would end it.
	RunIDEnv,
	// The probe tag marks a process as a daemon's probe, and the next
	// daemon ends what carries an earlier one's. Only a probe gets it, and
	// from its own daemon.
	ProbeEnv,
	// The agent ancestry is only for agents, stamped with a chain that
	// includes them. A probe or a shell command is not an agent hop: an
	// inherited chain would make an agent started from it believe it runs
	// inside another agent, and refuse or shorten its nested calls.
	guard.AncestryEnv,
	// These point git at another repository. A child acts on the repository
	// of the directory it runs in, not on one the daemon's environment
	// happens to name (a daemon started from a git hook has GIT_DIR set).
	"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
	"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
}

// Env is a child's environment being built, by name. Build it with NewEnv,
// adjust it with Set and Unset, and hand List to exec.Cmd.Env.
type Env map[string]string

// NewEnv is base (the daemon's environment as read at startup) without the
// Stripped variables. base is not modified.
func NewEnv(base map[string]string) Env {
	e := make(Env, len(base)+4)
	for k, v := range base {
		e[k] = v
	}
	for _, k := range Stripped {
		delete(e, k)
	}
	return e
}

// Set gives name the value, replacing any inherited one.
func (e Env) Set(name, value string) Env {
	e[name] = value
	return e
}

// SetAll sets every entry of m.
func (e Env) SetAll(m map[string]string) Env {
	for k, v := range m {
		e[k] = v
	}
	return e
}

// SetDefault sets name only when it is missing or empty.
func (e Env) SetDefault(name, value string) Env {
	if e[name] == "" {
		e[name] = value
	}
	return e
}

// Unset removes name.
func (e Env) Unset(name string) Env {
	delete(e, name)
	return e
}

// List is the environment in exec.Cmd.Env form, sorted by name so two runs
// with the same inputs see the same environment. It is never nil: a nil
// exec.Cmd.Env would make the child inherit the daemon's live environment.
func (e Env) List() []string {
	out := make([]string, 0, len(e))
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// AgentEnv is the environment of one agent run: base without the Stripped
// variables, PATH set to the resolved search path (dropped when path is
// empty: a stale daemon PATH must not stand in for it), the run id, and the
// guard's ancestry chain with the agent itself at its end.
func AgentEnv(base map[string]string, path string, chain []string, runID string) []string {
	e := NewEnv(base).Unset("PATH")
	if path != "" {
		e.Set("PATH", path)
	}
	return e.Set(RunIDEnv, runID).Set(guard.AncestryEnv, guard.Format(chain)).List()
}

// EnvMap turns an environment in os.Environ form into a map; a later entry
// wins, as it does for getenv.
func EnvMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}

// TempDir is where a child's temporary files go: env's TMPDIR when it is an
// absolute path, else /tmp. os.TempDir would read the daemon's live
// environment instead of the one it started with.
func TempDir(env map[string]string) string {
	if d := env["TMPDIR"]; filepath.IsAbs(d) {
		return d
	}
	return "/tmp"
}

// LookPath finds the executable file in the directories of pathList (a PATH
// value: the child's, from the startup environment). exec.LookPath would
// consult the daemon's live PATH. Relative and empty entries are skipped: a
// program found relative to the daemon's working directory is one nobody
// chose. A name with a slash is checked as it is.
func LookPath(file, pathList string) (string, error) {
	if strings.Contains(file, "/") {
		if err := executable(file); err != nil {
			return "", &exec.Error{Name: file, Err: err}
		}
		return file, nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, file)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}

// environValue finds name's value in a /proc/<pid>/environ listing
// (NUL-separated name=value entries).
func environValue(env []byte, name string) (string, bool) {
	for len(env) > 0 {
		entry := env
		if i := bytes.IndexByte(env, 0); i >= 0 {
			entry, env = env[:i], env[i+1:]
		} else {
			env = nil
		}
		if len(entry) > len(name) && entry[len(name)] == '=' && string(entry[:len(name)]) == name {
			return string(entry[len(name)+1:]), true
		}
	}
	return "", false
}
