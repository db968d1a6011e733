package fakeagent

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/card-dev/card/acp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client is an ACP client on the other end of an in-memory pipe from one
// fake agent process (a Serve call).
type client struct {
	t    *testing.T
	conn *jsonrpc2.Conn
	done chan struct{}

	mu      sync.Mutex
	updates []acp.SessionNotification
	asked   []acp.RequestPermissionRequest
	// answer decides a permission question; nil picks the first option.
	answer func(acp.RequestPermissionRequest) acp.RequestPermissionResponse
}

func start(t *testing.T, opts Options) *client {
	t.Helper()
	agentEnd, clientEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	c := &client{t: t, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		assert.NoError(t, Serve(ctx, agentEnd, agentEnd, opts))
	}()
	c.conn = jsonrpc2.NewConn(ctx, jsonrpc2.NewPlainObjectStream(clientEnd), jsonrpc2.HandlerWithError(c.handle))
	t.Cleanup(func() { c.stop(); cancel() })
	return c
}

// stop ends the connection as a client closing the agent's stdin does,
// and waits for the agent to finish.
func (c *client) stop() {
	c.conn.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.t.Fatal("the fake agent did not end within 10 s of its input closing")
	}
}

func (c *client) handle(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
	switch req.Method {
	case acp.MethodSessionUpdate:
		var n acp.SessionNotification
		require.NoError(c.t, json.Unmarshal(*req.Params, &n))
		c.mu.Lock()
		c.updates = append(c.updates, n)
		c.mu.Unlock()
		return nil, nil
	case acp.MethodSessionRequestPermission:
		var p acp.RequestPermissionRequest
		require.NoError(c.t, json.Unmarshal(*req.Params, &p))
		c.mu.Lock()
		c.asked = append(c.asked, p)
		answer := c.answer
		c.mu.Unlock()
		if answer == nil {
			return acp.Selected(p.Options[0].OptionID), nil
		}
		return answer(p), nil
	}
	return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: req.Method}
}

func (c *client) call(method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.conn.Call(ctx, method, params, result)
}

func (c *client) initialize() acp.InitializeResponse {
	var res acp.InitializeResponse
	require.NoError(c.t, c.call(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: 1}, &res))
	return res
}

func (c *client) newSession(cwd string) string {
	var res acp.NewSessionResponse
	require.NoError(c.t, c.call(acp.MethodSessionNew, acp.NewSessionRequest{Cwd: cwd}, &res))
	require.NotEmpty(c.t, res.SessionID)
	return res.SessionID
}

// prompt runs one turn and returns its answer and the text it streamed.
func (c *client) prompt(sid string, blocks ...acp.ContentBlock) (acp.PromptResponse, string) {
	c.t.Helper()
	from := c.count()
	var res acp.PromptResponse
	require.NoError(c.t, c.call(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: blocks}, &res))
	return res, c.text(from)
}

func (c *client) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.updates)
}

// since is the updates received from index from on.
func (c *client) since(from int) []acp.SessionUpdate {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []acp.SessionUpdate
	for _, n := range c.updates[from:] {
		out = append(out, n.Update)
	}
	return out
}

// text is the agent's message streamed since update index from.
func (c *client) text(from int) string {
	var b strings.Builder
	for _, u := range c.since(from) {
		if u.Kind == acp.UpdateAgentMessageChunk {
			b.WriteString(u.Chunk.Content.Text)
		}
	}
	return b.String()
}

func kinds(us []acp.SessionUpdate) []acp.UpdateKind {
	var out []acp.UpdateKind
	for _, u := range us {
		out = append(out, u.Kind)
	}
	return out
}

func TestInitializeOffersImagesSessionLoadAndOneSignInOfTypeAgent(t *testing.T) {
	c := start(t, Options{Name: "fake", Version: "1.2.3"})
	var raw json.RawMessage
	require.NoError(t, c.call(acp.MethodInitialize, acp.InitializeRequest{ProtocolVersion: 1}, &raw))
	var res acp.InitializeResponse
	require.NoError(t, json.Unmarshal(raw, &res))
	assert.Equal(t, 1, res.ProtocolVersion)
	assert.True(t, res.AgentCapabilities.LoadSession)
	assert.True(t, res.AgentCapabilities.PromptCapabilities.Image)
	assert.NotNil(t, res.AgentCapabilities.SessionCapabilities.Resume)
	require.Len(t, res.AuthMethods, 1)
	assert.Equal(t, AuthMethodID, res.AuthMethods[0].ID)
	// The type is written out, not left to the default: the ACP registry
	// reads it.
	assert.Contains(t, string(raw), `"type":"agent"`)
	assert.Equal(t, "fake", res.AgentInfo.Name)
	assert.Equal(t, "1.2.3", res.AgentInfo.Version)

	require.NoError(t, c.call(acp.MethodAuthenticate, acp.AuthenticateRequest{MethodID: AuthMethodID}, &raw))
}

func TestADefaultTurnStreamsItsAnswerInSeveralChunksAndReportsUsage(t *testing.T) {
	c := start(t, Options{})
	c.initialize()
	sid := c.newSession(t.TempDir())
	from := c.count()
	res, text := c.prompt(sid, acp.TextBlock("say pong"))
	assert.Equal(t, acp.StopEndTurn, res.StopReason)
	assert.Equal(t, `You said: "say pong". This is the first turn of this session.`, text)
	us := c.since(from)
	chunks := 0
	for _, u := range us {
		if u.Kind == acp.UpdateAgentMessageChunk {
			chunks++
		}
	}
	assert.GreaterOrEqual(t, chunks, 3, "the answer streams in several chunks: %v", kinds(us))
	last := us[len(us)-1]
	require.Equal(t, acp.UpdateUsage, last.Kind, "every turn ends with a usage_update")
	assert.Equal(t, uint64(TurnInputTokens+TurnOutputTokens), last.Usage.Used)
	assert.Equal(t, uint64(ContextSize), last.Usage.Size)
	assert.Equal(t, &acp.Cost{Amount: TurnCostUSD, Currency: "USD"}, last.Usage.Cost)
	require.NotNil(t, res.Usage)
	assert.Equal(t, int64(TurnInputTokens), res.Usage.InputTokens)
	assert.Equal(t, int64(TurnOutputTokens), res.Usage.OutputTokens)
}

func TestASessionRemembersWhatAnEarlierTurnSaid(t *testing.T) {
	c := start(t, Options{})
	c.initialize()
	sid := c.newSession(t.TempDir())
	c.prompt(sid, acp.TextBlock("Remember the word pelican."))
	_, text := c.prompt(sid, acp.TextBlock("Which word?"))
	assert.Contains(t, text, "You asked me to remember: the word pelican.")
	assert.Contains(t, text, `they said: "Remember the word pelican."`)

	// Another session knows nothing of it.
	other := c.newSession(t.TempDir())
	_, text = c.prompt(other, acp.TextBlock("Which word?"))
	assert.NotContains(t, text, "pelican")
}

func TestASessionOutlivesItsProcessThroughTheStateDirectory(t *testing.T) {
	state, cwd := t.TempDir(), t.TempDir()
	first := start(t, Options{StateDir: state})
	first.initialize()
	sid := first.newSession(cwd)
	first.prompt(sid, acp.TextBlock("Remember the word heron."))
	first.prompt(sid, acp.TextBlock("[usage] second"))
	first.stop()

	// session/load in a second process replays both turns, then the
	// third remembers the first, and the cost counts on from the two.
	second := start(t, Options{StateDir: state})
	second.initialize()
	from := second.count()
	var loaded acp.LoadSessionResponse
	require.NoError(t, second.call(acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: sid, Cwd: cwd}, &loaded))
	replay := second.since(from)
	assert.Equal(t, []acp.UpdateKind{acp.UpdateUserMessageChunk, acp.UpdateAgentMessageChunk, acp.UpdateUserMessageChunk, acp.UpdateAgentMessageChunk}, kinds(replay))
	assert.Equal(t, "Remember the word heron.", replay[0].Chunk.Content.Text)
	assert.Equal(t, "[usage] second", replay[2].Chunk.Content.Text)
	assert.Contains(t, replay[3].Chunk.Content.Text, "has cost $0.02 so far")
	assert.Equal(t, ModeDefault, loaded.Modes.CurrentModeID)
	from = second.count()
	_, text := second.prompt(sid, acp.TextBlock("Which word?"))
	assert.Contains(t, text, "remember: the word heron")
	assert.Equal(t, &acp.Cost{Amount: 0.03, Currency: "USD"}, second.since(from)[len(second.since(from))-1].Usage.Cost)
	second.stop()

	// session/resume in a third replays nothing and still remembers.
	third := start(t, Options{StateDir: state})
	third.initialize()
	from = third.count()
	require.NoError(t, third.call(acp.MethodSessionResume, acp.ResumeSessionRequest{SessionID: sid, Cwd: cwd}, &loaded))
	assert.Empty(t, third.since(from), "resume replays nothing")
	_, text = third.prompt(sid, acp.TextBlock("And now?"))
	assert.Contains(t, text, "remember: the word heron")
	assert.Contains(t, text, "This session has 3 earlier turn(s)")
}

func TestAToolTurnAnnouncesAReadCallThenCompletesIt(t *testing.T) {
	c := start(t, Options{})
	c.initialize()
	cwd := t.TempDir()
	sid := c.newSession(cwd)
	from := c.count()
	res, text := c.prompt(sid, acp.TextBlock("[tool] look around"))
	assert.Equal(t, acp.StopEndTurn, res.StopReason)
	us := c.since(from)
	require.Equal(t, acp.UpdateToolCall, us[0].Kind)
	assert.Equal(t, acp.ToolRead, us[0].ToolCall.Kind)
	assert.Equal(t, cwd+"/README.md", us[0].ToolCall.Locations[0].Path)
	require.Equal(t, acp.UpdateToolCallUpdate, us[1].Kind)
	assert.Equal(t, us[0].ToolCall.ToolCallID, us[1].ToolCallUpdate.ToolCallID)
	assert.Equal(t, acp.ToolCompleted, us[1].ToolCallUpdate.Status)
	assert.True(t, strings.HasPrefix(text, "I read README.md with a tool call"), text)
}

func TestAnAskTurnAsksToEditAFileInTheCwdAndSaysWhatItWasTold(t *testing.T) {
	pick := func(kind acp.PermissionOptionKind) func(acp.RequestPermissionRequest) acp.RequestPermissionResponse {
		return func(p acp.RequestPermissionRequest) acp.RequestPermissionResponse {
			for _, o := range p.Options {
				if o.Kind == kind {
					return acp.Selected(o.OptionID)
				}
			}
			return acp.Selected("none")
		}
	}
	cases := []struct {
		name   string
		mode   string
		answer func(acp.RequestPermissionRequest) acp.RequestPermissionResponse
		asks   bool
		says   string
		status acp.ToolCallStatus
	}{
		{"allowed once", "", pick(acp.PermissionAllowOnce), true, "Permission to edit fake-agent-edit.txt was allowed (allow_once).", acp.ToolCompleted},
		{"denied", "", pick(acp.PermissionRejectOnce), true, "Permission to edit fake-agent-edit.txt was denied (reject_once).", acp.ToolFailed},
		{"an option not offered", "", func(acp.RequestPermissionRequest) acp.RequestPermissionResponse { return acp.Selected("yes-please") }, true,
			`was denied: the answer chose "yes-please", which was not offered.`, acp.ToolFailed},
		{"plan mode refuses unasked", ModePlan, nil, false, "was refused without asking: the session is in plan mode.", acp.ToolFailed},
		{"auto-edit mode allows unasked", ModeAutoEdit, nil, false, "was allowed without asking: the session is in auto-edit mode.", acp.ToolCompleted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, Options{})
			c.answer = tc.answer
			c.initialize()
			cwd := t.TempDir()
			sid := c.newSession(cwd)
			if tc.mode != "" {
				require.NoError(t, c.call(acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: sid, ModeID: tc.mode}, nil))
			}
			from := c.count()
			res, text := c.prompt(sid, acp.TextBlock("[ask] edit something"))
			assert.Equal(t, acp.StopEndTurn, res.StopReason)
			assert.Contains(t, text, tc.says)
			us := c.since(from)
			require.Equal(t, acp.UpdateToolCall, us[0].Kind)
			assert.Equal(t, acp.ToolEdit, us[0].ToolCall.Kind)
			c.mu.Lock()
			asked := c.asked
			c.mu.Unlock()
			if tc.asks {
				require.Len(t, asked, 1)
				assert.Equal(t, acp.ToolEdit, asked[0].ToolCall.Kind)
				assert.Equal(t, us[0].ToolCall.ToolCallID, asked[0].ToolCall.ToolCallID)
				assert.Equal(t, cwd+"/"+EditFile, asked[0].ToolCall.Locations[0].Path)
			} else {
				assert.Empty(t, asked)
			}
			require.Equal(t, acp.UpdateToolCallUpdate, us[1].Kind)
			assert.Equal(t, tc.status, us[1].ToolCallUpdate.Status)
			assert.NoFileExists(t, cwd+"/"+EditFile, "the fake agent never writes")
		})
	}
}

func TestAnImageTurnSaysHowManyImagesItGotTheirTypesAndSizes(t *testing.T) {
	c := start(t, Options{})
	c.initialize()
	sid := c.newSession(t.TempDir())
	_, text := c.prompt(sid, acp.TextBlock("[image] what is this?"),
		acp.ImageBlock("image/png", make([]byte, 68)), acp.ImageBlock("image/jpeg", make([]byte, 1024)))
	assert.True(t, strings.HasPrefix(text, "I got 2 images: image/png of 68 bytes, image/jpeg of 1024 bytes."), text)
	_, text = c.prompt(sid, acp.TextBlock("[image] and now?"))
	assert.True(t, strings.HasPrefix(text, "I got no images."), text)
}

func TestAUsageTurnSaysItsTokensAndTheSessionsCost(t *testing.T) {
	c := start(t, Options{})
	c.initialize()
	sid := c.newSession(t.TempDir())
	c.prompt(sid, acp.TextBlock("one"))
	_, text := c.prompt(sid, acp.TextBlock("[usage] two"))
	assert.Contains(t, text, "This turn used 100 input and 50 output tokens; the session holds 300 tokens of 200000 and has cost $0.02 so far.")
}

func TestASlowTurnStreamsForSeveralStepsUnlessCancelled(t *testing.T) {
	c := start(t, Options{SlowStep: 20 * time.Millisecond})
	c.initialize()
	sid := c.newSession(t.TempDir())
	began := time.Now()
	res, text := c.prompt(sid, acp.TextBlock("[slow] take your time"))
	assert.Equal(t, acp.StopEndTurn, res.StopReason)
	assert.GreaterOrEqual(t, time.Since(began), 9*20*time.Millisecond)
	assert.Contains(t, text, "step 10 of 10")

	// Cancelled after its first step: the answer is cancelled, and the
	// session takes the next prompt.
	c2 := start(t, Options{SlowStep: time.Minute})
	c2.initialize()
	sid = c2.newSession(t.TempDir())
	got := make(chan acp.PromptResponse, 1)
	go func() {
		var res acp.PromptResponse
		assert.NoError(t, c2.call(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: []acp.ContentBlock{acp.TextBlock("[slow] forever")}}, &res))
		got <- res
	}()
	require.Eventually(t, func() bool { return strings.Contains(c2.text(0), "step 1 of 10") }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, c2.conn.Notify(context.Background(), acp.MethodSessionCancel, acp.CancelNotification{SessionID: sid}))
	select {
	case res := <-got:
		assert.Equal(t, acp.StopCancelled, res.StopReason)
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled slow turn did not end")
	}
	assert.NotContains(t, c2.text(0), "step 2 of 10")
	res, _ = c2.prompt(sid, acp.TextBlock("after"))
	assert.Equal(t, acp.StopEndTurn, res.StopReason)
}

func TestFailureMarkersFailThePromptAsARealAgentDoes(t *testing.T) {
	cases := []struct {
		marker string
		code   int64
		msg    string
		data   string
	}{
		{Marker401, -32000, "Authentication required: the sign-in has expired; sign in again", `"authMethods":[{"type":"agent","id":"fake-sign-in"`},
		{Marker429, 429, "Too many requests: the rate limit is reached; try again in 30 seconds", ""},
	}
	for _, tc := range cases {
		t.Run(tc.marker, func(t *testing.T) {
			c := start(t, Options{})
			c.initialize()
			sid := c.newSession(t.TempDir())
			from := c.count()
			err := c.call(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: []acp.ContentBlock{acp.TextBlock(tc.marker + " hello")}}, nil)
			var je *jsonrpc2.Error
			require.ErrorAs(t, err, &je)
			assert.Equal(t, tc.code, je.Code)
			assert.Equal(t, tc.msg, je.Message)
			if tc.data != "" {
				require.NotNil(t, je.Data)
				assert.Contains(t, string(*je.Data), tc.data)
			}
			assert.Empty(t, c.since(from), "a failed prompt says nothing first")
			// The session is not broken by it.
			res, _ := c.prompt(sid, acp.TextBlock("again"))
			assert.Equal(t, acp.StopEndTurn, res.StopReason)
		})
	}
}

func TestBadRequestsAreRefusedNamingWhatIsWrong(t *testing.T) {
	state := t.TempDir()
	c := start(t, Options{StateDir: state})
	c.initialize()
	sid := c.newSession(t.TempDir())
	cases := []struct {
		name   string
		method string
		params any
		code   int64
		msg    string
	}{
		{"a relative cwd", acp.MethodSessionNew, acp.NewSessionRequest{Cwd: "project"}, -32602, "cwd must be an absolute path"},
		{"an unknown session", acp.MethodSessionPrompt, acp.PromptRequest{SessionID: "fake-00000000000000000000000000000000", Prompt: []acp.ContentBlock{acp.TextBlock("hi")}}, -32002, "no session fake-0000"},
		{"a session id that is a path", acp.MethodSessionLoad, acp.LoadSessionRequest{SessionID: "../" + sid, Cwd: "/tmp"}, -32002, "no session ../"},
		{"an unknown mode", acp.MethodSessionSetMode, acp.SetSessionModeRequest{SessionID: sid, ModeID: "yolo"}, -32602, `modeId no mode "yolo"`},
		{"an unknown auth method", acp.MethodAuthenticate, acp.AuthenticateRequest{MethodID: "oauth"}, -32602, "methodId"},
		{"an unknown method", "session/fork", acp.SessionRef{SessionID: sid}, -32601, "session/fork"},
		{"no params", acp.MethodSessionNew, nil, -32602, "params missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.call(tc.method, tc.params, nil)
			var je *jsonrpc2.Error
			require.ErrorAs(t, err, &je)
			assert.Equal(t, tc.code, je.Code)
			assert.Contains(t, je.Message, tc.msg)
		})
	}
}

func TestASecondPromptWhileATurnRunsIsRefused(t *testing.T) {
	c := start(t, Options{SlowStep: time.Minute})
	c.initialize()
	sid := c.newSession(t.TempDir())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.call(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: []acp.ContentBlock{acp.TextBlock("[slow]")}}, nil)
	}()
	require.Eventually(t, func() bool { return strings.Contains(c.text(0), "step 1") }, 10*time.Second, 5*time.Millisecond)
	err := c.call(acp.MethodSessionPrompt, acp.PromptRequest{SessionID: sid, Prompt: []acp.ContentBlock{acp.TextBlock("now")}}, nil)
	var je *jsonrpc2.Error
	require.ErrorAs(t, err, &je)
	assert.Equal(t, int64(-32600), je.Code)
	assert.Contains(t, je.Message, "already running a turn")
	require.NoError(t, c.conn.Notify(context.Background(), acp.MethodSessionCancel, acp.CancelNotification{SessionID: sid}))
	<-done
}

// An agent that needs no sign-in offers none, which card's health check
// reads as ready; authenticate then has nothing to run.
func TestWithNoSignInInitializeOffersNoAuthMethod(t *testing.T) {
	c := start(t, Options{NoSignIn: true})
	res := c.initialize()
	assert.Empty(t, res.AuthMethods)
	var je *jsonrpc2.Error
	require.ErrorAs(t, c.call(acp.MethodAuthenticate, acp.AuthenticateRequest{MethodID: AuthMethodID}, nil), &je)
	assert.Equal(t, int64(-32602), je.Code)
}
