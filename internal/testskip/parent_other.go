//go:build !linux

package testskip

import "syscall"

// Without /proc, go test's own descriptors are out of reach: the terminal
// alone carries the line past go test.
func streamed() bool { return false }

func writeParentStderr(string) *syscall.Stat_t { return nil }

func isControllingTerminal(syscall.Stat_t) bool { return false }
