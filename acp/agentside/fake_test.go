package agentside

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/rpc/rpcclient"
)

// fakeBackend is card's sessions in memory: a turn is a script of events
// the test gives, sent to every subscriber in seq order.
type fakeBackend struct {
	mu       sync.Mutex
	specs    []api.ExternalAgentSpec
	health   api.ExternalAgentHealth
	sessions map[string]*fakeSession
	// script makes a turn's events from its prompt; nil answers "ok".
	script  func(fs *fakeSession, p api.SessionPromptParams) []api.AgentEvent
	started []api.SessionStartParams
	prompts []api.SessionPromptParams
	decided []api.DecideParams
	cancels []api.SessionCancelParams
	// released are the sessions.release calls, by session id.
	released []string
	// configured are the sessions.configure calls; configureErr refuses
	// the next one.
	configured   []api.SessionConfigureParams
	configureErr error
	// hold, when set, makes a turn wait before its last event until the
	// test sends or the turn is cancelled.
	hold     chan struct{}
	startErr error
	n        int
	// healthOf, when it names an adapter, is that adapter's status.
	healthOf map[string]api.HealthStatus
	// promptDelay, when set, is how long PromptSession takes for a task
	// before the daemon would have taken the prompt (a turn being set up).
	promptDelay func(task string) time.Duration
}

type fakeSession struct {
	sess   api.Session
	events []api.SessionEvent
	subs   []func(api.SessionEvent)
	cancel chan struct{}
	tasks  map[string]string
	// approvals waiting for a decision, by request id.
	waiting map[string]chan string
}

func newFake() *fakeBackend {
	spec := func(id, name string, images, mcp bool) api.ExternalAgentSpec {
		return api.ExternalAgentSpec{ID: id, DisplayName: name, BinaryPath: "/bin/" + id,
			Capabilities: api.Capabilities{Images: images, MCP: mcp, Ask: true, Sessions: true, Streaming: true}}
	}
	return &fakeBackend{specs: []api.ExternalAgentSpec{spec("claude-code", "Claude Code", true, true), spec("pi", "Pi", true, false),
		spec("droid", "Droid", false, true)},
		health: api.ExternalAgentHealth{Status: api.StatusReady}, sessions: map[string]*fakeSession{}}
}

func (f *fakeBackend) StartSession(_ context.Context, p api.SessionStartParams) (api.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return api.Session{}, f.startErr
	}
	f.n++
	f.started = append(f.started, p)
	s := api.Session{SessionID: fmt.Sprintf("ses_%d", f.n), Adapter: p.ID, State: api.SessionIdle, Cwd: p.Cwd,
		PermissionMode: p.PermissionMode, Model: p.Model, Effort: p.Effort, NextSeq: 1, UpdatedAt: time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)}
	if p.Isolation != "" {
		s.Worktree = fakeWorktree(s.SessionID, p.Cwd, p.Base)
	}
	f.sessions[s.SessionID] = &fakeSession{sess: s, tasks: map[string]string{}, waiting: map[string]chan string{}}
	return s, nil
}

// fakeWorktree is the worktree the fake daemon reports for session id.
func fakeWorktree(id, cwd, base string) *api.SessionWorktree {
	if base == "" {
		base = "HEAD"
	}
	return &api.SessionWorktree{Path: "/card/worktrees/" + id + "/project", Dir: "/card/worktrees/" + id + "/project",
		Branch: "card/" + id, Base: strings.Repeat("a", 40), BaseRef: base, Repo: cwd, Uncommitted: api.Uncommitted{Paths: []string{}}}
}

func (f *fakeBackend) emit(fs *fakeSession, turn int, ev api.AgentEvent) {
	f.mu.Lock()
	seq := int64(len(fs.events) + 1)
	// The run's own seq counts its events from 1; the session's counts
	// every turn's.
	ev.Seq = 1
	for _, e := range fs.events {
		if e.Event.RunID == ev.RunID {
			ev.Seq++
		}
	}
	if ev.RunID == "" { // the session's own event, between turns
		ev.Seq = 0
	}
	se := api.SessionEvent{SessionID: fs.sess.SessionID, Seq: seq, Turn: turn, Event: ev}
	fs.events = append(fs.events, se)
	fs.sess.NextSeq = seq + 1
	subs := append([]func(api.SessionEvent){}, fs.subs...)
	f.mu.Unlock()
	for _, fn := range subs {
		fn(se)
	}
}

func (f *fakeBackend) PromptSession(_ context.Context, p api.SessionPromptParams) (api.SessionPromptResult, error) {
	if f.promptDelay != nil {
		time.Sleep(f.promptDelay(p.Task))
	}
	f.mu.Lock()
	fs := f.sessions[p.SessionID]
	if fs == nil {
		f.mu.Unlock()
		return api.SessionPromptResult{}, &rpcclient.Error{Code: -32043, Message: "no session " + p.SessionID}
	}
	f.prompts = append(f.prompts, p)
	fs.sess.Turns++
	turn := fs.sess.Turns
	runID := fmt.Sprintf("run_%d_%d", f.n, turn)
	fs.tasks[runID] = p.Task
	fs.cancel = make(chan struct{})
	cancel := fs.cancel
	script, hold := f.script, f.hold
	f.mu.Unlock()
	var evs []api.AgentEvent
	if script != nil {
		evs = script(fs, p)
	} else {
		evs = []api.AgentEvent{{Event: api.Event{Kind: api.EventText, Text: "ok", Delta: true}}}
	}
	go func() {
		for _, ev := range evs {
			ev.RunID = runID
			if ev.Kind == api.EventApprovalRequested {
				ch := make(chan string, 1)
				f.mu.Lock()
				fs.waiting[ev.Approval.RequestID] = ch
				f.mu.Unlock()
				f.emit(fs, turn, ev)
				var d string
				select {
				case d = <-ch:
				case <-cancel:
					d = api.DecisionDeny
				}
				f.emit(fs, turn, api.AgentEvent{RunID: runID, Event: api.Event{Kind: api.EventApprovalDecided, Tool: ev.Tool},
					Approval: &api.Approval{RequestID: ev.Approval.RequestID, Decision: d, By: api.ByClient}})
				if d == api.DecisionDeny {
					f.emit(fs, turn, api.AgentEvent{RunID: runID, Event: api.Event{Kind: api.EventToolResult, Tool: &api.Tool{ID: ev.Tool.ID}, Output: "denied", IsError: true}})
				}
				continue
			}
			f.emit(fs, turn, ev)
		}
		status, kind := api.StatusSucceeded, api.EventDone
		if hold != nil {
			select {
			case <-hold:
			case <-cancel:
				status, kind = api.StatusCancelled, api.EventRunError
			}
		}
		cost := 0.01
		f.emit(fs, turn, api.AgentEvent{RunID: runID, Event: api.Event{Kind: kind}, Status: status,
			Result: &api.InvokeResult{Result: api.Result{Answer: "ok", CostUSD: &cost, Usage: api.Usage{InputTokens: 10, OutputTokens: 5}}, RunID: runID, Status: status}})
	}()
	return api.SessionPromptResult{SessionID: p.SessionID, Turn: turn, RunID: runID}, nil
}

func (f *fakeBackend) CancelTurn(_ context.Context, p api.SessionCancelParams) (api.SessionCancelResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, p)
	fs := f.sessions[p.SessionID]
	if fs == nil || fs.cancel == nil {
		return api.SessionCancelResult{SessionID: p.SessionID}, nil
	}
	select {
	case <-fs.cancel:
	default:
		close(fs.cancel)
	}
	return api.SessionCancelResult{SessionID: p.SessionID, Cancelled: true}, nil
}

// ConfigureSession changes the session's settings and, as card's
// sessions do, adds a session_configured event to its stream when
// something changed.
func (f *fakeBackend) ConfigureSession(_ context.Context, p api.SessionConfigureParams) (api.SessionConfigureResult, error) {
	f.mu.Lock()
	fs := f.sessions[p.SessionID]
	if fs == nil {
		f.mu.Unlock()
		return api.SessionConfigureResult{}, &rpcclient.Error{Code: -32043, Message: "no session " + p.SessionID}
	}
	if err := f.configureErr; err != nil {
		f.configureErr = nil
		f.mu.Unlock()
		return api.SessionConfigureResult{}, err
	}
	f.configured = append(f.configured, p)
	set := func(field *string, v string) {
		switch v {
		case "":
		case api.ConfigureDefault:
			*field = ""
		default:
			*field = v
		}
	}
	was := fs.sess
	if p.ID != "" && p.ID != fs.sess.Adapter {
		if fs.sess.Turns > 0 {
			f.mu.Unlock()
			return api.SessionConfigureResult{}, &rpcclient.Error{Code: -32602, Message: "invalid params: id: the session has taken a turn"}
		}
		fs.sess.Adapter = p.ID
	}
	if p.Isolation != "" && (p.Isolation == api.IsolationOff) != (fs.sess.Worktree == nil) {
		if fs.sess.Turns > 0 {
			f.mu.Unlock()
			return api.SessionConfigureResult{}, &rpcclient.Error{Code: -32602, Message: "invalid params: isolation: the session has taken a turn",
				Data: json.RawMessage(`{"field":"isolation"}`)}
		}
		fs.sess.Worktree = nil
		if p.Isolation == api.IsolationWorktree {
			fs.sess.Worktree = fakeWorktree(fs.sess.SessionID, fs.sess.Cwd, p.Base)
		}
	}
	if p.PermissionMode != "" {
		fs.sess.PermissionMode = p.PermissionMode
	}
	set(&fs.sess.Model, p.Model)
	set(&fs.sess.Effort, p.Effort)
	now := fs.sess
	f.mu.Unlock()
	changed := []string{}
	if was.Adapter != now.Adapter {
		changed = append(changed, "id")
	}
	if was.PermissionMode != now.PermissionMode {
		changed = append(changed, "permission_mode")
	}
	if was.Model != now.Model {
		changed = append(changed, "model")
	}
	if was.Effort != now.Effort {
		changed = append(changed, "effort")
	}
	if (was.Worktree == nil) != (now.Worktree == nil) {
		changed = append(changed, "isolation")
	}
	if len(changed) > 0 {
		iso := ""
		if now.Worktree != nil {
			iso = api.IsolationWorktree
		}
		f.emit(fs, now.Turns, api.AgentEvent{Event: api.Event{Kind: api.EventSessionConfigured}, Configured: &api.SessionConfigured{
			Changed: changed, Adapter: now.Adapter, PermissionMode: now.PermissionMode, Model: now.Model, Effort: now.Effort, AppliesFromTurn: now.Turns + 1,
			Isolation: iso, Worktree: now.Worktree}})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return api.SessionConfigureResult{Session: fs.sess, Changed: changed, AppliesFromTurn: now.Turns + 1}, nil
}

func (f *fakeBackend) CloseSession(_ context.Context, id string) (api.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.sessions[id]
	if fs == nil {
		return api.Session{}, &rpcclient.Error{Code: -32043, Message: "no session " + id}
	}
	fs.sess.State = api.SessionClosed
	return fs.sess, nil
}

func (f *fakeBackend) ReleaseSession(_ context.Context, id string) (api.SessionReleaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.sessions[id]
	if fs == nil {
		return api.SessionReleaseResult{}, &rpcclient.Error{Code: -32043, Message: "no session " + id}
	}
	f.released = append(f.released, id)
	return api.SessionReleaseResult{Session: fs.sess, WarmAgent: "ended"}, nil
}

func (f *fakeBackend) Sessions(_ context.Context, p api.SessionListParams) (api.SessionList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := api.SessionList{}
	for i := 1; i <= f.n; i++ {
		if fs := f.sessions[fmt.Sprintf("ses_%d", i)]; fs != nil && (p.Adapter == "" || p.Adapter == fs.sess.Adapter) {
			out.Sessions = append(out.Sessions, fs.sess)
		}
	}
	return out, nil
}

func (f *fakeBackend) Session(_ context.Context, id string) (api.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.sessions[id]
	if fs == nil {
		return api.Session{}, &rpcclient.Error{Code: -32043, Message: "no session " + id}
	}
	return fs.sess, nil
}

func (f *fakeBackend) SubscribeSession(_ context.Context, p api.SessionSubscribeParams, on func(api.SessionEvent)) (api.SessionSubscribeResult, error) {
	f.mu.Lock()
	fs := f.sessions[p.SessionID]
	if fs == nil {
		f.mu.Unlock()
		return api.SessionSubscribeResult{}, &rpcclient.Error{Code: -32043, Message: "no session " + p.SessionID}
	}
	var history []api.SessionEvent
	for _, e := range fs.events {
		if e.Seq > p.AfterSeq {
			history = append(history, e)
		}
	}
	fs.subs = append(fs.subs, on)
	res := api.SessionSubscribeResult{SessionID: p.SessionID, State: fs.sess.State, NextSeq: fs.sess.NextSeq, Live: true}
	f.mu.Unlock()
	// The history follows the answer, as notifications do on the wire.
	go func() {
		for _, e := range history {
			on(e)
		}
	}()
	return res, nil
}

func (f *fakeBackend) Detect(context.Context, api.DetectParams) ([]api.ExternalAgentSpec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.specs, nil
}

func (f *fakeBackend) Health(_ context.Context, id string, _ bool) (api.ExternalAgentHealth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.health
	if st, ok := f.healthOf[id]; ok {
		h.Status = st
	}
	h.ID = id
	return h, nil
}

func (f *fakeBackend) Run(_ context.Context, runID string) (api.RunRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fs := range f.sessions {
		if t, ok := fs.tasks[runID]; ok {
			return api.RunRecord{Run: api.Run{Task: t}}, nil
		}
	}
	return api.RunRecord{}, &rpcclient.Error{Code: -32004, Message: "no run"}
}

func (f *fakeBackend) ApprovalDecide(_ context.Context, p api.DecideParams) (api.DecideResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decided = append(f.decided, p)
	for _, fs := range f.sessions {
		if ch := fs.waiting[p.RequestID]; ch != nil {
			delete(fs.waiting, p.RequestID)
			ch <- p.Decision
		}
	}
	return api.DecideResult{RunID: p.RunID, RequestID: p.RequestID, Decision: p.Decision, By: api.ByClient}, nil
}

// pipe is an in-memory transport: the test is the editor.
type pipe struct {
	in   chan []byte
	out  chan []byte
	done chan struct{}
	once sync.Once
}

func (p *pipe) Read(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.in:
		return b, nil
	case <-p.done:
		return nil, errEOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipe) Write(_ context.Context, b []byte) error {
	select {
	case p.out <- append([]byte(nil), b...):
		return nil
	case <-p.done:
		return errEOF
	}
}

// editor drives a Server as an ACP client would, and checks every frame
// the server sends against the published schema.
type editor struct {
	t      *testing.T
	p      *pipe
	srv    *Server
	be     *fakeBackend
	schema *jsonschema.Compiler

	mu      sync.Mutex
	nextID  int
	methods map[string]string // our request ids → method, to validate answers
	waiting map[string]chan acp.Message
	updates []acp.SessionNotification
	frames  [][]byte
	// onPermission answers session/request_permission; nil selects the
	// first option.
	onPermission func(acp.RequestPermissionRequest) acp.RequestPermissionResponse
	asked        []acp.RequestPermissionRequest
	withdrawn    []string
	served       chan error
}

var errEOF = fmt.Errorf("EOF: %w", os.ErrClosed)

// schemaCompiler compiles the published schema; a compiler is not safe for
// concurrent use, so each user has its own.
func schemaCompiler(t *testing.T) *jsonschema.Compiler {
	t.Helper()
	raw, err := os.ReadFile("../testdata/schema.json")
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("schema.json", doc))
	return c
}

// eventsMayWait makes every editor's server handle its events where they
// are delivered (Config.EventsMayWait), as the daemon's front door does;
// the fake backend may wait wherever it delivers them.
var eventsMayWait bool

func newEditor(t *testing.T, cfg Config, be *fakeBackend) *editor {
	t.Helper()
	c := schemaCompiler(t)
	e := &editor{t: t, p: &pipe{in: make(chan []byte, 64), out: make(chan []byte, 4096), done: make(chan struct{})},
		be: be, schema: c, methods: map[string]string{}, waiting: map[string]chan acp.Message{}, served: make(chan error, 1)}
	if cfg.Version == "" {
		cfg.Version = "0.1.0-test"
	}
	cfg.EventsMayWait = cfg.EventsMayWait || eventsMayWait
	e.srv = New(cfg)
	if be != nil {
		e.srv.SetBackend(be)
	}
	go func() { e.served <- e.srv.Serve(context.Background(), e.p) }()
	go e.read()
	t.Cleanup(func() {
		e.p.once.Do(func() { close(e.p.done) })
		select {
		case <-e.served:
		case <-time.After(10 * time.Second):
			t.Error("the server did not stop when its transport closed")
		}
	})
	return e
}

// validate checks one frame card sent against the schema's definition def.
func (e *editor) validate(def string, v json.RawMessage) {
	sch, err := e.schema.Compile("schema.json#/$defs/" + def)
	require.NoError(e.t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(v))
	require.NoError(e.t, err)
	assert.NoError(e.t, sch.Validate(inst), "%s: %s", def, v)
}

var responseDefs = map[string]string{
	acp.MethodInitialize: "InitializeResponse", acp.MethodAuthenticate: "AuthenticateResponse",
	acp.MethodSessionNew: "NewSessionResponse", acp.MethodSessionLoad: "LoadSessionResponse",
	acp.MethodSessionList: "ListSessionsResponse", acp.MethodSessionResume: "ResumeSessionResponse",
	acp.MethodSessionClose: "CloseSessionResponse", acp.MethodSessionSetMode: "SetSessionModeResponse",
	acp.MethodSessionSetConfigOption: "SetSessionConfigOptionResponse", acp.MethodSessionPrompt: "PromptResponse",
}

func (e *editor) read() {
	root, err := e.schema.Compile("schema.json")
	if err != nil {
		e.t.Error(err)
		return
	}
	for {
		var b []byte
		select {
		case b = <-e.p.out:
		case <-e.p.done:
			return
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if !assert.NoError(e.t, err) {
			continue
		}
		assert.NoError(e.t, root.Validate(inst), "a frame card sent is no ACP message: %s", b)
		var m acp.Message
		require.NoError(e.t, json.Unmarshal(b, &m))
		e.mu.Lock()
		e.frames = append(e.frames, b)
		e.mu.Unlock()
		switch {
		case m.IsResponse():
			e.mu.Lock()
			method := e.methods[string(m.ID)]
			ch := e.waiting[string(m.ID)]
			e.mu.Unlock()
			if m.Error != nil {
				eb, _ := json.Marshal(m.Error)
				e.validate("Error", eb)
			} else if def := responseDefs[method]; def != "" {
				e.validate(def, m.Result)
			}
			if ch != nil {
				ch <- m
			}
		case m.Method == acp.MethodSessionUpdate:
			e.validate("SessionNotification", m.Params)
			var n acp.SessionNotification
			require.NoError(e.t, json.Unmarshal(m.Params, &n))
			e.mu.Lock()
			e.updates = append(e.updates, n)
			e.mu.Unlock()
		case m.Method == acp.MethodSessionRequestPermission:
			e.validate("RequestPermissionRequest", m.Params)
			var q acp.RequestPermissionRequest
			require.NoError(e.t, json.Unmarshal(m.Params, &q))
			e.mu.Lock()
			e.asked = append(e.asked, q)
			answer := e.onPermission
			e.mu.Unlock()
			go func(id json.RawMessage) {
				var res acp.RequestPermissionResponse
				if answer != nil {
					res = answer(q)
				} else {
					res = acp.Selected(q.Options[0].OptionID)
				}
				if res.Outcome.Outcome == "" { // the test withholds its answer
					return
				}
				r, _ := acp.Response(id, res, nil)
				rb, _ := json.Marshal(r)
				e.p.in <- rb
			}(m.ID)
		case m.Method == acp.MethodCancelRequest:
			e.validate("CancelRequestNotification", m.Params)
			var c acp.CancelRequestNotification
			require.NoError(e.t, json.Unmarshal(m.Params, &c))
			e.mu.Lock()
			e.withdrawn = append(e.withdrawn, string(c.RequestID))
			e.mu.Unlock()
		default:
			e.t.Errorf("card sent an unexpected frame: %s", b)
		}
	}
}

// request sends method and returns the answer message.
func (e *editor) request(method string, params any) acp.Message {
	e.t.Helper()
	ch := e.start(method, params)
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		e.t.Fatalf("no answer to %s", method)
		return acp.Message{}
	}
}

func (e *editor) start(method string, params any) chan acp.Message {
	e.mu.Lock()
	e.nextID++
	id := strconv.Itoa(e.nextID)
	e.methods[id] = method
	ch := make(chan acp.Message, 1)
	e.waiting[id] = ch
	e.mu.Unlock()
	m, err := acp.Request(json.RawMessage(id), method, params)
	require.NoError(e.t, err)
	b, _ := json.Marshal(m)
	e.p.in <- b
	return ch
}

func (e *editor) notify(method string, params any) {
	m, err := acp.Notification(method, params)
	require.NoError(e.t, err)
	b, _ := json.Marshal(m)
	e.p.in <- b
}

// ok decodes a successful answer into out.
func (e *editor) ok(method string, params, out any) {
	e.t.Helper()
	m := e.request(method, params)
	require.Nil(e.t, m.Error, "%s answered an error", method)
	if out != nil {
		require.NoError(e.t, json.Unmarshal(m.Result, out))
	}
}

func (e *editor) fail(method string, params any) *acp.Error {
	e.t.Helper()
	m := e.request(method, params)
	require.NotNil(e.t, m.Error, "%s should have failed: %s", method, m.Result)
	return m.Error
}

func (e *editor) kinds(session string) []acp.UpdateKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []acp.UpdateKind
	for _, u := range e.updates {
		if u.SessionID == session {
			out = append(out, u.Update.Kind)
		}
	}
	return out
}

func (e *editor) updatesOf(session string, kind acp.UpdateKind) []acp.SessionUpdate {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []acp.SessionUpdate
	for _, u := range e.updates {
		if u.SessionID == session && u.Update.Kind == kind {
			out = append(out, u.Update)
		}
	}
	return out
}

func (e *editor) clearUpdates() {
	e.mu.Lock()
	e.updates = nil
	e.mu.Unlock()
}

func meta(adapter string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"card": map[string]any{"adapter": adapter}})
	return b
}
