package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
)

// card serve --fake-agents, as an app's tests start it: the fake agents
// are detected and ready, a session remembers, an ask turn asks the app,
// and every process the daemon starts is card itself.
func TestServeWithFakeAgentsServesAgentsThatNeedNoAccountAndStartsNoOtherProgram(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the daemon's children from /proc")
	}
	bin := daemontest.Build(t)
	asked := make(chan api.ApproveParams, 4)
	p := daemontest.Serve(t, bin, daemontest.Options{
		Config:    "login_shell_path = false\n",
		Warm:      true,
		ServeArgs: []string{"--fake-agents"},
		Client: client.Options{OnApprove: func(_ context.Context, q api.ApproveParams) (api.ApproveAnswer, error) {
			asked <- q
			return api.ApproveAnswer{Decision: "allow"}, nil
		}},
	})
	ctx := daemontest.Context(t)

	specs, err := p.Client.Detect(ctx, api.DetectParams{})
	require.NoError(t, err)
	ids := map[string]api.ExternalAgentSpec{}
	for _, s := range specs {
		ids[s.ID] = s
	}
	// The built-in adapters are still there (none is installed here, so
	// detection lists none, but each is known).
	_, err = p.Client.Health(ctx, "claude-code", false)
	assert.NoError(t, err, "the fake agents hide none of the built-in ones")
	for _, id := range []string{"fake", "fake-2"} {
		require.Contains(t, ids, id)
		h, err := p.Client.Health(ctx, id, true)
		require.NoError(t, err)
		assert.Equal(t, api.StatusReady, h.Status, "%s: %s", id, h.Reason)
	}

	cwd := t.TempDir()
	s, err := p.Client.StartSession(ctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "fake", Cwd: cwd, PermissionMode: "ask"}, Warm: true})
	require.NoError(t, err)
	turn := func(task string) api.RunRecord {
		t.Helper()
		sp, err := p.Client.PromptSession(ctx, api.SessionPromptParams{SessionID: s.SessionID, Task: task})
		require.NoError(t, err)
		var r api.RunRecord
		require.Eventually(t, func() bool {
			r, err = p.Client.Run(ctx, sp.RunID)
			return err == nil && r.Status != api.StatusRunning
		}, 30*time.Second, 20*time.Millisecond)
		require.Equal(t, api.StatusSucceeded, r.Status, "%q: %+v", task, r.Error)
		require.Eventually(t, func() bool {
			g, err := p.Client.Session(ctx, s.SessionID)
			return err == nil && g.State == api.SessionIdle
		}, 10*time.Second, 10*time.Millisecond)
		return r
	}
	turn("Remember the word pelican.")
	assert.Contains(t, turn("Which word?").Answer, "remember: the word pelican", "the session remembers its first turn")

	r := turn("[ask] edit the file")
	require.Len(t, asked, 1, "the ask turn's question reached the app")
	q := <-asked
	assert.Equal(t, "fake", q.Adapter)
	assert.Contains(t, r.Answer, "Permission to edit fake-agent-edit.txt was allowed")
	assert.NoFileExists(t, filepath.Join(cwd, "fake-agent-edit.txt"))

	// The warm session's agent is running now: it and every other
	// process under the daemon is card.
	self, err := filepath.EvalSymlinks(bin)
	require.NoError(t, err)
	kids := descendants(t, p.Cmd.Process.Pid)
	require.NotEmpty(t, kids, "the warm session keeps its agent running")
	for _, pid := range kids {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err != nil {
			continue // it exited since
		}
		assert.Equal(t, self, exe, "process %d under the daemon is not card", pid)
	}
}

// descendants are the processes under pid, from /proc.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	children := map[int][]int{}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: state, ppid.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}
