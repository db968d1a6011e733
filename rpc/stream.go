package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/sourcegraph/jsonrpc2"
	"go.uber.org/zap"
)

// internalIDPrefix marks request ids the stream rewrote. It starts with NUL so
// no sensible client id collides with it, and a client id that does start
// with it is rewritten too, so a collision cannot misroute an answer.
const internalIDPrefix = "\x00card:"

// internalIDMarker is the prefix as json.Marshal writes it inside a string.
var internalIDMarker = []byte(`"\u0000card:`)

// frameStream is the jsonrpc2.ObjectStream over one WebSocket connection: one
// JSON-RPC message or batch per text frame.
//
// sourcegraph/jsonrpc2 closes the connection on any frame it cannot decode
// and knows nothing of batches, so on the server side the stream stands in
// front of it: it answers malformed input itself, exactly as section 7 of the
// JSON-RPC 2.0 specification says, and keeps the connection open; it splits a
// batch into single requests and gathers their answers back into one array;
// and it rewrites the ids jsonrpc2 cannot carry (null, negative, fractional or
// huge numbers) and restores them on the way out. Well-formed single requests
// with ordinary ids pass through untouched, which keeps the common path cheap.
type frameStream struct {
	conn         *websocket.Conn
	ctx          context.Context
	server       bool
	writeTimeout time.Duration
	maxBatch     int
	log          *zap.Logger

	// queue holds batch members not yet handed to jsonrpc2. Only the read
	// goroutine touches it.
	queue [][]byte

	mu        sync.Mutex
	nextID    uint64
	rewritten map[string]*pendingAnswer
	// rewrites counts entries in rewritten, so WriteObject can skip the
	// id check without taking the lock when nothing was rewritten.
	rewrites atomic.Int64

	// out holds the server's own requests awaiting the client's response
	// (call.go); nil on the client side.
	out *outgoing
}

// pendingAnswer remembers a rewritten request: its original id and, for a
// batch member, the batch its answer belongs to.
type pendingAnswer struct {
	origID json.RawMessage
	batch  *batch
}

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
		rewritten:    map[string]*pendingAnswer{},
	}
}

// ReadObject hands jsonrpc2 the next well-formed message. Every read error
// becomes io.EOF, so jsonrpc2 does not log an ordinary disconnect as a
// "protocol error"; the stream logs the real cause at the right level.
func (s *frameStream) ReadObject(v any) error {
	for {
		if len(s.queue) > 0 {
			msg := s.queue[0]
			s.queue = s.queue[1:]
			return json.Unmarshal(msg, v)
		}
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
		if typ != websocket.MessageText {
			s.writeError(nil, CodeInvalidRequest, "invalid request: binary frames are not accepted; send each JSON-RPC message as one UTF-8 text frame")
			continue
		}
		if msg := s.admit(data); msg != nil {
			return json.Unmarshal(msg, v)
		}
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

// admit checks one frame and returns the message to pass to jsonrpc2, or nil
// when the stream answered (or, for notifications, dropped) it itself.
func (s *frameStream) admit(data []byte) []byte {
	data = bytes.TrimLeft(data, " \t\r\n")
	if !utf8.Valid(data) {
		s.writeError(nil, CodeParseError, "parse error: the frame is not valid UTF-8")
		return nil
	}
	// No separate json.Valid pass: the decode below validates the whole
	// frame and tells a syntax error from a wrong shape.
	if len(data) == 0 {
		s.writeError(nil, CodeParseError, "parse error: the frame is empty")
		return nil
	}
	if data[0] != '[' {
		// An object is validated by prepare's own decode; anything else is
		// checked here so garbage is a parse error, not an invalid request.
		if data[0] != '{' && !json.Valid(data) {
			s.writeError(nil, CodeParseError, "parse error: the frame is not valid JSON")
			return nil
		}
		msg, errAnswer := s.prepare(data, nil)
		if errAnswer != nil {
			s.write(errAnswer)
		}
		return msg
	}

	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		s.writeError(nil, CodeParseError, "parse error: the frame is not valid JSON")
		return nil
	}
	if len(items) == 0 {
		s.writeError(nil, CodeInvalidRequest, "invalid request: an empty batch")
		return nil
	}
	if len(items) > s.maxBatch {
		s.writeError(nil, CodeInvalidRequest, fmt.Sprintf("invalid request: a batch of %d messages exceeds the limit of %d", len(items), s.maxBatch))
		return nil
	}
	b := &batch{flushed: make(chan struct{})}
	var forward [][]byte
	s.mu.Lock()
	for _, item := range items {
		msg, errAnswer := s.prepareLocked(item, b)
		if errAnswer != nil {
			b.answers = append(b.answers, errAnswer)
		}
		if msg != nil {
			forward = append(forward, msg)
		}
	}
	complete := b.pending == 0
	s.mu.Unlock()
	if complete {
		// Nothing to wait for: every member was invalid or a notification.
		if len(b.answers) > 0 {
			s.write(joinBatch(b.answers))
		}
		close(b.flushed)
	}
	if len(forward) == 0 {
		return nil
	}
	s.queue = append(s.queue, forward[1:]...)
	return forward[0]
}

func (s *frameStream) prepare(raw []byte, b *batch) (msg, errAnswer []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prepareLocked(raw, b)
}

// prepareLocked validates one request object. It returns the message to
// forward (possibly with a rewritten id) or the error answer to send. A
// malformed message is always answered, even without an id: the
// specification answers {"method": 1} with -32600 and id null.
func (s *frameStream) prepareLocked(raw []byte, b *batch) (msg, errAnswer []byte) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errorAnswer(nil, CodeInvalidRequest, "invalid request: a JSON-RPC message must be an object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errorAnswer(nil, CodeParseError, "parse error: the frame is not valid JSON")
		}
		return nil, errorAnswer(nil, CodeInvalidRequest, "invalid request: "+err.Error())
	}
	id, hasID := fields["id"]
	idKind := classifyID(id, hasID)
	answerID := id
	if idKind == idInvalid {
		answerID = nil
	}
	if v := fields["jsonrpc"]; string(v) != `"2.0"` {
		return nil, errorAnswer(answerID, CodeInvalidRequest, `invalid request: "jsonrpc" must be exactly "2.0"`)
	}
	method, ok := fields["method"]
	if !ok && s.takeResponse(fields) {
		return nil, nil
	}
	if !ok || len(method) == 0 || method[0] != '"' {
		return nil, errorAnswer(answerID, CodeInvalidRequest, `invalid request: "method" must be a string`)
	}
	if p, ok := fields["params"]; ok && len(p) > 0 && p[0] != '{' && p[0] != '[' && string(p) != "null" {
		return nil, errorAnswer(answerID, CodeInvalidRequest, `invalid request: "params" must be an object or an array`)
	}
	if idKind == idInvalid {
		return nil, errorAnswer(nil, CodeInvalidRequest, `invalid request: "id" must be a string, a number or null`)
	}
	if p := fields["params"]; len(p) > 0 && p[0] == '{' {
		if field, dup := duplicateParam(p); dup {
			if idKind == idNone {
				return nil, nil // bad params: the notification is not run, and gets no answer
			}
			return nil, invalidParamsAnswer(answerID, field, duplicateMessage)
		}
	}
	if idKind == idNone {
		return raw, nil
	}
	if idKind == idPlain && b == nil {
		return raw, nil
	}
	// Rewrite the id: jsonrpc2 cannot carry it, or the answer must be
	// gathered into a batch.
	s.nextID++
	internal := internalIDPrefix + strconv.FormatUint(s.nextID, 10)
	fields["id"], _ = json.Marshal(internal)
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, errorAnswer(answerID, CodeInvalidRequest, "invalid request: "+err.Error())
	}
	s.rewritten[internal] = &pendingAnswer{origID: id, batch: b}
	s.rewrites.Add(1)
	if b != nil {
		b.pending++
	}
	return out, nil
}

type idKind int

const (
	idNone idKind = iota
	idPlain
	idRewrite
	idInvalid
)

// classifyID sorts an id into what jsonrpc2 can carry as is (strings and
// non-negative integers that fit), what the stream must rewrite (null,
// negative, fractional, exponent or huge numbers, and strings that look like
// the stream's own), and what is not an id at all.
func classifyID(id json.RawMessage, present bool) idKind {
	if !present {
		return idNone
	}
	if len(id) == 0 {
		return idInvalid
	}
	switch c := id[0]; {
	case c == '"':
		if bytes.HasPrefix(id, internalIDMarker) {
			return idRewrite
		}
		return idPlain
	case c == 'n':
		return idRewrite
	case c == '-' || (c >= '0' && c <= '9'):
		if _, err := strconv.ParseInt(string(id), 10, 64); err == nil && c != '-' {
			return idPlain
		}
		return idRewrite
	default:
		return idInvalid
	}
}

// WriteObject writes one answer or notification as one text frame, restoring
// a rewritten id and gathering batch answers into their array.
func (s *frameStream) WriteObject(obj any) error {
	var b []byte
	var err error
	// jsonrpc2's messages marshal themselves into compact JSON; calling
	// MarshalJSON directly skips encoding/json re-validating and compacting
	// every answer a second time on the hot path.
	if m, ok := obj.(json.Marshaler); ok {
		b, err = m.MarshalJSON()
	} else {
		b, err = json.Marshal(obj)
	}
	if err != nil {
		return err
	}
	_, err = s.send(b)
	return err
}

// send writes one encoded message. flushed is closed once the frame that
// carries it has been written: at once for a single message, when the last
// answer arrives for a batch member.
func (s *frameStream) send(b []byte) (flushed <-chan struct{}, err error) {
	if s.rewrites.Load() == 0 || !bytes.Contains(b, internalIDMarker) {
		return sent, s.write(b)
	}
	out, bt := s.restore(b)
	if out == nil {
		return bt.flushed, nil
	}
	err = s.write(out)
	if bt != nil {
		close(bt.flushed)
	}
	return sent, err
}

// restore puts the client's id back into an answer. For a batch member it
// stores the answer and returns nil until the whole batch is answered, then
// the joined array; bt is the member's batch (nil for a single request).
func (s *frameStream) restore(b []byte) (out []byte, bt *batch) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return b, nil
	}
	var internal string
	if err := json.Unmarshal(fields["id"], &internal); err != nil || !strings.HasPrefix(internal, internalIDPrefix) {
		return b, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.rewritten[internal]
	if !ok {
		return b, nil
	}
	delete(s.rewritten, internal)
	s.rewrites.Add(-1)
	if p.origID == nil {
		fields["id"] = json.RawMessage("null")
	} else {
		fields["id"] = p.origID
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return b, nil
	}
	if p.batch == nil {
		return out, nil
	}
	p.batch.answers = append(p.batch.answers, out)
	p.batch.pending--
	if p.batch.pending > 0 {
		return nil, p.batch
	}
	return joinBatch(p.batch.answers), p.batch
}

// clientID is the id the client sent for a request jsonrpc2 knows as id:
// the stream rewrites some ids (null, negative or huge numbers, batch
// members), and a client that cancels a request names it by its own id.
func (s *frameStream) clientID(id jsonrpc2.ID) json.RawMessage {
	if id.IsString && strings.HasPrefix(id.Str, internalIDPrefix) {
		s.mu.Lock()
		p, ok := s.rewritten[id.Str]
		s.mu.Unlock()
		if ok {
			if p.origID == nil {
				return json.RawMessage("null")
			}
			return p.origID
		}
	}
	b, _ := id.MarshalJSON()
	return b
}

func (s *frameStream) write(b []byte) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.writeTimeout)
	defer cancel()
	return s.conn.Write(ctx, websocket.MessageText, b)
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

type errorEnvelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   wireError       `json:"error"`
}

func errorAnswer(id json.RawMessage, code int64, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(errorEnvelope{JSONRPC: "2.0", ID: id, Error: wireError{Code: code, Message: message}})
	return b
}

// invalidParamsAnswer is the -32602 the registry would give for field,
// for the params checks the stream makes before the registry sees them.
func invalidParamsAnswer(id json.RawMessage, field, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	data, _ := json.Marshal(map[string]string{"field": field})
	b, _ := json.Marshal(errorEnvelope{JSONRPC: "2.0", ID: id, Error: wireError{Code: CodeInvalidParams,
		Message: "invalid params: " + field + ": " + message, Data: data}})
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
