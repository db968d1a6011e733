package testskip

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// parentFD is where go test's (the parent's) descriptor n is, through
// /proc: the one way to reach go test's own stderr from a test binary
// whose stdout and stderr go test keeps.
func parentFD(n int) string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getppid(), n) }

// streamed reports whether this binary's stderr is already go test's own
// stdout or stderr (go test in a package's directory, or the binary run by
// hand), where the line was written once already.
func streamed() bool {
	var mine syscall.Stat_t
	if syscall.Fstat(2, &mine) != nil {
		return false
	}
	for _, n := range []int{1, 2} {
		var theirs syscall.Stat_t
		if syscall.Stat(parentFD(n), &theirs) == nil && sameFile(mine, theirs) {
			return true
		}
	}
	return false
}

// writeParentStderr writes s to go test's stderr and returns what it wrote
// to, or nil. A pipe or a terminal takes the line whole; a regular file
// only when go test writes it in append mode: otherwise go test's next
// write, at its own offset, would land on the line.
func writeParentStderr(s string) *syscall.Stat_t {
	path := parentFD(2)
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return nil
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFIFO, syscall.S_IFCHR:
	case syscall.S_IFREG:
		if !parentAppends(2) {
			return nil
		}
	default:
		return nil
	}
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if _, err := io.WriteString(f, s); err != nil {
		return nil
	}
	return &st
}

// parentAppends reports whether go test's descriptor n is open in append
// mode (its fdinfo's flags, in octal).
func parentAppends(n int) bool {
	fd, err := syscall.Open(fmt.Sprintf("/proc/%d/fdinfo/%d", os.Getppid(), n), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	buf := make([]byte, 4096)
	k, err := syscall.Read(fd, buf)
	if err != nil || k <= 0 {
		return false
	}
	for _, line := range bytes.Split(buf[:k], []byte("\n")) {
		v, ok := bytes.CutPrefix(line, []byte("flags:"))
		if !ok {
			continue
		}
		flags, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 8, 64)
		return err == nil && flags&syscall.O_APPEND != 0
	}
	return false
}

// isControllingTerminal reports whether st is this process's controlling
// terminal (/proc/self/stat's tty_nr): go test's stderr on a terminal is
// the terminal /dev/tty reaches, and one line there is enough. (/dev/tty
// itself cannot tell: its own device number is the same for every
// terminal.)
func isControllingTerminal(st syscall.Stat_t) bool {
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		return false
	}
	fd, err := syscall.Open("/proc/self/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	buf := make([]byte, 4096)
	k, err := syscall.Read(fd, buf)
	if err != nil || k <= 0 {
		return false
	}
	// The fields after the command's closing parenthesis: state, ppid,
	// pgrp, session, tty_nr, …
	i := bytes.LastIndexByte(buf[:k], ')')
	if i < 0 {
		return false
	}
	fields := bytes.Fields(buf[i+1 : k])
	if len(fields) < 5 {
		return false
	}
	nr, err := strconv.ParseUint(string(fields[4]), 10, 64)
	return err == nil && nr != 0 && devMajorMinor(nr) == devMajorMinor(uint64(st.Rdev))
}

// devMajorMinor splits a device number as Linux encodes it for stat and
// /proc alike.
func devMajorMinor(dev uint64) [2]uint64 {
	return [2]uint64{(dev >> 8) & 0xfff, (dev & 0xff) | ((dev >> 12) & 0xfff00)}
}
