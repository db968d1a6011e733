//go:build unix && !linux

package spawn

// holdDir opens the run's working directory and returns the name to start
// the child in and a release to call once the child has started; see
// holdDirByName for what it cannot catch here.
func holdDir(dir string) (string, func(), error) { return holdDirByName(dir) }
