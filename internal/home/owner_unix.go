//go:build unix

package home

import (
	"os"
	"syscall"
)

// fileOwner is the uid that owns a file; ok is false where the platform
// does not say.
func fileOwner(st os.FileInfo) (uid int, ok bool) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid), true
	}
	return 0, false
}
