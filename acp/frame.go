package acp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// ACP's framing is JSON-RPC 2.0 with one message per line, each way, over
// the agent's stdin and stdout (or any byte stream). A message must not
// contain a newline; encoding/json never writes one outside a string.

// Message is one JSON-RPC 2.0 message as it travels: a request (ID and
// Method), a notification (Method, no ID), or a response (ID and Result or
// Error). Params and Result stay raw: the method names their type.
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// IsRequest is a message that wants an answer.
func (m *Message) IsRequest() bool { return m.Method != "" && len(m.ID) > 0 }

// IsNotification is a message that must not be answered.
func (m *Message) IsNotification() bool { return m.Method != "" && len(m.ID) == 0 }

// IsResponse answers a request of the reader's.
func (m *Message) IsResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// Error is a JSON-RPC error object. It is an error, so a call can return
// it as it came; Data is whatever the sender attached.
type Error struct {
	Code    ErrorCode       `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	if len(e.Data) > 0 && string(e.Data) != "null" {
		return fmt.Sprintf("acp error %d: %s: %s", e.Code, e.Message, e.Data)
	}
	return fmt.Sprintf("acp error %d: %s", e.Code, e.Message)
}

// IsMessage is true for a line that is one JSON-RPC request, notification
// or response, and false for anything else an agent prints on its stdout
// (a log line, a stray object). A reader must skip those rather than end
// the connection on them: agents print them, and one bad line must not
// cost the turn.
func IsMessage(line []byte) bool {
	if len(line) == 0 || line[0] != '{' {
		return false
	}
	var m struct {
		Method *string          `json:"method"`
		Result *json.RawMessage `json:"result"`
		Error  *json.RawMessage `json:"error"`
		ID     *json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil {
		return false
	}
	// A result of null decodes as a nil pointer; a response always has
	// an id, so the id tells it apart from an object that is no message.
	response := m.Method == nil && m.ID != nil && (m.Result != nil || m.Error != nil || hasNullResult(line))
	return m.Method != nil || response
}

// hasNullResult is a response whose result is JSON null, which a pointer
// field cannot tell from a missing one.
func hasNullResult(line []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return false
	}
	_, ok := m["result"]
	return ok
}

// DefaultMaxLine bounds one message read by a Reader made with a bound of
// zero: big enough for a prompt with images, small enough that a peer
// that never sends a newline cannot grow the reader without end.
const DefaultMaxLine = 16 << 20

// ErrLineTooLong is a line longer than the reader's bound. The reader has
// skipped it to its end; the next Read goes on with the next line.
var ErrLineTooLong = errors.New("acp: message line longer than the reader's bound")

// Reader reads messages one line each from a byte stream, never holding
// more than its bound of one line.
type Reader struct {
	r   *bufio.Reader
	max int
}

// NewReader reads from r, refusing lines longer than maxLine bytes (zero
// is DefaultMaxLine).
func NewReader(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), max: maxLine}
}

// ReadLine is the next non-empty line without its newline. A line over
// the bound is skipped and reported as ErrLineTooLong; io.EOF ends the
// stream (a last line without a newline is still returned first).
func (r *Reader) ReadLine() ([]byte, error) {
	for {
		var line []byte
		tooLong := false
		for {
			frag, err := r.r.ReadSlice('\n')
			if !tooLong {
				if len(line)+len(frag) > r.max+1 { // +1: the newline itself
					tooLong, line = true, nil
				} else {
					line = append(line, frag...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil && (err != io.EOF || len(line) == 0 && !tooLong) {
				return nil, err
			}
			break
		}
		if tooLong {
			return nil, ErrLineTooLong
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
	}
}

// NotMessageError is a line that is no JSON-RPC message. Line is what the
// peer printed, for a log; the stream goes on.
type NotMessageError struct{ Line []byte }

func (e *NotMessageError) Error() string {
	return "acp: not a JSON-RPC message: " + strconv.Quote(clipString(string(e.Line), 200))
}

// Read is the next message. A line that is no message comes back as a
// *NotMessageError and a line over the bound as ErrLineTooLong; both leave
// the reader at the next line, so the caller decides whether to go on.
func (r *Reader) Read() (*Message, error) {
	line, err := r.ReadLine()
	if err != nil {
		return nil, err
	}
	if !IsMessage(line) {
		return nil, &NotMessageError{Line: line}
	}
	var m Message
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, &NotMessageError{Line: line}
	}
	return &m, nil
}

// Writer writes messages one line each. It is safe for concurrent use:
// replies written from several goroutines never interleave within a line.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes v (a Message, or any value that marshals to one) as one
// line.
func (w *Writer) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.w.Write(b)
	return err
}

// Request is a request message for method with params.
func Request(id json.RawMessage, method string, params any) (*Message, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	return &Message{JSONRPC: "2.0", ID: id, Method: method, Params: p}, nil
}

// Notification is a notification message for method with params.
func Notification(method string, params any) (*Message, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	return &Message{JSONRPC: "2.0", Method: method, Params: p}, nil
}

// Response is the answer to request id: result, or e when e is not nil.
func Response(id json.RawMessage, result any, e *Error) (*Message, error) {
	if e != nil {
		return &Message{JSONRPC: "2.0", ID: id, Error: e}, nil
	}
	r, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	return &Message{JSONRPC: "2.0", ID: id, Result: r}, nil
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
