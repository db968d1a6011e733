package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/rpc"
)

// fixtureDir is where the real captured CLI streams live inside the repo
// (spawn/testdata holds copies of the shared captures), so the tests need
// nothing outside the checkout.
func fixtureDir(t testing.TB) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "spawn", "testdata"))
	require.NoError(t, err)
	for _, f := range []string{"claude-stream-success.jsonl", "codex-exec-json-success.jsonl", "gemini-stream-success.jsonl"} {
		_, err := os.Stat(filepath.Join(abs, f))
		require.NoError(t, err, "captured CLI stream missing from spawn/testdata")
	}
	return abs
}

// replayAgent writes a fake agent CLI that answers --version like the real
// one and otherwise replays a real captured stream. The task (read from
// stdin, as card sends it) steers it:
//
//	SLEEP      a grandchild sleeps 60 s in the run's process group
//	DRIP       the fixture's first line, its second line 10 times 100 ms apart, its last line
//	FAIL       prints to stderr and exits 3
//
// Every run writes its environment to <dir>/env-<CARD_RUN_ID>.
func replayAgent(t testing.TB, name, version, fixture string) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	fx := filepath.Join(fixtureDir(t), fixture)
	script := fmt.Sprintf(`#!/bin/sh
case "$1" in
--version) echo %q; exit 0;;
auth|login) exit 1;;
esac
task=$(cat)
env > %q/env-"$CARD_RUN_ID"
case "$task" in
*SLEEP*) sleep 60 & wait; exit 0;;
*DRIP*) head -n 1 %[3]q; i=0; while [ $i -lt 10 ]; do sed -n 2p %[3]q; sleep 0.1; i=$((i+1)); done; tail -n 1 %[3]q; exit 0;;
*FAIL*) echo "boom: the fake agent failed" >&2; exit 3;;
esac
cat %[3]q
`, version, dir, fx)
	path = filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path, dir
}

// fakeAgentSet is fake claude, codex and gemini replaying the real streams,
// pinned through their CAR_<ID>_BIN variables.
type fakeAgentSet struct {
	environ []string
	dirs    map[string]string // adapter id → where the fake writes env files
}

func replayAgents(t testing.TB) fakeAgentSet {
	claude, cdir := replayAgent(t, "claude", "2.1.197 (Claude Code)", "claude-stream-success.jsonl")
	codex, xdir := replayAgent(t, "codex", "codex-cli 0.171.0", "codex-exec-json-success.jsonl")
	gemini, gdir := replayAgent(t, "gemini", "0.61.0", "gemini-stream-success.jsonl")
	return fakeAgentSet{
		environ: []string{"CAR_CLAUDE_CODE_BIN=" + claude, "CAR_CODEX_BIN=" + codex, "CAR_GEMINI_BIN=" + gemini},
		dirs:    map[string]string{"claude-code": cdir, "codex": xdir, "gemini": gdir},
	}
}

// childEnvOf reads the environment a fake agent recorded for a run.
func (f fakeAgentSet) childEnvOf(t testing.TB, adapter, runID string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dirs[adapter], "env-"+runID))
	require.NoError(t, err, "the fake %s never ran for run %s", adapter, runID)
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// runsDaemon is a daemon with the fake agents pinned and card.toml extra.
type runsDaemon struct {
	*testDaemon
	agents fakeAgentSet
	cwd    string
}

func startRunsDaemon(t *testing.T, toml string, environ ...string) *runsDaemon {
	t.Helper()
	agents := replayAgents(t)
	td := startDaemonWith(t, "login_shell_path = false\n"+toml, append(append([]string{}, agents.environ...), environ...)...)
	return &runsDaemon{testDaemon: td, agents: agents, cwd: t.TempDir()}
}

// events collects agents.event notifications of one connection.
type events struct {
	mu  sync.Mutex
	all []daemon.AgentEvent
	ch  chan struct{}
}

func newEvents() *events { return &events{ch: make(chan struct{}, 1)} }

func (e *events) opts() rpc.ClientOptions {
	return rpc.ClientOptions{OnNotification: func(method string, params json.RawMessage) {
		if method != "agents.event" {
			return
		}
		var ev daemon.AgentEvent
		if json.Unmarshal(params, &ev) != nil {
			return
		}
		e.mu.Lock()
		e.all = append(e.all, ev)
		e.mu.Unlock()
		select {
		case e.ch <- struct{}{}:
		default:
		}
	}}
}

// of returns the events seen so far for run id.
func (e *events) of(id string) []daemon.AgentEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []daemon.AgentEvent
	for _, ev := range e.all {
		if ev.RunID == id {
			out = append(out, ev)
		}
	}
	return out
}

// waitFor waits until cond holds over run id's events.
func (e *events) waitFor(t testing.TB, id string, d time.Duration, cond func([]daemon.AgentEvent) bool) []daemon.AgentEvent {
	t.Helper()
	deadline := time.After(d)
	for {
		if evs := e.of(id); cond(evs) {
			return evs
		}
		select {
		case <-e.ch:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			evs := e.of(id)
			t.Fatalf("run %s: condition not met after %s; %d events: %s", id, d, len(evs), kinds(evs))
			return nil
		}
	}
}

func terminal(evs []daemon.AgentEvent) bool {
	return len(evs) > 0 && (evs[len(evs)-1].Kind == daemon.EventDone || evs[len(evs)-1].Kind == daemon.EventRunError)
}

func kinds(evs []daemon.AgentEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%d:%s ", e.Seq, e.Kind)
	}
	return b.String()
}

func (rd *runsDaemon) invoke(t testing.TB, c *rpc.Client, p map[string]any, out any) error {
	t.Helper()
	if _, ok := p["cwd"]; !ok {
		p["cwd"] = rd.cwd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Call(ctx, "agents.invoke", p, out)
}

// finished runs a task to its end on c and returns the answer.
func (rd *runsDaemon) finished(t testing.TB, c *rpc.Client, p map[string]any) daemon.InvokeResult {
	t.Helper()
	var res daemon.InvokeResult
	require.NoError(t, rd.invoke(t, c, p, &res))
	return res
}

// stream starts a streaming run on a new client that collects its events.
func (rd *runsDaemon) stream(t *testing.T, p map[string]any) (*rpc.Client, *events, daemon.InvokeAccepted) {
	t.Helper()
	evs := newEvents()
	c := rd.client(t, evs.opts())
	p["stream"] = true
	var acc daemon.InvokeAccepted
	require.NoError(t, rd.invoke(t, c, p, &acc))
	return c, evs, acc
}

func call(t testing.TB, c *rpc.Client, method string, params, out any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return c.Call(ctx, method, params, out)
}

func rpcCode(t testing.TB, err error) *rpc.Error {
	t.Helper()
	var re *rpc.Error
	require.True(t, errors.As(err, &re), "want a JSON-RPC error, got %v", err)
	return re
}

func errData(t testing.TB, re *rpc.Error) map[string]any {
	t.Helper()
	var m map[string]any
	switch d := re.Data.(type) {
	case json.RawMessage:
		require.NoError(t, json.Unmarshal(d, &m))
	case []byte:
		require.NoError(t, json.Unmarshal(d, &m))
	default:
		b, err := json.Marshal(d)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &m))
	}
	return m
}

// waitRun polls runs.get until the run has a terminal status.
func waitRun(t testing.TB, c *rpc.Client, id string, d time.Duration) store.Run {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var r store.Run
		require.NoError(t, call(t, c, "runs.get", map[string]any{"run_id": id}, &r))
		if r.Status.Terminal() || time.Now().After(deadline) {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesOfRun lists live processes whose environment names run id
// (Linux only; elsewhere nil).
func processesOfRun(id string) []int {
	if runtime.GOOS != "linux" {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
			if f := strings.Fields(string(stat)[i+1:]); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
				continue
			}
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == daemon.RunIDEnv+"="+id {
				out = append(out, pid)
			}
		}
	}
	sort.Ints(out)
	return out
}

func waitNoProcesses(t testing.TB, id string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(processesOfRun(id)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.Empty(t, processesOfRun(id), "processes of run %s are still alive", id)
}
