package client

import (
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"

	homedir "github.com/card-dev/card/internal/home"
)

// Before it sends the token a client makes sure that what listens on the
// daemon's port is this user's card daemon. When a daemon has died (a
// crash, or the moments of a shutdown), another local user can bind the
// port daemon.json still names; a client that sent the token there would
// hand it to them, with whatever the connection then carries. The facts
// are read from the operating system (listener_<os>.go); what they mean is
// decided here, over explicit inputs.

// ListenerError says the client refused to send the token: what listens on
// the daemon's port, or the process daemon.json names, is not this user's
// card daemon.
type ListenerError struct {
	Home string
	Port int
	// Reason says what was wrong, e.g. "port 41234 is held by uid 1001, not
	// you (uid 1000)".
	Reason string
}

func (e *ListenerError) Error() string {
	return fmt.Sprintf("%s: not sending the token (daemon.json of home %s names a daemon that is not there any more, or not yours; "+
		"start yours again with `card serve`, which writes a new daemon.json and token)", e.Reason, e.Home)
}

// target is where daemon.json says the daemon listens.
type target struct {
	addr netip.AddrPort
	pid  int
	// exe is the daemon's executable as it recorded it; empty from a
	// daemon that did not record one.
	exe string
}

// parseTarget accepts only the URL a daemon writes, ws://<IP>:<port>/rpc:
// a host name would be resolved to who knows where, and could not be
// matched against the kernel's table of listening sockets.
func parseTarget(disc homedir.Discovery) (target, error) {
	u, err := url.Parse(disc.URL)
	if err != nil {
		return target{}, fmt.Errorf("daemon.json: url %q: %w", disc.URL, err)
	}
	ip, ipErr := netip.ParseAddr(u.Hostname())
	port, portErr := strconv.ParseUint(u.Port(), 10, 16)
	if u.Scheme != "ws" || ipErr != nil || portErr != nil || port == 0 || u.Path != "/rpc" || u.RawQuery != "" || u.User != nil {
		return target{}, fmt.Errorf("daemon.json: url %q is not the ws://<IP address>:<port>/rpc a card daemon writes; remove the file and start the daemon again with `card serve`", disc.URL)
	}
	if disc.PID <= 0 {
		return target{}, fmt.Errorf("daemon.json: pid %d names no process; remove the file and start the daemon again with `card serve`", disc.PID)
	}
	return target{addr: netip.AddrPortFrom(ip.Unmap(), uint16(port)), pid: disc.PID, exe: disc.Exe}, nil
}

// socket is one TCP socket as the kernel lists it.
type socket struct {
	addr   netip.AddrPort
	listen bool
	uid    int
	inode  uint64
}

// process is what could be seen of the process daemon.json names.
type process struct {
	running bool
	uid     int
	// exe is its executable ("" when it could not be read).
	exe string
	// sockets are the inodes of the sockets it holds; nil when they could
	// not be listed.
	sockets map[uint64]bool
}

// accepts says whether a listening socket would take a connection to t:
// bound to t's address itself, to the wildcard of its family, or (for an
// IPv4 target) to the IPv6 wildcard or t's IPv4-mapped address.
func (s socket) accepts(t netip.AddrPort) bool {
	if !s.listen || s.addr.Port() != t.Port() {
		return false
	}
	a, want := s.addr.Addr(), t.Addr()
	switch {
	case a.Unmap() == want:
		return true
	case a.IsUnspecified() && a.Is4() == want.Is4():
		return true
	case a.IsUnspecified() && a.Is6() && want.Is4():
		return true
	}
	return false
}

// judgeListener decides, from the sockets of the system and the process
// daemon.json names, whether the token may go to t. me is this process's
// effective uid. A nil answer means every check passed; otherwise it is a
// *NoDaemonError (nothing is there) or a *ListenerError (something is, and
// it is not ours).
func judgeListener(home string, t target, me int, sockets []socket, p process) error {
	port := int(t.addr.Port())
	gone := func(why string) error {
		return &NoDaemonError{Home: home, PID: t.pid, Cause: fmt.Errorf("%s", why)}
	}
	refuse := func(format string, args ...any) error {
		return &ListenerError{Home: home, Port: port, Reason: fmt.Sprintf(format, args...)}
	}
	var held []socket
	for _, s := range sockets {
		if s.accepts(t.addr) {
			held = append(held, s)
		}
	}
	if len(held) == 0 {
		return gone(fmt.Sprintf("nothing listens on port %d", port))
	}
	// Every socket that could take the connection must be ours: which one
	// the kernel picks is not ours to choose.
	for _, s := range held {
		if s.uid != me {
			return refuse("port %d is held by uid %d, not you (uid %d)", port, s.uid, me)
		}
	}
	if !p.running {
		return gone(fmt.Sprintf("pid %d is not running, though something of yours listens on port %d", t.pid, port))
	}
	if p.uid != me {
		return refuse("pid %d, which daemon.json names, belongs to uid %d, not you (uid %d)", t.pid, p.uid, me)
	}
	if t.exe != "" && p.exe != "" && p.exe != t.exe {
		return gone(fmt.Sprintf("pid %d is now %s, not the card daemon (%s) that wrote daemon.json", t.pid, p.exe, t.exe))
	}
	if p.sockets != nil {
		for _, s := range held {
			if p.sockets[s.inode] {
				return nil
			}
		}
		return refuse("pid %d, which daemon.json names, does not hold the socket listening on port %d", t.pid, port)
	}
	return nil
}

// judgeProcess decides from the process alone, where the platform does not
// list sockets with their owners (macOS): the process daemon.json names is
// running, is this user's, and runs an executable of the daemon's name.
func judgeProcess(home string, t target, me int, p process) error {
	port := int(t.addr.Port())
	if !p.running {
		return &NoDaemonError{Home: home, PID: t.pid, Cause: fmt.Errorf("pid %d is not running", t.pid)}
	}
	if p.uid != me {
		return &ListenerError{Home: home, Port: port, Reason: fmt.Sprintf("pid %d, which daemon.json names, belongs to uid %d, not you (uid %d)", t.pid, p.uid, me)}
	}
	if t.exe != "" && p.exe != "" && !sameCommand(p.exe, t.exe) {
		return &NoDaemonError{Home: home, PID: t.pid, Cause: fmt.Errorf("pid %d is now %s, not the card daemon (%s) that wrote daemon.json", t.pid, p.exe, t.exe)}
	}
	return nil
}

// sameCommand compares a process's command name, which the kernel may cut
// short (16 bytes on macOS), with the executable's path.
func sameCommand(comm, exe string) bool {
	base := filepath.Base(exe)
	if comm == base {
		return true
	}
	return len(comm) >= 15 && len(base) > len(comm) && base[:len(comm)] == comm
}
