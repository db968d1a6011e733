package daemon

import (
	"net"
	"strings"
)

// sdNotify sends a state line to systemd when NOTIFY_SOCKET is set, so a
// Type=notify unit is "started" only once the daemon is really listening.
// Without the variable it does nothing: most supervisors do not speak it.
func sdNotify(socket, state string) error {
	if socket == "" {
		return nil
	}
	if strings.HasPrefix(socket, "@") {
		socket = "\x00" + socket[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
