package agentside

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// SessionMeta is _meta.card on session/new: what ACP's session/new has no
// field for. Adapter picks the CLI (required unless the server is fixed to
// one, and then it must name that one or be left out).
type SessionMeta struct {
	Adapter        string `json:"adapter,omitempty"`
	PermissionMode string `json:"permissionMode,omitempty"`
	Model          string `json:"model,omitempty"`
	Effort         string `json:"effort,omitempty"`
	Warm           bool   `json:"warm,omitempty"`
	// DropMCPServers starts the session without the mcpServers card cannot
	// hand the CLI, instead of refusing it: the editor asked for it.
	DropMCPServers bool `json:"dropMcpServers,omitempty"`
	// AfterSeq, on session/load, replays only the events after this seq
	// (each session/update card sends carries its seq in _meta.card.seq).
	AfterSeq int64 `json:"afterSeq,omitempty"`
	// Isolation "worktree" runs the session's turns in a git worktree of
	// the cwd's repository, from Base (default HEAD): sessions.start's
	// isolation and base. Base is read on session/set_config_option too,
	// with the isolation option set to "worktree".
	Isolation string `json:"isolation,omitempty"`
	Base      string `json:"base,omitempty"`
}

func readMeta(raw acp.Meta) (SessionMeta, *acp.Error) {
	var m SessionMeta
	if len(raw) == 0 || string(raw) == "null" {
		return m, nil
	}
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(raw, &outer); err != nil {
		return m, invalid("_meta", "must be an object: %v", err)
	}
	inner, ok := outer[MetaKey]
	if !ok {
		return m, nil
	}
	if err := json.Unmarshal(inner, &m); err != nil {
		return m, invalid("_meta.card", "%v", err)
	}
	return m, nil
}

// permissionModes are card's modes, offered as the session's ACP modes.
var permissionModes = []acp.SessionMode{
	{ID: "read_only", Name: "Read only", Description: ptr("The agent reads and answers; it changes nothing.")},
	{ID: "ask", Name: "Ask", Description: ptr("Each tool call outside read-only is put to you first.")},
	{ID: "edit", Name: "Edit", Description: ptr("The agent edits files in the session's directory without asking.")},
	{ID: "bypass", Name: "Bypass", Description: ptr("The agent runs anything without asking (the operator must allow it).")},
}

func ptr[T any](v T) *T { return &v }

// detect is the daemon's detection, cached for a minute: initialize and
// every session/new need it, and it does not change between them.
func (s *Server) detect(ctx context.Context, be Backend) ([]api.ExternalAgentSpec, *acp.Error) {
	s.mu.Lock()
	specs, at := s.specs, s.specsAt
	s.mu.Unlock()
	if specs != nil && time.Since(at) < time.Minute {
		return specs, nil
	}
	specs, err := be.Detect(ctx, api.DetectParams{})
	if err != nil {
		return nil, fromBackend(err)
	}
	s.mu.Lock()
	s.specs, s.specsAt = specs, time.Now()
	s.mu.Unlock()
	return specs, nil
}

// spec is the installed adapter id, or the error an editor shows.
func (s *Server) spec(ctx context.Context, be Backend, id string) (api.ExternalAgentSpec, *acp.Error) {
	facts, known := agent.Lookup(id)
	if !known {
		return api.ExternalAgentSpec{}, unknownAdapter(id)
	}
	specs, aerr := s.detect(ctx, be)
	if aerr != nil {
		return api.ExternalAgentSpec{}, aerr
	}
	for _, sp := range specs {
		if sp.ID != id {
			continue
		}
		if reason, bad := sp.UnusableReason(); bad {
			data, _ := json.Marshal(map[string]string{"adapter": id, "reason": reason})
			return sp, &acp.Error{Code: CodeAdapterUnavailable, Message: facts.DisplayName + " cannot run: " + reason, Data: data}
		}
		return sp, nil
	}
	data, _ := json.Marshal(map[string]string{"adapter": id, "install": facts.InstallHint})
	return api.ExternalAgentSpec{}, &acp.Error{Code: CodeAdapterUnavailable,
		Message: fmt.Sprintf("%s (%s) is not installed where card looks: %s", facts.DisplayName, facts.Binary, facts.InstallHint), Data: data}
}

// unknownAdapter is the error for an adapter id card does not have,
// listing the ones it has.
func unknownAdapter(id string) *acp.Error {
	ids := []string{}
	for _, a := range agent.All() {
		ids = append(ids, a.ID)
	}
	data, _ := json.Marshal(map[string]any{"adapter": id, "adapters": ids})
	return &acp.Error{Code: CodeAdapterUnavailable,
		Message: fmt.Sprintf("card has no adapter %q; the adapters are %s", id, strings.Join(ids, ", ")), Data: data}
}

func (s *Server) initialize(ctx context.Context, be Backend, p acp.InitializeRequest) (any, *acp.Error) {
	s.mu.Lock()
	s.clientCaps = p.ClientCapabilities
	s.mu.Unlock()
	caps := acp.AgentCapabilities{
		LoadSession:         true,
		PromptCapabilities:  acp.PromptCapabilities{EmbeddedContext: true},
		SessionCapabilities: acp.SessionCapabilities{List: &acp.MetaOnly{}, Resume: &acp.MetaOnly{}, Close: &acp.MetaOnly{}},
	}
	info := &acp.Implementation{Name: "card", Version: s.cfg.Version}
	var auth []acp.AuthMethod
	if s.cfg.Adapter != "" {
		sp, aerr := s.spec(ctx, be, s.cfg.Adapter)
		if aerr != nil {
			return nil, aerr
		}
		caps.PromptCapabilities.Image = sp.Capabilities.Images
		caps.MCPCapabilities.HTTP = sp.Capabilities.MCP
		info.Title = ptr("card: " + sp.DisplayName)
		auth = []acp.AuthMethod{authMethod(sp.ID)}
	} else {
		// Every session names its adapter, so what a prompt may carry is
		// what every installed adapter takes: an image is never sent to
		// one that would not see it. _meta.card.adapters has each one's.
		specs, aerr := s.detect(ctx, be)
		if aerr != nil {
			return nil, aerr
		}
		per := map[string]acp.PromptCapabilities{}
		img, mcp, some := true, true, false
		for _, sp := range specs {
			if _, bad := sp.UnusableReason(); bad {
				continue
			}
			some = true
			img = img && sp.Capabilities.Images
			mcp = mcp && sp.Capabilities.MCP
			per[sp.ID] = acp.PromptCapabilities{Image: sp.Capabilities.Images, EmbeddedContext: true}
			auth = append(auth, authMethod(sp.ID))
		}
		caps.PromptCapabilities.Image = img && some
		caps.MCPCapabilities.HTTP = mcp && some
		meta, _ := json.Marshal(map[string]any{MetaKey: map[string]any{"adapters": per}})
		caps.Meta = meta
	}
	return acp.InitializeResponse{ProtocolVersion: acp.ProtocolVersion, AgentCapabilities: caps, AuthMethods: auth, AgentInfo: info}, nil
}

// initializeWithoutDaemon is initialize when `card acp` found no daemon:
// the capabilities are the adapter's own facts (what detection would
// report for it), and the sign-in method is the one it always offers.
// Whether the CLI is installed is the daemon's to say, at session/new.
func (s *Server) initializeWithoutDaemon(p acp.InitializeRequest) (any, *acp.Error) {
	s.mu.Lock()
	s.clientCaps = p.ClientCapabilities
	s.mu.Unlock()
	caps := acp.AgentCapabilities{
		LoadSession:         true,
		PromptCapabilities:  acp.PromptCapabilities{EmbeddedContext: true},
		SessionCapabilities: acp.SessionCapabilities{List: &acp.MetaOnly{}, Resume: &acp.MetaOnly{}, Close: &acp.MetaOnly{}},
	}
	info := &acp.Implementation{Name: "card", Version: s.cfg.Version}
	var auth []acp.AuthMethod
	if s.cfg.Adapter != "" {
		facts, known := agent.Lookup(s.cfg.Adapter)
		if !known {
			return nil, unknownAdapter(s.cfg.Adapter)
		}
		caps.PromptCapabilities.Image = facts.Capabilities.Images
		caps.MCPCapabilities.HTTP = facts.Capabilities.MCP
		info.Title = ptr("card: " + facts.DisplayName)
		auth = []acp.AuthMethod{authMethod(facts.ID)}
	} else {
		for _, a := range agent.All() {
			auth = append(auth, authMethod(a.ID))
		}
	}
	return acp.InitializeResponse{ProtocolVersion: acp.ProtocolVersion, AgentCapabilities: caps, AuthMethods: auth, AgentInfo: info}, nil
}

// authTypeAgent is ACP's auth method type for a sign-in the agent runs
// itself when the client calls authenticate. ACP reads a method without a
// type as this one, but the ACP registry lists only agents whose methods
// say their type.
const authTypeAgent = "agent"

// authMethod is the one sign-in card offers per adapter: checking the
// CLI's own sign-in. card never handles credentials; a person signs in
// with the CLI and authenticate reports what card's health check sees.
func authMethod(id string) acp.AuthMethod {
	facts, _ := agent.Lookup(id)
	return acp.AuthMethod{Type: authTypeAgent, ID: id, Name: "Check " + facts.DisplayName + "'s sign-in",
		Description: ptr("card uses " + facts.Binary + "'s own sign-in; sign in with " + loginHint(id) + ", then choose this again.")}
}

// loginHint is how a person signs in: with the CLI itself, as for using
// it without card. The health check's reason, when there is one, names the
// CLI's own command (it is the adapter's probe that knows it).
func loginHint(id string) string {
	facts, ok := agent.Lookup(id)
	if !ok {
		return "the CLI's own login"
	}
	return "`" + facts.Binary + "` itself (its own login, or its API key in the daemon's environment)"
}

func (s *Server) authenticate(ctx context.Context, be Backend, p acp.AuthenticateRequest) (any, *acp.Error) {
	id := p.MethodID
	if s.cfg.Adapter != "" && id != s.cfg.Adapter {
		return nil, invalid("methodId", "this agent offers %q only", s.cfg.Adapter)
	}
	if _, aerr := s.spec(ctx, be, id); aerr != nil {
		return nil, aerr
	}
	h, err := be.Health(ctx, id, true)
	if err != nil {
		return nil, fromBackend(err)
	}
	if h.Status == api.StatusReady {
		return acp.AuthenticateResponse{}, nil
	}
	return nil, notSignedIn(id, h)
}

func notSignedIn(id string, h api.ExternalAgentHealth) *acp.Error {
	facts, _ := agent.Lookup(id)
	data, _ := json.Marshal(map[string]string{"adapter": id, "status": string(h.Status), "reason": h.Reason})
	msg := facts.DisplayName + " is not signed in"
	if h.Reason != "" {
		msg += ": " + h.Reason
	}
	return &acp.Error{Code: acp.CodeAuthRequired, Message: msg + "; sign in with " + loginHint(id), Data: data}
}

func (s *Server) newSession(ctx context.Context, be Backend, p acp.NewSessionRequest) (any, *acp.Error) {
	meta, aerr := readMeta(p.Meta)
	if aerr != nil {
		return nil, aerr
	}
	id := meta.Adapter
	switch {
	case s.cfg.Adapter != "" && id != "" && id != s.cfg.Adapter:
		return nil, invalid("_meta.card.adapter", "this agent runs %s only (card acp %s); it cannot start a %s session", s.cfg.Adapter, s.cfg.Adapter, id)
	case s.cfg.Adapter != "":
		id = s.cfg.Adapter
	case id == "":
		var aerr *acp.Error
		if id, aerr = s.defaultAdapter(ctx, be); aerr != nil {
			return nil, aerr
		}
	}
	if !filepath.IsAbs(p.Cwd) {
		return nil, invalid("cwd", "must be an absolute path, got %q", p.Cwd)
	}
	sp, aerr := s.spec(ctx, be, id)
	if aerr != nil {
		return nil, aerr
	}
	endpoint, aerr := mcpEndpoint(sp, p.MCPServers, meta.DropMCPServers)
	if aerr != nil {
		return nil, aerr
	}
	mode := meta.PermissionMode
	if mode == "" {
		mode = s.cfg.DefaultPermissionMode
	}
	if mode == "" {
		mode = "read_only"
		if sp.Capabilities.Ask {
			mode = "ask"
		}
	}
	sess, err := be.StartSession(ctx, api.SessionStartParams{
		AgentSettings: api.AgentSettings{ID: id, InvokedBy: s.cfg.InvokedBy, Cwd: p.Cwd, PermissionMode: mode, Model: meta.Model, Effort: meta.Effort, MCPEndpoint: endpoint, Isolation: meta.Isolation, Base: meta.Base},
		Warm:          meta.Warm,
	})
	if err != nil {
		return nil, s.startError(ctx, be, id, err)
	}
	st := s.attach(sess, sp.Capabilities)
	st.offer(s.choices(ctx, be))
	if aerr := s.subscribe(ctx, be, st, sess.NextSeq-1, false); aerr != nil {
		return nil, aerr
	}
	return acp.NewSessionResponse{SessionID: sess.SessionID, Modes: modes(sess.PermissionMode), ConfigOptions: st.configOptions(),
		Meta: worktreeMeta(sess.Worktree)}, nil
}

// worktreeMeta is _meta.card of an answer that names an isolated session
// (session/new, session/load, session/resume): where its agent works (an
// editor's open files are the checkout's, not these), as sessions.start
// answers it; nil for a session that runs in its cwd.
func worktreeMeta(wt *api.SessionWorktree) acp.Meta {
	if wt = liveWorktree(wt); wt == nil {
		return nil
	}
	meta, _ := json.Marshal(map[string]any{MetaKey: map[string]any{"worktree": wt}})
	return meta
}

// liveWorktree is wt, or nil when there is none or it was discarded.
func liveWorktree(wt *api.SessionWorktree) *api.SessionWorktree {
	if wt == nil || wt.DiscardedAt != nil {
		return nil
	}
	return wt
}

// defaultAdapter is the agent of a session whose editor named none, on a
// connection with no adapter fixed: the first installed adapter that can
// run and is signed in, else the first that can run. The editor can pick
// another with the agent config option before the first turn.
func (s *Server) defaultAdapter(ctx context.Context, be Backend) (string, *acp.Error) {
	ids := s.choices(ctx, be)
	for _, id := range ids {
		if h, err := be.Health(ctx, id, false); err == nil && h.Status == api.StatusReady {
			return id, nil
		}
	}
	if len(ids) > 0 {
		return ids[0], nil
	}
	return "", &acp.Error{Code: CodeAdapterUnavailable,
		Message: "no agent CLI card can run is installed (card detect says which it found and how to install the others); " + adapterList() + " are the adapters"}
}

// choices are the adapters a session may pick on this connection: every
// installed one that can run, in card's order, when no adapter is fixed;
// none when one is.
func (s *Server) choices(ctx context.Context, be Backend) []string {
	if s.cfg.Adapter != "" {
		return nil
	}
	specs, aerr := s.detect(ctx, be)
	if aerr != nil {
		return nil
	}
	var ids []string
	for _, a := range agent.All() {
		for _, sp := range specs {
			if _, bad := sp.UnusableReason(); sp.ID == a.ID && !bad {
				ids = append(ids, a.ID)
			}
		}
	}
	return ids
}

// startError is a refused start as the daemon said it. The sign-in state
// is not checked here: health is a reading of the CLI's files, which can
// say "not signed in" of a CLI that works (a key in the daemon's
// environment), so it must not refuse a session; a turn the API refuses
// ends with the sign-in error instead.
func (s *Server) startError(_ context.Context, _ Backend, _ string, err error) *acp.Error {
	return fromBackend(err)
}

func adapterList() string {
	ids := []string{}
	for _, a := range agent.All() {
		ids = append(ids, a.ID)
	}
	return strings.Join(ids, ", ")
}

func modes(current string) *acp.SessionModeState {
	return &acp.SessionModeState{CurrentModeID: current, AvailableModes: permissionModes}
}

// mcpEndpoint is the one MCP server card can hand the session's CLI: an
// HTTP server without headers, for a CLI that takes an endpoint. Every
// other server is named in the error, unless the editor asked to drop
// them.
func mcpEndpoint(sp api.ExternalAgentSpec, servers []acp.MCPServer, drop bool) (string, *acp.Error) {
	type refused struct {
		Name   string `json:"name"`
		Type   string `json:"type"`
		Reason string `json:"reason"`
	}
	var endpoint string
	var out []refused
	for _, srv := range servers {
		typ := srv.Type
		if typ == "" {
			typ = "stdio"
		}
		switch {
		case typ != "http":
			out = append(out, refused{srv.Name, typ, "card hands a CLI one MCP server over HTTP; it does not run " + typ + " servers"})
		case !sp.Capabilities.MCP:
			out = append(out, refused{srv.Name, typ, sp.DisplayName + " takes no MCP endpoint from card"})
		case len(srv.Headers) > 0:
			out = append(out, refused{srv.Name, typ, "card hands over a URL only, not headers"})
		case endpoint != "":
			out = append(out, refused{srv.Name, typ, "card hands over one MCP server per session"})
		default:
			endpoint = srv.URL
		}
	}
	if len(out) > 0 && !drop {
		names := []string{}
		for _, r := range out {
			names = append(names, fmt.Sprintf("%s (%s: %s)", r.Name, r.Type, r.Reason))
		}
		data, _ := json.Marshal(map[string]any{"field": "mcpServers", "refused": out})
		return "", &acp.Error{Code: acp.CodeInvalidParams, Message: "mcpServers: card cannot hand " + strings.Join(names, "; ") +
			`; remove them, or set _meta.card.dropMcpServers to start without them`, Data: data}
	}
	return endpoint, nil
}

func (s *Server) loadSession(ctx context.Context, be Backend, p acp.LoadSessionRequest) (any, *acp.Error) {
	meta, aerr := readMeta(p.Meta)
	if aerr != nil {
		return nil, aerr
	}
	st, sess, aerr := s.reopen(ctx, be, p.SessionID)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := s.subscribe(ctx, be, st, meta.AfterSeq, true); aerr != nil {
		return nil, aerr
	}
	return acp.LoadSessionResponse{Modes: modes(sess.PermissionMode), ConfigOptions: st.configOptions(), Meta: worktreeMeta(sess.Worktree)}, nil
}

func (s *Server) resumeSession(ctx context.Context, be Backend, p acp.ResumeSessionRequest) (any, *acp.Error) {
	st, sess, aerr := s.reopen(ctx, be, p.SessionID)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := s.subscribe(ctx, be, st, sess.NextSeq-1, false); aerr != nil {
		return nil, aerr
	}
	return acp.ResumeSessionResponse{Modes: modes(sess.PermissionMode), ConfigOptions: st.configOptions(), Meta: worktreeMeta(sess.Worktree)}, nil
}

// reopen finds a session of card's for load or resume.
func (s *Server) reopen(ctx context.Context, be Backend, id string) (*session, api.Session, *acp.Error) {
	if id == "" {
		return nil, api.Session{}, invalid("sessionId", "is required")
	}
	sess, err := be.Session(ctx, id)
	if err != nil {
		aerr := fromBackend(err)
		if aerr.Code == -32043 { // session_not_found
			aerr.Code = acp.CodeResourceNotFound
		}
		return nil, sess, aerr
	}
	if s.cfg.Adapter != "" && sess.Adapter != s.cfg.Adapter {
		return nil, sess, &acp.Error{Code: acp.CodeResourceNotFound,
			Message: fmt.Sprintf("session %s is a %s session; this agent runs %s", id, sess.Adapter, s.cfg.Adapter)}
	}
	if s.cfg.Origin != "" && sess.Origin != s.cfg.Origin {
		data, _ := json.Marshal(map[string]string{"field": "sessionId", "session_id": id})
		return nil, sess, &acp.Error{Code: CodeNotSessionOwner, Data: data,
			Message: fmt.Sprintf("session %s was started by another client; an editor may load or resume only the sessions it started", id)}
	}
	var caps api.Capabilities
	if facts, ok := agent.Lookup(sess.Adapter); ok {
		caps = facts.Capabilities
	}
	return s.attach(sess, caps), sess, nil
}

func (s *Server) listSessions(ctx context.Context, be Backend, p acp.ListSessionsRequest) (any, *acp.Error) {
	list, err := be.Sessions(ctx, api.SessionListParams{Adapter: s.cfg.Adapter, Limit: api.MaxListLimit})
	if err != nil {
		return nil, fromBackend(err)
	}
	out := acp.ListSessionsResponse{}
	for _, ss := range list.Sessions {
		if p.Cwd != nil && *p.Cwd != ss.Cwd {
			continue
		}
		title := ss.Adapter + " session"
		out.Sessions = append(out.Sessions, acp.SessionInfo{SessionID: ss.SessionID, Cwd: ss.Cwd, Title: &title,
			UpdatedAt: ptr(ss.UpdatedAt.UTC().Format(time.RFC3339))})
	}
	return out, nil
}

func (s *Server) closeSession(ctx context.Context, be Backend, p acp.CloseSessionRequest) (any, *acp.Error) {
	if p.SessionID == "" {
		return nil, invalid("sessionId", "is required")
	}
	if _, err := be.CloseSession(ctx, p.SessionID); err != nil {
		return nil, fromBackend(err)
	}
	s.mu.Lock()
	st := s.sessions[p.SessionID]
	delete(s.sessions, p.SessionID)
	s.mu.Unlock()
	if st != nil {
		st.stop()
	}
	return acp.CloseSessionResponse{}, nil
}

// setMode is sessions.configure with the new permission mode: it holds
// from the session's next turn (a turn running now keeps its own), judged
// as session/new's mode is (the cwd's roots for the mode, allow_bypass,
// the connection's access classes), and the editor is told with a
// current_mode_update.
func (s *Server) setMode(ctx context.Context, be Backend, p acp.SetSessionModeRequest) (any, *acp.Error) {
	st := s.session(p.SessionID)
	if st == nil {
		return nil, &acp.Error{Code: acp.CodeResourceNotFound, Message: "no session " + p.SessionID + " on this connection"}
	}
	if !slices.ContainsFunc(permissionModes, func(m acp.SessionMode) bool { return m.ID == p.ModeID }) {
		return nil, invalid("modeId", "card's modes are read_only, ask, edit and bypass, not %q", p.ModeID)
	}
	st.mu.Lock()
	same := p.ModeID == st.mode
	st.mu.Unlock()
	if same {
		return acp.SetSessionModeResponse{}, nil
	}
	res, err := be.ConfigureSession(ctx, api.SessionConfigureParams{SessionID: st.id, PermissionMode: p.ModeID})
	if err != nil {
		return nil, fromBackend(err)
	}
	// The session's stream tells every editor following it, this one too;
	// whichever of that event and this answer comes first tells this
	// editor, once.
	if mode, _ := st.configured(res.Session, res.Session.NextSeq-1); mode {
		s.notify(acp.MethodSessionUpdate, acp.SessionNotification{SessionID: st.id,
			Update: acp.SessionUpdate{Kind: acp.UpdateCurrentMode, CurrentMode: &acp.CurrentModeUpdate{CurrentModeID: res.Session.PermissionMode}}})
	}
	return acp.SetSessionModeResponse{Meta: configureMeta(res)}, nil
}

// configureMeta is _meta.card of a mode or option change: from which turn
// it holds, which running turn keeps the old settings, and for an isolated
// session its worktree, as session/new names it.
func configureMeta(res api.SessionConfigureResult) acp.Meta {
	m := map[string]any{"appliesFromTurn": res.AppliesFromTurn}
	if res.RunningTurn > 0 {
		m["runningTurn"] = res.RunningTurn
	}
	if res.WarmAgent != "" {
		m["warmAgent"] = res.WarmAgent
	}
	if wt := liveWorktree(res.Session.Worktree); wt != nil {
		m["worktree"] = wt
	}
	meta, _ := json.Marshal(map[string]any{MetaKey: m})
	return meta
}

// The config options card offers: the model, for every adapter (each CLI
// takes a model flag), the thought level where the adapter's CLI takes
// an effort, the agent where no adapter is fixed, and where the agent
// works (isolation), for every session.
const (
	configModel     = "model"
	configEffort    = "effort"
	configAgent     = "agent"
	configIsolation = "isolation"
)

// effortLevels are the effort levels the adapter's CLI takes from card
// (agent.Adapter.Efforts); none for a CLI without an effort setting
// (Gemini CLI), whose session then offers no thought level.
func effortLevels(adapter string) []string {
	facts, _ := agent.Lookup(adapter)
	return facts.Efforts
}

// configOptions are the session's options as they stand. card does not
// know a CLI's catalogue of models, so the model select lists the CLI's
// default and the session's model; any model id the CLI takes can be set.
func (st *session) configOptions() []acp.SessionConfigOption {
	st.mu.Lock()
	model, effort, adapter, agents, wt := st.model, st.effort, st.adapter, st.agents, st.worktree
	st.mu.Unlock()
	name, takesModel := adapter, true
	if facts, ok := agent.Lookup(adapter); ok {
		// An agent declared in card.toml runs as declared: card sends it
		// no model, so it offers no model to pick.
		name, takesModel = facts.DisplayName, facts.Declared == nil
	}
	def := acp.SessionConfigSelectOption{Value: api.ConfigureDefault, Name: "Default", Description: ptr(name + " chooses (card passes no flag)")}
	models := []acp.SessionConfigSelectOption{def}
	if model != "" {
		models = append(models, acp.SessionConfigSelectOption{Value: model, Name: model})
	}
	var opts []acp.SessionConfigOption
	if len(agents) > 0 {
		opts = append(opts, agentOption(adapter, agents))
	}
	if takesModel {
		opts = append(opts, acp.SessionConfigOption{ID: configModel, Name: "Model", Category: ptr("model"), Type: "select",
			Description:  ptr("From the next turn. Any model id " + name + " takes may be set; card does not list the CLI's models."),
			CurrentValue: orDefault(model), Options: mustJSON(models)})
	}
	if levels := effortLevels(adapter); len(levels) > 0 {
		efforts := []acp.SessionConfigSelectOption{def}
		for _, l := range levels {
			efforts = append(efforts, acp.SessionConfigSelectOption{Value: l, Name: l})
		}
		opts = append(opts, acp.SessionConfigOption{ID: configEffort, Name: "Thought level", Category: ptr("thought_level"), Type: "select",
			Description: ptr("How hard the model thinks, from the next turn."), CurrentValue: orDefault(effort), Options: mustJSON(efforts)})
	}
	return append(opts, isolationOption(wt))
}

// isolationOption is where the session's agent works: in the editor's
// checkout, or in a git worktree of card's, on a branch of the session's
// own, whose changes card diff and card apply review. An editor can send
// no _meta.card.isolation on session/new, so this is how one chooses it;
// it can change until the first prompt.
func isolationOption(wt *api.SessionWorktree) acp.SessionConfigOption {
	current := api.IsolationOff
	if wt != nil {
		current = api.IsolationWorktree
	}
	return acp.SessionConfigOption{ID: configIsolation, Name: "Isolation", Category: ptr("_isolation"), Type: "select",
		Description: ptr("Where the agent works: in your checkout, or in a git worktree of its own that card diff and card apply review. " +
			"It can change until the first prompt."),
		CurrentValue: current, Options: mustJSON([]acp.SessionConfigSelectOption{
			{Value: api.IsolationOff, Name: "Off", Description: ptr("The agent works in the session's directory: your checkout")},
			{Value: api.IsolationWorktree, Name: "Worktree",
				Description: ptr("The agent works in a git worktree of the repository, on a branch of its own; your checkout is not written")},
		})}
}

// agentOption is the choice of the session's agent among the installed
// ones, before its first turn.
func agentOption(current string, ids []string) acp.SessionConfigOption {
	var choices []acp.SessionConfigSelectOption
	for _, id := range ids {
		name := id
		if facts, ok := agent.Lookup(id); ok {
			name = facts.DisplayName
		}
		choices = append(choices, acp.SessionConfigSelectOption{Value: id, Name: name})
	}
	return acp.SessionConfigOption{ID: configAgent, Name: "Agent", Category: ptr("_agent"), Type: "select",
		Description:  ptr("The agent CLI card runs for this session; it can change until the first prompt."),
		CurrentValue: current, Options: mustJSON(choices)}
}

// offer sets the adapters the editor may pick for the session (nil when
// one is fixed for the connection).
func (st *session) offer(ids []string) {
	st.mu.Lock()
	st.agents = ids
	st.mu.Unlock()
}

// agent is the session's adapter and what it takes, now.
func (st *session) agent() (string, api.Capabilities) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.adapter, st.caps
}

func orDefault(v string) string {
	if v == "" {
		return api.ConfigureDefault
	}
	return v
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// configured takes the session's settings as they stood at seq (a
// configure's answer, whose view is as of its next_seq, or a
// session_configured event), unless this connection already has them as
// of a later seq: an answer and the stream's event each may come first,
// and an older one must not undo a newer. It says whether the mode and the
// options changed here.
func (st *session) configured(sess api.Session, seq int64) (mode, options bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if seq <= st.configSeq {
		return false, false
	}
	st.configSeq = seq
	mode = st.mode != sess.PermissionMode
	wt := liveWorktree(sess.Worktree)
	options = st.model != sess.Model || st.effort != sess.Effort || (sess.Adapter != "" && st.adapter != sess.Adapter) ||
		(wt == nil) != (st.worktree == nil)
	st.mode, st.model, st.effort, st.worktree = sess.PermissionMode, sess.Model, sess.Effort, wt
	if sess.Adapter != "" && sess.Adapter != st.adapter {
		st.adapter = sess.Adapter
		if facts, ok := agent.Lookup(sess.Adapter); ok {
			st.caps = facts.Capabilities
		}
	}
	return mode, options
}

// setConfigOption is sessions.configure with the session's new model or
// effort: it holds from the next turn, and the answer and a
// config_option_update carry every option as it now is.
func (s *Server) setConfigOption(ctx context.Context, be Backend, p acp.SetSessionConfigOptionRequest) (any, *acp.Error) {
	st := s.session(p.SessionID)
	if st == nil {
		return nil, &acp.Error{Code: acp.CodeResourceNotFound, Message: "no session " + p.SessionID + " on this connection"}
	}
	value, ok := p.Value.(string)
	if !ok || value == "" || p.Type == "boolean" {
		return nil, invalid("value", "card's options are selects: the value is a string id, not %v", p.Value)
	}
	cp := api.SessionConfigureParams{SessionID: st.id}
	adapter, _ := st.agent()
	st.mu.Lock()
	agents := st.agents
	st.mu.Unlock()
	switch p.ConfigID {
	case configModel:
		cp.Model = value
	case configEffort:
		levels := effortLevels(adapter)
		if len(levels) == 0 {
			return nil, invalid("configId", "%s takes no effort setting, so this session offers no %q option", adapter, p.ConfigID)
		}
		if value != api.ConfigureDefault && !slices.Contains(levels, value) {
			return nil, invalid("value", "%s's thought levels are %s (or default), not %q", adapter, strings.Join(levels, ", "), value)
		}
		cp.Effort = value
	case configAgent:
		if len(agents) == 0 {
			return nil, invalid("configId", "this agent runs %s only; it offers no %q option", adapter, p.ConfigID)
		}
		if !slices.Contains(agents, value) {
			return nil, invalid("value", "the agents card can run here are %s, not %q", strings.Join(agents, ", "), value)
		}
		cp.ID = value
	case configIsolation:
		if answer, aerr := st.isolationChange(p, value, &cp); answer != nil || aerr != nil {
			return answer, aerr
		}
	default:
		return nil, invalid("configId", "card offers the options model, effort, isolation and (with no agent fixed) agent, not %q", p.ConfigID)
	}
	res, err := be.ConfigureSession(ctx, cp)
	if err != nil {
		return nil, fromBackend(err)
	}
	_, changed := st.configured(res.Session, res.Session.NextSeq-1)
	opts := st.configOptions()
	if changed {
		s.notify(acp.MethodSessionUpdate, acp.SessionNotification{SessionID: st.id,
			Update: acp.SessionUpdate{Kind: acp.UpdateConfigOption, ConfigOption: &acp.ConfigOptionUpdate{ConfigOptions: opts}}})
	}
	return acp.SetSessionConfigOptionResponse{ConfigOptions: opts, Meta: configureMeta(res)}, nil
}

// isolationChange fills cp for the isolation option set to value, with
// _meta.card.base the commit a new worktree starts from. The value the
// session has already is answered here (a non-nil answer), without a
// change: removing a worktree needs the write class, and an editor that
// sets the option to what it shows asks for nothing.
func (st *session) isolationChange(p acp.SetSessionConfigOptionRequest, value string, cp *api.SessionConfigureParams) (any, *acp.Error) {
	if value != api.IsolationOff && value != api.IsolationWorktree {
		return nil, invalid("value", "the isolation values are %q and %q, not %q", api.IsolationOff, api.IsolationWorktree, value)
	}
	meta, aerr := readMeta(p.Meta)
	if aerr != nil {
		return nil, aerr
	}
	if meta.Base != "" && value != api.IsolationWorktree {
		return nil, invalid("_meta.card.base", "applies only with the value %q: the commit the session's worktree starts from", api.IsolationWorktree)
	}
	st.mu.Lock()
	wt := st.worktree
	st.mu.Unlock()
	if (wt != nil) == (value == api.IsolationWorktree) && (meta.Base == "" || wt == nil || meta.Base == wt.BaseRef) {
		return acp.SetSessionConfigOptionResponse{ConfigOptions: st.configOptions(), Meta: worktreeMeta(wt)}, nil
	}
	cp.Isolation, cp.Base = value, meta.Base
	return nil, nil
}

func (s *Server) session(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// prompt runs one turn: the prompt's blocks become the task and its
// images attachments; the answer waits for the turn to end. A prompt sent
// while a turn runs waits in the session's queue, and is answered when its
// own turn ends.
func (s *Server) prompt(ctx context.Context, be Backend, p acp.PromptRequest) (any, *acp.Error) {
	st := s.session(p.SessionID)
	if st == nil {
		return nil, &acp.Error{Code: acp.CodeResourceNotFound, Message: "no session " + p.SessionID + " on this connection: session/new, session/load or session/resume it first"}
	}
	_, caps := st.agent()
	task, atts, aerr := promptContent(p.Prompt, caps.Images)
	if aerr != nil {
		return nil, aerr
	}
	st.mu.Lock()
	st.prompting++
	st.mu.Unlock()
	res, err := be.PromptSession(ctx, api.SessionPromptParams{SessionID: st.id, Task: task, Attachments: atts})
	if err != nil {
		st.mu.Lock()
		st.prompting--
		st.mu.Unlock()
		return nil, fromBackend(err)
	}
	w := st.await(res.Turn)
	st.mu.Lock()
	st.prompting--
	st.mu.Unlock()
	// card has the prompt and the turn has its waiter: a cancel the
	// editor sent after this prompt may go now, and will find the turn.
	markTaken(ctx)
	select {
	case end := <-w:
		if end.err != nil {
			return nil, end.err
		}
		return acp.PromptResponse{StopReason: end.stop, Meta: end.meta}, nil
	case <-ctx.Done():
		// The request itself was withdrawn ($/cancel_request): the turn
		// is ended too, since nobody waits for it any more.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = be.CancelTurn(cctx, api.SessionCancelParams{SessionID: st.id})
		return nil, &acp.Error{Code: acp.CodeRequestCancelled, Message: "request cancelled"}
	}
}

// promptContent is a prompt as card's task: text blocks as they are, a
// resource link as a line naming it, an embedded text resource inline
// under its URI; images (data or a file URI) become attachments.
func promptContent(blocks []acp.ContentBlock, images bool) (string, []api.Attachment, *acp.Error) {
	var b strings.Builder
	var atts []api.Attachment
	sep := func() {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
	}
	for i, blk := range blocks {
		field := fmt.Sprintf("prompt[%d]", i)
		switch blk.Type {
		case acp.ContentText:
			sep()
			b.WriteString(blk.Text)
		case acp.ContentResourceLink:
			sep()
			fmt.Fprintf(&b, "[%s](%s)", blk.Name, blk.URI)
		case acp.ContentResource:
			r := blk.Resource
			if r == nil {
				return "", nil, invalid(field+".resource", "is required")
			}
			switch {
			case r.Text != nil:
				sep()
				fmt.Fprintf(&b, "Contents of %s:\n```\n%s\n```", r.URI, *r.Text)
			case r.Blob != nil && r.MimeType != nil && strings.HasPrefix(*r.MimeType, "image/"):
				if !images {
					return "", nil, invalid(field, "this adapter takes no images (see promptCapabilities.image)")
				}
				atts = append(atts, api.Attachment{DataB64: *r.Blob, MimeType: *r.MimeType, Name: filepath.Base(r.URI)})
			default:
				return "", nil, invalid(field+".resource", "card passes embedded resources as text; %s is binary", r.URI)
			}
		case acp.ContentImage:
			if !images {
				return "", nil, invalid(field, "this adapter takes no images (see promptCapabilities.image)")
			}
			switch {
			case blk.Data != "":
				if _, err := base64.StdEncoding.DecodeString(blk.Data); err != nil {
					return "", nil, invalid(field+".data", "is not standard base64: %v", err)
				}
				atts = append(atts, api.Attachment{DataB64: blk.Data, MimeType: blk.MimeType})
			case strings.HasPrefix(blk.URI, "file://"):
				atts = append(atts, api.Attachment{Path: strings.TrimPrefix(blk.URI, "file://"), MimeType: blk.MimeType})
			default:
				return "", nil, invalid(field, "an image needs data, or a file:// uri")
			}
		default:
			return "", nil, invalid(field+".type", "card does not take %q content (see promptCapabilities)", blk.Type)
		}
	}
	if strings.TrimSpace(b.String()) == "" && len(atts) == 0 {
		return "", nil, invalid("prompt", "is empty")
	}
	return b.String(), atts, nil
}

// cancelSession is session/cancel: the running turn ends (its prompt is
// answered cancelled once the turn's last events are sent), and so do the
// prompts of this connection still waiting in the queue.
func (s *Server) cancelSession(ctx context.Context, id string) {
	st := s.session(id)
	s.mu.Lock()
	be := s.backend
	s.mu.Unlock()
	if st == nil || be == nil {
		return
	}
	st.markCancelled()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := be.CancelTurn(cctx, api.SessionCancelParams{SessionID: id, ClearQueue: true})
	if err != nil {
		s.logf("card acp: cancel session %s: %v", id, err)
		return
	}
	st.cancelQueued(res)
}
