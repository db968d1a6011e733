package main

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// rawConn is one client connection the sessions phase writes requests on
// back to back, without waiting for answers, as an editor queueing its
// user's messages does; a reader hands each answer to its request's
// callback. A request whose answer never comes (the daemon was killed, or
// stopped, before it answered) keeps its callback uncalled: the phase
// counts it as unanswered, an outcome it cannot know from the wire.
type rawConn struct {
	ws      *websocket.Conn
	mu      sync.Mutex
	next    int64
	pending map[int64]func(rpcAnswer)
	gone    chan struct{}
}

// rpcAnswer is one JSON-RPC answer: its result, or its error's code and
// message.
type rpcAnswer struct {
	result json.RawMessage
	code   int64
	msg    string
}

func dialRawConn(ctx context.Context, d *liveDaemon) (*rawConn, error) {
	ws, err := rawDial(ctx, d)
	if err != nil {
		return nil, err
	}
	c := &rawConn{ws: ws, pending: map[int64]func(rpcAnswer){}, gone: make(chan struct{})}
	go c.read(ctx)
	return c, nil
}

func (c *rawConn) read(ctx context.Context) {
	defer close(c.gone)
	for {
		_, b, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		var m struct {
			ID     *int64          `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int64  `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &m) != nil || m.ID == nil || m.Method != "" {
			continue // a notification, or a request of the daemon's
		}
		c.mu.Lock()
		cb := c.pending[*m.ID]
		delete(c.pending, *m.ID)
		c.mu.Unlock()
		if cb == nil {
			continue
		}
		a := rpcAnswer{result: m.Result}
		if m.Error != nil {
			a.code, a.msg = m.Error.Code, m.Error.Message
		}
		cb(a)
	}
}

// send writes one request frame and returns at once; cb gets its answer
// if one comes. Frames one goroutine sends reach the daemon in that order.
func (c *rawConn) send(ctx context.Context, method string, params any, cb func(rpcAnswer)) error {
	c.mu.Lock()
	c.next++
	id := c.next
	c.pending[id] = cb
	c.mu.Unlock()
	frame, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = c.ws.Write(wctx, websocket.MessageText, frame)
		cancel()
	}
	if err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	return err
}

// settle waits up to d for every request sent to have its answer, or for
// the connection to be gone.
func (c *rawConn) settle(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.gone:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// close ends the connection at once and waits for its reader (settle
// first to read the answers still on the way).
func (c *rawConn) close() {
	_ = c.ws.CloseNow()
	<-c.gone
}
