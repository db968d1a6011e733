package daemon_test

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/internal/testskip"
)

// TestInvokeOverheadAgainstRunningTheAgentDirectly measures, side by side in
// one run, a fake agent that replays a real stream and exits at once, run
// directly (fork/exec, prompt on stdin, stdout read to EOF) and through
// agents.invoke over the WebSocket (validation, detection cache, guard, run
// row, spawn, parser, events, outcome). It also runs a chatty agent (5000
// stream lines) both ways, to show that recording events off the stdout
// goroutine does not slow the agent. Goal: ≤ 1.10× or ≤ +5 ms at the median.
//
//	CARD_BENCH=1 go test -run TestInvokeOverheadAgainstRunningTheAgentDirectly -v ./daemon/
func TestInvokeOverheadAgainstRunningTheAgentDirectly(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Bench, "benchmark of invoke overhead (figures go to docs/performance.md)")
	}
	rd := startRunsDaemon(t, "")
	claude := rd.agents["claude-code"].Path
	fx := daemontest.RepoFile(t, "spawn/testdata/claude-stream-success.jsonl")
	chatty := filepath.Join(t.TempDir(), "chatty.jsonl")
	lines, err := os.ReadFile(fx)
	require.NoError(t, err)
	parts := strings.SplitN(string(lines), "\n", 3)
	var b strings.Builder
	b.WriteString(parts[0] + "\n")
	for i := 0; i < 5000; i++ {
		b.WriteString(parts[1] + "\n")
	}
	b.WriteString(parts[2])
	require.NoError(t, os.WriteFile(chatty, []byte(b.String()), 0o644))

	direct := func(task string) time.Duration {
		start := time.Now()
		cmd := exec.Command(claude)
		cmd.Dir = rd.cwd
		cmd.Stdin = strings.NewReader(task)
		_, err := cmd.Output()
		require.NoError(t, err)
		return time.Since(start)
	}
	st, err := store.Open(context.Background(), filepath.Join(rd.Home, home.RunsDBName), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	// stored waits until a run's terminal event is in the store: events are
	// stored after the answer, off the agent's path, and each measurement
	// starts with no backlog.
	stored := func(id string) time.Duration {
		start := time.Now()
		for {
			evs, err := st.Events(context.Background(), id, 0, store.MaxEventsLimit)
			require.NoError(t, err)
			if n := len(evs); n > 0 && evs[n-1].Kind == api.EventDone {
				return time.Since(start)
			}
			require.Less(t, time.Since(start), time.Minute)
			time.Sleep(5 * time.Millisecond)
		}
	}
	var lag []time.Duration
	viaInvoke := func(task string) time.Duration {
		start := time.Now()
		res := rd.finished(t, rd.params("claude-code", task))
		took := time.Since(start)
		require.Equal(t, api.StatusSucceeded, res.Status)
		lag = append(lag, stored(res.RunID))
		return took
	}
	// The fake replays chatty.jsonl when the task names it.
	script, err := os.ReadFile(claude)
	require.NoError(t, err)
	require.NoError(t, proc.WriteExecutable(claude, []byte(strings.Replace(string(script), "*FAIL*)", "*CHATTY*) cat '"+chatty+"'; exit 0;;\n*FAIL*)", 1))))

	const n = 40
	report := func(name, task string) {
		var d, v []time.Duration
		lag = nil
		for i := 0; i < 3; i++ { // warm caches
			direct(task)
			viaInvoke(task)
		}
		for i := 0; i < n; i++ {
			d = append(d, direct(task))
			v = append(v, viaInvoke(task))
		}
		md, mv := median(d), median(v)
		t.Logf("%-28s direct median %6.2f ms | agents.invoke median %6.2f ms | %.2fx, %+.2f ms | all events stored %6.1f ms after the answer (n=%d each, interleaved)",
			name, ms(md), ms(mv), float64(mv)/float64(md), ms(mv-md), ms(median(lag)), n)
	}
	report("replay, exits at once", "say pong")
	report("chatty, 5002 stream lines", "CHATTY")
}

func median[T cmp.Ordered](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
