package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files inside the home directory.
const (
	TokenFileName     = "token"
	DiscoveryFileName = "daemon.json"
	LockFileName      = "daemon.lock"
	// RunsDBName is the run history.
	RunsDBName = "runs.db"
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

// EnsureHome creates the home directory 0700, and tightens it to 0700 if it
// exists with looser permissions: it holds the token.
func EnsureHome(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create home %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("home %s is not a directory", dir)
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("home %s has mode %o and cannot be set to 0700: %w", dir, st.Mode().Perm(), err)
		}
	}
	return nil
}

// LoadOrCreateToken returns the token in <home>/token, creating it on first
// start. It is kept across restarts so clients need not re-read it.
func LoadOrCreateToken(home string) (string, error) {
	path := filepath.Join(home, TokenFileName)
	tok, err := ReadToken(home)
	if err == nil {
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return writeNewToken(path)
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

// ReadToken reads and checks <home>/token. A file readable by others is
// refused rather than used: the token is only a secret while it is private.
func ReadToken(home string) (string, error) {
	path := filepath.Join(home, TokenFileName)
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %o, readable by others; run `card token rotate` to replace it with a private one", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
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
	if err := writeFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write token %s: %w", path, err)
	}
	return tok, nil
}

// writeFileAtomic writes through a temp file and a rename, so a reader never
// sees a half-written token or discovery file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Discovery is <home>/daemon.json: how a client finds the running daemon.
type Discovery struct {
	URL             string `json:"url"`
	PID             int    `json:"pid"`
	Version         string `json:"version"`
	ProtocolVersion string `json:"protocol_version"`
	StartedAt       string `json:"started_at"`
}

// ReadDiscovery reads <home>/daemon.json.
func ReadDiscovery(home string) (Discovery, error) {
	var d Discovery
	b, err := os.ReadFile(filepath.Join(home, DiscoveryFileName))
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", filepath.Join(home, DiscoveryFileName), err)
	}
	return d, nil
}

func writeDiscovery(home string, d Discovery) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(home, DiscoveryFileName), append(b, '\n'), 0o600)
}

// removeDiscovery deletes daemon.json only if it is still ours, so a daemon
// exiting late cannot delete the file of one that started after it.
func removeDiscovery(home string, pid int) {
	d, err := ReadDiscovery(home)
	if err == nil && d.PID == pid {
		os.Remove(filepath.Join(home, DiscoveryFileName))
	}
}

// homeLock is an exclusive flock on <home>/daemon.lock. The kernel drops it
// when the process dies, so a crash never leaves a stale lock behind.
type homeLock struct{ f *os.File }

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

func lockHome(home string) (*homeLock, error) {
	path := filepath.Join(home, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
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
	return &homeLock{f: f}, nil
}

func (l *homeLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}
