package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
)

// cliDaemon starts a daemon whose Claude Code replays the real captured
// stream (a task containing SLEEP sleeps, FAIL fails) and returns its home
// for --home.
func cliDaemon(t *testing.T) string {
	t.Helper()
	return replayDaemon(t).Home
}

func replayDaemon(t *testing.T) *daemontest.Daemon {
	t.Helper()
	fixture := daemontest.RepoFile(t, "e2e/fixtures/cli/claude-stream-success.jsonl")
	claude := daemontest.ReplayAgent(t, "claude", "2.1.197 (Claude Code)", fixture)
	return agentDaemon(t, agent.ClaudeCode, claude.Path)
}

// agentDaemon starts a daemon whose one agent, id, is the executable path.
func agentDaemon(t *testing.T, id, path string) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, daemontest.Options{
		Config:   "login_shell_path = false\n",
		Agents:   map[string]string{id: path},
		Logger:   zap.NewNop(),
		NoClient: true,
	})
}

func TestInvokeStreamsTheAnswerToStdoutAndTheStatusToStderr(t *testing.T) {
	home := cliDaemon(t)
	code, out, _ := runCLI("runs", "--home", home)
	require.Equal(t, exitOK, code)
	assert.Equal(t, "No runs recorded yet; `card invoke ID TASK` starts one.\n", out)

	code, out, errOut := runCLI("invoke", "claude-code", "say pong", "--home", home, "--cwd", t.TempDir())
	assert.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "PONG from the anthropic stand-in\n", out)
	assert.Contains(t, errOut, "succeeded")
	assert.NotContains(t, errOut, "\r", "no spinner when stderr is not a terminal")

	code, out, _ = runCLI("runs", "--home", home, "--json")
	require.Equal(t, exitOK, code)
	var runs []api.Run
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 1)
	assert.Equal(t, api.StatusSucceeded, runs[0].Status)

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
	var res api.InvokeResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	assert.Equal(t, "PONG from the anthropic stand-in", res.Answer)
	assert.Equal(t, api.StatusSucceeded, res.Status)
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
	outcome := r.errOut[strings.LastIndex(strings.TrimRight(r.errOut, "\n"), "\n")+1:]
	assert.Regexp(t, `^card: run run_\w+ cancelled after \d+\.\ds: a client asked to stop it; the agent's process group was ended\n$`, outcome)
	assert.Equal(t, 1, strings.Count(outcome, "cancel"), "said once: %q", outcome)

	code, out, _ := runCLI("runs", "--home", home, "--json")
	require.Equal(t, exitOK, code)
	var runs []api.Run
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 1)
	assert.Equal(t, api.StatusCancelled, runs[0].Status)
}

// A daemon that stops under a run is exit 75 (EX_TEMPFAIL, "retrying may
// work"), as the usage says, not a plain failure.
func TestInvokeExitsInterruptedWhenTheDaemonStopsMidRun(t *testing.T) {
	d := replayDaemon(t)
	following := make(chan struct{}, 1)
	signalNotify = func(chan<- os.Signal, ...os.Signal) { following <- struct{}{} }
	t.Cleanup(func() { signalNotify = signal.Notify })
	type result struct {
		code   int
		errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, _, errOut := runCLI("invoke", "claude-code", "SLEEP", "--home", d.Home, "--cwd", t.TempDir())
		done <- result{code, errOut}
	}()
	select {
	case <-following:
	case <-time.After(10 * time.Second):
		t.Fatal("card invoke never started following its run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = d.Shutdown(ctx)
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("card invoke did not end when the daemon stopped")
	}
	assert.Equal(t, exitInterrupted, r.code, r.errOut)
	assert.Contains(t, r.errOut, "the daemon stopped")
}

func TestATimeoutOutsideItsRangeIsRefusedSayingTheRange(t *testing.T) {
	for _, secs := range []string{"-5", "0", "99999"} {
		code, _, errOut := runCLI("invoke", "claude-code", "x", "--timeout", secs, "--home", filepath.Join(t.TempDir(), "none"))
		assert.Equal(t, exitUsage, code, secs)
		assert.Contains(t, errOut, "--timeout "+secs+": the deadline is 1 to 3600 seconds (default 300)")
	}
}

// A crash is shown with what the agent printed last, not only its exit.
func TestACrashedAgentShowsTheEndOfItsStderr(t *testing.T) {
	crash := daemontest.Script(t, "claude", `case "$1" in --version) echo "2.1.197 (Claude Code)"; exit 0;; esac
cat >/dev/null
echo "Segmentation fault in libfoo: bad pointer at 0x0" >&2
kill -SEGV $$`)
	d := agentDaemon(t, agent.ClaudeCode, crash)
	code, _, errOut := runCLI("invoke", "claude-code", "x", "--home", d.Home, "--cwd", t.TempDir())
	assert.Equal(t, exitFailure, code, errOut)
	assert.Contains(t, errOut, "killed by signal 11 (segmentation fault)")
	assert.Contains(t, errOut, "card: the agent's stderr ended with:\n  Segmentation fault in libfoo: bad pointer at 0x0\n")
}

// On a terminal, a missing task is asked for instead of waited for in
// silence.
func TestWithNoTaskOnATerminalInvokeSaysItReadsStdin(t *testing.T) {
	home := cliDaemon(t)
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	defer tty.Close()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"invoke", "claude-code", "--home", home, "--cwd", t.TempDir()}, tty, &out, &errOut)
	}()
	// The terminal's line discipline ends the input at Ctrl-D.
	_, err = ptmx.Write([]byte("say pong\n\x04"))
	require.NoError(t, err)
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code, errOut.String())
	case <-time.After(20 * time.Second):
		t.Fatal("card invoke did not end after the task and Ctrl-D")
	}
	assert.Contains(t, errOut.String(), "card invoke: reading the task from stdin; end it with Ctrl-D")
	assert.Equal(t, "PONG from the anthropic stand-in\n", out.String())
}

// What the CLI prints is in its own words: flags and commands, never a
// JSON-RPC method, field or code.
func TestRefusalsNameFlagsAndCommandsNotTheWire(t *testing.T) {
	home := cliDaemon(t)
	cwd := t.TempDir()
	cases := []struct {
		name     string
		args     []string
		code     int
		says     string
		mustNots []string
	}{
		{"unknown run", []string{"runs", "show", "run_nope"}, exitRefused,
			"card runs show: no run \"run_nope\"; `card runs` lists the recorded runs", []string{"runs.list"}},
		{"unknown agent", []string{"invoke", "clippy", "x"}, exitRefused,
			`card invoke: unknown agent "clippy": known agents are claude-code, codex, copilot, droid, gemini, opencode, pi, qwen-code`, []string{"id:"}},
		{"self-named loop", []string{"invoke", "claude-code", "x", "--invoked-by", "claude-code"}, exitRefused,
			"the caller named itself claude-code (--invoked-by)", []string{"CAR_INVOKED_BY", "invoked_by"}},
		{"bypass", []string{"invoke", "claude-code", "x", "--mode", "bypass"}, exitRefused,
			`card invoke: --mode "bypass" is refused for claude-code`, []string{"permission_mode"}},
		{"bad mode", []string{"invoke", "claude-code", "x", "--mode", "weird"}, exitRefused,
			`card invoke: --mode: unknown mode "weird"`, []string{"permission_mode", "invalid params"}},
		{"empty task", []string{"invoke", "claude-code", ""}, exitRefused,
			"card invoke: the task is empty", []string{"task:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, "--home", home)
			if args[0] == "invoke" {
				args = append(args, "--cwd", cwd)
			}
			code, _, errOut := runCLI(args...)
			assert.Equal(t, tc.code, code, errOut)
			assert.Contains(t, errOut, tc.says)
			assert.NotContains(t, errOut, "(code ")
			for _, s := range tc.mustNots {
				assert.NotContains(t, errOut, s)
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "no daemon here")
	code, _, errOut := runCLI("info", "--home", missing)
	assert.Equal(t, exitNoDaemon, code)
	assert.Contains(t, errOut, "start it with `card serve --home '"+missing+"'`", "the home in use")
}

// --cwd is the shell's: a relative one is resolved here, not in the daemon.
func TestARelativeCwdIsTheShellsDirectory(t *testing.T) {
	home := cliDaemon(t)
	dir := t.TempDir()
	t.Chdir(filepath.Dir(dir))
	code, _, errOut := runCLI("invoke", "claude-code", "say pong", "--home", home, "--cwd", filepath.Base(dir), "--json")
	require.Equal(t, exitOK, code, errOut)
	_, out, _ := runCLI("runs", "--home", home, "--json")
	var runs []api.Run
	require.NoError(t, json.Unmarshal([]byte(out), &runs))
	require.Len(t, runs, 1)
	assert.Equal(t, dir, runs[0].Cwd)
}

// The refusal of an agent whose read_only card cannot enforce names the
// flag that runs it anyway, the one the help lists.
func TestAnUnenforcedReadOnlyRefusalNamesTheFlag(t *testing.T) {
	pi := daemontest.Script(t, "pi", `case "$1" in --version) echo "0.73.1"; exit 0;; esac; cat >/dev/null; exit 1`)
	d := agentDaemon(t, agent.Pi, pi)
	code, _, errOut := runCLI("invoke", "pi", "x", "--home", d.Home, "--cwd", t.TempDir())
	assert.Equal(t, exitRefused, code, errOut)
	assert.Contains(t, errOut, "Pass --acknowledge-unenforced-read-only to run it anyway")
	assert.NotContains(t, errOut, "acknowledge_unenforced_read_only")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	_, help, _ := runCLI("invoke", "--help")
	assert.Contains(t, help, "--acknowledge-unenforced-read-only")
}
