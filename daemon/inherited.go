package daemon

import (
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/spawn"
)

// closeInheritedOnExec marks every descriptor above stderr close-on-exec
// and returns how many it had to. card opens each of its own with that flag
// (Go always does), so one without it was left open by whatever started
// card — a terminal, a supervisor, an editor's plugin host — and would
// otherwise reach every agent card runs: a socket or a file of the
// launcher's, in the hands of a model-driven process. Marked, not closed:
// card itself may still have been handed it on purpose.
func closeInheritedOnExec() int {
	ents, err := os.ReadDir("/dev/fd")
	if err != nil {
		return 0
	}
	marked := 0
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // gone (the directory's own descriptor) or already marked
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err == nil {
			marked++
		}
	}
	return marked
}

// sweepPrivateDirs removes what a crashed card left of its runs' private
// directories in the temporary directory (the agents' private files, the
// attachments' copies), leaving every live process's alone.
func sweepPrivateDirs(env map[string]string, log *zap.Logger) {
	tmp := proc.TempDir(env)
	removed, err := spawn.SweepPrivateDirs(tmp, time.Now())
	if err != nil {
		log.Warn("could not look for leftover private directories", zap.String("dir", tmp), zap.Error(err))
		return
	}
	if len(removed) > 0 {
		log.Info("removed private directories a previous card left behind", zap.Strings("dirs", removed))
	}
}
