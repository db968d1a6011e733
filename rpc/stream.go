package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/card-dev/card/rpc/rpcclient"
)

// frameStream is the jsonrpc2.ObjectStream over one WebSocket connection: one
// JSON-RPC message or batch per text frame.
//
// sourcegraph/jsonrpc2 closes the connection on any frame it cannot decode,
// knows nothing of batches, and decodes every request through a map, params
// included, which it then encodes again. So on the server side the stream
// stands in front of it: it answers malformed input itself, exactly as
// section 7 of the JSON-RPC 2.0 specification says, and keeps the connection
// open; it decodes each well-formed request once and hands it to the server
// (handle) in frame order, with the id exactly as the client wrote it; and it
// gathers a batch's answers back into one array. jsonrpc2 still writes what
// the server sends on its own (notifications) and is the whole of the client
// side.
type frameStream struct {
	conn         *websocket.Conn
	ctx          context.Context
	server       bool
	writeTimeout time.Duration
	maxBatch     int
	log          *zap.Logger

	// handle receives each well-formed request, on the read goroutine and
	// in frame order (server side only). It must not block.
	handle func(*request)
	// ready is closed once the server has what handle needs; the server's
	// reads wait for it.
	ready chan struct{}
	// large, when set, is told of every message of largeMessage bytes or
	// more read or written (server side: memoryRelease).
	large func()

	// mu guards the batches' answers.
	mu sync.Mutex

	// out holds the server's own requests awaiting the client's response
	// (call.go); nil on the client side.
	out *outgoing
	// strays counts responses that answered no waiting request (call.go),
	// so the first on a connection is logged where an operator sees it and
	// the rest, which a client can send without end, only at debug.
	strays atomic.Int64

	// wmu makes writes one at a time; wtimer and deadline enforce
	// writeTimeout on each (see write).
	wmu      sync.Mutex
	wtimer   *time.Timer
	deadline atomic.Int64
}

// request is one well-formed request the stream hands the server.
type request struct {
	// id is the id exactly as the client wrote it (a string, a number or
	// null); nil for a notification. Answers carry these bytes back, so an
	// id survives whatever its spelling.
	id     json.RawMessage
	method string
	params json.RawMessage
	// batch is the batch the answer belongs to; nil for a single request.
	batch *batch
}

func (r *request) notif() bool { return r.id == nil }

type batch struct {
	answers []json.RawMessage
	pending int
	// flushed is closed once the frame carrying the batch's answers has
	// been written (or could not be), so work that must follow an answer
	// (a Then) waits for the frame its answer travels in.
	flushed chan struct{}
}

// sent is a closed channel: the answer's frame is already written.
var sent = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newFrameStream(ctx context.Context, conn *websocket.Conn, server bool, writeTimeout time.Duration, maxBatch int, log *zap.Logger) *frameStream {
	return &frameStream{
		conn:         conn,
		ctx:          ctx,
		server:       server,
		writeTimeout: writeTimeout,
		maxBatch:     maxBatch,
		log:          log,
		ready:        make(chan struct{}),
	}
}

// ReadObject hands jsonrpc2 the next message meant for it. Every read error
// becomes io.EOF, so jsonrpc2 does not log an ordinary disconnect as a
// "protocol error"; the stream logs the real cause at the right level. On
// the server nothing is meant for jsonrpc2 (requests go to handle), so it
// returns only when the connection ends.
func (s *frameStream) ReadObject(v any) error {
	if s.server {
		select {
		case <-s.ready:
		case <-s.ctx.Done():
			return io.EOF
		}
	}
	for {
		typ, data, err := s.conn.Read(s.ctx)
		if err != nil {
			s.logReadEnd(err)
			return io.EOF
		}
		if !s.server {
			if typ != websocket.MessageText {
				continue
			}
			if err := json.Unmarshal(data, v); err != nil {
				s.log.Warn("ignoring a frame from the daemon that is not JSON-RPC", zap.Error(err))
				continue
			}
			return nil
		}
		if len(data) >= largeMessage && s.large != nil {
			s.large()
		}
		if typ != websocket.MessageText {
			s.writeError(nil, rpcclient.CodeInvalidRequest, "invalid request: binary frames are not accepted; send each JSON-RPC message as one UTF-8 text frame")
			continue
		}
		s.admit(data)
	}
}

func (s *frameStream) logReadEnd(err error) {
	switch {
	case errors.Is(err, websocket.ErrMessageTooBig):
		s.log.Info("closed connection: a frame exceeded the read limit (close code 1009)", zap.Error(err))
	case websocket.CloseStatus(err) == websocket.StatusNormalClosure,
		websocket.CloseStatus(err) == websocket.StatusGoingAway,
		errors.Is(err, io.EOF), errors.Is(err, context.Canceled):
		s.log.Debug("connection closed", zap.Error(err))
	default:
		s.log.Debug("connection ended", zap.Error(err))
	}
}

// admit checks one frame: it answers what is malformed (or, for
// notifications, drops it) and hands each well-formed request to handle.
func (s *frameStream) admit(data []byte) {
	data = bytes.TrimLeft(data, " \t\r\n")
	if !utf8.Valid(data) {
		s.writeError(nil, rpcclient.CodeParseError, "parse error: the frame is not valid UTF-8")
		return
	}
	if len(data) == 0 {
		s.writeError(nil, rpcclient.CodeParseError, "parse error: the frame is empty")
		return
	}
	if data[0] != '[' {
		// An object is validated by parse's own decode; anything else is
		// checked here so garbage is a parse error, not an invalid request.
		if data[0] != '{' && !json.Valid(data) {
			s.writeError(nil, rpcclient.CodeParseError, "parse error: the frame is not valid JSON")
			return
		}
		req, errAnswer := s.parseRequest(data)
		if errAnswer != nil {
			s.write(errAnswer)
			return
		}
		if req != nil {
			s.handle(req)
		}
		return
	}

	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		s.writeError(nil, rpcclient.CodeParseError, "parse error: the frame is not valid JSON")
		return
	}
	if len(items) == 0 {
		s.writeError(nil, rpcclient.CodeInvalidRequest, "invalid request: an empty batch")
		return
	}
	if len(items) > s.maxBatch {
		s.writeError(nil, rpcclient.CodeInvalidRequest, fmt.Sprintf("invalid request: a batch of %d messages exceeds the limit of %d", len(items), s.maxBatch))
		return
	}
	// Every member is counted before any is handed on: a member answered at
	// once (over the in-flight cap, say) must not find the batch complete.
	b := &batch{flushed: make(chan struct{})}
	reqs := make([]*request, 0, len(items))
	for _, item := range items {
		req, errAnswer := s.parseRequest(item)
		if errAnswer != nil {
			b.answers = append(b.answers, errAnswer)
			continue
		}
		if req == nil {
			continue // a response, taken
		}
		if !req.notif() {
			req.batch = b
			b.pending++
		}
		reqs = append(reqs, req)
	}
	if b.pending == 0 {
		// Nothing to wait for: every member was invalid or a notification.
		if len(b.answers) > 0 {
			s.write(joinBatch(b.answers))
		}
		close(b.flushed)
	}
	for _, req := range reqs {
		s.handle(req)
	}
}

// parseRequest validates one request object. It returns the request or the
// error answer to send, or neither for a response to one of the server's
// own requests, which it hands to the request waiting for it. A malformed
// message is always answered, even without an id: the specification
// answers {"method": 1} with -32600 and id null.
func (s *frameStream) parseRequest(raw []byte) (req *request, errAnswer []byte) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errorAnswer(nil, rpcclient.CodeInvalidRequest, "invalid request: a JSON-RPC message must be an object")
	}
	env, err := decodeEnvelope(raw)
	if err != nil {
		return nil, errorAnswer(nil, rpcclient.CodeParseError, "parse error: the frame is not valid JSON")
	}
	id := json.RawMessage(env.ID)
	idValid := validID(id)
	answerID := id
	if !idValid {
		answerID = nil
	}
	if env.dupMember != "" {
		// Neither copy is read: not a method to run, not an answer to a
		// question. The answer names the request only when its id and
		// method are each given once; a response (no method) is never
		// answered by id, as its id is the server's own.
		if env.dupMember == "id" || env.dupMember == "method" || env.Method == nil {
			answerID = nil
		}
		return nil, duplicateMemberAnswer(answerID, env.dupMember)
	}
	if string(env.JSONRPC) != `"2.0"` {
		return nil, errorAnswer(answerID, rpcclient.CodeInvalidRequest, `invalid request: "jsonrpc" must be exactly "2.0"`)
	}
	if env.Method == nil && s.takeResponse(env.ID, env.Result, env.Error) {
		return nil, nil
	}
	method, ok := decodeString(env.Method)
	if !ok {
		return nil, errorAnswer(answerID, rpcclient.CodeInvalidRequest, `invalid request: "method" must be a string`)
	}
	if p := env.Params; len(p) > 0 && p[0] != '{' && p[0] != '[' && string(p) != "null" {
		return nil, errorAnswer(answerID, rpcclient.CodeInvalidRequest, `invalid request: "params" must be an object or an array`)
	}
	if !idValid {
		return nil, errorAnswer(nil, rpcclient.CodeInvalidRequest, `invalid request: "id" must be a string, a number or null`)
	}
	if env.dupParams {
		if env.ID == nil {
			return nil, nil // bad params: the notification is not run, and gets no answer
		}
		return nil, invalidParamsAnswer(answerID, env.dupField, duplicateMessage)
	}
	return &request{id: id, method: method, params: json.RawMessage(env.Params)}, nil
}

// validID: absent (a notification), a string, a number or null.
func validID(id []byte) bool {
	if id == nil {
		return true
	}
	if len(id) == 0 {
		return false
	}
	c := id[0]
	return c == '"' || c == 'n' || c == '-' || (c >= '0' && c <= '9')
}

// decodeString decodes a JSON string value; ok is false for any other kind.
// The common case, a string without escapes, needs no decoder.
func decodeString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// WriteObject writes one message jsonrpc2 sends (a notification from the
// server, a request from the client) as one text frame.
func (s *frameStream) WriteObject(obj any) error {
	var b []byte
	var err error
	// jsonrpc2's messages marshal themselves into compact JSON; calling
	// MarshalJSON directly skips encoding/json re-validating and compacting
	// every message a second time.
	if m, ok := obj.(json.Marshaler); ok {
		b, err = m.MarshalJSON()
	} else {
		b, err = json.Marshal(obj)
	}
	if err != nil {
		return err
	}
	return s.write(b)
}

// answer sends msg, the answer to req. flushed is closed once the frame that
// carries it has been written: at once for a single request, when the last
// answer arrives for a batch member.
func (s *frameStream) answer(req *request, msg []byte) (flushed <-chan struct{}, err error) {
	b := req.batch
	if b == nil {
		return sent, s.write(msg)
	}
	s.mu.Lock()
	b.answers = append(b.answers, msg)
	b.pending--
	complete := b.pending == 0
	s.mu.Unlock()
	if !complete {
		return b.flushed, nil
	}
	err = s.write(joinBatch(b.answers))
	close(b.flushed)
	return sent, err
}

// write sends one text frame. A client that stops reading must not hold a
// writer for ever: a write not done within writeTimeout closes the
// connection, as an expired write context makes the WebSocket library do.
// Writes are one at a time (the library serialises them anyway), so one
// timer per connection, re-armed per write, keeps that deadline; a context
// with a timeout per write cost an allocation, a timer and the parent's
// child bookkeeping on every answer.
func (s *frameStream) write(b []byte) error {
	if len(b) >= largeMessage && s.large != nil {
		s.large()
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.deadline.Store(time.Now().Add(s.writeTimeout).UnixNano())
	if s.wtimer == nil {
		s.wtimer = time.AfterFunc(s.writeTimeout, s.writeExpired)
	} else {
		s.wtimer.Reset(s.writeTimeout)
	}
	err := s.conn.Write(s.ctx, websocket.MessageText, b)
	s.deadline.Store(0)
	s.wtimer.Stop()
	return err
}

// writeExpired closes the connection if a write is still under way past its
// deadline. A timer that fires as a write ends, or after the next write has
// begun, finds no deadline or a later one and does nothing.
func (s *frameStream) writeExpired() {
	if d := s.deadline.Load(); d != 0 && time.Now().UnixNano() >= d {
		s.log.Debug("closing the connection: a write did not finish within the write timeout", zap.Duration("timeout", s.writeTimeout))
		_ = s.conn.CloseNow()
	}
}

func (s *frameStream) writeError(id json.RawMessage, code int64, message string) {
	if err := s.write(errorAnswer(id, code, message)); err != nil {
		s.log.Debug("could not answer a malformed frame", zap.Error(err))
	}
}

// Close ends the connection with a normal close; the server closes with 1001
// first when it is shutting down.
func (s *frameStream) Close() error {
	return s.conn.Close(websocket.StatusNormalClosure, "")
}

// errorAnswer is an error answer under id (null when nil).
func errorAnswer(id json.RawMessage, code int64, message string) []byte {
	return errorAnswerWire(id, &wireError{Code: code, Message: message})
}

type errorEnvelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   *wireError      `json:"error"`
}

func errorAnswerWire(id json.RawMessage, e *wireError) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(errorEnvelope{JSONRPC: "2.0", ID: id, Error: e})
	return b
}

// appendResultAnswer appends a success answer to b. id and result are
// already JSON; they are joined as they are, since encoding/json would scan
// and copy both again to check what the stream and the encoder already
// checked.
func appendResultAnswer(b, id, result []byte) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// answerBufs holds buffers for single answers, which are written and done
// with at once. Only small ones go back: a pool that kept the buffer of
// every large answer would hold the daemon's memory at its peak after a
// burst.
var answerBufs = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledAnswer = 64 << 10

// answerResult sends a success answer to req; see answer.
func (s *frameStream) answerResult(req *request, result []byte) (flushed <-chan struct{}, err error) {
	if req.batch != nil {
		return s.answer(req, appendResultAnswer(make([]byte, 0, len(req.id)+len(result)+32), req.id, result))
	}
	bp := answerBufs.Get().(*[]byte)
	*bp = appendResultAnswer((*bp)[:0], req.id, result)
	err = s.write(*bp)
	if cap(*bp) <= maxPooledAnswer {
		answerBufs.Put(bp)
	}
	return sent, err
}

// invalidParamsAnswer is the -32602 the registry would give for field,
// for the params checks the stream makes before the registry sees them.
func invalidParamsAnswer(id json.RawMessage, field, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	data, _ := json.Marshal(map[string]string{"field": field})
	b, _ := json.Marshal(errorEnvelope{JSONRPC: "2.0", ID: id, Error: &wireError{Code: rpcclient.CodeInvalidParams,
		Message: "invalid params: " + field + ": " + message, Data: data}})
	return b
}

// duplicateMemberAnswer refuses a message that gives one of its own
// members twice, naming it in the message and in data.member.
func duplicateMemberAnswer(id json.RawMessage, member string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	data, _ := json.Marshal(map[string]string{"member": member})
	b, _ := json.Marshal(errorEnvelope{JSONRPC: "2.0", ID: id, Error: &wireError{Code: rpcclient.CodeInvalidRequest,
		Message: fmt.Sprintf("invalid request: %q is given more than once; each member of a JSON-RPC message may appear once", member), Data: data}})
	return b
}

func joinBatch(answers []json.RawMessage) []byte {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, a := range answers {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(a)
	}
	buf.WriteByte(']')
	return buf.Bytes()
}
