package agentside

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
)

// Error codes of the front door beyond ACP's own. ACP lets an agent use
// any code; these two are card's application range.
const (
	// CodeAdapterUnavailable: the adapter is not installed, cannot run,
	// or is not one card knows. The message names it and how to install.
	CodeAdapterUnavailable acp.ErrorCode = -32048
	// CodeNoDaemon: `card acp` found no daemon to connect to; the message
	// says how to start one.
	CodeNoDaemon acp.ErrorCode = -32049
	// CodeNotSessionOwner: the session was started by another client
	// (card's not_session_owner on /rpc).
	CodeNotSessionOwner acp.ErrorCode = -32051
)

// MetaKey is the key of card's object in an ACP message's _meta.
const MetaKey = "card"

// Config is what a Server is for.
type Config struct {
	// Adapter fixes the adapter of every session (`card acp ADAPTER`);
	// empty lets each session/new name its own in _meta.card.adapter.
	Adapter string
	// Version is card's version, for agentInfo.
	Version string
	// Logf, when set, gets one line per thing worth telling the person
	// (never ACP frames); `card acp` writes it to stderr.
	Logf func(format string, args ...any)
	// DefaultPermissionMode is the permission mode of a session whose
	// session/new names none; empty is ask for an adapter that can ask,
	// else read_only.
	DefaultPermissionMode string
	// InvokedBy is the adapter this agent runs under, when an agent CLI
	// started it (the last of its CAR_INVOKED_BY): every session names it,
	// so the guard refuses a session that would call an agent already in
	// the chain.
	InvokedBy string
	// EventsMayWait says the backend hands over a session's events on a
	// goroutine that may wait while the editor catches up, and may call the
	// backend meanwhile: the daemon's own front door, whose events come in
	// process, each subscription on a goroutine of its own. Each event is
	// then written to the editor on that goroutine, and a slow editor holds
	// the daemon's sending back, where a subscriber too far behind is cut
	// off and taken up again from the history. A backend that hands events
	// over on the goroutine reading its answers (a client over a socket)
	// must not wait there, since handling an event may need those answers;
	// its events are queued as they come, at most a turn's output, for a
	// goroutine that writes them.
	EventsMayWait bool
	// Origin is the web origin of the editor's connection (the daemon's
	// /acp), "" for a native one (`card acp`). A web origin may load or
	// resume only the sessions it started, as on /rpc it may change only
	// those.
	Origin string
}

// Server is one ACP connection's agent side. Serve it once.
type Server struct {
	cfg Config

	mu          sync.Mutex
	backend     Backend
	unavailable error
	t           Transport
	ctx         context.Context
	nextID      int64
	calls       map[string]chan *acp.Message
	inflight    map[string]context.CancelFunc
	sessions    map[string]*session
	clientCaps  acp.ClientCapabilities
	specs       []api.ExternalAgentSpec
	specsAt     time.Time
	wg          sync.WaitGroup
	// order holds, by session id, the channel the latest request or
	// cancel of that session closes once card has taken it (inOrder).
	order map[string]chan struct{}
}

// New is a Server with no backend yet: SetBackend or SetUnavailable before
// Serve.
func New(cfg Config) *Server {
	return &Server{cfg: cfg, calls: map[string]chan *acp.Message{}, inflight: map[string]context.CancelFunc{},
		sessions: map[string]*session{}, order: map[string]chan struct{}{}}
}

// SetBackend gives the server its backend.
func (s *Server) SetBackend(b Backend) {
	s.mu.Lock()
	s.backend, s.unavailable = b, nil
	s.mu.Unlock()
}

// SetUnavailable makes every request answer with err's message: what
// `card acp` does when no daemon runs, so the editor shows why.
func (s *Server) SetUnavailable(err error) {
	s.mu.Lock()
	s.unavailable = err
	s.mu.Unlock()
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Serve reads and answers messages until the transport ends or ctx is
// done, then waits for the handlers it started.
func (s *Server) Serve(ctx context.Context, t Transport) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.t, s.ctx = t, ctx
	s.mu.Unlock()
	defer s.releaseWarm()
	defer s.wg.Wait()
	defer cancel()
	for {
		line, err := t.Read(ctx)
		if err != nil {
			if errors.Is(err, acp.ErrLineTooLong) {
				s.send(errorResponse(json.RawMessage("null"), &acp.Error{Code: acp.CodeInvalidRequest, Message: "message longer than card reads"}))
				continue
			}
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !acp.IsMessage(line) {
			s.send(errorResponse(json.RawMessage("null"), &acp.Error{Code: acp.CodeParseError, Message: "not a JSON-RPC message"}))
			continue
		}
		var m acp.Message
		if err := json.Unmarshal(line, &m); err != nil {
			s.send(errorResponse(json.RawMessage("null"), &acp.Error{Code: acp.CodeParseError, Message: err.Error()}))
			continue
		}
		switch {
		case m.IsResponse():
			s.mu.Lock()
			ch := s.calls[string(m.ID)]
			delete(s.calls, string(m.ID))
			s.mu.Unlock()
			if ch != nil {
				ch <- &m
			}
		case m.IsNotification():
			s.notification(ctx, &m)
		case m.IsRequest():
			rctx, rcancel := context.WithCancel(ctx)
			key := string(m.ID)
			s.mu.Lock()
			s.inflight[key] = rcancel
			s.mu.Unlock()
			// Taken in frame order, here on the read loop: see inOrder.
			wait, taken := s.inOrder(orderedSession(&m))
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer rcancel()
				defer taken()
				<-wait
				res, aerr := s.dispatch(context.WithValue(rctx, takenKey{}, taken), &m)
				s.mu.Lock()
				delete(s.inflight, key)
				s.mu.Unlock()
				if aerr == nil && rctx.Err() != nil && ctx.Err() == nil {
					aerr = &acp.Error{Code: acp.CodeRequestCancelled, Message: "request cancelled"}
				}
				if aerr != nil {
					s.send(errorResponse(m.ID, aerr))
					return
				}
				resp, err := acp.Response(m.ID, res, nil)
				if err != nil {
					s.send(errorResponse(m.ID, &acp.Error{Code: acp.CodeInternalError, Message: err.Error()}))
					return
				}
				s.send(resp)
			}()
		default:
			s.send(errorResponse(json.RawMessage("null"), &acp.Error{Code: acp.CodeInvalidRequest, Message: "not a request, notification or response"}))
		}
	}
}

// releaseWarmTimeout bounds the releases once the editor has gone: a
// daemon that does not answer leaves each agent to its idle_secs.
const releaseWarmTimeout = 10 * time.Second

// releaseWarm ends the warm agents of this connection's sessions once the
// editor has gone (its input ended, or the connection was stopped), after
// the requests it left have been answered or cancelled: nobody will prompt
// those sessions soon, and each agent would otherwise hold its CLI's
// process for [sessions] idle_secs. The sessions stay open, for the next
// editor's session/load.
func (s *Server) releaseWarm() {
	s.mu.Lock()
	r, ok := s.backend.(WarmReleaser)
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	if !ok || len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	ctx, cancel := context.WithTimeout(context.Background(), releaseWarmTimeout)
	defer cancel()
	for _, id := range ids {
		// Quiet when it works: an editor that closed its end is the
		// ordinary way out.
		if _, err := r.ReleaseSession(ctx, id); err != nil {
			s.logf("could not end the warm agent of session %s: %v (it ends after [sessions] idle_secs)", id, err)
		}
	}
}

func errorResponse(id json.RawMessage, e *acp.Error) *acp.Message {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	m, _ := acp.Response(id, nil, e)
	return m
}

// send writes one message; a write that fails ends nothing here (the read
// side notices the transport is gone).
func (s *Server) send(m *acp.Message) {
	b, err := json.Marshal(m)
	if err != nil {
		s.logf("card acp: cannot encode a message: %v", err)
		return
	}
	s.write(b)
}

// write sends one encoded message.
func (s *Server) write(b []byte) {
	s.mu.Lock()
	t, ctx := s.t, s.ctx
	s.mu.Unlock()
	if t == nil {
		return
	}
	if err := t.Write(ctx, b); err != nil {
		s.logf("card acp: write: %v", err)
	}
}

// notifyUpdate sends one session/update. A turn's answer is nearly all
// text chunks, each carrying tens of KiB of an agent's text, so a plain
// text chunk is written here from its parts: its text quoted once by
// jsontext (half again as fast as encoding/json on this machine), where
// encoding the notification would quote it, then check and copy the
// update's own JSON once more. Any other update is encoded as a whole.
// TestATextChunkIsWrittenAsItsEncodingReadsWritten holds both to the
// same meaning.
func (s *Server) notifyUpdate(n acp.SessionNotification) {
	c := n.Update.Chunk
	if c == nil || c.Content.Type != acp.ContentText || c.Content.Annotations != nil || len(c.Content.Meta) > 0 ||
		c.MessageID != nil || len(c.Meta) > 0 || (len(n.Meta) > 0 && !json.Valid(n.Meta)) {
		s.notify(acp.MethodSessionUpdate, n)
		return
	}
	s.writeChunk(n.SessionID, n.Update.Kind, len(c.Content.Text)+2, func(b []byte) []byte {
		// AppendQuote reports invalid UTF-8 and writes it as U+FFFD, as
		// encoding/json does silently.
		b, _ = jsontext.AppendQuote(b, c.Content.Text)
		return b
	}, n.Meta)
}

// writeTextChunk writes the session/update of a plain text chunk of kind
// from its parts: text is the text as a JSON string, meta the _meta
// (valid JSON, or empty for none).
func (s *Server) writeTextChunk(sessionID string, kind acp.UpdateKind, text, meta json.RawMessage) {
	s.writeChunk(sessionID, kind, len(text), func(b []byte) []byte { return append(b, text...) }, meta)
}

// writeChunk is writeTextChunk with the text appended by appendText (about
// size bytes), so a text still to be quoted is quoted straight into the
// frame rather than into a buffer of its own first.
func (s *Server) writeChunk(sessionID string, kind acp.UpdateKind, size int, appendText func([]byte) []byte, meta json.RawMessage) {
	bp := frameBufs.Get().(*[]byte)
	b := slices.Grow((*bp)[:0], size+len(meta)+len(sessionID)+160)
	b = append(b, `{"jsonrpc":"2.0","method":"`+acp.MethodSessionUpdate+`","params":{"sessionId":`...)
	b, _ = jsontext.AppendQuote(b, sessionID)
	b = append(b, `,"update":{"sessionUpdate":`...)
	b, _ = jsontext.AppendQuote(b, string(kind))
	b = append(b, `,"content":{"type":"text","text":`...)
	b = appendText(b)
	b = append(b, "}}"...)
	if len(meta) > 0 {
		b = append(append(b, `,"_meta":`...), meta...)
	}
	b = append(b, "}}"...)
	s.write(b)
	putBuf(&frameBufs, bp, b)
}

// frameBufs and textBufs hold the buffers a turn's chunks pass through
// (the frame written, the text waiting for the pump): a talkative turn is
// dozens of chunks of several KiB each, and allocating them anew made the
// front door's garbage, and so its collections, double an /rpc client's.
var frameBufs, textBufs = sync.Pool{New: func() any { return new([]byte) }}, sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuf bounds the buffers that go back to their pool: one that
// kept a burst's largest chunk would hold the daemon's memory at its peak.
const maxPooledBuf = 64 << 10

// putBuf returns b, the buffer bp gave, to pool when it is small enough.
func putBuf(pool *sync.Pool, bp *[]byte, b []byte) {
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
		pool.Put(bp)
	}
}

// notify sends a notification. Its params are encoded once and written
// inside the envelope as they are: going through acp.Message would have
// encoding/json scan and copy them again, and a turn's session/update
// carries the whole text of the agent's answer.
//
// The json/v2 engine with encoding/json's rules (its v1 package) encodes
// them: it checks what the protocol types' own MarshalJSON return at about
// five times the speed encoding/json compacts it.
func (s *Server) notify(method string, params any) {
	p, err := jsonv1.Marshal(params)
	if err != nil {
		s.logf("card acp: cannot encode %s: %v", method, err)
		return
	}
	b := make([]byte, 0, len(p)+len(method)+40)
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = strconv.AppendQuote(b, method)
	b = append(b, `,"params":`...)
	b = append(b, p...)
	b = append(b, '}')
	s.write(b)
}

// call sends a request to the client and waits for its answer. A ctx that
// ends first withdraws the request with $/cancel_request.
func (s *Server) call(ctx context.Context, method string, params, result any) error {
	s.mu.Lock()
	s.nextID++
	id := json.RawMessage(strconv.FormatInt(s.nextID, 10))
	ch := make(chan *acp.Message, 1)
	s.calls[string(id)] = ch
	s.mu.Unlock()
	m, err := acp.Request(id, method, params)
	if err != nil {
		return err
	}
	s.send(m)
	select {
	case r := <-ch:
		if r.Error != nil {
			return r.Error
		}
		if result != nil {
			return json.Unmarshal(r.Result, result)
		}
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.calls, string(id))
		s.mu.Unlock()
		s.notify(acp.MethodCancelRequest, acp.CancelRequestNotification{RequestID: id})
		return ctx.Err()
	}
}

func (s *Server) notification(ctx context.Context, m *acp.Message) {
	switch m.Method {
	case acp.MethodCancelRequest:
		var p acp.CancelRequestNotification
		if json.Unmarshal(m.Params, &p) == nil {
			s.mu.Lock()
			cancel := s.inflight[string(p.RequestID)]
			s.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		}
	case acp.MethodSessionCancel:
		var p acp.CancelNotification
		if json.Unmarshal(m.Params, &p) == nil {
			wait, taken := s.inOrder(p.SessionID)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer taken()
				<-wait
				s.cancelSession(ctx, p.SessionID)
			}()
		}
	default:
		s.logf("card acp: ignored notification %s", m.Method)
	}
}

// inOrder puts a request or cancel of session id in that session's line,
// in the order the editor sent them (it is called on the read loop): wait
// is closed once card has taken everything before it, and taken, which the
// caller must call exactly when card has taken this one (for a prompt:
// the daemon answered that it runs or queued it), lets the next one go. A
// prompt and the cancel the editor sent right after it are otherwise two
// goroutines, and the cancel could reach card first and cancel nothing;
// two prompts could queue in the wrong order. An id of "" takes no place:
// wait is already closed and taken does nothing.
func (s *Server) inOrder(id string) (wait <-chan struct{}, taken func()) {
	if id == "" {
		return closedChan, func() {}
	}
	ch := make(chan struct{})
	s.mu.Lock()
	prev := s.order[id]
	s.order[id] = ch
	s.mu.Unlock()
	if prev == nil {
		prev = closedChan
	}
	var once sync.Once
	return prev, func() {
		once.Do(func() {
			close(ch)
			s.mu.Lock()
			if s.order[id] == ch {
				delete(s.order, id)
			}
			s.mu.Unlock()
		})
	}
}

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// takenKey carries a request's taken (inOrder) to a handler that can let
// the next request of its session go before it returns: a prompt is taken
// once the daemon has queued it, long before its turn ends.
type takenKey struct{}

// markTaken lets the next request of ctx's session go (see inOrder).
func markTaken(ctx context.Context) {
	if f, ok := ctx.Value(takenKey{}).(func()); ok {
		f()
	}
}

// orderedSession is the session a request that changes one names, or ""
// for any other request: prompts, mode and option changes and closes of
// one session are taken in the order the editor sent them.
func orderedSession(m *acp.Message) string {
	switch m.Method {
	case acp.MethodSessionPrompt, acp.MethodSessionSetMode, acp.MethodSessionSetConfigOption, acp.MethodSessionClose:
	default:
		return ""
	}
	var p struct {
		SessionID string `json:"sessionId"`
	}
	if json.Unmarshal(m.Params, &p) != nil {
		return ""
	}
	return p.SessionID
}

// dispatch runs one request.
func (s *Server) dispatch(ctx context.Context, m *acp.Message) (any, *acp.Error) {
	s.mu.Lock()
	be, unavailable := s.backend, s.unavailable
	s.mu.Unlock()
	if unavailable != nil {
		if m.Method == acp.MethodInitialize {
			// An editor (and the ACP registry's check) decides from
			// initialize whether card is an agent at all, so it is answered
			// from what card knows without its daemon; what needs the
			// daemon says why it is not there.
			return decodeAnd(m, func(p acp.InitializeRequest) (any, *acp.Error) { return s.initializeWithoutDaemon(p) })
		}
		return nil, &acp.Error{Code: CodeNoDaemon, Message: unavailable.Error()}
	}
	if be == nil {
		return nil, &acp.Error{Code: CodeNoDaemon, Message: "card is not connected to its daemon"}
	}
	side, known := acp.SideOf(m.Method)
	if !known || side != acp.SideAgent {
		return nil, &acp.Error{Code: acp.CodeMethodNotFound, Message: "card serves no method " + strconv.Quote(m.Method)}
	}
	switch m.Method {
	case acp.MethodInitialize:
		return decodeAnd(m, func(p acp.InitializeRequest) (any, *acp.Error) { return s.initialize(ctx, be, p) })
	case acp.MethodAuthenticate:
		return decodeAnd(m, func(p acp.AuthenticateRequest) (any, *acp.Error) { return s.authenticate(ctx, be, p) })
	case acp.MethodSessionNew:
		return decodeAnd(m, func(p acp.NewSessionRequest) (any, *acp.Error) { return s.newSession(ctx, be, p) })
	case acp.MethodSessionLoad:
		return decodeAnd(m, func(p acp.LoadSessionRequest) (any, *acp.Error) { return s.loadSession(ctx, be, p) })
	case acp.MethodSessionResume:
		return decodeAnd(m, func(p acp.ResumeSessionRequest) (any, *acp.Error) { return s.resumeSession(ctx, be, p) })
	case acp.MethodSessionList:
		return decodeAnd(m, func(p acp.ListSessionsRequest) (any, *acp.Error) { return s.listSessions(ctx, be, p) })
	case acp.MethodSessionClose:
		return decodeAnd(m, func(p acp.CloseSessionRequest) (any, *acp.Error) { return s.closeSession(ctx, be, p) })
	case acp.MethodSessionPrompt:
		return decodeAnd(m, func(p acp.PromptRequest) (any, *acp.Error) { return s.prompt(ctx, be, p) })
	case acp.MethodSessionSetMode:
		return decodeAnd(m, func(p acp.SetSessionModeRequest) (any, *acp.Error) { return s.setMode(ctx, be, p) })
	case acp.MethodSessionSetConfigOption:
		return decodeAnd(m, func(p acp.SetSessionConfigOptionRequest) (any, *acp.Error) { return s.setConfigOption(ctx, be, p) })
	}
	return nil, &acp.Error{Code: acp.CodeMethodNotFound, Message: "card does not serve " + m.Method + " (see its initialize capabilities)"}
}

func decodeAnd[P any](m *acp.Message, f func(P) (any, *acp.Error)) (any, *acp.Error) {
	var p P
	if len(m.Params) > 0 {
		if err := json.Unmarshal(m.Params, &p); err != nil {
			return nil, &acp.Error{Code: acp.CodeInvalidParams, Message: m.Method + " params: " + err.Error()}
		}
	}
	return f(p)
}

// invalid is an invalid-params error naming the field.
func invalid(field, format string, args ...any) *acp.Error {
	data, _ := json.Marshal(map[string]string{"field": field})
	return &acp.Error{Code: acp.CodeInvalidParams, Message: field + ": " + fmt.Sprintf(format, args...), Data: data}
}

// fromBackend is a backend error in ACP's shape: a daemon error keeps its
// code, message and data (an editor shows the message; the code is card's
// documented one), anything else is an internal error.
func fromBackend(err error) *acp.Error {
	if err == nil {
		return nil
	}
	var ae *acp.Error
	if errors.As(err, &ae) {
		return ae
	}
	if code, msg, data, ok := rpcError(err); ok {
		return &acp.Error{Code: acp.ErrorCode(code), Message: msg, Data: data}
	}
	if errors.Is(err, context.Canceled) {
		return &acp.Error{Code: acp.CodeRequestCancelled, Message: "request cancelled"}
	}
	return &acp.Error{Code: acp.CodeInternalError, Message: err.Error()}
}
