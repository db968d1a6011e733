package client

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	homedir "github.com/card-dev/card/internal/home"
)

func TestOnlyTheURLADaemonWritesIsAccepted(t *testing.T) {
	ok := []string{"ws://127.0.0.1:41234/rpc", "ws://[::1]:41234/rpc", "ws://127.0.0.2:1/rpc"}
	for _, u := range ok {
		_, err := parseTarget(homedir.Discovery{URL: u, PID: 7})
		assert.NoError(t, err, u)
	}
	bad := []string{"ws://localhost:41234/rpc", "wss://127.0.0.1:41234/rpc", "ws://127.0.0.1/rpc",
		"ws://127.0.0.1:41234/other", "ws://127.0.0.1:41234/rpc?x=1", "ws://u@127.0.0.1:41234/rpc", "ws://127.0.0.1:0/rpc", "::"}
	for _, u := range bad {
		_, err := parseTarget(homedir.Discovery{URL: u, PID: 7})
		assert.Error(t, err, u)
	}
	_, err := parseTarget(homedir.Discovery{URL: ok[0]})
	assert.Error(t, err, "a daemon.json without a pid")
}

func TestTheTokenGoesOnlyToThisUsersDaemonHoldingThePort(t *testing.T) {
	const me, them, pid = 1000, 1001, 4242
	tgt := target{addr: netip.MustParseAddrPort("127.0.0.1:41234"), pid: pid, exe: "/usr/bin/card"}
	sock := func(addr string, uid int, inode uint64) socket {
		return socket{addr: netip.MustParseAddrPort(addr), listen: true, uid: uid, inode: inode}
	}
	ours := sock("127.0.0.1:41234", me, 77)
	daemonProc := process{running: true, uid: me, exe: "/usr/bin/card", sockets: map[uint64]bool{77: true}}

	cases := []struct {
		name    string
		sockets []socket
		proc    process
		// want is "" for a pass, "gone" for a *NoDaemonError, or the
		// reason of a *ListenerError.
		want string
	}{
		{"the daemon itself", []socket{ours}, daemonProc, ""},
		{"descriptors that cannot be listed leave the uid checks", []socket{ours}, process{running: true, uid: me, exe: "/usr/bin/card"}, ""},
		{"nothing listens", nil, daemonProc, "gone"},
		{"a connected socket on the port is not a listener", []socket{{addr: netip.MustParseAddrPort("127.0.0.1:41234"), uid: them, inode: 9}}, daemonProc, "gone"},
		{"another port", []socket{sock("127.0.0.1:41235", them, 9)}, daemonProc, "gone"},
		{"another user took the port", []socket{sock("127.0.0.1:41234", them, 9)}, process{}, "port 41234 is held by uid 1001, not you (uid 1000)"},
		{"another user on the IPv4 wildcard", []socket{sock("0.0.0.0:41234", them, 9)}, process{}, "port 41234 is held by uid 1001, not you (uid 1000)"},
		{"another user on the IPv6 wildcard", []socket{sock("[::]:41234", them, 9)}, process{}, "port 41234 is held by uid 1001, not you (uid 1000)"},
		{"another user on the mapped address", []socket{sock("[::ffff:127.0.0.1]:41234", them, 9)}, process{}, "port 41234 is held by uid 1001, not you (uid 1000)"},
		{"ours and another user's on the same port", []socket{ours, sock("0.0.0.0:41234", them, 9)}, daemonProc, "port 41234 is held by uid 1001, not you (uid 1000)"},
		{"another address of the same port is no matter", []socket{ours, sock("127.0.0.2:41234", them, 9), sock("[::1]:41234", them, 10)}, daemonProc, ""},
		{"the daemon died, something of ours holds the port", []socket{ours}, process{}, "gone"},
		{"the pid is another user's", []socket{ours}, process{running: true, uid: them, exe: "/usr/bin/card"}, "pid 4242, which daemon.json names, belongs to uid 1001, not you (uid 1000)"},
		{"the pid was reused by another program", []socket{ours}, process{running: true, uid: me, exe: "/usr/bin/sleep", sockets: map[uint64]bool{}}, "gone"},
		{"the daemon does not hold the listening socket", []socket{ours}, process{running: true, uid: me, exe: "/usr/bin/card", sockets: map[uint64]bool{5: true}}, "pid 4242, which daemon.json names, does not hold the socket listening on port 41234"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := judgeListener("/h", tgt, me, c.sockets, c.proc)
			switch c.want {
			case "":
				assert.NoError(t, err)
			case "gone":
				var nd *NoDaemonError
				require.ErrorAs(t, err, &nd)
				assert.Equal(t, pid, nd.PID)
			default:
				var le *ListenerError
				require.ErrorAs(t, err, &le)
				assert.Equal(t, c.want, le.Reason)
				assert.Contains(t, err.Error(), c.want+": not sending the token")
				assert.False(t, errors.As(err, new(*NoDaemonError)))
			}
		})
	}
}

func TestADaemonJSONWithoutExeSkipsOnlyTheExecutableCheck(t *testing.T) {
	const me = 1000
	tgt := target{addr: netip.MustParseAddrPort("127.0.0.1:41234"), pid: 4242}
	ours := socket{addr: tgt.addr, listen: true, uid: me, inode: 77}
	assert.NoError(t, judgeListener("/h", tgt, me, []socket{ours}, process{running: true, uid: me, exe: "/any", sockets: map[uint64]bool{77: true}}))
	assert.ErrorAs(t, judgeListener("/h", tgt, me, []socket{ours}, process{running: true, uid: me, exe: "/any", sockets: map[uint64]bool{}}), new(*ListenerError))
}

func TestWithoutSocketsTheProcessAloneIsJudged(t *testing.T) {
	const me = 501
	tgt := target{addr: netip.MustParseAddrPort("127.0.0.1:41234"), pid: 77, exe: "/Applications/Card.app/Contents/MacOS/card-daemon-long-name"}
	assert.NoError(t, judgeProcess("/h", tgt, me, process{running: true, uid: me, exe: "card-daemon-lon"}), "macOS cuts the command name to 15 bytes")
	assert.ErrorAs(t, judgeProcess("/h", tgt, me, process{}), new(*NoDaemonError))
	assert.ErrorAs(t, judgeProcess("/h", tgt, me, process{running: true, uid: me, exe: "python3"}), new(*NoDaemonError))
	var le *ListenerError
	require.ErrorAs(t, judgeProcess("/h", tgt, me, process{running: true, uid: 502, exe: "card"}), &le)
	assert.Equal(t, "pid 77, which daemon.json names, belongs to uid 502, not you (uid 501)", le.Reason)
}
