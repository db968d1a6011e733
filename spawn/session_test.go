package spawn

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/internal/proc"
)

// fakeSilent is the "silent" script of every fake session agent: it starts
// a grandchild (its pid in grandchild.pid) and answers nothing, ever.
func fakeSilent() int {
	gc := exec.Command("sleep", "300")
	if gc.Start() == nil {
		_ = os.WriteFile("grandchild.pid", []byte(strconv.Itoa(gc.Process.Pid)), 0o600)
	}
	select {}
}

// sessionRun runs plan's fake session agent (the test binary, in the role
// its helperEnv names) through the real runner as an ask plan, and gives the
// run's result, its events in order and its working dir.
func sessionRun(t *testing.T, ctx context.Context, plan Plan, approver Approver, lim Limits) (Result, []Event, string, error) {
	t.Helper()
	plan.Program, plan.Dir = os.Args[0], t.TempDir()
	plan.Ask = &AskPlan{Channel: AskViaSession}
	var mu sync.Mutex
	var evs []Event
	res, err := Run(ctx, RunSpec{Plan: plan, Prompt: "Please create the file.", Approver: approver, Limits: lim,
		BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
		OnEvent: func(e Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() }})
	return res, evs, plan.Dir, err
}

// assertSilentAgentEndsAtTheDeadline runs the fake agent helper (whose
// script is "silent") as a session of sp, and checks that the run ends at
// its deadline as a timeout, with the agent's grandchild and group gone.
func assertSilentAgentEndsAtTheDeadline(t *testing.T, helper string, sp SessionPlan) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var pgid int
	work := t.TempDir()
	plan := Plan{Program: os.Args[0], Dir: work, Env: map[string]string{helperEnv: helper},
		Ask: &AskPlan{Channel: AskViaSession}, Session: &sp}
	start := time.Now()
	_, err := Run(ctx, RunSpec{Plan: plan, Prompt: "x", Approver: &recorder{}, BaseEnv: []string{"PATH=" + os.Getenv("PATH")},
		Limits: Limits{KillGrace: 300 * time.Millisecond}, OnStart: func(pid, g int) { pgid = g }})
	assert.Equal(t, KindTimeout, runErr(t, err).Kind)
	assert.Less(t, time.Since(start), 10*time.Second)
	b, rerr := os.ReadFile(filepath.Join(work, "grandchild.pid"))
	require.NoError(t, rerr)
	gc, _ := strconv.Atoi(string(b))
	assert.False(t, proc.Alive(gc), "grandchild %d outlived the run", gc)
	assert.False(t, proc.GroupAlive(pgid))
}

// assertCancelEndsTheWaitingQuestion cancels a run once its agent has
// asked, through run (which runs the fake agent's script that asks and
// writes made.txt if allowed, returning its working dir), and checks that
// the question ends with the run and the call does not run.
func assertCancelEndsTheWaitingQuestion(t *testing.T, run func(ctx context.Context, approver Approver) (string, error)) {
	t.Helper()
	approver, asked, ended := waitingApprover()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-asked
		cancel()
	}()
	work, err := run(ctx, approver)
	assert.Equal(t, KindCancelled, runErr(t, err).Kind)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the question outlived the run")
	}
	assert.NoFileExists(t, filepath.Join(work, "made.txt"))
}
