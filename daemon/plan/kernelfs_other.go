//go:build !linux

package plan

import "os"

// kernelFS names the kernel file system f is on, or "": only Linux's are
// known.
func kernelFS(*os.File) string { return "" }
