package client

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The kernel's own table, read back: a socket this test listens on appears
// with its address, this user's uid, and the inode its descriptor has.
func TestTheKernelsSocketTableIsReadBackRight(t *testing.T) {
	for _, network := range []struct{ net, addr, file string }{
		{"tcp4", "127.0.0.1:0", "/proc/net/tcp"},
		{"tcp4", "127.0.0.2:0", "/proc/net/tcp"},
		{"tcp6", "[::1]:0", "/proc/net/tcp6"},
	} {
		t.Run(network.addr, func(t *testing.T) {
			ln, err := net.Listen(network.net, network.addr)
			if err != nil && network.net == "tcp6" {
				t.Skipf("no IPv6 loopback here: %v", err)
			}
			require.NoError(t, err)
			defer ln.Close()
			want := ln.Addr().(*net.TCPAddr).AddrPort()
			f, err := ln.(*net.TCPListener).File()
			require.NoError(t, err)
			defer f.Close()
			var st syscall.Stat_t
			require.NoError(t, syscall.Fstat(int(f.Fd()), &st))

			b, err := os.ReadFile(network.file)
			require.NoError(t, err)
			var found []socket
			for _, s := range parseProcNet(string(b), network.net == "tcp6") {
				if s.addr.Port() == want.Port() && s.listen {
					found = append(found, s)
				}
			}
			require.Len(t, found, 1, "one listening socket on port %d", want.Port())
			assert.Equal(t, netip.AddrPortFrom(want.Addr().Unmap(), want.Port()), netip.AddrPortFrom(found[0].addr.Addr().Unmap(), found[0].addr.Port()))
			assert.Equal(t, os.Geteuid(), found[0].uid)
			assert.Equal(t, st.Ino, found[0].inode)

			p := readProcess(os.Getpid())
			assert.True(t, p.running)
			assert.Equal(t, os.Geteuid(), p.uid)
			exe, _ := os.Executable()
			assert.Equal(t, exe, p.exe)
			assert.True(t, p.sockets[found[0].inode], "this process holds the socket it listens on")
		})
	}
}

func TestAFixedSocketTableParses(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the sample was taken on a little-endian machine")
	}
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A0F2 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 812345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A0F2 0100007F:D5B0 01 00000000:00000000 00:00000000 00000000     0        0 812399 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1234 1 0000000000000000 100 0 0 10 0
   garbage line
`
	got := parseProcNet(tcp, false)
	require.Len(t, got, 3)
	assert.Equal(t, socket{addr: netip.MustParseAddrPort("127.0.0.1:41202"), listen: true, uid: 1001, inode: 812345}, got[0])
	assert.False(t, got[1].listen)
	assert.Equal(t, netip.MustParseAddrPort("0.0.0.0:8080"), got[2].addr)

	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:A0F2 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 55 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:A0F3 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 56 1 0000000000000000 100 0 0 10 0
`
	got = parseProcNet(tcp6, true)
	require.Len(t, got, 2)
	assert.Equal(t, netip.MustParseAddrPort("[::1]:41202"), got[0].addr)
	assert.Equal(t, "::ffff:127.0.0.1", got[1].addr.Addr().String())
	assert.Equal(t, strconv.Itoa(41203), strconv.Itoa(int(got[1].addr.Port())))
}
