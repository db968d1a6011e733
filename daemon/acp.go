package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/card-dev/card/acp/agentside"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/rpc"
)

// ACPPath is where the daemon speaks the Agent Client Protocol: one ACP
// message per WebSocket text frame, on the listener of /rpc.
const ACPPath = "/acp"

// acpHandler serves ACP over WebSocket. The upgrade passes the gate of
// /rpc (token, Host, Origin) and needs the acp access class. Each ACP
// connection then calls card's methods in process, through a connection to
// the method registry that carries the grants and origin the ACP client
// would hold on /rpc: an ACP session can do nothing its client could not do
// there (an origin granted acp but not write starts no edit session, and
// one without approve is never asked a question), and ACP gets card's
// sessions, their guard and their history unchanged.
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
		d.serveACP(ws, grants, origin)
	})
}

// acpConns are the front door's open connections: a shutdown ends each
// (its editor is told the daemon is going away) and waits for them.
type acpConns struct {
	mu      sync.Mutex
	closing bool
	stops   map[*websocket.Conn]context.CancelFunc
	wg      sync.WaitGroup
}

// add registers ws, ended by stop; false once the daemon is shutting down.
func (a *acpConns) add(ws *websocket.Conn, stop context.CancelFunc) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return false
	}
	if a.stops == nil {
		a.stops = map[*websocket.Conn]context.CancelFunc{}
	}
	a.stops[ws] = stop
	a.wg.Add(1)
	return true
}

func (a *acpConns) done(ws *websocket.Conn) {
	a.mu.Lock()
	delete(a.stops, ws)
	a.mu.Unlock()
	a.wg.Done()
}

// close ends every connection and waits for them until ctx ends.
func (a *acpConns) close(ctx context.Context) {
	a.mu.Lock()
	a.closing = true
	for ws, stop := range a.stops {
		stop()
		go func() { _ = ws.Close(websocket.StatusGoingAway, "the daemon is shutting down") }()
	}
	a.mu.Unlock()
	ended := make(chan struct{})
	go func() { a.wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-ctx.Done():
	}
}

func (d *Daemon) serveACP(ws *websocket.Conn, grants rpc.Grants, origin string) {
	log := d.log.Named("acp")
	// Its sessions' events come in process, each subscription on its own
	// goroutine, which may wait while the editor catches up.
	srv := agentside.New(agentside.Config{Version: Version, EventsMayWait: true, Origin: origin, Logf: func(format string, args ...any) {
		log.Info(fmt.Sprintf(format, args...))
	}})
	ctx, stop := context.WithCancel(d.ctx)
	defer stop()
	if !d.acp.add(ws, stop) {
		_ = ws.Close(websocket.StatusGoingAway, "the daemon is shutting down")
		return
	}
	defer d.acp.done(ws)
	c := client.Open(client.Options{OnApprove: srv.Approve}, func(notify func(string, json.RawMessage),
		serve func(context.Context, string, json.RawMessage) (any, error)) client.Conn {
		return rpc.OpenLocal(d.registry, grants, origin, notify, serve)
	})
	defer c.Close()
	srv.SetBackend(c)
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
