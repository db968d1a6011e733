//go:build linux

package spawn

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// holdDir opens the run's working directory and returns the name to start
// the child in and a release to call once the child has started (or failed
// to). The daemon judged dir by its name; a directory on the way to it may
// be swapped for a symlink between that check and the start, so the name is
// not trusted twice: the directory is held by descriptor, the kernel says
// where the held directory is, and that must be dir itself. The child then
// changes into the descriptor's /proc link, which reaches the held
// directory whatever its name has become since.
func holdDir(dir string) (string, func(), error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("working directory %q cannot be opened: %v", dir, err)
	}
	release := func() { _ = unix.Close(fd) }
	link := "/proc/self/fd/" + strconv.Itoa(fd)
	real, err := os.Readlink(link)
	if err != nil {
		// No /proc: compare the held directory with the name, as elsewhere.
		release()
		return holdDirByName(dir)
	}
	if real != filepath.Clean(dir) {
		release()
		return "", nil, dirSwapped(dir, real)
	}
	return link, release, nil
}
