package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
	"github.com/card-dev/card/spawn"
)

const (
	readerOrigin = "https://reader.example"
	writerOrigin = "https://writer.example"
	onlyWriteOrg = "https://nobody-asks.example"
)

// modesConfig allows four origins: app with the default grants, reader
// with read only, writer granted write and approve, and one granted write
// but not approve. Bypass is allowed, so only the grants can refuse it.
const modesConfig = `allow_bypass = true
allowed_origins = ["` + appOrigin + `", "` + readerOrigin + `", "` + writerOrigin + `", "` + onlyWriteOrg + `"]

[origins."` + readerOrigin + `"]
grants = ["read"]

[origins."` + writerOrigin + `"]
grants = ["read", "agents", "write", "approve"]

[origins."` + onlyWriteOrg + `"]
grants = ["read", "agents", "write"]
`

// pageClient dials d from origin; every question it is sent it allows.
func pageClient(t *testing.T, d *daemontest.Daemon, origin string, asked *atomic.Int32) *client.Client {
	t.Helper()
	return d.Dial(t, client.Options{
		RPC: rpcclient.ClientOptions{Header: http.Header{"Origin": {origin}}},
		OnApprove: func(ctx context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
			asked.Add(1)
			return api.ApproveAnswer{Decision: "allow"}, nil
		},
	})
}

// shellTask is a script for the asking fake: a Bash command and a Write,
// each making a file in dir.
func shellTask(dir string) string {
	return fmt.Sprintf("TOOL Bash {\"command\":\"touch %s\"}\nTOOL Write {\"file_path\":%q,\"content\":\"x\"}",
		filepath.Join(dir, "bash-ran"), filepath.Join(dir, "write-ran"))
}

func noFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "A PAGE RAN A COMMAND OR WROTE A FILE")
}

// A page on an allowed origin with the default grants (read, agents) runs
// read-only agents but starts no run that writes or asks, runs no bypass
// even with allow_bypass on, and answers no question. Each refusal is
// access_denied naming the method, the permission_mode and the class it
// needs, before any run is recorded; and nothing is written. An origin
// the operator granted write and approve does what the page could not.
func TestAPageWithTheDefaultGrantsStartsNoRunThatCanWriteOrRunACommand(t *testing.T) {
	ad := startAskDaemon(t, modesConfig)
	ctx := daemontest.Context(t)
	outside := t.TempDir()
	var asked atomic.Int32
	page := pageClient(t, ad.Daemon, appOrigin, &asked)
	before, err := ad.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)

	for _, tc := range []struct {
		mode, need string
		ack        bool
	}{
		{"ask", "write", false},
		{"edit", "write", false},
		{"bypass", "host", false},
		{"", "write", true},
	} {
		for _, method := range []string{"agents.invoke", "agents.invoke_external"} {
			p := api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: tc.mode, AcknowledgeUnenforcedReadOnly: tc.ack},
				Task:          shellTask(outside),
			}
			var res api.InvokeResult
			err := page.Call(ctx, method, p, &res)
			re := rpcCode(t, err)
			require.Equal(t, daemon.CodeAccessDenied, re.Code, "%s %s: %s", method, tc.mode, re.Message)
			data := errData(t, re)
			assert.Equal(t, method, data["method"])
			assert.Equal(t, tc.need, data["access"])
			assert.Equal(t, []any{"read", "agents"}, data["grants"])
			assert.Equal(t, `[origins."https://app.example"] grants`, data["config_key"])
			assert.Contains(t, re.Message, `"`+tc.need+`" access class`)
			if tc.ack {
				assert.Equal(t, "acknowledge_unenforced_read_only", data["param"])
				assert.Equal(t, true, data["acknowledge_unenforced_read_only"])
				continue
			}
			assert.Equal(t, "permission_mode", data["param"])
			assert.Equal(t, tc.mode, data["permission_mode"])
			assert.Contains(t, re.Message, fmt.Sprintf("%s with permission_mode %q", method, tc.mode))
			if tc.mode == "bypass" {
				assert.Contains(t, re.Message, "allow_bypass alone never opens bypass to a web page")
			}
		}
	}
	err = page.Call(ctx, "agents.invoke", map[string]any{"id": "claude-code", "task": "hi", "mcp_endpoint": "http://127.0.0.1:9/mcp"}, nil)
	assert.Equal(t, "mcp_endpoint", errData(t, rpcCode(t, err))["param"], "an MCP server handed to the agent is write")
	after, err := ad.Client.Runs(ctx, api.ListParams{})
	require.NoError(t, err)
	assert.Len(t, after, len(before), "a refused invoke is not even a refused run")

	// A read-only run of the same task: the agent is refused both tools.
	res, err := page.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd}, Task: shellTask(outside)})
	require.NoError(t, err, "the page runs read-only agents")
	assert.Contains(t, res.Answer, "Permission to use Bash has been denied")
	_, err = page.ApprovalDecide(ctx, api.DecideParams{RunID: res.RunID, RequestID: "apr_1", Decision: "allow"})
	re := rpcCode(t, err)
	assert.Equal(t, daemon.CodeAccessDenied, re.Code)
	assert.Equal(t, "approve", errData(t, re)["access"])
	noFiles(t, outside)
	assert.Zero(t, asked.Load(), "the page was asked a question")

	// An origin granted write but not approve starts an ask run and is
	// never asked: nobody may answer, so the tool calls are denied.
	var writerAsked atomic.Int32
	nobody := pageClient(t, ad.Daemon, onlyWriteOrg, &writerAsked)
	res, err = nobody.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "ask"}, Task: shellTask(outside)})
	require.NoError(t, err)
	assert.Zero(t, writerAsked.Load(), "a connection without approve was asked")
	rec := record(t, ad.Client, res.RunID)
	require.NotEmpty(t, rec.Approvals)
	assert.Equal(t, "no_client", rec.Approvals[0].By)
	noFiles(t, outside)

	// The positive control: granted write and approve, the same run asks
	// and what it allows runs.
	writer := pageClient(t, ad.Daemon, writerOrigin, &writerAsked)
	res, err = writer.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "ask"}, Task: shellTask(outside)})
	require.NoError(t, err)
	assert.EqualValues(t, 2, writerAsked.Load())
	assert.FileExists(t, filepath.Join(outside, "bash-ran"))
	// bypass stays host: write does not reach it.
	_, err = writer.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "bypass"}, Task: "hi"})
	assert.Equal(t, "host", errData(t, rpcCode(t, err))["access"])
}

// A connection that only reads may follow an ask-mode run, but once the
// run's starter is gone it is not asked the run's questions, its
// agents.approval_decide is refused by its class, and a JSON-RPC response
// it sends with the ids the daemon uses for its questions decides nothing:
// the question waits for someone who may answer, and is denied at its
// timeout.
func TestAReadOnlyFollowerIsNeverAskedAndItsAnswersDecideNothing(t *testing.T) {
	ad := startAskDaemon(t, modesConfig)
	ctx := daemontest.Context(t)
	outside := t.TempDir()
	starter := newAsker(nil)
	p := ad.ask(shellTask(outside))
	p.ApprovalTimeoutSecs = 3
	sc, id := ad.startAsk(t, starter, p)
	q := starter.next(t)

	// The follower as a browser would be: a raw socket from the reader
	// origin, subscribed, answering every question the daemon could send.
	ws, _, err := websocket.Dial(ctx, ad.URL, &websocket.DialOptions{HTTPHeader: http.Header{
		"Authorization": {"Bearer " + ad.Token}, "Origin": {readerOrigin}}})
	require.NoError(t, err)
	defer ws.CloseNow()
	send := func(f string) { require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(f))) }
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"runs.subscribe","params":{"run_id":%q}}`, id))
	frames := make(chan map[string]any, 256)
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				close(frames)
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) == nil {
				frames <- m
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, sc.Close(), "the starter leaves")
	time.Sleep(300 * time.Millisecond)
	for i := 1; i <= 8; i++ {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"card-%d","result":{"decision":"allow"}}`, i))
	}
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"agents.approval_decide","params":{"run_id":%q,"request_id":%q,"decision":"allow"}}`, id, q.RequestID))

	var decide map[string]any
	deadline := time.After(20 * time.Second)
	ended := false
	for !ended {
		select {
		case m, ok := <-frames:
			require.True(t, ok, "the socket closed")
			if m["method"] == api.ApproveMethod {
				t.Fatalf("A READ-ONLY CONNECTION WAS ASKED: %v", m)
			}
			if m["id"] == float64(2) {
				decide = m
			}
			if m["method"] == "agents.event" {
				if params, _ := m["params"].(map[string]any); params["kind"] == "done" || params["kind"] == "error" {
					ended = true
				}
			}
		case <-deadline:
			t.Fatal("the run never ended")
		}
	}
	require.NotNil(t, decide)
	e, _ := decide["error"].(map[string]any)
	require.NotNil(t, e, "approval_decide from a read-only connection: %v", decide)
	assert.EqualValues(t, daemon.CodeAccessDenied, e["code"])
	rec := record(t, ad.Client, id)
	require.NotEmpty(t, rec.Approvals)
	assert.Equal(t, "timeout", rec.Approvals[0].By, "%+v", rec.Approvals[0])
	assert.Equal(t, "deny", rec.Approvals[0].Decision)
	noFiles(t, outside)
}

// The invariant, over every method the daemon registers and every
// permission mode: a connection holding the default origin grants calls
// each with params made to do harm (a command, a path, content, a task
// whose agent runs Bash and Write, the mode) and answers every question it
// is sent with allow, and afterwards no command ran and no file was
// written. The methods and their params come from rpc.discover, so a
// method added later is swept without anyone listing it; one whose
// required param has no harmful value here fails until it gets one.
func TestNoMethodAndModeOpenToTheDefaultOriginGrantsRunsACommandOrWritesAFile(t *testing.T) {
	ad := startAskDaemon(t, modesConfig)
	ctx := daemontest.Context(t)
	outside := t.TempDir()
	doc, err := ad.Client.Discover(ctx)
	require.NoError(t, err)
	var asked atomic.Int32
	page := pageClient(t, ad.Daemon, appOrigin, &asked)

	// A live ask-mode run started by a native client that waits for its
	// answer: what the methods taking a run_id are pointed at.
	native := newAsker(nil)
	liveRun := func() string {
		_, id := ad.startAsk(t, native, ad.ask(shellTask(outside)))
		native.next(t)
		return id
	}
	// Every mode, the default, and spellings that are no mode.
	modes := []string{"", string(spawn.ModeReadOnly), string(spawn.ModeEdit), string(spawn.ModeAsk), string(spawn.ModeBypass),
		"bypassPermissions", "EDIT"}
	sort.Strings(modes)
	harm := func(name, mode, runID string) (any, bool) {
		switch name {
		case "command":
			return "touch " + filepath.Join(outside, "command-ran"), true
		case "path":
			return filepath.Join(outside, "path-written"), true
		case "content":
			return "x", true
		case "data_b64", "content_b64":
			return "eA==", true
		case "cwd":
			return ad.cwd, true
		case "id":
			return agent.ClaudeCode, true
		case "task":
			return shellTask(outside), true
		case "permission_mode":
			return mode, true
		case "run_id":
			return runID, true
		case "request_id":
			return "apr_1", true
		case "decision":
			return "allow", true
		case "pid":
			return 1, true
		case "rows", "cols":
			return 24, true
		case "turn":
			return 0, true
		case "data":
			return "touch " + filepath.Join(outside, "pty-ran") + "\n", true
		}
		return nil, false
	}
	sessionID := ""
	editSession := func() string {
		if sessionID == "" {
			s, err := ad.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "edit"}})
			require.NoError(t, err)
			sessionID = s.SessionID
		}
		return sessionID
	}
	refusedModes := map[string]string{"edit": "write", "ask": "write", "bypass": "host"}
	calls := 0
	for _, m := range doc.Methods {
		for _, mode := range modes {
			runID := ""
			params := map[string]any{}
			takesMode := false
			for _, cd := range m.Params {
				takesMode = takesMode || cd.Name == "permission_mode"
				if cd.Name == "run_id" && runID == "" {
					runID = liveRun()
				}
				v, ok := harm(cd.Name, mode, runID)
				if !ok && m.Name == "agents.chat.cancel" && cd.Name == "session_id" {
					// Only this method requires one; agents.invoke's must be a UUID.
					v, ok = "chat-1", true
				}
				if !ok && strings.HasPrefix(m.Name, "sessions.") && cd.Name == "session_id" {
					// A session a native client started in edit mode: a
					// prompt from the page must not run its turn.
					v, ok = editSession(), true
				}
				if !ok && m.Name == "session.auth" && cd.Name == "token" {
					// The right one: a wrong token closes the connection
					// the sweep goes on with.
					v, ok = ad.Token, true
				}
				if !ok {
					require.False(t, cd.Required, "%s: required param %q has no harmful value in this test: add one", m.Name, cd.Name)
					continue
				}
				if cd.Name == "permission_mode" && mode == "" {
					continue
				}
				params[cd.Name] = v
			}
			var out json.RawMessage
			err := page.Call(ctx, m.Name, params, &out)
			calls++
			var re *rpcclient.Error
			if takesMode && refusedModes[mode] != "" && assert.ErrorAs(t, err, &re, "%s %s", m.Name, mode) {
				assert.Equal(t, daemon.CodeAccessDenied, re.Code, "%s %s", m.Name, mode)
				assert.Equal(t, refusedModes[mode], errData(t, re)["access"], "%s %s", m.Name, mode)
			}
			if runID != "" {
				_, _ = ad.Client.Cancel(ctx, runID)
			}
			if !takesMode {
				break // one call is the method's whole sweep
			}
		}
	}
	t.Logf("%d methods, %d calls from the default origin grants", len(doc.Methods), calls)
	// Let anything started finish before looking.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		runs, err := ad.Client.Runs(ctx, api.ListParams{Status: "running"})
		require.NoError(t, err)
		if len(runs) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	noFiles(t, outside)
	assert.Zero(t, asked.Load(), "the page was asked a question")
}

// A run started by a connection that may not approve (a page granted write
// but not approve) is never asked, so its questions are denied: the denial
// the agent and the record get says that is why, where it used to say the
// starter's connection "has closed" while it was still open. The same for a
// session's turn it prompted.
func TestADenialForAStarterThatMayNotApproveSaysSoAndNotThatItsConnectionClosed(t *testing.T) {
	ad := startAskDaemon(t, modesConfig)
	ctx := daemontest.Context(t)
	outside := t.TempDir()
	var asked atomic.Int32
	page := pageClient(t, ad.Daemon, onlyWriteOrg, &asked)
	res, err := page.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "ask"}, Task: shellTask(outside)})
	require.NoError(t, err)
	s, err := page.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ad.cwd, PermissionMode: "ask"}})
	require.NoError(t, err)
	turn, err := page.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: shellTask(outside)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := ad.Client.Run(ctx, turn.RunID)
		return err == nil && r.Status != api.StatusRunning
	}, 20*time.Second, 20*time.Millisecond)
	for _, id := range []string{res.RunID, turn.RunID} {
		rec := record(t, ad.Client, id)
		require.NotEmpty(t, rec.Approvals, id)
		a := rec.Approvals[0]
		assert.Equal(t, "deny", a.Decision)
		assert.Equal(t, "no_client", a.By)
		assert.Contains(t, a.Message, "the connection that started run "+id+" may not approve tool calls (its grants lack the approve access class")
		assert.NotContains(t, a.Message, "has closed", "the starter's connection was open: %s", a.Message)
	}
	assert.Zero(t, asked.Load())
	noFiles(t, outside)
}
