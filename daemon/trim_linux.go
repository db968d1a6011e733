package daemon

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// dropExecutablePages tells the kernel the daemon no longer needs the
// resident pages of its executable's read-only mappings (code, read-only
// data): MADV_DONTNEED on a private mapping that was never written reads
// the same bytes from the file on the next touch. Writable mappings (data,
// the GOT the dynamic loader filled in) are never touched: their pages may
// differ from the file. It returns how many mappings it advised.
func dropExecutablePages() (int, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	var exe []byte
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// start-end perms offset dev inode path
		f := bytes.Fields(sc.Bytes())
		if len(f) < 6 || f[4][0] == '0' && len(f[4]) == 1 {
			continue
		}
		if exe == nil {
			exe = f[5] // the first file mapping is the executable's
		}
		perms := f[1]
		if !bytes.Equal(f[5], exe) || len(perms) != 4 || perms[1] == 'w' || perms[3] != 'p' {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte{'-'})
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), syscall.MADV_DONTNEED); errno != 0 {
			return n, errno
		}
		n++
	}
	return n, sc.Err()
}
