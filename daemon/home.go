package daemon

import (
	"os"

	"github.com/card-dev/card/internal/home"
)

// DefaultHome is where card keeps its state (home.DefaultHome).
func DefaultHome(getenv func(string) string) (string, error) { return home.DefaultHome(getenv) }

// EnsureHome creates or checks the home directory (home.EnsureHome).
func EnsureHome(dir string) error { return home.EnsureHome(dir) }

// CheckHome is what a client checks before it trusts a home (home.CheckHome).
func CheckHome(dir string) (os.FileInfo, error) { return home.CheckHome(dir) }

// NewToken writes a fresh token to <home>/token (home.NewToken).
func NewToken(dir string) (string, error) { return home.NewToken(dir) }

// RotateToken replaces the token (home.RotateToken).
func RotateToken(dir string) (string, error) { return home.RotateToken(dir) }

// ReadToken reads and checks <home>/token (home.ReadToken).
func ReadToken(dir string) (string, error) { return home.ReadToken(dir) }

// ReadDiscovery reads <home>/daemon.json (home.ReadDiscovery).
func ReadDiscovery(dir string) (home.Discovery, error) { return home.ReadDiscovery(dir) }

func writeDiscovery(dir string, d home.Discovery) error { return home.WriteDiscovery(dir, d) }
func removeDiscovery(dir string, pid int)               { home.RemoveDiscovery(dir, pid) }
func lockHome(dir string) (*home.Lock, error)           { return home.LockHome(dir) }
