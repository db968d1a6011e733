package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/testskip"
	"github.com/card-dev/card/rpc/rpcclient"
)

// TestAttachmentsKeepTheDaemonsMemoryBounded measures `card serve` as a
// process: its resident memory idle, its peak (VmHWM) and what it keeps
// after 16 concurrent requests refused at max_concurrent_runs, each naming
// 10 path attachments of 20 MiB, then a mix of one accepted run with the
// same attachments (Claude Code: streamed onto its stdin; then Codex:
// linked into its private directory) and 15 refused alongside it. The goal
// is peak RSS at most twice idle plus one run's allowance (10 × 20 MiB).
// CARD_BENCH_BEFORE names an older card binary measured the same way, side
// by side.
//
//	CARD_BENCH=1 CARD_BENCH_BEFORE=/tmp/card-before go test -run TestAttachmentsKeepTheDaemonsMemoryBounded -v ./daemon/
func TestAttachmentsKeepTheDaemonsMemoryBounded(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Bench, "memory benchmark of attachments (figures go to docs/reliability.md)")
	}
	bins := []struct{ name, path string }{{"this tree", daemontest.Build(t)}}
	if b := os.Getenv("CARD_BENCH_BEFORE"); b != "" {
		bins = append([]struct{ name, path string }{{"before", b}}, bins...)
	}
	const count, size = 10, 20 << 20
	dir := t.TempDir()
	paths := make([]string, count)
	for i := range paths {
		paths[i] = filepath.Join(dir, fmt.Sprintf("shot-%d.png", i))
		b := make([]byte, size)
		copy(b, "\x89PNG\r\n\x1a\n")
		for j := 8; j < len(b); j += 4096 {
			b[j] = byte(i + j) // not all zeros, so nothing compresses it away
		}
		require.NoError(t, os.WriteFile(paths[i], b, 0o600))
	}
	atts := make([]api.Attachment, count)
	for i, p := range paths {
		atts[i] = api.Attachment{Path: p}
	}
	type figures struct{ idle, afterRefused, peak, after int64 }
	results := map[string]figures{}
	for _, bin := range bins {
		t.Run(bin.name, func(t *testing.T) {
			codex := daemontest.ReplayAgent(t, "codex", "codex-cli 0.171.0", daemontest.RepoFile(t, "spawn/testdata/codex-exec-json-success.jsonl"))
			fixture := daemontest.RepoFile(t, "spawn/testdata/claude-stream-success.jsonl")
			claude := daemontest.Script(t, "claude", fmt.Sprintf(`case "$1" in
--version) echo "2.1.197 (Claude Code)"; exit 0;;
auth|login) exit 1;;
esac
cat > /dev/null
cat %q`, fixture))
			p := daemontest.Serve(t, bin.path, daemontest.Options{
				Config: "login_shell_path = false\nmax_concurrent_runs = 2\nmax_inflight_per_connection = 64\n",
				Agents: map[string]string{"codex": codex.Path, "claude-code": claude},
			})
			pid := p.Cmd.Process.Pid
			ctx := daemontest.Context(t)
			cwd := t.TempDir()
			require.NoError(t, p.Client.Call(ctx, "agents.detect", nil, nil))
			time.Sleep(2 * time.Second)
			var f figures
			f.idle = procStatus(t, pid, "VmRSS")

			hold := func() string {
				acc, err := p.Client.Stream(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: "codex", Cwd: cwd, TimeoutSecs: 120}, Task: "SLEEP"}, nil)
				require.NoError(t, err)
				return acc.RunID
			}
			first, second := hold(), hold()
			refused := func(id string, n int) (refusedN, accepted int) {
				var mu sync.Mutex
				var wg sync.WaitGroup
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, err := p.Client.Invoke(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: id, Cwd: cwd, TimeoutSecs: 120}, Task: "look", Attachments: atts})
						mu.Lock()
						defer mu.Unlock()
						var re *rpcclient.Error
						switch {
						case err == nil:
							accepted++
						case errors.As(err, &re) && re.Code == daemon.CodeTooManyRuns:
							refusedN++
						default:
							t.Errorf("%s: %v", id, err)
						}
					}()
				}
				wg.Wait()
				return refusedN, accepted
			}
			r, a := refused("claude-code", 16)
			require.Equal(t, 16, r, "every one refused at the cap")
			require.Zero(t, a)
			f.afterRefused = procStatus(t, pid, "VmHWM")

			_, err := p.Client.Cancel(ctx, first)
			require.NoError(t, err)
			waitRunning(t, p.Client, 1)
			r, a = refused("claude-code", 16)
			require.Equal(t, 1, a, "one of them took the free slot")
			require.Equal(t, 15, r)
			r, a = refused("codex", 16)
			require.Equal(t, 1, a)
			require.Equal(t, 15, r)
			f.peak = procStatus(t, pid, "VmHWM")
			_, err = p.Client.Cancel(ctx, second)
			require.NoError(t, err)
			waitRunning(t, p.Client, 0)
			time.Sleep(5 * time.Second) // the runtime's scavenger hands idle pages back in the background
			f.after = procStatus(t, pid, "VmRSS")
			results[bin.name] = f
		})
	}
	mib := func(kb int64) string { return strconv.FormatFloat(float64(kb)/1024, 'f', 0, 64) + " MiB" }
	var b strings.Builder
	fmt.Fprintf(&b, "\n| card | idle RSS | peak after 16 refused | peak after the mix | RSS after |\n| --- | --- | --- | --- | --- |\n")
	for _, bin := range bins {
		f := results[bin.name]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", bin.name, mib(f.idle), mib(f.afterRefused), mib(f.peak), mib(f.after))
	}
	t.Log(b.String())
	f := results["this tree"]
	require.LessOrEqual(t, f.peak, 2*f.idle+count*size/1024, "peak RSS over 2 × idle + one run's allowance")
}

// procStatus is a field of /proc/<pid>/status in kB (VmRSS, VmHWM).
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// waitRunning waits until the daemon has n runs going.
func waitRunning(t *testing.T, c *client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := c.Runs(context.Background(), api.ListParams{Status: "running"})
		require.NoError(t, err)
		if len(list) == n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d runs still going, waiting for %d", len(list), n)
		time.Sleep(50 * time.Millisecond)
	}
}
