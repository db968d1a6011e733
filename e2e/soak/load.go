package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/rpc/rpcclient"
)

// soakConfig raises the connection cap above the load phase's 200 clients;
// the default (128) is a deliberate limit and would refuse the rest with 503.
const soakConfig = "max_connections = 512\n"

// method is one request of the load mix.
type method struct {
	name string
	call func(ctx context.Context, c *client.Client) error
}

// loadMix is the request mix; runs.list joins when the daemon has it.
func loadMix(ctx context.Context, c *client.Client) (mix []method, note string) {
	mix = []method{
		{"daemon.info", func(ctx context.Context, c *client.Client) error { _, err := c.Info(ctx); return err }},
		{"agents.detect", func(ctx context.Context, c *client.Client) error {
			_, err := c.Detect(ctx, api.DetectParams{})
			return err
		}},
		{"agents.health_external", func(ctx context.Context, c *client.Client) error { _, err := c.HealthAll(ctx, false); return err }},
	}
	list := method{"runs.list", func(ctx context.Context, c *client.Client) error {
		_, err := c.Runs(ctx, api.ListParams{})
		return err
	}}
	if err := list.call(ctx, c); errors.Is(err, &rpcclient.Error{Code: rpcclient.CodeMethodNotFound}) {
		return mix, "runs.list is not registered in this build: left out of the mix"
	}
	return append(mix, list), ""
}

func phaseLoad(ctx context.Context, h *harness) *result {
	d, r := h.startPhase(ctx, daemonSetup{config: soakConfig})
	if d == nil {
		return r
	}
	defer d.stop(15 * time.Second)

	warm, err := d.dial(ctx)
	if err != nil {
		r.fail("dial", err)
		return r
	}
	mix, note := loadMix(ctx, warm)
	// Warm the detect and health caches once, so the load measures the
	// cached path that every call but the first takes, not the first probe.
	for _, m := range mix {
		_ = m.call(ctx, warm)
	}
	_ = warm.Close()
	before := snap(d.pid())

	conns, reqs := h.opts.conns, h.opts.reqs
	var (
		errs     atomic.Int64
		dialErrs atomic.Int64
		firstErr atomic.Value
		mu       sync.Mutex
		all      = make(latencies, 0, conns*reqs)
		perMeth  = map[string]latencies{}
	)
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := d.dial(ctx)
			if err != nil {
				dialErrs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			defer c.Close()
			<-ready
			local := make(latencies, 0, reqs)
			localM := map[string]latencies{}
			for j := 0; j < reqs && ctx.Err() == nil; j++ {
				m := mix[(i+j)%len(mix)]
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				t0 := time.Now()
				err := m.call(cctx, c)
				el := time.Since(t0)
				cancel()
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %v", m.name, err))
					continue
				}
				local = append(local, el)
				localM[m.name] = append(localM[m.name], el)
			}
			mu.Lock()
			all = append(all, local...)
			for k, v := range localM {
				perMeth[k] = append(perMeth[k], v...)
			}
			mu.Unlock()
		}(i)
	}
	// Every client connects first, so the 200 are truly concurrent.
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	close(ready)
	wg.Wait()
	elapsed := time.Since(start)
	after := snap(d.pid())

	total := int64(conns * reqs)
	r.add("connections", fmt.Sprintf("%d (dial errors %d)", conns, dialErrs.Load()), "all connect", dialErrs.Load() == 0)
	r.add("requests", fmt.Sprintf("%d sent, %d answered ok", total, len(all)), "", true)
	r.add("errors", fmt.Sprint(errs.Load()+dialErrs.Load()*int64(reqs)), "0", errs.Load() == 0 && dialErrs.Load() == 0)
	if v := firstErr.Load(); v != nil {
		r.info("first error", v.(string))
	}
	r.info("throughput", fmt.Sprintf("%.0f req/s over %s", float64(len(all))/elapsed.Seconds(), elapsed.Round(time.Millisecond)))
	r.info("latency p50 / p99 / max (all)", fmt.Sprintf("%s / %s / %s", ms(all.pct(0.5)), ms(all.pct(0.99)), ms(all.pct(1))))
	for _, m := range mix {
		l := perMeth[m.name]
		r.info("  "+m.name+" p50 / p99", fmt.Sprintf("%s / %s (n=%d)", ms(l.pct(0.5)), ms(l.pct(0.99)), len(l)))
	}
	r.info("daemon RSS before / after", fmt.Sprintf("%s / %s", mib(before.rssKB), mib(after.rssKB)))
	r.info("daemon peak RSS (VmHWM)", mib(after.hwmKB))
	r.info("daemon threads / fds after", fmt.Sprintf("%d / %d", after.threads, after.fds))
	if note != "" {
		r.info("note", note)
	}
	return r
}

func phaseChurn(ctx context.Context, h *harness) *result {
	d, r := h.startPhase(ctx, daemonSetup{config: soakConfig})
	if d == nil {
		return r
	}
	defer d.stop(15 * time.Second)

	cycle := func() error {
		c, err := d.dial(ctx)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = c.Info(cctx)
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		return err
	}
	// Warm up, so first-use allocations are not counted as growth.
	for i := 0; i < 200; i++ {
		_ = cycle()
	}
	time.Sleep(time.Second)
	before := snap(d.pid())

	const workers = 8
	var errs atomic.Int64
	var firstErr atomic.Value
	var next atomic.Int64
	n := int64(h.opts.churn)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n && ctx.Err() == nil {
				if err := cycle(); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// Give the daemon a moment to finish closing the last sockets.
	time.Sleep(2 * time.Second)
	after := snap(d.pid())

	r.add("cycles (dial, daemon.info, close)", fmt.Sprintf("%d in %s (%.0f/s, %d workers)", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), workers), "", true)
	r.add("errors", fmt.Sprint(errs.Load()), "0", errs.Load() == 0)
	if v := firstErr.Load(); v != nil {
		r.info("first error", v.(string))
	}
	r.add("open fds before / after", fmt.Sprintf("%d / %d", before.fds, after.fds), "no growth (±4)", after.fds <= before.fds+4)
	r.add("threads before / after", fmt.Sprintf("%d / %d", before.threads, after.threads), "no growth (±4)", after.threads <= before.threads+4)
	r.info("RSS before / after / peak", fmt.Sprintf("%s / %s / %s", mib(before.rssKB), mib(after.rssKB), mib(after.hwmKB)))
	r.info("goroutines", "not exposed by the daemon; fds and threads (/proc) stand in — goleak over 1,000 cycles is in the daemon's own tests")
	return r
}
