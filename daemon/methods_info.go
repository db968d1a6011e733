package daemon

import (
	"context"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/rpc"
)

func (d *Daemon) registerInfo() {
	rpc.Register(d.registry, "daemon.info", rpc.Doc{
		Access:  rpc.AccessRead,
		Summary: "Who this daemon is: version, protocol version, pid, start time, home, address, and the guard's base ancestry.",
		Description: "Takes no params. `ancestry` is the CAR_INVOKED_BY chain the daemon read once at startup (empty when it was started by a supervisor), `max_chain` the chain limit. " +
			"`last_crash`, when present, is the last time a daemon of this home did not stop cleanly: its Go crash output (kind crash, with the log's first lines and its file) " +
			"or an end nobody saw (kind unclean_exit: SIGKILL, the out-of-memory killer, a fault in C code, the machine stopping).",
	}, func(ctx context.Context, _ api.InfoParams) (rpc.Encoded[api.Info], error) {
		return d.infoAnswer()
	})
	rpc.Fast(d.registry, "daemon.info", func(ctx context.Context, _ api.InfoParams) (rpc.Encoded[api.Info], bool) {
		e, err := d.infoAnswer()
		return e, err == nil
	})
}

// infoAnswer is daemon.info's answer. Nothing in it changes while the daemon
// runs: it is encoded once, at the first call (the listener exists by
// then), and written as is after.
func (d *Daemon) infoAnswer() (rpc.Encoded[api.Info], error) {
	d.infoOnce.Do(func() { d.infoJSON, d.infoErr = rpc.Encode(d.info()) })
	return d.infoJSON, d.infoErr
}

func (d *Daemon) info() api.Info {
	addr := ""
	if d.ln != nil {
		addr = d.ln.Addr().String()
	}
	return api.Info{
		Version:         Version,
		ProtocolVersion: ProtocolVersion,
		PID:             d.pid,
		StartedAt:       d.startedAt.Format(time.RFC3339),
		Home:            d.home,
		Addr:            addr,
		URL:             d.url,
		Ancestry:        append([]string{}, d.guard.Ancestry...),
		MaxChain:        d.guard.MaxChain,
		LastCrash:       d.lastCrash,
	}
}
