package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/card-dev/card/internal/proc"
)

// Bounds on what one git call may print. A call whose answer card parses
// (a status, a list of files) fails past its bound rather than parse half an
// answer; a patch shown to a person is cut (see Diff).
const (
	// maxListOutput bounds a listing: status, numstat, log, config.
	maxListOutput = 64 << 20
	// maxSmallOutput bounds an answer of a line or two (rev-parse).
	maxSmallOutput = 64 << 10
	// stderrKept is how much of a failing call's stderr the error keeps
	// (half from its start, half from its end).
	stderrKept = 32 << 10
	// endGrace is how long a git call that outlived its context has
	// between SIGTERM and SIGKILL.
	endGrace = 2 * time.Second
)

// GitError is a git call that failed: which call, in which directory, its
// exit code (-1 when it did not exit by itself) and the end of what it said.
type GitError struct {
	Args     []string
	Dir      string
	ExitCode int
	Stderr   string
	Err      error
}

func (e *GitError) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("git %s (in %s): %s", strings.Join(e.Args, " "), e.Dir, msg)
}

func (e *GitError) Unwrap() error { return e.Err }

// errOutputTooLarge is a parsed answer that went past its bound.
var errOutputTooLarge = errors.New("git printed more than card reads")

// call is one git invocation. Every call names its working directory; a
// call about a repository also names its git directory and work tree, so
// that git never discovers a repository from a directory an agent could
// have written (a planted .git there would bring its own config and with it
// programs git runs: core.fsmonitor, filters).
type call struct {
	dir      string
	gitDir   string
	workTree string
	args     []string
	stdin    []byte
	// max is how many bytes of stdout are kept; past it the call fails
	// with errOutputTooLarge, or, when truncate is set, ends early and
	// reports truncated.
	max      int
	truncate bool
	// config is the per-repository part of the overrides (the filter
	// drivers that repository's config defines), from repoConfig.
	config []kv
}

type kv struct{ key, value string }

// staticConfig is set on every call, at the command line's precedence, so
// no scope of the repository's or the user's config can undo it. Each entry
// stops git from running a program, from writing what a read should not
// write, or from making its output depend on the user's settings.
var staticConfig = []kv{
	// Hooks are the repository's code. git looks up <hooksPath>/<name>;
	// under /dev/null no name exists, whatever .git/hooks or a config's
	// core.hooksPath holds. This covers every hook, not only the two that
	// `git commit --no-verify` skips (pre-commit, commit-msg): also
	// prepare-commit-msg, post-commit, post-checkout, post-index-change,
	// reference-transaction and pre-auto-gc.
	{"core.hooksPath", "/dev/null"},
	// An fsmonitor is a program (or a daemon git starts) named by config.
	{"core.fsmonitor", "false"},
	// Signing runs gpg (or ssh-keygen) and could prompt for a passphrase.
	{"commit.gpgSign", "false"},
	{"tag.gpgSign", "false"},
	{"log.showSignature", "false"},
	// No background gc or maintenance started from card's calls: it would
	// outlive the call and run pre-auto-gc.
	{"gc.auto", "0"},
	{"gc.autoDetach", "false"},
	{"maintenance.auto", "false"},
	// Submodules: no recursion into them (a checkout would fetch, a status
	// would run git inside a repository an agent may have made), and no
	// transport at all: card's calls are local.
	{"submodule.recurse", "false"},
	{"diff.ignoreSubmodules", "all"},
	{"status.submoduleSummary", "false"},
	{"protocol.allow", "never"},
	// Output card parses or shows must not follow the user's taste.
	{"color.ui", "false"},
	{"core.quotePath", "true"},
	{"core.pager", "cat"},
	{"diff.noprefix", "false"},
	{"diff.mnemonicPrefix", "false"},
	{"diff.relative", "false"},
	{"diff.suppressBlankEmpty", "false"},
	{"i18n.commitEncoding", "UTF-8"},
	{"i18n.logOutputEncoding", "UTF-8"},
	{"apply.whitespace", "nowarn"},
	{"apply.ignoreWhitespace", "no"},
	{"advice.detachedHead", "false"},
	// A rewound turn's commit stays in the branch's reflog; a user who
	// turned reflogs off would otherwise lose it at once.
	{"core.logAllRefUpdates", "true"},
}

// env is the environment of every git call: the startup environment without
// anything that points git elsewhere or changes what it runs (every GIT_*
// variable: GIT_DIR, GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF, GIT_SSH,
// GIT_ASKPASS, GIT_EXEC_PATH, an identity...), then card's own: no prompt,
// no editor, no pager, English messages (Apply reads them), card's
// identity and date, and the config overrides.
func (m *Manager) env(repoConfig []kv) []string {
	e := proc.NewEnv(m.cfg.Env)
	for k := range e {
		if strings.HasPrefix(k, "GIT_") {
			delete(e, k)
		}
	}
	e.Unset("LANGUAGE").Unset("EMAIL")
	e.Set("LC_ALL", "C").
		Set("GIT_TERMINAL_PROMPT", "0").
		Set("GIT_EDITOR", "true").
		Set("GIT_SEQUENCE_EDITOR", "true").
		Set("GIT_PAGER", "cat").
		Set("PAGER", "cat").
		// A read in the user's checkout (status) must not refresh and
		// write its index.
		Set("GIT_OPTIONAL_LOCKS", "0").
		// Replace refs would make a commit read as another.
		Set("GIT_NO_REPLACE_OBJECTS", "1")
	when := m.now().UTC()
	date := fmt.Sprintf("@%d +0000", when.Unix())
	e.Set("GIT_AUTHOR_NAME", m.cfg.Identity.Name).
		Set("GIT_AUTHOR_EMAIL", m.cfg.Identity.Email).
		Set("GIT_AUTHOR_DATE", date).
		Set("GIT_COMMITTER_NAME", m.cfg.Identity.Name).
		Set("GIT_COMMITTER_EMAIL", m.cfg.Identity.Email).
		Set("GIT_COMMITTER_DATE", date)
	// GIT_CONFIG_COUNT rather than -c: a key and its value travel
	// separately, so a filter driver named with an "=" in it cannot
	// split differently, and git passes them on to any git it starts.
	all := append(append([]kv(nil), staticConfig...), repoConfig...)
	e.Set("GIT_CONFIG_COUNT", strconv.Itoa(len(all)))
	for i, c := range all {
		e.Set("GIT_CONFIG_KEY_"+strconv.Itoa(i), c.key)
		e.Set("GIT_CONFIG_VALUE_"+strconv.Itoa(i), c.value)
	}
	return e.List()
}

// run runs one git call under ctx and the call timeout. It returns stdout
// (at most c.max bytes) and whether it was cut there.
func (m *Manager) run(ctx context.Context, c call) (out []byte, truncated bool, err error) {
	if c.dir == "" {
		return nil, false, errors.New("worktree: a git call without a working directory")
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	var argv []string
	if c.gitDir != "" {
		argv = append(argv, "--git-dir="+c.gitDir)
	}
	if c.workTree != "" {
		argv = append(argv, "--work-tree="+c.workTree)
	}
	argv = append(argv, "--no-pager")
	argv = append(argv, c.args...)
	cmd := exec.Command(m.cfg.Git, argv...)
	cmd.Dir = c.dir
	cmd.Env = m.env(c.config)
	if c.stdin != nil {
		cmd.Stdin = bytes.NewReader(c.stdin)
	}
	limit := c.max
	if limit <= 0 {
		limit = maxSmallOutput
	}
	stdout := &capBuffer{max: limit}
	stderr := &proc.Capped{Head: stderrKept / 2, Tail: stderrKept / 2}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if err := proc.Start(cmd); err != nil {
		return nil, false, &GitError{Args: c.args, Dir: c.dir, ExitCode: -1, Err: err}
	}
	werr := proc.Wait(ctx, cmd, endGrace)
	if stdout.over {
		if !c.truncate {
			return nil, false, &GitError{Args: c.args, Dir: c.dir, ExitCode: -1,
				Stderr: fmt.Sprintf("more than %d bytes of output", limit), Err: errOutputTooLarge}
		}
		// git was stopped by the closed pipe, which is not a failure of
		// the call: the kept part is what was asked for.
		if ctx.Err() == nil {
			return stdout.buf.Bytes(), true, nil
		}
	}
	if werr != nil {
		ge := &GitError{Args: c.args, Dir: c.dir, ExitCode: -1, Stderr: stderr.String(), Err: werr}
		var ee *exec.ExitError
		if errors.As(werr, &ee) && ee.Exited() {
			ge.ExitCode = ee.ExitCode()
		}
		if ctx.Err() != nil {
			ge.Err = fmt.Errorf("%w (after %s at most)", ctx.Err(), m.cfg.CallTimeout)
		}
		return nil, false, ge
	}
	return stdout.buf.Bytes(), false, nil
}

// output is run for a call whose stdout is wanted whole.
func (m *Manager) output(ctx context.Context, c call) ([]byte, error) {
	out, _, err := m.run(ctx, c)
	return out, err
}

// exitCode is the exit code of a GitError, or -1.
func exitCode(err error) int {
	var ge *GitError
	if errors.As(err, &ge) {
		return ge.ExitCode
	}
	return -1
}

// capBuffer keeps the first max bytes written to it. The write that goes
// past max fails, so os/exec closes the pipe and git ends at its next write
// (SIGPIPE) instead of producing output nobody reads.
type capBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	room := b.max - b.buf.Len()
	if len(p) <= room {
		return b.buf.Write(p)
	}
	if room > 0 {
		b.buf.Write(p[:room])
	}
	b.over = true
	return room, errOutputTooLarge
}

// repoConfig is the per-repository part of the overrides: every filter
// driver any config scope of the repository defines (system, global, the
// repository's own, its worktree's), with its commands emptied and
// required off. A filter is chosen by .gitattributes, which an agent
// writes, from the drivers config defines; git runs no filter whose
// command is empty. textconv and external diff drivers are turned off by
// flags on each diff (--no-textconv, --no-ext-diff), and merge drivers are
// never reached: card does no merge (Apply does not use --3way).
func (m *Manager) repoConfig(ctx context.Context, dir, gitDir, workTree string) ([]kv, error) {
	out, err := m.output(ctx, call{dir: dir, gitDir: gitDir, workTree: workTree, max: maxListOutput,
		args: []string{"config", "--null", "--name-only", "--get-regexp", `^filter\.`}})
	if exitCode(err) == 1 {
		return nil, nil // no such key anywhere
	}
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var kvs []kv
	for _, key := range strings.Split(string(out), "\x00") {
		rest, ok := strings.CutPrefix(key, "filter.")
		if !ok {
			continue
		}
		dot := strings.LastIndexByte(rest, '.')
		if dot <= 0 {
			continue // filter.<var> has no driver
		}
		driver := rest[:dot]
		if seen[driver] {
			continue
		}
		seen[driver] = true
		p := "filter." + driver + "."
		kvs = append(kvs, kv{p + "clean", ""}, kv{p + "smudge", ""}, kv{p + "process", ""}, kv{p + "required", "false"})
	}
	return kvs, nil
}

// version asks git for its version (major, minor).
func (m *Manager) version(ctx context.Context, dir string) (int, int, error) {
	out, err := m.output(ctx, call{dir: dir, args: []string{"version"}})
	if err != nil {
		return 0, 0, err
	}
	// "git version 2.39.5" (with vendor suffixes after the numbers).
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return 0, 0, fmt.Errorf("worktree: cannot read git's version from %q", out)
	}
	parts := strings.SplitN(f[2], ".", 3)
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("worktree: cannot read git's version from %q", out)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("worktree: cannot read git's version from %q", out)
	}
	return major, minor, nil
}
