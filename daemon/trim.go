package daemon

import (
	"context"
	"runtime/debug"
	"time"

	"go.uber.org/zap"
)

// trimAfter is how long after start the daemon hands back what only
// start-up needed.
const trimAfter = 3 * time.Second

// trimAfterStart, once the daemon has been up for trimAfter, returns the
// heap start-up freed and lets go of the pages of its own binary that
// start-up touched. An idle daemon's resident memory is mostly those pages:
// of about 21 MiB, some 17 MiB were the executable's code and read-only
// data, mapped in 64 KiB at a time as start-up ran the init of every
// package once, against 3 MiB of heap and stacks. They are clean copies of
// the file: the kernel drops them under pressure anyway and maps them again
// from the page cache when code runs, so giving them back costs a request
// a few minor faults and keeps nothing from working.
func (d *Daemon) trimAfterStart() {
	t := time.AfterFunc(trimAfter, func() {
		start := time.Now()
		debug.FreeOSMemory()
		n, err := dropExecutablePages()
		if err != nil {
			d.log.Debug("could not let go of the binary's start-up pages", zap.Error(err))
			return
		}
		d.log.Debug("let go of start-up memory", zap.Int("binary_mappings", n), zap.Duration("took", time.Since(start)))
	})
	d.onClose(func(context.Context) { t.Stop() })
}
