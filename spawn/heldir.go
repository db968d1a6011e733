package spawn

import (
	"fmt"
	"os"
)

// dirSwapped is the failure of a run whose working directory is no longer
// the directory that was checked.
func dirSwapped(dir, now string) error {
	return fmt.Errorf("working directory %q changed after it was checked (it now leads to %s: a directory on the way was replaced or is a symlink); the agent was not started", dir, now)
}

// holdDirByName is holdDir where the kernel cannot say where a descriptor
// points: the directory is held open and must be the one dir names, itself
// no symlink, at the moment of the check. A directory on the way swapped
// after that check and before the child changes into it is not caught.
func holdDirByName(dir string) (string, func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return "", nil, fmt.Errorf("working directory %q cannot be opened: %v", dir, err)
	}
	held, err := f.Stat()
	if err != nil {
		f.Close()
		return "", nil, fmt.Errorf("working directory %q: %v", dir, err)
	}
	named, err := os.Lstat(dir)
	if err != nil || !os.SameFile(held, named) {
		f.Close()
		return "", nil, dirSwapped(dir, "another directory")
	}
	return dir, func() { f.Close() }, nil
}
