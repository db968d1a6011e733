//go:build !linux

package daemon

import "os"

// kernelFS names the kernel file system f is on, or "": only Linux's are
// known.
func kernelFS(*os.File) string { return "" }
