// Package fakeagent is an ACP agent that needs no account, no model and no
// network: card's own binary runs it (`card fake-agent`) so that an app can
// test itself against card with agents that behave like real ones on card's
// wire — streamed text, tool calls, a permission question, an image echo,
// usage and cost, a slow turn, an expired sign-in, a rate limit, sessions
// that remember — without ever starting a real agent CLI.
//
// It speaks the Agent Client Protocol, version 1, over stdio as the ACP
// agents card runs do (Gemini CLI, OpenCode, Qwen Code): JSON-RPC 2.0, one
// message per line. What a turn does is chosen by markers in the prompt
// text; without one it streams a short answer that quotes what earlier
// turns said, so a client can tell that a session remembers:
//
//	[tool]   a read tool call (tool_call, then tool_call_update completed)
//	[ask]    asks session/request_permission for an edit inside the cwd and
//	         says whether it was allowed; it never writes the file
//	[image]  says how many images the prompt carried, their types and sizes
//	[usage]  says the turn's tokens and the session's cost in the answer
//	         (every turn reports them as usage_update and in its result)
//	[slow]   streams for several seconds; session/cancel ends it cancelled
//	[401]    fails as an agent whose sign-in expired: -32000
//	         "Authentication required"
//	[429]    fails as a rate-limited agent: code 429, as Gemini CLI sends
//	         the model API's status
//
// A session's turns are kept in a file per session under Options.StateDir,
// so session/load and session/resume find them in a later process (a warm
// agent that idled out, a daemon restart). Without a state directory the
// sessions live as long as the process.
package fakeagent

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/internal/atomicfile"
)

// StateEnv names the directory the `card fake-agent` command keeps its
// sessions in; card serve --fake-agents sets it under card's home.
const StateEnv = "CARD_FAKE_AGENT_STATE"

// The figures every turn reports, fixed so that an app's test can assert
// them: 100 tokens in, 50 out, one cent.
const (
	TurnInputTokens  = 100
	TurnOutputTokens = 50
	TurnCostUSD      = 0.01
	// ContextSize is the context window usage_update reports.
	ContextSize = 200000
)

// AuthMethodID is the one sign-in the fake agents offer. It always
// succeeds: there is nothing to sign in to.
const AuthMethodID = "fake-sign-in"

// The modes a session offers. default asks before an edit; auto-edit
// edits inside the cwd without asking; plan refuses edits without asking.
// A new or reopened session starts in default.
const (
	ModeDefault  = "default"
	ModeAutoEdit = "auto-edit"
	ModePlan     = "plan"
)

// Options configure one agent.
type Options struct {
	// Name is the agent's name in initialize's agentInfo.
	Name string
	// Version is its version there.
	Version string
	// StateDir keeps sessions across processes; empty keeps them in
	// memory only.
	StateDir string
	// NoSignIn offers no sign-in method in initialize: the agent needs
	// none. Without it, initialize offers one of type agent, as an agent
	// listed in the ACP registry must, and authenticate always succeeds.
	NoSignIn bool
	// SlowStep is the pause between the chunks of a [slow] turn, which
	// streams ten of them; zero means 500 ms.
	SlowStep time.Duration
}

// Serve answers ACP on in and out until the client closes in or ctx ends.
// A line that is not JSON ends the connection, as it would with most
// agents.
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	if opts.Name == "" {
		opts.Name = "card-fake-agent"
	}
	if opts.SlowStep <= 0 {
		opts.SlowStep = 500 * time.Millisecond
	}
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
			return fmt.Errorf("fake agent: its state directory: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := &agent{opts: opts, ctx: ctx, sessions: map[string]*session{}}
	conn := jsonrpc2.NewConn(ctx, jsonrpc2.NewPlainObjectStream(stdio{in, out}), a, jsonrpc2.SetLogger(discard{}))
	select {
	case <-conn.DisconnectNotify():
	case <-ctx.Done():
		conn.Close()
	}
	// The turns still running end with the connection: their replies
	// have nowhere to go.
	cancel()
	a.turns.Wait()
	return nil
}

// stdio joins a reader and a writer into the stream jsonrpc2 reads and
// writes; closing it closes whichever of them can be closed.
type stdio struct {
	io.Reader
	io.Writer
}

func (s stdio) Close() error {
	if c, ok := s.Reader.(io.Closer); ok {
		c.Close()
	}
	if c, ok := s.Writer.(io.Closer); ok {
		c.Close()
	}
	return nil
}

type discard struct{}

func (discard) Printf(string, ...any) {}

// agent is one connection's state.
type agent struct {
	opts Options
	ctx  context.Context

	mu       sync.Mutex
	sessions map[string]*session
	turns    sync.WaitGroup
}

// session is one conversation. Its record is what the state file holds.
type session struct {
	mu     sync.Mutex
	rec    record
	cancel context.CancelFunc // the turn in progress, nil between turns
}

type record struct {
	SessionID string `json:"sessionId"`
	Cwd       string `json:"cwd"`
	Mode      string `json:"mode"`
	Turns     []turn `json:"turns"`
	// CostUSD is what the session has cost so far, across processes.
	CostUSD float64 `json:"costUsd"`
	// Tokens is what its context holds so far.
	Tokens uint64 `json:"tokens"`
}

type turn struct {
	User  string `json:"user"`
	Agent string `json:"agent"`
}

// Handle serves one message. A prompt runs on its own goroutine, so the
// connection keeps reading: the cancel for it, and the answer to the
// question it asks, come on the same stream.
func (a *agent) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if req.Method == acp.MethodSessionPrompt && !req.Notif {
		// The turn is registered before the next message is read, so a
		// session/cancel right behind the prompt finds it.
		t, err := a.begin(req)
		if err != nil {
			reply(ctx, conn, req, func() (any, error) { return nil, err })
			return
		}
		a.turns.Add(1)
		go func() {
			defer a.turns.Done()
			reply(a.ctx, conn, req, func() (any, error) { return t.run(conn) })
		}()
		return
	}
	if req.Notif {
		if req.Method == acp.MethodSessionCancel {
			a.cancel(req)
		}
		return
	}
	reply(ctx, conn, req, func() (any, error) { return a.call(ctx, conn, req) })
}

func reply(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request, f func() (any, error)) {
	res, err := f()
	if err != nil {
		var je *jsonrpc2.Error
		if !errors.As(err, &je) {
			je = &jsonrpc2.Error{Code: int64(acp.CodeInternalError), Message: err.Error()}
		}
		_ = conn.ReplyWithError(ctx, req.ID, je)
		return
	}
	_ = conn.Reply(ctx, req.ID, res)
}

func (a *agent) call(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
	switch req.Method {
	case acp.MethodInitialize:
		var p acp.InitializeRequest
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return a.initialize(), nil
	case acp.MethodAuthenticate:
		var p acp.AuthenticateRequest
		if err := params(req, &p); err != nil {
			return nil, err
		}
		if p.MethodID != AuthMethodID || a.opts.NoSignIn {
			return nil, invalid("methodId", fmt.Sprintf("no auth method %q; the one offered is %q", p.MethodID, AuthMethodID))
		}
		return acp.AuthenticateResponse{}, nil
	case acp.MethodSessionNew:
		var p acp.NewSessionRequest
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return a.newSession(p)
	case acp.MethodSessionLoad:
		var p acp.LoadSessionRequest
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return a.reopen(ctx, conn, p.SessionID, p.Cwd, true)
	case acp.MethodSessionResume:
		var p acp.ResumeSessionRequest
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return a.reopen(ctx, conn, p.SessionID, p.Cwd, false)
	case acp.MethodSessionClose:
		var p acp.CloseSessionRequest
		if err := params(req, &p); err != nil {
			return nil, err
		}
		a.mu.Lock()
		s, ok := a.sessions[p.SessionID]
		delete(a.sessions, p.SessionID)
		a.mu.Unlock()
		if !ok {
			return nil, notFound(p.SessionID)
		}
		s.mu.Lock()
		if s.cancel != nil {
			s.cancel()
		}
		s.mu.Unlock()
		return acp.CloseSessionResponse{}, nil
	case acp.MethodSessionSetMode:
		var p acp.SetSessionModeRequest
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return a.setMode(ctx, conn, p)
	}
	return nil, &jsonrpc2.Error{Code: int64(acp.CodeMethodNotFound), Message: "Method not found: " + req.Method}
}

func (a *agent) initialize() acp.InitializeResponse {
	title := "card fake agent"
	desc := "Nothing to sign in to: the fake agent needs no account."
	// Typed "agent": the agent runs the sign-in itself when asked, and
	// the ACP registry lists only agents whose methods say their type.
	auth := []acp.AuthMethod{{Type: "agent", ID: AuthMethodID, Name: "Sign in (nothing to do)", Description: &desc}}
	if a.opts.NoSignIn {
		auth = []acp.AuthMethod{}
	}
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersion,
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession:         true,
			PromptCapabilities:  acp.PromptCapabilities{Image: true, EmbeddedContext: true},
			SessionCapabilities: acp.SessionCapabilities{Resume: &acp.MetaOnly{}, Close: &acp.MetaOnly{}},
		},
		AuthMethods: auth,
		AgentInfo:   &acp.Implementation{Name: a.opts.Name, Title: &title, Version: a.opts.Version},
	}
}

func modes(current string) *acp.SessionModeState {
	d := func(s string) *string { return &s }
	return &acp.SessionModeState{CurrentModeID: current, AvailableModes: []acp.SessionMode{
		{ID: ModeDefault, Name: "Default", Description: d("Asks before each edit")},
		{ID: ModeAutoEdit, Name: "Auto Edit", Description: d("Edits inside the working directory without asking")},
		{ID: ModePlan, Name: "Plan", Description: d("Read only: refuses edits without asking")},
	}}
}

func (a *agent) newSession(p acp.NewSessionRequest) (any, error) {
	if !filepath.IsAbs(p.Cwd) {
		return nil, invalid("cwd", fmt.Sprintf("must be an absolute path, not %q", p.Cwd))
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	s := &session{rec: record{SessionID: "fake-" + hex.EncodeToString(b[:]), Cwd: filepath.Clean(p.Cwd), Mode: ModeDefault, Turns: []turn{}}}
	if err := a.save(s.rec); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.sessions[s.rec.SessionID] = s
	a.mu.Unlock()
	return acp.NewSessionResponse{SessionID: s.rec.SessionID, Modes: modes(ModeDefault)}, nil
}

// sessionIDRE is the shape of the ids this agent makes; any other id is
// not one of its sessions, and never becomes a path.
var sessionIDRE = regexp.MustCompile(`^fake-[0-9a-f]{32}$`)

// reopen is session/load (replay true: the turns are sent back as
// session/update before the answer) and session/resume.
func (a *agent) reopen(ctx context.Context, conn *jsonrpc2.Conn, id, cwd string, replay bool) (any, error) {
	if !filepath.IsAbs(cwd) {
		return nil, invalid("cwd", fmt.Sprintf("must be an absolute path, not %q", cwd))
	}
	a.mu.Lock()
	s, ok := a.sessions[id]
	a.mu.Unlock()
	if !ok {
		rec, err := a.load(id)
		if err != nil {
			return nil, err
		}
		s = &session{rec: rec}
		a.mu.Lock()
		if have, ok := a.sessions[id]; ok {
			s = have
		} else {
			a.sessions[id] = s
		}
		a.mu.Unlock()
	}
	s.mu.Lock()
	// Reopened, a session starts in the default mode again, as Qwen
	// Code's do: a client that wants another sets it each time.
	s.rec.Mode = ModeDefault
	s.rec.Cwd = filepath.Clean(cwd)
	turns := append([]turn(nil), s.rec.Turns...)
	s.mu.Unlock()
	if replay {
		for _, t := range turns {
			notify(ctx, conn, id, acp.SessionUpdate{Kind: acp.UpdateUserMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock(t.User)}})
			notify(ctx, conn, id, acp.SessionUpdate{Kind: acp.UpdateAgentMessageChunk, Chunk: &acp.ContentChunk{Content: acp.TextBlock(t.Agent)}})
		}
	}
	return acp.LoadSessionResponse{Modes: modes(ModeDefault)}, nil
}

func (a *agent) setMode(ctx context.Context, conn *jsonrpc2.Conn, p acp.SetSessionModeRequest) (any, error) {
	s, err := a.session(p.SessionID)
	if err != nil {
		return nil, err
	}
	switch p.ModeID {
	case ModeDefault, ModeAutoEdit, ModePlan:
	default:
		return nil, invalid("modeId", fmt.Sprintf("no mode %q; the modes are %s, %s and %s", p.ModeID, ModeDefault, ModeAutoEdit, ModePlan))
	}
	s.mu.Lock()
	s.rec.Mode = p.ModeID
	rec := s.rec
	s.mu.Unlock()
	if err := a.save(rec); err != nil {
		return nil, err
	}
	notify(ctx, conn, p.SessionID, acp.SessionUpdate{Kind: acp.UpdateCurrentMode, CurrentMode: &acp.CurrentModeUpdate{CurrentModeID: p.ModeID}})
	return acp.SetSessionModeResponse{}, nil
}

// session is an open session of this connection.
func (a *agent) session(id string) (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[id]
	if !ok {
		return nil, notFound(id)
	}
	return s, nil
}

func (a *agent) cancel(req *jsonrpc2.Request) {
	var p acp.CancelNotification
	if params(req, &p) != nil {
		return
	}
	a.mu.Lock()
	s := a.sessions[p.SessionID]
	a.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
}

// save writes a session's record, when there is a state directory.
func (a *agent) save(rec record) error {
	if a.opts.StateDir == "" {
		return nil
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(a.opts.StateDir, rec.SessionID+".json"), b, 0o600); err != nil {
		return fmt.Errorf("fake agent: keeping session %s: %w", rec.SessionID, err)
	}
	return nil
}

// load reads a session another process kept.
func (a *agent) load(id string) (record, error) {
	if !sessionIDRE.MatchString(id) || a.opts.StateDir == "" {
		return record{}, notFound(id)
	}
	b, err := os.ReadFile(filepath.Join(a.opts.StateDir, id+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return record{}, notFound(id)
	}
	if err != nil {
		return record{}, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil || rec.SessionID != id {
		return record{}, fmt.Errorf("fake agent: session %s's file is not one it wrote", id)
	}
	if rec.Turns == nil {
		rec.Turns = []turn{}
	}
	return rec, nil
}

func params(req *jsonrpc2.Request, v any) error {
	if req.Params == nil {
		return invalid("params", "missing")
	}
	if err := json.Unmarshal(*req.Params, v); err != nil {
		return invalid("params", err.Error())
	}
	return nil
}

// invalid is ACP's invalid-params error naming the field at fault.
func invalid(field, why string) *jsonrpc2.Error {
	e := &jsonrpc2.Error{Code: int64(acp.CodeInvalidParams), Message: "Invalid params: " + field + " " + why}
	e.SetError(map[string]string{"field": field})
	return e
}

func notFound(id string) *jsonrpc2.Error {
	e := &jsonrpc2.Error{Code: int64(acp.CodeResourceNotFound), Message: "Resource not found: no session " + id}
	e.SetError(map[string]string{"sessionId": id})
	return e
}

func notify(ctx context.Context, conn *jsonrpc2.Conn, id string, u acp.SessionUpdate) {
	_ = conn.Notify(ctx, acp.MethodSessionUpdate, acp.SessionNotification{SessionID: id, Update: u})
}

// decodedSize is the size of a base64 image's bytes, or -1 when it is not
// base64.
func decodedSize(data string) int {
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return -1
	}
	return len(b)
}
