package rpcclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/go-json-experiment/json/jsontext"
)

// The transport's names, shared with the server.
const (
	// SubprotocolVersion is the WebSocket subprotocol a client may offer
	// beside a card.bearer.<token> one, so the server need not echo the
	// token back.
	SubprotocolVersion = "card.v1"
	// BearerSubprotocolPrefix carries the token for clients that cannot set
	// headers on a WebSocket upgrade (a browser's WebSocket constructor).
	BearerSubprotocolPrefix = "card.bearer."
	// CancelRequestMethod is the Language Server Protocol's notification
	// that withdraws a request: {"id": <the request's id>}.
	CancelRequestMethod = "$/cancelRequest"
	// NotificationHead and NotificationParams frame every notification
	// the daemon writes from encoded params: NotificationHead, the quoted
	// method, NotificationParams, the params, "}". The client reads that
	// form straight from the frame (see notification), so both sides take
	// it from here.
	NotificationHead   = `{"jsonrpc":"2.0","method":`
	NotificationParams = `,"params":`
)

// WriteTimeout bounds each frame the client writes: a daemon that stops
// reading must not hold a caller for ever.
const WriteTimeout = 10 * time.Second

// frameStream is the jsonrpc2.ObjectStream of a client over one WebSocket
// connection: one JSON-RPC message per text frame. The server's stream
// (package rpc) does much more (batches, malformed input answered in
// place); what the daemon sends a client is always one message per frame.
type frameStream struct {
	ctx          context.Context
	conn         *websocket.Conn
	writeTimeout time.Duration
	logf         func(format string, args ...any)
	wmu          sync.Mutex
	// notify, when set, gets the notifications of the daemon's own form
	// straight from the frame (see notification).
	notify func(method string, params json.RawMessage)
}

// lenient accepts what encoding/json accepts, as jsonrpc2's own reading
// would: a repeated name, invalid UTF-8 in a string.
var lenient = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// notifyHead opens a notification whose method is a plain string.
var notifyHead, notifyParams = []byte(NotificationHead + `"`), []byte(NotificationParams)

// notification reads a frame of the daemon's notification form: its
// method (a plain string, not $/cancelRequest) and its params, a single
// valid JSON value. A session's or run's events are most of what a client
// reads, a text delta tens of KiB; jsonrpc2 would validate and copy each
// one four times on the way (the envelope to learn the message's kind,
// then again as a request) where this checks it once, with the json/v2
// validator at five times encoding/json's speed. Any other frame
// (a response, a server's request, a notification written another way)
// says false and goes through jsonrpc2 as before.
func notification(frame []byte) (string, json.RawMessage, bool) {
	rest, ok := bytes.CutPrefix(frame, notifyHead)
	if !ok {
		return "", nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return "", nil, false
	}
	method := rest[:end]
	if bytes.IndexByte(method, '\\') >= 0 || string(method) == CancelRequestMethod {
		return "", nil, false
	}
	params, ok := bytes.CutPrefix(rest[end+1:], notifyParams)
	if !ok || len(params) < 2 || params[len(params)-1] != '}' {
		return "", nil, false
	}
	// What lies between is the params only if it is one JSON value: a
	// frame with a member after params fails here.
	params = params[:len(params)-1]
	if !jsontext.Value(params).IsValid(lenient...) {
		return "", nil, false
	}
	return string(method), params, true
}

// ReadObject hands jsonrpc2 the next message. Every read error becomes
// io.EOF, so jsonrpc2 does not report an ordinary disconnect as a protocol
// error; a frame that is not JSON is skipped, not fatal.
func (s *frameStream) ReadObject(v any) error {
	for {
		typ, data, err := s.conn.Read(s.ctx)
		if err != nil {
			return io.EOF
		}
		if typ != websocket.MessageText {
			continue
		}
		if s.notify != nil {
			// Handled here, on jsonrpc2's reading goroutine as its own
			// handler would be: in order with the answers around it.
			if method, params, ok := notification(data); ok {
				s.notify(method, params)
				continue
			}
		}
		if err := json.Unmarshal(data, v); err != nil {
			if s.logf != nil {
				s.logf("ignoring a frame from the daemon that is not JSON-RPC: %v", err)
			}
			continue
		}
		return nil
	}
}

// WriteObject writes one message as one text frame, within writeTimeout
// (an expired write closes the connection, as the WebSocket library does).
func (s *frameStream) WriteObject(obj any) error {
	var b []byte
	var err error
	if m, ok := obj.(json.Marshaler); ok {
		b, err = m.MarshalJSON()
	} else {
		b, err = json.Marshal(obj)
	}
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, s.writeTimeout)
	defer cancel()
	return s.conn.Write(ctx, websocket.MessageText, b)
}

// Close ends the connection with a normal close.
func (s *frameStream) Close() error {
	return s.conn.Close(websocket.StatusNormalClosure, "")
}

// discard is jsonrpc2's logger: the client has nothing to add to what its
// calls return.
type discard struct{}

func (discard) Printf(string, ...any) {}

// IDKey is a request id as its sender wrote it, in one spelling: a string
// by its value (so "\u0061" and "a" match), a number by its text. null names
// no request that could be told apart from another, so it is not a key.
// Both ends match responses and $/cancelRequest to requests by it, so they
// share this one spelling.
func IDKey(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	// Every request is tracked, so the common spellings (a string without
	// escapes, digits) take their keys without a decoder.
	if raw[0] == '"' && len(raw) >= 2 && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return `"` + string(raw[1:len(raw)-1]), true
	}
	if digits(raw) {
		return "n" + string(raw), true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return `"` + s, true
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return "", false
	}
	return "n" + n.String(), true
}

func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
