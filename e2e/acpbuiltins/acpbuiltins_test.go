// Package acpbuiltins_test drives the real OpenCode and Qwen Code from npm
// through the real daemon, each pointed at the loopback OpenAI stand-in the
// way an operator points it (its provider in card.toml [adapters.<id>]
// env): detection with their versions, a one-shot run, a session whose
// turns carry each other across a SIGKILL of the daemon, cancel, and the
// permission modes card holds by answering what each asks.
//
// Like every real-CLI test it runs only with CARD_E2E=1 (or
// CARD_E2E_REQUIRED=1, which turns a missing CLI into a failure); see
// standin.CLI.
package acpbuiltins_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/e2e/standin"
)

// The daemon runs as a child and the stand-ins are closed by t.Cleanup, so
// nothing of ours may outlive the tests.
func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// cli is one of the two, with the version e2e/agents/package.json pins
// and its model's tools.
type cli struct {
	id, bin, version string
	// adapter is its card.toml [adapters.<id>] table against s, writing
	// what it needs under home.
	adapter func(t *testing.T, s *standin.Server, home string) map[string]any
	write   func(path string) standin.ToolCall
	shell   func(command string) standin.ToolCall
}

var clis = []cli{
	{id: agent.OpenCode, bin: "opencode", version: "1.18.33",
		adapter: func(t *testing.T, s *standin.Server, home string) map[string]any {
			env, err := s.OpenCodeEnv(home, os.Getenv("PATH"), nil)
			require.NoError(t, err)
			e := standin.AdapterEnv(env)
			delete(e, "OPENCODE_SERVER_PASSWORD") // card's, fresh per process
			return map[string]any{"env": e}
		},
		write: func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "write", Input: map[string]any{"filePath": p, "content": "planted\n"}}
		},
		shell: func(c string) standin.ToolCall {
			return standin.ToolCall{Name: "bash", Input: map[string]any{"command": c, "description": "Run it"}}
		}},
	{id: agent.QwenCode, bin: "qwen", version: "0.24.4",
		adapter: func(t *testing.T, s *standin.Server, home string) map[string]any {
			env, err := s.QwenSetup(home, os.Getenv("PATH"))
			require.NoError(t, err)
			return map[string]any{"env": standin.AdapterEnv(env)}
		},
		write: func(p string) standin.ToolCall {
			return standin.ToolCall{Name: "write_file", Input: map[string]any{"file_path": p, "content": "planted\n"}}
		},
		shell: func(c string) standin.ToolCall {
			return standin.ToolCall{Name: "run_shell_command", Input: map[string]any{"command": c, "description": "Run it"}}
		}},
}

var (
	buildMu sync.Mutex
	cardBin string
)

// card builds ./cmd/card once for the tests still running.
func card(t *testing.T) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if _, err := os.Stat(cardBin); cardBin == "" || err != nil {
		cardBin = daemontest.Build(t)
	}
	return cardBin
}

// searchPath is the CLIs' directory and node's, which the npm launchers
// need.
func searchPath(t *testing.T, bin string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node must be on PATH to run the npm-installed CLIs")
	return strings.Join([]string{filepath.Dir(bin), filepath.Dir(node), "/usr/local/bin", "/usr/bin", "/bin"}, ":")
}

// rig is one CLI's daemon (a `card serve` process) and its stand-in.
type rig struct {
	c       cli
	bin     string
	server  *standin.Server
	opts    daemontest.Options
	proc    *daemontest.Process
	home    string
	project string
	marker  string
}

// newMarker is a word no other process on the machine carries.
func newMarker(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return "card-marker-" + hex.EncodeToString(b)
}

// serve starts the daemon for c against a stand-in playing script. Every
// process of the agent carries the rig's marker in its environment (set
// in the adapter's env), so the test can find them all.
func serve(t *testing.T, c cli, script standin.Script, copts client.Options, extraCfg map[string]any) *rig {
	t.Helper()
	bin := standin.CLI(t, c.bin)
	path := searchPath(t, bin)
	r := &rig{c: c, bin: bin, home: t.TempDir(), marker: newMarker(t)}
	r.project = filepath.Join(r.home, "project")
	require.NoError(t, os.MkdirAll(r.project, 0o755))
	r.server = standin.NewOpenAI(t, script)
	adapterCfg := c.adapter(t, r.server, r.home)
	env, _ := adapterCfg["env"].(map[string]string)
	env["CARD_TEST_MARKER"] = r.marker
	cfg := map[string]any{"login_shell_path": false, "probe_timeout_secs": 90, "adapters": map[string]any{c.id: adapterCfg}}
	for k, v := range extraCfg {
		cfg[k] = v
	}
	var buf bytes.Buffer
	require.NoError(t, toml.NewEncoder(&buf).Encode(cfg))
	r.opts = daemontest.Options{Warm: true, Config: buf.String(), Agents: map[string]string{c.id: bin},
		Environ: []string{"HOME=" + r.home, "PATH=" + path, "LANG=C.UTF-8"}, Client: copts}
	r.proc = daemontest.Serve(t, card(t), r.opts)
	t.Cleanup(func() { killMarked(r.marker) })
	return r
}

// marked lists the processes whose environment or command line holds
// marker.
func marked(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, f := range []string{"environ", "cmdline"} {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err == nil && bytes.Contains(b, []byte(marker)) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// killMarked ends whatever a test left running with marker.
func killMarked(marker string) {
	for _, pid := range marked(marker) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Both are found on the search path with the versions they print, and a
// daemon that points them at a provider in card.toml reports them ready;
// in an empty home OpenCode is unknown (its free models need no account)
// and Qwen Code not configured (its session/new refuses without a key).
func TestTheRealOpenCodeAndQwenCodeAreDetectedWithTheirVersions(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			r := serve(t, c, standin.Script{}, client.Options{}, nil)
			specs, err := r.proc.Client.Detect(ctxFor(t, 3*time.Minute), api.DetectParams{IncludeHealth: true})
			require.NoError(t, err)
			i := slices.IndexFunc(specs, func(s api.ExternalAgentSpec) bool { return s.ID == c.id })
			require.GreaterOrEqual(t, i, 0, "agents.detect lacks %s: %+v", c.id, specs)
			s := specs[i]
			assert.Equal(t, c.version, s.Version)
			assert.True(t, s.Execution.IsRunnable(), "%+v", s.Execution)
			a, _ := agent.Lookup(c.id)
			assert.Equal(t, a.ReadOnly, s.ReadOnlyEnforcement)
			require.NotNil(t, s.Health)
			assert.Equal(t, api.StatusReady, s.Health.Status, s.Health.Reason)
			t.Logf("%s %s: %s: %s", c.id, s.Version, s.Health.Status, s.Health.Reason)

			home := t.TempDir()
			d := detect.New(detect.Options{Search: detect.NewSearchPath(searchPath(t, r.bin)), Home: home,
				Env: map[string]string{"HOME": home, "PATH": searchPath(t, r.bin)}, ScratchDirs: []string{},
				ProbeTimeout: 90 * time.Second, HealthTimeout: 30 * time.Second})
			t.Cleanup(d.Close)
			h, err := d.Health(ctxFor(t, 3*time.Minute), c.id, true)
			require.NoError(t, err)
			want := map[string]api.HealthStatus{agent.OpenCode: api.StatusUnknown, agent.QwenCode: api.StatusNotConfigured}[c.id]
			assert.Equal(t, want, h.Status, h.Reason)
			t.Logf("%s in an empty home: %s: %s", c.id, h.Status, h.Reason)
		})
	}
}

// A one-shot run in the default mode (read_only) answers with the
// stand-in's words and names the CLI's session.
func TestAOneShotRunOfEachAnswers(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			const answer = "PONG from the openai stand-in via card"
			r := serve(t, c, standin.Script{Answer: answer}, client.Options{}, nil)
			res, err := r.proc.Client.Invoke(ctxFor(t, 4*time.Minute), api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: c.id, Cwd: r.project, TimeoutSecs: 180}, Task: "say pong"})
			require.NoError(t, err)
			require.False(t, res.IsError, "%+v", res.Error)
			assert.Equal(t, answer, res.Answer)
			assert.NotEmpty(t, res.SessionID)
			assert.Equal(t, c.id, res.Adapter)
			assert.True(t, r.server.TextContains("say pong"), "the prompt reached the model")
			assert.Empty(t, marked(r.marker), "the run's agent is gone once it answered")
		})
	}
}

// sessionEvents collects a session's events.
type sessionEvents struct {
	mu  sync.Mutex
	evs []api.SessionEvent
}

func (c *sessionEvents) add(ev api.SessionEvent) {
	c.mu.Lock()
	c.evs = append(c.evs, ev)
	c.mu.Unlock()
}
func (c *sessionEvents) all() []api.SessionEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.evs)
}

// turn prompts the session and waits for the turn's terminal event.
func (r *rig) turn(t *testing.T, evs *sessionEvents, id, task string) api.SessionEvent {
	t.Helper()
	res, err := r.proc.Client.PromptSession(daemontest.Context(t), api.SessionPromptParams{SessionID: id, Task: task})
	require.NoError(t, err)
	var end api.SessionEvent
	require.Eventually(t, func() bool {
		for _, ev := range evs.all() {
			if ev.Turn == res.Turn && client.Terminal(ev.Event) {
				end = ev
				return true
			}
		}
		return false
	}, 4*time.Minute, 50*time.Millisecond, "turn %d of %s never ended", res.Turn, r.c.id)
	require.NotNil(t, end.Event.Result)
	require.Equal(t, api.StatusSucceeded, end.Event.Status, "%s turn %d: %+v", r.c.id, res.Turn, end.Event.Result.Error)
	return end
}

// userMessages reads the stand-in's answer: how many user messages the
// turn's model call carried.
func userMessages(t *testing.T, end api.SessionEvent) int {
	t.Helper()
	answer := strings.TrimSpace(end.Event.Result.Answer)
	i := strings.LastIndex(answer, "user messages: ")
	require.GreaterOrEqual(t, i, 0, "the answer %q is not the stand-in's count", answer)
	n, err := strconv.Atoi(strings.Fields(answer[i+len("user messages: "):])[0])
	require.NoError(t, err)
	return n
}

// A session's second turn runs on its warm agent and carries the first;
// the third, after a SIGKILL of the daemon (the warm agent dies with it),
// runs on a new agent that reopens the CLI's own session over ACP and
// carries both.
func TestEachSessionsTurnsCarryTheOnesBeforeAcrossASIGKILLOfTheDaemon(t *testing.T) {
	card(t)
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			r := serve(t, c, standin.Script{AnswerUserMessages: true}, client.Options{}, nil)
			ctx := daemontest.Context(t)
			s, err := r.proc.Client.StartSession(ctx, api.SessionStartParams{
				AgentSettings: api.AgentSettings{ID: c.id, Cwd: r.project, TimeoutSecs: 180}})
			require.NoError(t, err)
			evs := &sessionEvents{}
			_, err = r.proc.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID}, evs.add)
			require.NoError(t, err)
			one := userMessages(t, r.turn(t, evs, s.SessionID, "Remember the word avocado."))
			two := userMessages(t, r.turn(t, evs, s.SessionID, "Which word did I ask you to remember?"))
			assert.Greater(t, two, one, "turn two does not carry turn one")
			got, err := r.proc.Client.Session(ctx, s.SessionID)
			require.NoError(t, err)
			assert.True(t, got.Warm, "the second turn ran on the session's warm agent")
			require.NotEmpty(t, got.AgentSessionID)

			// Both write a turn into their history as they answer; a second
			// lets the write land before the kill.
			time.Sleep(time.Second)
			require.NoError(t, r.proc.Cmd.Process.Signal(syscall.SIGKILL))
			r.proc.Wait(t, 10*time.Second)
			require.Eventually(t, func() bool { return len(marked(r.marker)) == 0 }, 10*time.Second, 50*time.Millisecond,
				"the warm agent died with the daemon")
			r.opts.Home = r.proc.Home
			r.proc = daemontest.Serve(t, card(t), r.opts)
			evs = &sessionEvents{}
			_, err = r.proc.Client.SubscribeSession(ctx, api.SessionSubscribeParams{SessionID: s.SessionID, AfterSeq: got.NextSeq - 1}, evs.add)
			require.NoError(t, err)
			three := userMessages(t, r.turn(t, evs, s.SessionID, "And once more: which word?"))
			assert.Greater(t, three, two, "turn three, after the SIGKILL, does not carry the turns before it")
			calls := r.server.ModelCalls()
			assert.Contains(t, string(calls[len(calls)-1].Body), "avocado")
			t.Logf("%s: user messages per turn %d, %d, %d; CLI session %s", c.id, one, two, three, got.AgentSessionID)
		})
	}
}

// lateWrite is a command that writes late.txt in its cwd after delay and
// carries marker on its command line. One node process, not `sleep N &&
// …`: Qwen Code refuses a command that starts with a sleep.
func lateWrite(marker string, delay time.Duration) string {
	return fmt.Sprintf(`node -e "setTimeout(()=>require('fs').writeFileSync('late.txt','late'),%d) /*%s*/"`, delay.Milliseconds(), marker)
}

// Cancelling a run whose agent is running a shell command ends the agent
// and the command: no process of the run is left, and the command's late
// write never happens. (OpenCode starts its commands in a session of
// their own, out of the agent's process group.)
func TestCancelEndsTheAgentAndTheCommandItRuns(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			cmdMarker := newMarker(t)
			t.Cleanup(func() { killMarked(cmdMarker) })
			r := serve(t, c, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.shell(lateWrite(cmdMarker, 8*time.Second))}},
				client.Options{}, map[string]any{"allow_bypass": true})
			acc, err := r.proc.Client.Stream(ctxFor(t, 4*time.Minute), api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: c.id, Cwd: r.project, PermissionMode: "bypass", TimeoutSecs: 180}, Task: "run it"}, nil)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(marked(cmdMarker)) > 0 }, 3*time.Minute, 100*time.Millisecond,
				"the model's command never started")
			require.NotEmpty(t, marked(r.marker))
			_, err = r.proc.Client.Cancel(ctxFor(t, time.Minute), acc.RunID)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(marked(r.marker)) == 0 && len(marked(cmdMarker)) == 0 }, 15*time.Second, 50*time.Millisecond,
				"left running after cancel: agent %v, command %v", marked(r.marker), marked(cmdMarker))
			time.Sleep(9 * time.Second)
			assert.NoFileExists(t, filepath.Join(r.project, "late.txt"), "the cancelled command wrote later")
		})
	}
}

// In read_only a shell command the model asks for is not run, and the
// run still ends with an answer.
func TestReadOnlyRunsNoShellCommand(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			r := serve(t, c, standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.shell("echo planted > made-by-shell.txt")}}, client.Options{}, nil)
			res, err := r.proc.Client.Invoke(ctxFor(t, 4*time.Minute), api.InvokeParams{
				AgentSettings: api.AgentSettings{ID: c.id, Cwd: r.project, TimeoutSecs: 180}, Task: "run it"})
			require.NoError(t, err)
			t.Logf("%s: status %s, answer %q, error %+v", c.id, res.Status, res.Answer, res.Error)
			assert.NoFileExists(t, filepath.Join(r.project, "made-by-shell.txt"), "a read_only run ran a shell command")
			assert.GreaterOrEqual(t, len(r.server.ModelCalls()), 1)
		})
	}
}

// askToWrite runs c in ask mode on a model that writes asked.txt in the
// project, the client answering every question with decision; it gives
// the file's path and the questions asked, in order.
func askToWrite(t *testing.T, c cli, decision string) (string, []api.ApproveParams) {
	t.Helper()
	var mu sync.Mutex
	var qs []api.ApproveParams
	answer := func(_ context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
		mu.Lock()
		qs = append(qs, q)
		mu.Unlock()
		return api.ApproveAnswer{Decision: decision}, nil
	}
	placeholder := filepath.Join(t.TempDir(), "x") // replaced below, once the rig's project exists
	script := standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.write(placeholder)}}
	r := serve(t, c, script, client.Options{OnApprove: answer}, nil)
	target := filepath.Join(r.project, "asked.txt")
	r.server.SetScript(standin.Script{Answer: "DONE", ToolCalls: []standin.ToolCall{c.write(target)}})
	res, err := r.proc.Client.Invoke(ctxFor(t, 4*time.Minute), api.InvokeParams{
		AgentSettings: api.AgentSettings{ID: c.id, Cwd: r.project, PermissionMode: "ask", TimeoutSecs: 180}, Task: "write it"})
	require.NoError(t, err)
	t.Logf("%s: status %s, answer %q, error %+v", c.id, res.Status, res.Answer, res.Error)
	mu.Lock()
	defer mu.Unlock()
	for i, q := range qs {
		t.Logf("%s: question %d: %s %s", c.id, i+1, q.Tool.Name, q.Summary)
	}
	return target, slices.Clone(qs)
}

// In ask mode the agent's question about a write reaches card's client as
// agents.approve, and the client's denial holds: no file.
func TestAskModesQuestionReachesTheClientAndADenialHolds(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			target, qs := askToWrite(t, c, api.DecisionDeny)
			require.NotEmpty(t, qs, "no question reached the client")
			assert.Contains(t, qs[0].Summary+string(qs[0].Tool.Input), "asked.txt", "the question names the file: %+v", qs[0])
			assert.NoFileExists(t, target, "a denied write happened")
		})
	}
}

// An edit the client allows in ask mode is asked once: Qwen Code asks and
// then writes through card's fs/write_text_file, which card takes as the
// edit already answered (it was two questions before); OpenCode asks and
// writes the file itself.
func TestAskModesAllowedEditIsWrittenAfterOneQuestion(t *testing.T) {
	for _, c := range clis {
		t.Run(c.id, func(t *testing.T) {
			t.Parallel()
			target, qs := askToWrite(t, c, api.DecisionAllow)
			assert.FileExists(t, target, "an allowed write did not happen")
			assert.Len(t, qs, 1, "one edit, one question")
		})
	}
}
