// Package atomicfile replaces a file so that a reader never sees half of it:
// the token and daemon.json a client reads while the daemon writes them, a
// service file a supervisor reloads, detection's cache a restarted daemon
// reads.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data through a temp file in the same directory,
// given mode before any byte is written, synced, then renamed over path. On
// any error path is left as it was and the temp file is removed.
func Write(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
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
