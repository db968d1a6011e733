// Package worktree gives a session its own git worktree: a checkout of the
// user's repository on a branch of the session's own, in a private directory
// of card's, where the agent's turns run while the user's checkout stays as
// it was. Each turn that changed something becomes one commit on that
// branch; the session's changes (or one turn's) can be shown as a diff,
// brought into the user's checkout as uncommitted changes, rewound to an
// earlier turn, or thrown away with the worktree and the branch.
//
// The package keeps nothing a restart would lose: git holds the worktree,
// the branch and the turns (each turn's commit names its number), and a
// small record next to the worktree (and the Worktree value the caller may
// store) says where they are. A Manager holds only its configuration and
// the locks of the operations under way.
//
// card runs no code of the repository's: every git call turns hooks, the
// fsmonitor, filter drivers, textconv, external diff, signing and
// background gc off, and names its git directory and work tree rather than
// letting git discover them from a directory an agent has written.
package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"
)

// Errors a caller maps to what it answers. Each returned error wraps one of
// them and says in its text what was refused and why.
var (
	// ErrNotRepository: the cwd is not inside a git work tree (a plain
	// directory, a bare repository, inside .git). The wire's -32602
	// naming `isolation`.
	ErrNotRepository = errors.New("not inside a git work tree")
	// ErrNoCommit: the repository has no commit to start a worktree from.
	ErrNoCommit = errors.New("the repository has no commit yet")
	// ErrBadBase: the base given does not name a commit, or could be read
	// as an option.
	ErrBadBase = errors.New("the base is not a commit of the repository")
	// ErrBadName: a session id card cannot use in a branch or a path.
	ErrBadName = errors.New("not a usable session id")
	// ErrExists: the session already has a worktree, or its branch is
	// taken.
	ErrExists = errors.New("the session's worktree or branch already exists")
	// ErrNotFound: no worktree for the session, or git no longer knows it
	// (removed or moved by hand, its repository gone).
	ErrNotFound = errors.New("no worktree for the session")
	// ErrNoTurn: no commit for that turn (it changed nothing, was rewound
	// away, or never ran).
	ErrNoTurn = errors.New("no commit for that turn")
	// ErrTurnOrder: a turn number at or below one already committed.
	ErrTurnOrder = errors.New("turn numbers must grow")
	// ErrConflict: Apply refused; see *ConflictError for the files.
	ErrConflict = errors.New("the session's changes conflict with the checkout")
	// ErrUnsafeRoot: the root is not a private directory of this user, or
	// it lies inside the repository.
	ErrUnsafeRoot = errors.New("the worktrees' root is not private to card")
)

// Identity is the author and committer of card's commits.
type Identity struct {
	Name, Email string
}

// DefaultIdentity is card's: a turn's commit is card's record of what the
// agent did, not the user's work.
var DefaultIdentity = Identity{Name: "card", Email: "card@localhost"}

// Config is what a Manager needs; only Root and Git are required.
type Config struct {
	// Root is the private directory holding every session's worktree
	// (created 0700 when missing; it must not be a link, must be the
	// user's, and is made 0700). It must lie outside every repository a
	// session isolates.
	Root string
	// Git is the absolute path of the git binary.
	Git string
	// Env is the environment git runs in (the daemon's, as read at
	// startup); its GIT_* variables are dropped. HOME in it is where git
	// finds the user's global config (for core.excludesFile, say).
	Env map[string]string
	// Identity is the author and committer of the turns' commits
	// (default DefaultIdentity).
	Identity Identity
	// BranchPrefix is put before the session id to name its branch
	// (default "card/").
	BranchPrefix string
	// CallTimeout bounds each git call (default 2 minutes); a context's
	// earlier deadline wins.
	CallTimeout time.Duration
	// Now is the clock for commit dates and ages (default time.Now).
	Now func() time.Time
}

// Manager performs the operations. It is safe for concurrent use:
// operations on one session run one at a time, and those that write a
// user's checkout (Create, Apply) one at a time per repository.
type Manager struct {
	cfg   Config
	locks keyedLock
}

// minGit is the oldest git with what card relies on: GIT_CONFIG_COUNT and
// rev-parse --path-format (2.31).
const minGitMajor, minGitMinor = 2, 31

// New checks the configuration, makes the root private and checks git's
// version.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("worktree: the root %q is not an absolute path", cfg.Root)
	}
	cfg.Root = filepath.Clean(cfg.Root)
	if !filepath.IsAbs(cfg.Git) {
		return nil, fmt.Errorf("worktree: git %q is not an absolute path", cfg.Git)
	}
	if cfg.Identity == (Identity{}) {
		cfg.Identity = DefaultIdentity
	}
	if cfg.BranchPrefix == "" {
		cfg.BranchPrefix = "card/"
	}
	if !validBranchPrefix(cfg.BranchPrefix) {
		return nil, fmt.Errorf("worktree: branch prefix %q: %w", cfg.BranchPrefix, ErrBadName)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 2 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := ensurePrivateDir(cfg.Root, true); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg}
	major, minor, err := m.version(ctx, cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("worktree: %w", err)
	}
	if major < minGitMajor || major == minGitMajor && minor < minGitMinor {
		return nil, fmt.Errorf("worktree: git %d.%d is older than %d.%d, which isolation needs", major, minor, minGitMajor, minGitMinor)
	}
	return m, nil
}

func (m *Manager) now() time.Time { return m.cfg.Now() }

// ensurePrivateDir makes dir a directory of this user's that no one else
// can read or enter (0700), refusing a link or another user's directory:
// the worktrees hold the user's source, and a planted link would have card
// check it out wherever the link points.
func ensurePrivateDir(dir string, create bool) error {
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("worktree: %w", err)
		}
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("worktree: %w", err)
	}
	if st.Mode()&fs.ModeSymlink != 0 || !st.IsDir() {
		return fmt.Errorf("%s is not a directory (a link?): %w", dir, ErrUnsafeRoot)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to card's user: %w", dir, sys.Uid, ErrUnsafeRoot)
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("%s cannot be made 0700: %v: %w", dir, err, ErrUnsafeRoot)
		}
	}
	return nil
}

var branchPrefixPattern = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9_-]*/)*[A-Za-z0-9][A-Za-z0-9_-]*[/_-]$`)

func validBranchPrefix(p string) bool { return branchPrefixPattern.MatchString(p) }
