package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
)

const acpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}`

// startACP runs `card acp claude-code` against d with a pipe for stdin, and
// waits for its answer to initialize.
func startACP(t *testing.T, d *daemontest.Daemon) (feed *io.PipeWriter, out, errOut *syncBuffer, done chan int) {
	t.Helper()
	in, feed := io.Pipe()
	out, errOut = &syncBuffer{}, &syncBuffer{}
	done = make(chan int, 1)
	go func() { done <- run([]string{"acp", "claude-code", "--home", d.Home}, in, out, errOut) }()
	t.Cleanup(func() { _ = feed.Close() })
	fmt.Fprintln(feed, acpInitialize)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"id":1`) }, 20*time.Second, 10*time.Millisecond, errOut.String())
	return feed, out, errOut, done
}

func exitOf(t *testing.T, done chan int) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("card acp did not end")
		return -1
	}
}

// An editor ends its agent by closing its stdin: card acp then exits 0
// and says nothing, where it used to report the connection to the daemon
// it closed itself as lost. Its session stays open on the daemon.
func TestCardACPExitsQuietlyWhenTheEditorClosesItsInput(t *testing.T) {
	d := replayDaemon(t)
	feed, out, errOut, done := startACP(t, d)
	fmt.Fprintf(feed, `{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":%q,"mcpServers":[]}}`+"\n", t.TempDir())
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"id":2`) }, 20*time.Second, 10*time.Millisecond, errOut.String())
	require.NoError(t, feed.Close())
	assert.Equal(t, exitOK, exitOf(t, done), errOut.String())
	time.Sleep(300 * time.Millisecond) // a late line would come now
	assert.Empty(t, errOut.String(), "an editor that closed stdin was told something went wrong")

	list, err := d.Dial(t, client.Options{}).Sessions(daemontest.Context(t), api.SessionListParams{})
	require.NoError(t, err)
	require.Len(t, list.Sessions, 1)
	assert.NotEqual(t, api.SessionClosed, list.Sessions[0].State, "the editor's session was closed with it")
}

// A daemon that goes away under card acp is still reported, once, and the
// editor's requests are answered with it.
func TestCardACPSaysSoWhenTheDaemonIsLost(t *testing.T) {
	d := agentDaemon(t, agent.ClaudeCode, daemontest.AskingClaude(t))
	feed, out, errOut, done := startACP(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, d.Shutdown(ctx))
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "the connection to card's daemon was lost") },
		20*time.Second, 10*time.Millisecond, errOut.String())
	fmt.Fprintf(feed, `{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}`+"\n")
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"id":2`) }, 20*time.Second, 10*time.Millisecond)
	assert.Contains(t, out.String(), "daemon was lost")
	require.NoError(t, feed.Close())
	exitOf(t, done)
	assert.Equal(t, 1, strings.Count(errOut.String(), "was lost"), errOut.String())
}

// A supervisor or an editor that stops `card acp` with SIGTERM, its stdin
// still open, sees it exit at once: the line reader once blocked in a read
// of stdin that no signal interrupts, and only SIGKILL ended it.
func TestCardACPExitsOnSIGTERMWithItsInputStillOpen(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("signals")
	}
	bin := daemontest.Build(t)
	d := replayDaemon(t)
	cmd := exec.Command(bin, "acp", "claude-code", "--home", d.Home)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, io.Discard
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintln(stdin, acpInitialize)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"id":1`) }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("card acp did not exit within 5 s of SIGTERM")
	}
}

// acpPeer drives `card acp` (in this process) line by line, as an editor
// or the ACP registry's verifier does.
type acpPeer struct {
	t    *testing.T
	feed *io.PipeWriter
	out  *syncBuffer
	next int
}

// call sends a request and decodes its answer's result into out, failing
// on an error answer.
func (p *acpPeer) call(method string, params, out any) {
	p.t.Helper()
	p.next++
	req, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": p.next, "method": method, "params": params})
	require.NoError(p.t, err)
	fmt.Fprintln(p.feed, string(req))
	want := fmt.Sprintf(`"id":%d,`, p.next)
	var line string
	require.Eventually(p.t, func() bool {
		for _, l := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(l, want) && !strings.Contains(l, `"method"`) {
				line = l
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "no answer to %s", method)
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	require.NoError(p.t, json.Unmarshal([]byte(line), &m))
	require.Nil(p.t, m.Error, "%s answered an error: %s", method, m.Error)
	if out != nil {
		require.NoError(p.t, json.Unmarshal(m.Result, out))
	}
}

// What the ACP registry checks of an agent before it lists it, done to
// `card acp` with no adapter (the entry in acp-registry/ runs it so):
// initialize names auth methods of a type the registry takes (agent or
// terminal), and a session can be started, listed, given a model through
// its config option, resumed and closed.
func TestCardACPPassesTheRegistrysChecksOfAnAgent(t *testing.T) {
	d := replayDaemon(t)
	registryChecks(t, d.Home, true, func(p *acpPeer, sessionID string, agents []string) {
		assert.Equal(t, []string{"claude-code"}, agents)
	})
}

// The same checks against a daemon whose only agents are the fake ones,
// declared in card.toml (where `card acp`, a process of its own, reads
// them too): they are the agents `card acp` offers, and a prompt in the
// session the checks made is answered by one.
func TestCardACPWithTheFakeAgentsPassesTheRegistrysChecksAndAnswers(t *testing.T) {
	bin := daemontest.Build(t)
	home := t.TempDir()
	// card acp runs in this process and declares what card.toml declares
	// here, for the other tests to see unless taken back.
	t.Cleanup(func() { agent.Forget("fake"); agent.Forget("fake-2") })
	config := "login_shell_path = false\n"
	for _, d := range fakeAgentDecls(bin, home) {
		config += fmt.Sprintf("\n[agents.%s]\nname = %q\ncommand = [%q, %q, %q, %q, %q]\nversion_args = [%q, %q]\n",
			d.ID, d.Name, d.Command[0], d.Command[1], d.Command[2], d.Command[3], d.Command[4], d.VersionArgs[0], d.VersionArgs[1])
	}
	// Pinned, as --fake-agents pins them: detection does not take a
	// binary from a temp dir it meets on a search path.
	p := daemontest.Serve(t, bin, daemontest.Options{Home: home, Config: config, Environ: fakeAgentPins(bin, fakeAgentDecls(bin, home))})
	registryChecks(t, p.Home, false, func(peer *acpPeer, sessionID string, agents []string) {
		assert.Equal(t, []string{"fake", "fake-2"}, agents)
		var answer struct {
			StopReason string `json:"stopReason"`
		}
		peer.call("session/prompt", map[string]any{"sessionId": sessionID, "prompt": []any{map[string]any{"type": "text", "text": "Remember the word heron."}}}, &answer)
		assert.Equal(t, "end_turn", answer.StopReason)
		assert.Contains(t, peer.out.String(), "heron", "the fake agent's answer reached the editor")
	})
}

// registryChecks runs the registry's checks against `card acp` on the
// daemon of home; during runs in the session the checks made, with the
// ids the session's agent option offers, before it is closed. An agent
// that takes no model (one declared in card.toml) offers no model option,
// and the model step checks that instead.
func registryChecks(t *testing.T, home string, takesModel bool, during func(p *acpPeer, sessionID string, agents []string)) {
	t.Helper()
	in, feed := io.Pipe()
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run([]string{"acp", "--home", home}, in, out, errOut) }()
	p := &acpPeer{t: t, feed: feed, out: out}

	var init struct {
		ProtocolVersion int `json:"protocolVersion"`
		AuthMethods     []struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		} `json:"authMethods"`
	}
	p.call("initialize", map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}}, &init)
	assert.Equal(t, 1, init.ProtocolVersion)
	require.NotEmpty(t, init.AuthMethods, "%s\n%s", out.String(), errOut.String())
	for _, m := range init.AuthMethods {
		assert.Contains(t, []string{"agent", "terminal"}, m.Type, "auth method %s", m.ID)
	}

	cwd := t.TempDir()
	var created struct {
		SessionID     string `json:"sessionId"`
		ConfigOptions []struct {
			ID           string `json:"id"`
			CurrentValue any    `json:"currentValue"`
			Options      []struct {
				Value string `json:"value"`
			} `json:"options"`
		} `json:"configOptions"`
	}
	p.call("session/new", map[string]any{"cwd": cwd, "mcpServers": []any{}}, &created)
	require.NotEmpty(t, created.SessionID)
	var ids, agents []string
	for _, o := range created.ConfigOptions {
		ids = append(ids, o.ID)
		if o.ID == "agent" {
			for _, v := range o.Options {
				agents = append(agents, v.Value)
			}
		}
	}
	if !takesModel {
		assert.Equal(t, []string{"agent", "isolation"}, ids)
	} else {
		assert.Equal(t, []string{"agent", "model", "effort", "isolation"}, ids)
	}

	var listed struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
		} `json:"sessions"`
	}
	p.call("session/list", map[string]any{}, &listed)
	var found bool
	for _, s := range listed.Sessions {
		found = found || s.SessionID == created.SessionID
	}
	assert.True(t, found, "session/list lists the new session")

	if takesModel {
		var set struct {
			ConfigOptions []struct {
				ID           string `json:"id"`
				CurrentValue any    `json:"currentValue"`
			} `json:"configOptions"`
		}
		p.call("session/set_config_option", map[string]any{"sessionId": created.SessionID, "configId": "model", "value": "claude-sonnet-4-5"}, &set)
		for _, o := range set.ConfigOptions {
			if o.ID == "model" {
				assert.Equal(t, "claude-sonnet-4-5", o.CurrentValue)
			}
		}
	}
	p.call("session/resume", map[string]any{"sessionId": created.SessionID, "cwd": cwd}, nil)
	during(p, created.SessionID, agents)
	p.call("session/close", map[string]any{"sessionId": created.SessionID}, nil)
	require.NoError(t, feed.Close())
	assert.Equal(t, exitOK, exitOf(t, done), errOut.String())
}
