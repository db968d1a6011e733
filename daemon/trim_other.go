//go:build !linux

package daemon

// dropExecutablePages does nothing where there is no /proc/self/maps.
func dropExecutablePages() (int, error) { return 0, nil }
