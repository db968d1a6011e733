package main

import (
	"context"
	"fmt"
	"io"
	"strings"
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
