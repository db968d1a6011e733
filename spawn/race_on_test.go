//go:build race

package spawn

// raceDetector: the race detector's instrumentation allocates where the
// code itself does not, so allocation counts mean nothing under it.
const raceDetector = true
