package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
)

// cliDaemon starts a daemon whose Claude Code replays the real captured
// stream (a task containing SLEEP sleeps, FAIL fails) and returns its home
// for --home.
func cliDaemon(t *testing.T) string {
	t.Helper()
	fixture := daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-success.jsonl")
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", fixture)
	d := daemontest.Start(t, daemontest.Options{
		Config:   "login_shell_path = false\n",
		Agents:   map[string]string{agent.ClaudeCode: claude.Path},
		Logger:   zap.NewNop(),
		NoClient: true,
	})
	return d.Home
}

func TestInvokeStreamsTheAnswerToStdoutAndTheStatusToStderr(t *testing.T) {
	home := cliDaemon(t)
	code, out, errOut := runCLI("invoke", "claude-code", "say pong", "--home", home, "--cwd", t.TempDir())
	assert.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "PONG from the anthropic stand-in\n", out)
	assert.Contains(t, errOut, "succeeded")
	assert.NotContains(t, errOut, "\r", "no spinner when stderr is not a terminal")

	code, out, _ = runCLI("runs", "--home", home, "--json")
	require.Equal(t, exitOK, code)
	var runs []store.Run
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 1)
	assert.Equal(t, store.StatusSucceeded, runs[0].Status)

	code, out, _ = runCLI("runs", "--home", home)
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, runs[0].RunID)
	assert.Contains(t, out, "claude-code")

	code, out, _ = runCLI("runs", "show", runs[0].RunID, "--home", home)
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, `"answer": "PONG from the anthropic stand-in"`)

	code, out, errOut = runCLI("runs", "follow", runs[0].RunID, "--home", home)
	assert.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "PONG from the anthropic stand-in\n", out, "follow replays a finished run")
}

func TestInvokeReadsTheTaskFromStdinAndPrintsJSON(t *testing.T) {
	home := cliDaemon(t)
	var out, errb bytes.Buffer
	code := run([]string{"invoke", "claude-code", "-", "--json", "--home", home, "--cwd", t.TempDir()}, strings.NewReader("say pong"), &out, &errb)
	require.Equal(t, exitOK, code, errb.String())
	var res daemon.InvokeResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	assert.Equal(t, "PONG from the anthropic stand-in", res.Answer)
	assert.Equal(t, store.StatusSucceeded, res.Status)
}

func TestInvokeExitCodesSayHowTheRunEnded(t *testing.T) {
	home := cliDaemon(t)
	cwd := t.TempDir()
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"failed", []string{"invoke", "claude-code", "FAIL"}, exitFailure},
		{"timed out", []string{"invoke", "claude-code", "SLEEP", "--timeout", "1"}, exitTimedOut},
		{"refused", []string{"invoke", "claude-code", "x", "--mode", "bypass"}, exitRefused},
		{"bad params", []string{"invoke", "clippy", "x"}, exitRefused},
		{"usage", []string{"invoke"}, exitUsage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(append(tc.args, "--home", home, "--cwd", cwd)...)
			assert.Equal(t, tc.code, code, errOut)
		})
	}
	code, _, errOut := runCLI("invoke", "claude-code", "x", "--home", filepath.Join(t.TempDir(), "none"))
	assert.Equal(t, exitNoDaemon, code, errOut)
}

func TestCtrlCCancelsTheRunAndExits130(t *testing.T) {
	home := cliDaemon(t)
	got := make(chan chan<- os.Signal, 1)
	signalNotify = func(c chan<- os.Signal, _ ...os.Signal) { got <- c }
	t.Cleanup(func() { signalNotify = signal.Notify })
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI("invoke", "claude-code", "SLEEP", "--home", home, "--cwd", t.TempDir())
		done <- result{code, out, errOut}
	}()
	var sigs chan<- os.Signal
	select {
	case sigs = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("card invoke never started following its run")
	}
	time.Sleep(200 * time.Millisecond) // the fake agent is asleep by now
	start := time.Now()
	sigs <- os.Interrupt
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Ctrl-C did not end card invoke")
	}
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Equal(t, exitCancelled, r.code, r.errOut)
	assert.Contains(t, r.errOut, "cancelling run")
	assert.Contains(t, r.errOut, "cancelled")

	code, out, _ := runCLI("runs", "--home", home, "--json")
	require.Equal(t, exitOK, code)
	var runs []store.Run
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 1)
	assert.Equal(t, store.StatusCancelled, runs[0].Status)
}
