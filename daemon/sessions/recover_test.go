package sessions

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/internal/proc"
)

// leftover starts a process group that stands in for a warm agent a dead
// daemon left, tagged with env, and returns its pid.
func leftover(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = proc.NewGroup()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func exited(cmd *exec.Cmd) bool {
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

func TestAStartAfterACrashEndsTheWarmAgentGroupItsSessionLeftAndOnlyThat(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the leftover's environment from /proc")
	}
	m := newWarmManager(t, &fakeWarmer{}, Config{})
	ctx := context.Background()
	params, _ := json.Marshal(api.SessionStartParams{AgentSettings: api.AgentSettings{ID: "claude-code"}})
	mine, other := m.st.NewSessionID(), m.st.NewSessionID()
	agent := leftover(t, SessionIDEnv+"="+mine)
	stranger := leftover(t, SessionIDEnv+"=ses_someone_else")
	for id, pgid := range map[string]int{mine: agent.Process.Pid, other: stranger.Process.Pid} {
		require.NoError(t, m.st.CreateSession(ctx, store.Session{ID: id, Adapter: "claude-code", Params: params, WarmPgid: pgid, State: "running"}))
	}
	require.NoError(t, m.Recover(ctx))
	assert.True(t, exited(agent), "the session's leftover warm agent still runs")
	assert.NoError(t, stranger.Process.Signal(syscall.Signal(0)), "a group whose pgid was recorded but which carries another session's tag was ended")
	row, err := m.st.GetSession(ctx, mine)
	require.NoError(t, err)
	assert.Zero(t, row.WarmPgid)
	assert.Equal(t, "idle", row.State)
}
