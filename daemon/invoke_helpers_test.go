package daemon_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/rpc/rpcclient"
)

// The fake agents replay real captured streams, copied into spawn/testdata
// so the tests need nothing outside the checkout; see
// daemontest.ReplayAgent for the tasks that steer them.
var replays = []struct{ id, bin, version, fixture string }{
	{"claude-code", "claude", "2.1.197 (Claude Code)", "spawn/testdata/claude-stream-success.jsonl"},
	{"codex", "codex", "codex-cli 0.171.0", "spawn/testdata/codex-exec-json-success.jsonl"},
	{"gemini", "gemini", "0.61.0", "spawn/testdata/gemini-stream-success.jsonl"},
}

// runsDaemon is a daemon whose claude, codex and gemini are replaying
// fakes, with a working directory for runs and its client's events.
type runsDaemon struct {
	*daemontest.Daemon
	agents map[string]daemontest.Replay
	cwd    string
	events *daemontest.Events
}

// replayAgents writes the fakes and returns them with the pins for
// daemontest.Options.Agents.
func replayAgents(t testing.TB) (map[string]daemontest.Replay, map[string]string) {
	t.Helper()
	agents, pins := map[string]daemontest.Replay{}, map[string]string{}
	for _, r := range replays {
		agents[r.id] = daemontest.ReplayAgent(t, r.bin, r.version, daemontest.RepoFile(t, r.fixture))
		pins[r.id] = agents[r.id].Path
	}
	return agents, pins
}

// startRunsDaemon starts a runsDaemon with card.toml extra and environ
// added to its environment.
func startRunsDaemon(t testing.TB, toml string, environ ...string) *runsDaemon {
	t.Helper()
	agents, pins := replayAgents(t)
	rd := &runsDaemon{agents: agents, cwd: t.TempDir(), events: daemontest.NewEvents()}
	rd.Daemon = daemontest.Start(t, daemontest.Options{
		Config:  "login_shell_path = false\n" + toml,
		Agents:  pins,
		Environ: environ,
		Client:  client.Options{OnEvent: rd.events.Add},
	})
	return rd
}

// bigTask teaches the fake Claude Code the task BIG: after a second, it
// prints n text events of size bytes at once, ~n×size bytes in all; and the
// task TRICKLE, which prints the same about 32 KB at a time, every 20 ms.
func (rd *runsDaemon) bigTask(t testing.TB, n, size int) {
	t.Helper()
	claude := rd.agents["claude-code"].Path
	lines, err := os.ReadFile(daemontest.RepoFile(t, "spawn/testdata/claude-stream-success.jsonl"))
	require.NoError(t, err)
	parts := strings.SplitN(string(lines), "\n", 3)
	line := fmt.Sprintf(`{"type":"assistant","message":{"id":"m","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":%q}]}}`, strings.Repeat("x", size))
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString(parts[0] + "\n")
	for i := 0; i < n; i++ {
		b.WriteString(line + "\n")
		if per := max(1, 32000/size); i%per == per-1 || i == n-1 {
			if i == n-1 {
				b.WriteString(parts[2])
			}
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("chunk-%06d", i)), []byte(b.String()), 0o644))
			b.Reset()
		}
	}
	big := filepath.Join(dir, "big.jsonl")
	require.NoError(t, os.WriteFile(big, nil, 0o644))
	chunks, err := filepath.Glob(filepath.Join(dir, "chunk-*"))
	require.NoError(t, err)
	for _, c := range chunks {
		part, err := os.ReadFile(c)
		require.NoError(t, err)
		f, err := os.OpenFile(big, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.Write(part)
		require.NoError(t, errors.Join(err, f.Close()))
	}
	script, err := os.ReadFile(claude)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(claude, []byte(strings.Replace(string(script), "*FAIL*)",
		"*BIG*) sleep 1; cat '"+big+"'; exit 0;;\n"+
			"*TRICKLE*) sleep 1; for f in '"+dir+"'/chunk-*; do cat \"$f\"; sleep 0.02; done; exit 0;;\n*FAIL*)", 1)), 0o755))
}

// params is a run of adapter id on task in the daemon's working directory.
func (rd *runsDaemon) params(id, task string) api.InvokeParams {
	return api.InvokeParams{AgentSettings: api.AgentSettings{ID: id, Cwd: rd.cwd}, Task: task}
}

// finished runs p to its end and returns the answer.
func (rd *runsDaemon) finished(t testing.TB, p api.InvokeParams) api.InvokeResult {
	t.Helper()
	res, err := rd.Client.Invoke(daemontest.Context(t), p)
	require.NoError(t, err)
	return res
}

// stream starts a streaming run on a new client that collects its events.
func (rd *runsDaemon) stream(t testing.TB, p api.InvokeParams) (*client.Client, *daemontest.Events, api.InvokeAccepted) {
	t.Helper()
	evs := daemontest.NewEvents()
	c := rd.Dial(t, client.Options{OnEvent: evs.Add})
	acc, err := c.Stream(daemontest.Context(t), p, nil)
	require.NoError(t, err)
	return c, evs, acc
}

func rpcCode(t testing.TB, err error) *rpcclient.Error {
	t.Helper()
	var re *rpcclient.Error
	require.True(t, errors.As(err, &re), "want a JSON-RPC error, got %v", err)
	return re
}

func errData(t testing.TB, re *rpcclient.Error) map[string]any {
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
func waitRun(t testing.TB, c *client.Client, id string, d time.Duration) api.Run {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r, err := c.Run(daemontest.Context(t), id)
		require.NoError(t, err)
		if r.Status.Terminal() || time.Now().After(deadline) {
			return r.Run
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
			if kv == proc.RunIDEnv+"="+id {
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
