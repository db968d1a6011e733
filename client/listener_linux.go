package client

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// verifyListener checks, before the token is sent, that the socket
// listening on the daemon's address belongs to this user and is held by the
// process daemon.json names, which must be running, this user's, and the
// executable that wrote the file. Everything is read from /proc: the
// kernel's socket tables (/proc/net/tcp and tcp6: address, state, owner
// uid, inode) and the process's status, exe link and open descriptors.
func verifyListener(home string, t target) error {
	var sockets []socket
	for _, f := range []struct {
		path string
		v6   bool
	}{{"/proc/net/tcp", false}, {"/proc/net/tcp6", true}} {
		b, err := os.ReadFile(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return &ListenerError{Home: home, Port: int(t.addr.Port()), Reason: "cannot read the kernel's socket table " + f.path + ": " + err.Error()}
		}
		sockets = append(sockets, parseProcNet(string(b), f.v6)...)
	}
	return judgeListener(home, t, os.Geteuid(), sockets, readProcess(t.pid))
}

// tcpListen is the state column's value for a listening socket.
const tcpListen = 0x0A

// parseProcNet reads /proc/net/tcp or /proc/net/tcp6. Each line after the
// header is "sl local rem st tx:rx tr:when retrnsmt uid timeout inode …";
// addresses are hex, the IP as the kernel's 32-bit words in host byte
// order, the port as a number. Lines that do not parse are skipped.
func parseProcNet(text string, v6 bool) []socket {
	var out []socket
	lines := strings.Split(text, "\n")
	for _, line := range lines[min(1, len(lines)):] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		addr, ok := parseProcAddr(f[1], v6)
		if !ok {
			continue
		}
		st, err1 := strconv.ParseUint(f[3], 16, 8)
		uid, err2 := strconv.Atoi(f[7])
		inode, err3 := strconv.ParseUint(f[9], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, socket{addr: addr, listen: st == tcpListen, uid: uid, inode: inode})
	}
	return out
}

func parseProcAddr(s string, v6 bool) (netip.AddrPort, bool) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || (len(raw) != 4 && len(raw) != 16) || (len(raw) == 16) != v6 {
		return netip.AddrPort{}, false
	}
	// Each 32-bit word was printed as a number in host byte order; turn
	// each back into the bytes in memory, which are in network order.
	ip := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a, uint16(port)), true
}

// readProcess reads what /proc shows of pid. A process that is gone, or a
// zombie, is not running. The descriptor list is left nil when it cannot
// be read (a process that made itself undumpable); the uid checks still
// hold then.
func readProcess(pid int) process {
	dir := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return process{}
	}
	p := process{running: true, uid: -1}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		switch {
		case k == "State" && len(f) > 0 && (f[0] == "Z" || f[0] == "X"):
			p.running = false
		case k == "Uid" && len(f) > 1:
			// real, effective, saved, filesystem: the effective uid is
			// whose rights the process has.
			p.uid, _ = strconv.Atoi(f[1])
		}
	}
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		// A binary replaced on disk while it runs (an upgrade) reads
		// "<path> (deleted)"; it is still the program that was started.
		p.exe = strings.TrimSuffix(exe, " (deleted)")
	}
	if fds, err := os.ReadDir(dir + "/fd"); err == nil {
		p.sockets = map[uint64]bool{}
		for _, fd := range fds {
			link, err := os.Readlink(dir + "/fd/" + fd.Name())
			if err != nil {
				continue
			}
			if n, ok := strings.CutPrefix(link, "socket:["); ok {
				if ino, err := strconv.ParseUint(strings.TrimSuffix(n, "]"), 10, 64); err == nil {
					p.sockets[ino] = true
				}
			}
		}
	}
	return p
}
