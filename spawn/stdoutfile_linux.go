//go:build linux

package spawn

import (
	"os"

	"golang.org/x/sys/unix"
)

// inotifyWatch wakes on each write to the file (IN_MODIFY), so a line the
// child writes reaches the reader at once, and an idle run costs nothing.
type inotifyWatch struct{ f *os.File }

func newGrowthWatch(path string) (growthWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	// Non-blocking, so the runtime's poller waits on it and Close ends a
	// Wait in progress.
	return &inotifyWatch{f: os.NewFile(uintptr(fd), "inotify")}, nil
}

// Wait takes every event queued so far: one wake-up covers them all.
func (w *inotifyWatch) Wait() error {
	var buf [4096]byte
	_, err := w.f.Read(buf[:])
	return err
}

func (w *inotifyWatch) Close() error { return w.f.Close() }
