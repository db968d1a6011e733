// Package home is card's state directory as both sides see it: where it is,
// the checks that make it safe to trust (a private directory of this user,
// no links), the token and the discovery file a client finds the daemon
// by, and the lock one daemon holds. The daemon and the Go client share it,
// so a client reads the home with exactly the checks the daemon writes it
// under, without importing the daemon.
package home

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/card-dev/card/internal/atomicfile"
)

// Files inside the home directory.
const (
	TokenFileName     = "token"
	DiscoveryFileName = "daemon.json"
	LockFileName      = "daemon.lock"
	// RunsDBName is the run history.
	RunsDBName = "runs.db"
	// AgentSessionsDirName holds the conversations of the CLIs that keep
	// theirs in a file card names (Pi), one file per session, private as
	// the home is.
	AgentSessionsDirName = "agent-sessions"
	// WorktreesDirName holds isolated sessions' git worktrees, one
	// directory per session, private (0700).
	WorktreesDirName = "worktrees"
)

// tokenBytes is the token's entropy: 256 bits, as the design requires.
const tokenBytes = 32

// DefaultHome is where card keeps its state when neither --home nor
// CARD_HOME says otherwise: $XDG_STATE_HOME/card (~/.local/state/card) on
// Linux, ~/Library/Application Support/card on macOS.
func DefaultHome(getenv func(string) string) (string, error) {
	if h := getenv("CARD_HOME"); h != "" {
		return filepath.Abs(h)
	}
	home := getenv("HOME")
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("cannot find the home directory: set HOME, CARD_HOME or --home: %w", err)
		}
	}
	if runtime.GOOS == "darwin" {
		return filepath.Join(home, "Library", "Application Support", "card"), nil
	}
	if x := getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "card"), nil
	}
	return filepath.Join(home, ".local", "state", "card"), nil
}

// EnsureHome creates the home directory 0700, or checks the one that is
// there: it must be a real directory of this user that no one else can
// write to, in a directory not every user can write to (unless it is
// sticky, like /tmp). A home in a
// shared directory could otherwise be a link another user planted to a
// directory of theirs, and the daemon would write its token through it.
// Read and search bits for others are taken away (the token lives there);
// a home others can write to is refused rather than fixed, since what they
// may have put in it cannot be trusted.
func EnsureHome(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := checkHomeParent(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return fmt.Errorf("create the directory of home %s: %w", dir, err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create home %s: %w", dir, err)
		}
	}
	st, err := CheckHome(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("home %s has mode %04o and cannot be set to 0700: %w", dir, st.Mode().Perm(), err)
		}
	}
	return checkHomeFiles(dir)
}

// CheckHome is what a client checks before it trusts anything in a home:
// the home is a directory (not a link), owned by this user, that no one else
// can write to, in a directory that not every user can write to (unless it
// is sticky). It changes nothing.
func CheckHome(dir string) (os.FileInfo, error) {
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(dir)
		return nil, fmt.Errorf("home %s is a symbolic link (to %s): card does not follow a link for its home, since another user could have planted it; "+
			"give the real directory with --home or CARD_HOME, or remove the link", dir, target)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("home %s is not a directory; remove it or pick another with --home or CARD_HOME", dir)
	}
	if uid, ok := fileOwner(st); ok && uid != os.Geteuid() {
		return nil, fmt.Errorf("home %s belongs to uid %d, not you (uid %d): its owner could read the token or plant files in it; "+
			"use a home of your own with --home or CARD_HOME", dir, uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("home %s is writable by others (mode %04o): someone could have planted files in it; "+
			"check what is in it, then `chmod 700 %s`", dir, st.Mode().Perm(), dir)
	}
	if err := checkHomeParent(dir); err != nil {
		return nil, err
	}
	return st, nil
}

// checkHomeParent refuses a home whose directory every user may write to
// without the sticky bit: anyone who can write there can rename the home
// away and put a link or a directory of theirs in its place between two
// checks. /tmp (sticky) is fine. A directory writable by its group only is
// let be: with a private group per user (Fedora's umask 002 makes
// ~/.local/state 0775) that is the user alone, and telling the groups
// apart would mean reading the group database.
func checkHomeParent(dir string) error {
	parent := filepath.Dir(dir)
	st, err := os.Stat(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // created 0700 by us
	}
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o002 != 0 && st.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("home %s is in %s, which others can write to (mode %04o, no sticky bit): another user could replace the home; "+
			"pick a home under a directory only you can write to", dir, parent, st.Mode().Perm())
	}
	return nil
}

// checkHomeFiles refuses a token, daemon.json or lock file that is a link
// or belongs to someone else, naming the file and what to do. In a home
// that passed CheckHome only this user or root could have made one; a link
// there still means something is wrong, and following it would write the
// token elsewhere.
func checkHomeFiles(home string) error {
	for _, name := range []string{TokenFileName, DiscoveryFileName, LockFileName} {
		path := filepath.Join(home, name)
		st, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := checkPrivateFile(path, st); err != nil {
			return fmt.Errorf("%w; remove it (card writes a new one)", err)
		}
	}
	return nil
}

// checkPrivateFile refuses a link, a non-regular file or one owned by
// another user.
func checkPrivateFile(path string, st os.FileInfo) error {
	if st.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link: card does not follow links in its home, where one could send its token elsewhere", path)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if uid, ok := fileOwner(st); ok && uid != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not you (uid %d)", path, uid, os.Geteuid())
	}
	return nil
}

// readPrivateFile reads a small file of the home without following a link,
// and checks the file it opened (not the name, which could change between
// a check and an open): regular, this user's, and not writable by others
// (nor readable, when secret).
func readPrivateFile(path string, secret bool) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: card does not follow links in its home, where one could send its token elsewhere; remove it", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkPrivateFile(path, st); err != nil {
		return nil, err
	}
	mask := os.FileMode(0o022)
	if secret {
		mask = 0o077
	}
	if st.Mode().Perm()&mask != 0 {
		return nil, &looseFileError{path: path, mode: st.Mode().Perm(), secret: secret}
	}
	return io.ReadAll(io.LimitReader(f, 64<<10))
}

type looseFileError struct {
	path   string
	mode   os.FileMode
	secret bool
}

func (e *looseFileError) Error() string {
	if e.secret {
		return fmt.Sprintf("token file %s has mode %04o, readable by others; run `card token rotate` to replace it with a private one", e.path, e.mode)
	}
	return fmt.Sprintf("%s has mode %04o, writable by others; remove it (card writes a new one)", e.path, e.mode)
}

// NewToken writes a fresh token to <home>/token. The daemon makes one at
// every start, so a token read before a restart, or taken by whoever
// listened on a dead daemon's port, opens nothing.
func NewToken(home string) (string, error) {
	return writeNewToken(filepath.Join(home, TokenFileName))
}

// RotateToken replaces the token. A running daemon reads the file on every
// upgrade, so new connections need the new token at once; open connections
// stay open.
func RotateToken(home string) (string, error) {
	if err := EnsureHome(home); err != nil {
		return "", err
	}
	return writeNewToken(filepath.Join(home, TokenFileName))
}

// ReadToken reads and checks <home>/token: a regular file of this user,
// not a link, readable by no one else (the token is only a secret while it
// is private).
func ReadToken(home string) (string, error) {
	path := filepath.Join(home, TokenFileName)
	b, err := readPrivateFile(path, true)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 2*tokenBytes {
		return "", fmt.Errorf("token file %s is too short to be a card token; run `card token rotate`", path)
	}
	return tok, nil
}

func writeNewToken(path string) (string, error) {
	buf := make([]byte, tokenBytes)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	tok := hex.EncodeToString(buf)
	if err := atomicfile.Write(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write token %s: %w", path, err)
	}
	return tok, nil
}

// Discovery is <home>/daemon.json: how a client finds the running daemon.
type Discovery struct {
	URL string `json:"url"`
	PID int    `json:"pid"`
	// Exe is the daemon's executable, so a client can tell that the process
	// PID names is still the daemon that wrote the file and not another
	// program that was given the same pid later.
	Exe             string `json:"exe,omitempty"`
	Version         string `json:"version"`
	ProtocolVersion string `json:"protocol_version"`
	StartedAt       string `json:"started_at"`
}

// ReadDiscovery reads <home>/daemon.json, refusing a link or a file of
// another user: it says where to send the token.
func ReadDiscovery(home string) (Discovery, error) {
	var d Discovery
	path := filepath.Join(home, DiscoveryFileName)
	b, err := readPrivateFile(path, false)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// WriteDiscovery writes <home>/daemon.json (0600, atomically).
func WriteDiscovery(home string, d Discovery) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(home, DiscoveryFileName), append(b, '\n'), 0o600)
}

// RemoveDiscovery deletes daemon.json only if it is still ours, so a daemon
// exiting late cannot delete the file of one that started after it.
func RemoveDiscovery(home string, pid int) {
	d, err := ReadDiscovery(home)
	if err == nil && d.PID == pid {
		os.Remove(filepath.Join(home, DiscoveryFileName))
	}
}

// Lock is an exclusive flock on <home>/daemon.lock. The kernel drops it
// when the process dies, so a crash never leaves a stale lock behind.
type Lock struct{ f *os.File }

// AlreadyRunningError says another daemon holds the home.
type AlreadyRunningError struct {
	Home string
	PID  int
}

func (e *AlreadyRunningError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("another card daemon (pid %d) is already serving home %s; stop it first or pick another --home", e.PID, e.Home)
	}
	return fmt.Sprintf("another card daemon is already serving home %s; stop it first or pick another --home", e.Home)
}

// LockHome takes the home's lock, or says which daemon holds it.
func LockHome(home string) (*Lock, error) {
	path := filepath.Join(home, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: card does not follow links in its home; remove it", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	// Checked on the open file: the name could have changed since EnsureHome
	// looked at it.
	st, err := f.Stat()
	if err == nil {
		err = checkPrivateFile(path, st)
	}
	if err == nil && st.Mode().Perm() != 0o600 {
		err = f.Chmod(0o600)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w; remove it (card makes a new one)", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		pid := 0
		// The holder writes its pid right after locking; give it a moment.
		for i := 0; i < 20 && pid == 0; i++ {
			if b, rerr := os.ReadFile(path); rerr == nil {
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			if pid == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		return nil, &AlreadyRunningError{Home: home, PID: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}
