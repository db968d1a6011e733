package worktree

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/card-dev/card/internal/atomicfile"
)

// RecordName is the file, in each session's directory next to its
// worktree, that records where the worktree's repository is, so a restarted
// daemon (or Prune) finds every worktree without any other store.
const RecordName = "card-worktree.json"

// recordVersion is the record's format.
const recordVersion = 1

// Worktree is one session's worktree: where it is and where it came from.
// It is plain data the caller may store as JSON and hand back to any
// Manager with the same Root, after a restart too; every operation checks it
// against the disk and git before trusting it. The same value is written
// to RecordName in the session's directory.
type Worktree struct {
	Version   int    `json:"version"`
	SessionID string `json:"session_id"`
	// Repo is the top of the user's checkout the session was started in,
	// and RepoGitDir its git directory (the repository's own, or a linked
	// worktree's when the user's checkout is one).
	Repo       string `json:"repo"`
	RepoGitDir string `json:"repo_git_dir"`
	// CommonDir is the repository's git directory, shared by all its
	// worktrees: objects, refs, config.
	CommonDir string `json:"common_dir"`
	// Path is the top of the session's worktree, and GitDir its own git
	// directory (under CommonDir/worktrees/). GitDir is empty while
	// Create has not finished.
	Path   string `json:"path"`
	GitDir string `json:"git_dir,omitempty"`
	// Branch is the session's branch (short name: card/<session>).
	Branch string `json:"branch"`
	// Base is the commit the worktree started from; BaseRef what the
	// caller named it by (HEAD when nothing was given).
	Base    string `json:"base"`
	BaseRef string `json:"base_ref"`
	// Subdir is the directory of the repository the session's cwd was in
	// (slash-separated, relative to its top; empty at the top). Turns run
	// in the same directory of the worktree: Dir.
	Subdir  string    `json:"subdir,omitempty"`
	Created time.Time `json:"created"`
}

// Dir is where the session's turns run: the worktree's directory that
// matches the cwd the session was started in.
func (w Worktree) Dir() string {
	return filepath.Join(w.Path, filepath.FromSlash(w.Subdir))
}

func (w Worktree) ref() string { return "refs/heads/" + w.Branch }

// worktreeCall is a call in the session's worktree, with its git directory
// and work tree named.
func (w Worktree) call(config []kv, args ...string) call {
	return call{dir: w.Path, gitDir: w.GitDir, workTree: w.Path, config: config, args: args}
}

// checkoutCall is a call in the user's checkout.
func (w Worktree) checkoutCall(config []kv, args ...string) call {
	return call{dir: w.Repo, gitDir: w.RepoGitDir, workTree: w.Repo, config: config, args: args}
}

// Open reads a session's record from the root: how a restarted daemon
// finds a worktree knowing only the session id.
func (m *Manager) Open(sessionID string) (Worktree, error) {
	if !validSessionID(sessionID) {
		return Worktree{}, fmt.Errorf("session id %q: %w", sessionID, ErrBadName)
	}
	wt, err := m.readRecord(sessionID)
	if err != nil {
		return Worktree{}, err
	}
	if err := m.check(wt); err != nil {
		return Worktree{}, err
	}
	return wt, nil
}

func (m *Manager) readRecord(sessionID string) (Worktree, error) {
	path := filepath.Join(m.cfg.Root, sessionID, RecordName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Worktree{}, fmt.Errorf("session %s: %w", sessionID, ErrNotFound)
	}
	if err != nil {
		return Worktree{}, fmt.Errorf("worktree: %w", err)
	}
	var wt Worktree
	if err := json.Unmarshal(data, &wt); err != nil {
		return Worktree{}, fmt.Errorf("worktree: %s: %w", path, err)
	}
	if wt.SessionID != sessionID {
		return Worktree{}, fmt.Errorf("worktree: %s names session %q: %w", path, wt.SessionID, ErrNotFound)
	}
	return wt, nil
}

func writeRecord(wt Worktree) error {
	data, err := json.MarshalIndent(wt, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(filepath.Dir(wt.Path), RecordName), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("worktree: %w", err)
	}
	return nil
}

// check is what every operation asks of a Worktree before it names any of
// its paths to git or removes anything: the value has the shape Create
// gives (a worktree under this root, in the session's own directory; its
// git directory under the repository's worktrees/), and git's metadata
// still points at the worktree. A record edited by hand, or one that a
// moved or pruned worktree left stale, is refused rather than acted on.
func (m *Manager) check(wt Worktree) error {
	if err := m.checkShape(wt); err != nil {
		return err
	}
	if wt.GitDir == "" {
		return fmt.Errorf("session %s: its worktree was never finished (discard it): %w", wt.SessionID, ErrNotFound)
	}
	data, err := os.ReadFile(filepath.Join(wt.GitDir, "gitdir"))
	if err != nil {
		return fmt.Errorf("session %s: git no longer knows its worktree %s: %w", wt.SessionID, wt.Path, ErrNotFound)
	}
	if filepath.Clean(strings.TrimSpace(string(data))) != filepath.Join(wt.Path, ".git") {
		return fmt.Errorf("session %s: git's metadata %s points at %s, not at the worktree %s: %w",
			wt.SessionID, wt.GitDir, strings.TrimSpace(string(data)), wt.Path, ErrNotFound)
	}
	if st, err := os.Lstat(wt.Path); err != nil || !st.IsDir() {
		return fmt.Errorf("session %s: its worktree %s is gone: %w", wt.SessionID, wt.Path, ErrNotFound)
	}
	return nil
}

// checkShape checks what a record says without reading the disk.
func (m *Manager) checkShape(wt Worktree) error {
	bad := func(what string) error {
		return fmt.Errorf("session %q: the worktree's record %s: %w", wt.SessionID, what, ErrNotFound)
	}
	switch {
	case wt.Version != recordVersion:
		return bad(fmt.Sprintf("has version %d, not %d", wt.Version, recordVersion))
	case !validSessionID(wt.SessionID):
		return fmt.Errorf("session id %q: %w", wt.SessionID, ErrBadName)
	case filepath.Dir(filepath.Dir(wt.Path)) != m.cfg.Root || filepath.Base(filepath.Dir(wt.Path)) != wt.SessionID ||
		filepath.Clean(wt.Path) != wt.Path || !validName(filepath.Base(wt.Path)):
		return bad(fmt.Sprintf("puts it at %s, not in %s", wt.Path, filepath.Join(m.cfg.Root, wt.SessionID)))
	case wt.Branch != m.cfg.BranchPrefix+wt.SessionID:
		return bad(fmt.Sprintf("names branch %q", wt.Branch))
	case !isHash(wt.Base):
		return bad(fmt.Sprintf("names base %q", wt.Base))
	case !filepath.IsAbs(wt.Repo) || !filepath.IsAbs(wt.RepoGitDir) || !filepath.IsAbs(wt.CommonDir):
		return bad("names a repository by a relative path")
	case wt.GitDir != "" && (filepath.Dir(wt.GitDir) != filepath.Join(wt.CommonDir, "worktrees") || !validName(filepath.Base(wt.GitDir))):
		return bad(fmt.Sprintf("puts its git directory at %s", wt.GitDir))
	case wt.Subdir != "" && (strings.HasPrefix(wt.Subdir, "/") || slices.ContainsFunc(strings.Split(wt.Subdir, "/"), func(e string) bool { return e == "" || e == "." || e == ".." })):
		return bad(fmt.Sprintf("names subdirectory %q", wt.Subdir))
	}
	return nil
}

// sessionIDPattern is what a session id may be: a branch component and a
// directory name at once, and never an option (a UUID fits).
var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

func validSessionID(id string) bool { return sessionIDPattern.MatchString(id) }

// validName is a single path element git or card chose: not empty, no
// separator, not . or .., not an option.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, '/') && !strings.HasPrefix(name, "-")
}

// worktreeName names the worktree's directory after the repository's, so
// the agent sees the project's name in its cwd; a name card would not put
// in a path becomes "repo".
func worktreeName(top string) string {
	name := filepath.Base(top)
	if !validName(name) || name == RecordName || strings.HasPrefix(name, ".") ||
		strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "repo"
	}
	return name
}

func isHash(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// within reports whether dir is root or below it (both clean, absolute).
func within(dir, root string) bool {
	rel, err := filepath.Rel(root, dir)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimPrefix(s, "fatal: ")
}
