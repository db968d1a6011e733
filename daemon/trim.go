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

// trimAfterStart, once the daemon has been up for trimAfter, returns to the
// system the heap that start-up used and freed (reading the config,
// detecting the agents, opening the history): the Go runtime would keep it
// for minutes otherwise, and an idle daemon's private memory is mostly that.
//
// It deliberately touches nothing but the Go heap. Pages of the binary and
// of the libraries it maps are the kernel's to manage: clean file pages are
// shared and dropped under pressure anyway, and a mapping that is read-only
// now may still have been written once (the dynamic loader's relocations,
// made read-only afterwards), so advising it away would bring back the
// file's bytes in place of the loader's and break the next thread start.
func (d *Daemon) trimAfterStart() {
	t := time.AfterFunc(trimAfter, func() {
		start := time.Now()
		debug.FreeOSMemory()
		d.log.Debug("returned start-up's freed heap to the system", zap.Duration("took", time.Since(start)))
	})
	d.onClose(func(context.Context) { t.Stop() })
}
