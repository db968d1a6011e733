package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/card-dev/card/acp/agentside"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/rpc/rpcclient"
)

// ACPPath is where the daemon speaks the Agent Client Protocol: one ACP
// message per WebSocket text frame, on the listener of /rpc.
const ACPPath = "/acp"

// acpHandler serves ACP over WebSocket. The upgrade passes the gate of
// /rpc (token, Host, Origin) and needs the acp access class. Each ACP
// connection then works through a connection of its own to /rpc that
// carries the same Origin: it holds exactly the classes the ACP client
// would hold on /rpc, so an ACP session can do nothing its client could
// not do there (an origin granted acp but not write starts no edit
// session, and one without approve is never asked a question), and ACP
// gets card's sessions, their guard and their history unchanged.
func (d *Daemon) acpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		subprotocol, grants, origin, ok := d.rpcSrv.Admit(w, r)
		if !ok {
			return
		}
		if !grants.Has(rpc.AccessACP) {
			who := "this connection"
			if origin != "" {
				who = "connections from " + origin
			}
			d.rpcSrv.Refuse(w, r, http.StatusForbidden, fmt.Sprintf(
				"forbidden: %s needs the \"acp\" access class, which %s are not granted (granted: %s); an operator who trusts that page with it adds \"acp\" to [origins.%q] grants in %s",
				ACPPath, who, grants, origin, ConfigFileName))
			return
		}
		opts := &websocket.AcceptOptions{InsecureSkipVerify: true} // the gate checked Origin, more strictly
		if subprotocol != "" {
			opts.Subprotocols = []string{subprotocol}
		}
		ws, err := websocket.Accept(w, r, opts)
		if err != nil {
			d.log.Info("acp upgrade failed", zap.String("remote", r.RemoteAddr), zap.Error(err))
			return
		}
		ws.SetReadLimit(d.cfg.MaxMessageBytes)
		d.serveACP(ws, origin)
	})
}

func (d *Daemon) serveACP(ws *websocket.Conn, origin string) {
	log := d.log.Named("acp")
	// Its sessions' events come in process, each subscription on its own
	// goroutine, which may wait while the editor catches up.
	srv := agentside.New(agentside.Config{Version: Version, EventsMayWait: true, Origin: origin, Logf: func(format string, args ...any) {
		log.Info(fmt.Sprintf(format, args...))
	}})
	token, err := d.tokens.current()
	if err != nil {
		_ = ws.Close(websocket.StatusInternalError, "the daemon cannot read its token")
		return
	}
	header := http.Header{}
	if origin != "" {
		header.Set("Origin", origin)
	}
	// The loopback's sessions' events come to its client in process: the
	// daemon would otherwise encode each onto the socket, and the client
	// read it back, once more per event than an /rpc client costs.
	var loop atomic.Pointer[client.Client]
	ctx, stop := context.WithCancel(d.ctx)
	defer stop()
	key, err := d.loopbacks.add(func(method string, params json.RawMessage) {
		if c := loop.Load(); c != nil && ctx.Err() == nil {
			c.Deliver(method, params)
		}
	})
	if err != nil {
		_ = ws.Close(websocket.StatusInternalError, "the daemon cannot serve this connection")
		return
	}
	header.Set(loopbackHeader, key)
	dctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	c, err := client.Dial(dctx, client.Options{URL: d.url, Token: string(token), OnApprove: srv.Approve,
		RPC: rpcclient.ClientOptions{Header: header}})
	cancel()
	d.loopbacks.drop(key) // claimed by the upgrade, or never to be
	if err != nil {
		log.Warn("acp: cannot reach /rpc", zap.Error(err))
		_ = ws.Close(websocket.StatusTryAgainLater, "card cannot serve this connection now; try again")
		return
	}
	defer c.Close()
	loop.Store(c)
	srv.SetBackend(c)
	go func() {
		select {
		case <-c.Done(): // the daemon shuts down, or dropped the loopback
			stop()
		case <-ctx.Done():
		}
	}()
	if err := srv.Serve(ctx, wsTransport{ws}); err != nil && ctx.Err() == nil {
		log.Info("acp connection ended", zap.Error(err))
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")
}

// wsTransport is ACP over WebSocket: one message per text frame.
type wsTransport struct{ ws *websocket.Conn }

func (t wsTransport) Read(ctx context.Context) ([]byte, error) {
	for {
		typ, b, err := t.ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		if typ == websocket.MessageText {
			return b, nil
		}
	}
}

func (t wsTransport) Write(ctx context.Context, b []byte) error {
	wctx, cancel := context.WithTimeout(ctx, rpc.DefaultWriteTimeout)
	defer cancel()
	return t.ws.Write(wctx, websocket.MessageText, b)
}
