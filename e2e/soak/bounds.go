package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	homedir "github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/rpc/rpcclient"
)

// What a holder of the token can make the daemon keep: the run history on
// disk and the memory of its subscriptions. Both must stay bounded however
// fast or however badly a client asks.

// dbBytes is the run history's size on disk: the database and its WAL.
func dbBytes(home string) int64 {
	var n int64
	for _, name := range []string{homedir.RunsDBName, homedir.RunsDBName + "-wal"} {
		if st, err := os.Stat(filepath.Join(home, name)); err == nil {
			n += st.Size()
		}
	}
	return n
}

// countRuns counts the recorded runs by paging through runs.list.
func countRuns(ctx context.Context, c *client.Client) (int, error) {
	n, before := 0, ""
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		page, err := c.Runs(cctx, api.ListParams{Limit: api.MaxListLimit, Before: before})
		cancel()
		if err != nil {
			return n, err
		}
		n += len(page)
		if len(page) < api.MaxListLimit {
			return n, nil
		}
		before = page[len(page)-1].RunID
	}
}

// floodRefused sends invokes with a task of taskBytes from clients
// connections for d. Every one names its own adapter as the caller, so the
// guard refuses it (a cycle) and it is recorded as a refused run: the
// cheapest record a client can make the daemon write.
func floodRefused(ctx context.Context, d *liveDaemon, clients, taskBytes int, dur time.Duration, cwd string) (refused, other int64, firstErr error) {
	task := strings.Repeat("t", taskBytes)
	var mu sync.Mutex
	var nRefused, nOther atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(dur)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := d.dial(ctx)
			if err != nil {
				nOther.Add(1)
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			defer c.Close()
			for time.Now().Before(end) && ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.Invoke(cctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, InvokedBy: agent.ClaudeCode, Cwd: cwd}, Task: task})
				cancel()
				var re *rpcclient.Error
				if errors.As(err, &re) && re.Code == daemon.CodeGuardRefused {
					nRefused.Add(1)
					continue
				}
				nOther.Add(1)
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return nRefused.Load(), nOther.Load(), firstErr
}

// storeBounds runs the flood of refused invokes against a daemon with the
// default retention, then against one keeping few runs.
func storeBounds(ctx context.Context, h *harness, r *result) {
	cwd := filepath.Join(h.tmp, "bounds-cwd")
	_ = os.MkdirAll(cwd, 0o755)
	for _, round := range []struct {
		name, config string
		maxRuns      int
	}{
		{"default retention", "", 0},
		{"max_runs = 200", "max_runs = 200\n", 200},
	} {
		d, err := h.start(ctx, daemonSetup{config: soakConfig + round.config})
		if err != nil {
			r.fail("start daemon ("+round.name+")", err)
			return
		}
		before := dbBytes(d.home)
		refused, other, ferr := floodRefused(ctx, d, 8, 100<<10, 10*time.Second, cwd)
		// Give the pruner its moment: it runs behind the writes.
		time.Sleep(2 * time.Second)
		grew := dbBytes(d.home) - before
		per := int64(0)
		if refused > 0 {
			per = grew / refused
		}
		r.add(fmt.Sprintf("refused invokes with 100 KB tasks, 8 clients for 10 s (%s)", round.name),
			fmt.Sprintf("%d refused, %d otherwise (%v); runs.db grew %s, %s per run", refused, other, ferr, mib(grew>>10), kib(per)),
			// A row with a 4 KiB task prefix takes two 4 KiB pages, and the
			// WAL holds copies of them: the point is that the size no longer
			// follows the task's (100 KB).
			"≤ 16 KiB per refused run", other == 0 && refused > 0 && per <= 16<<10)
		if round.maxRuns > 0 {
			c, err := d.dial(ctx)
			if err != nil {
				r.fail("dial", err)
			} else {
				n, err := countRuns(ctx, c)
				c.Close()
				r.add("  runs kept after the flood", fmt.Sprintf("%d (err %v)", n, err), fmt.Sprintf("≤ max_runs + one prune batch (%d)", round.maxRuns+round.maxRuns/10+50),
					err == nil && n <= round.maxRuns+round.maxRuns/10+50)
			}
		}
		d.stop(15 * time.Second)
	}
}

func kib(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/1024) }

// subscribeFlood subscribes n times to a live run on one socket that never
// reads its answers or events, while the daemon's RSS is sampled; then it
// checks that the run ended as it would have and that a reading client was
// served throughout.
func subscribeFlood(ctx context.Context, h *harness, r *result, n int) {
	env, err := fakeAgentSetup(h)
	if err != nil {
		r.fail("fake agent", err)
		return
	}
	d, err := h.start(ctx, daemonSetup{config: soakConfig, env: env})
	if err != nil {
		r.fail("start daemon", err)
		return
	}
	defer d.stop(15 * time.Second)
	cwd := filepath.Join(h.tmp, "subscribe-cwd")
	_ = os.MkdirAll(cwd, 0o755)
	c, err := d.dial(ctx)
	if err != nil {
		r.fail("dial", err)
		return
	}
	defer c.Close()
	// 3,000 events of 1 KB at once, then 12 s of quiet: the run is live
	// and its log full while the flood arrives.
	id, err := invoke(ctx, c, "events=3000 size=1000 sleep=12", 60, cwd)
	if err != nil {
		r.fail("invoke", err)
		return
	}
	time.Sleep(2 * time.Second)
	base := snap(d.pid())

	ws, err := rawDial(ctx, d)
	if err != nil {
		r.fail("raw dial", err)
		return
	}
	defer ws.CloseNow()
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if kb := procStatus(d.pid(), "VmRSS"); kb > peak.Load() {
				peak.Store(kb)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	sent := 0
	t0 := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	for i := 1; i <= n; i++ {
		frame, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": i, "method": "runs.subscribe", "params": map[string]any{"run_id": id}})
		if err := ws.Write(wctx, websocket.MessageText, frame); err != nil {
			break
		}
		sent++
	}
	cancel()
	sendTook := time.Since(t0)
	// Hold the unread socket while the run goes on, then let it go.
	time.Sleep(3 * time.Second)
	during := procStatus(d.pid(), "VmRSS")
	ws.CloseNow()
	close(stopSampling)
	<-sampled

	// A reading client's own subscription, and the run's outcome.
	var got atomic.Int64
	reader, err := client.Dial(ctx, client.Options{URL: d.url, Token: d.token, OnEvent: func(api.AgentEvent) { got.Add(1) }})
	if err != nil {
		r.fail("reader dial", err)
		return
	}
	defer reader.Close()
	run, err := waitTerminal(ctx, reader, id, 60*time.Second)
	r.add(fmt.Sprintf("%d runs.subscribe on one socket that never reads", n),
		fmt.Sprintf("%d sent in %s; RSS %s before, peak %s, %s 3 s after", sent, sendTook.Round(time.Millisecond), mib(base.rssKB), mib(peak.Load()), mib(during)),
		"peak ≤ 2 × before", peak.Load() <= 2*base.rssKB)
	r.add("  the run the flood subscribed to", fmt.Sprintf("%s (err %v)", run.Status, err), "succeeded", err == nil && run.Status == api.StatusSucceeded)
	time.Sleep(30 * time.Second)
	r.info("  daemon RSS 30 s later", mib(procStatus(d.pid(), "VmRSS")))
}

// accessAttacks is what a page on an allowed origin can do with the token:
// read and run agents, but never reach the host. Each attempt to run a
// command must be refused with access_denied and start nothing, while a
// native client on the same daemon still can.
func accessAttacks(ctx context.Context, h *harness, r *result) {
	const origin = "http://app.example"
	d, err := h.start(ctx, daemonSetup{config: soakConfig + fmt.Sprintf("allowed_origins = [%q]\n", origin)})
	if err != nil {
		r.fail("start daemon (allowed origin)", err)
		return
	}
	defer d.stop(15 * time.Second)
	page, err := client.Dial(ctx, client.Options{URL: d.url, Token: d.token, RPC: rpcclient.ClientOptions{Header: http.Header{"Origin": {origin}}}})
	if err != nil {
		r.fail("dial from the allowed origin", err)
		return
	}
	defer page.Close()
	marker := filepath.Join(h.tmp, "access-marker")
	denied, other := 0, 0
	calls := []func(context.Context) error{
		func(ctx context.Context) error {
			_, err := page.SubstrateRunCommand(ctx, "touch "+marker, 0)
			return err
		},
		func(ctx context.Context) error { _, err := page.SubstrateReadText(ctx, "/etc/passwd"); return err },
		func(ctx context.Context) error {
			_, err := page.SubstrateWriteText(ctx, api.WriteTextParams{Path: marker, Content: "x"})
			return err
		},
		func(ctx context.Context) error { _, err := page.SubstratePTYStart(ctx, "touch "+marker); return err },
	}
	for i := 0; i < 1000; i++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := calls[i%len(calls)](cctx)
		cancel()
		var re *rpcclient.Error
		if errors.As(err, &re) && re.Code == daemon.CodeAccessDenied {
			denied++
		} else {
			other++
		}
	}
	_, statErr := os.Stat(marker)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, infoErr := page.Info(cctx)
	cancel()
	r.add("1,000 host calls (run_command, read_text, write_text, pty_start) from an allowed browser origin",
		fmt.Sprintf("%d access_denied, %d otherwise; marker file created: %v; daemon.info from the page: %v", denied, other, statErr == nil, infoErr),
		"all refused, nothing run", denied == 1000 && os.IsNotExist(statErr) && infoErr == nil)
	native, err := d.dial(ctx)
	if err != nil {
		r.fail("native dial", err)
		return
	}
	defer native.Close()
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	out, err := native.SubstrateRunCommand(cctx, "echo native", 0)
	cancel()
	r.add("  a native client on the same daemon runs a command", fmt.Sprintf("%q (err %v)", out.Stdout, err), "runs", err == nil && out.Stdout == "native\n")
}
