package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/detect"
)

// phaseStartup: how soon a started daemon is ready and answers, against
// starting the same binary for `card version` (the floor: exec and the Go
// runtime), and its memory once idle. The goal is on private memory
// (RssAnon: the heap, stacks and what the runtime holds; Private_Dirty
// adds the written pages of file mappings), which is what the daemon costs
// the machine. RSS is reported beside it but has no goal: most of it is
// clean pages of the binary and libc, shared and dropped by the kernel
// under pressure, and a goal on it rewards tricks that only move that
// counter.
func phaseStartup(ctx context.Context, h *harness) *result {
	r := &result{}
	const rounds = 5
	const idleAfter = 10 * time.Second
	var floor, ready, answered []time.Duration
	var idle, anon, dirty []int64
	for i := 0; i < rounds; i++ {
		t0 := time.Now()
		cmd := exec.Command(h.bin, "version")
		if err := cmd.Run(); err != nil {
			r.fail("card version", err)
			return r
		}
		floor = append(floor, time.Since(t0))

		d, err := h.start(ctx, daemonSetup{})
		if err != nil {
			r.fail("start", err)
			return r
		}
		ready = append(ready, d.ready.Sub(d.started))
		c, err := d.dial(ctx)
		if err == nil {
			_, err = c.Info(ctx)
			c.Close()
		}
		if err != nil {
			d.kill()
			r.fail("daemon.info", err)
			return r
		}
		answered = append(answered, time.Since(d.started))
		select {
		case <-time.After(time.Until(d.started.Add(idleAfter))):
		case <-ctx.Done():
		}
		idle = append(idle, procStatus(d.pid(), "VmRSS"))
		anon = append(anon, procStatus(d.pid(), "RssAnon"))
		dirty = append(dirty, privateDirty(d.pid()))
		if _, err := d.stop(10 * time.Second); err != nil {
			r.fail("stop", err)
			return r
		}
	}
	r.info("rounds", fmt.Sprint(rounds))
	r.info("baseline: `card version` start to exit (median)", ms(median(floor))+" (all "+msList(floor)+")")
	mr := median(ready)
	r.add("start to daemon.json written (median)", ms(mr)+" (all "+msList(ready)+")", "<= 100 ms", mr <= 100*time.Millisecond)
	r.info("start to first daemon.info answered (median)", ms(median(answered))+" (all "+msList(answered)+")")
	r.info("ready / baseline", fmt.Sprintf("%.2fx", float64(mr)/float64(median(floor))))
	ma := medianKB(anon)
	r.add(fmt.Sprintf("private memory (RssAnon) %v after start, idle (median)", idleAfter), mib(ma)+" (all "+mibList(anon)+")", "<= 8 MiB", ma <= 8*1024)
	r.info(fmt.Sprintf("Private_Dirty %v after start, idle (median)", idleAfter), mib(medianKB(dirty))+" (all "+mibList(dirty)+")")
	r.info(fmt.Sprintf("RSS %v after start, idle (median; mostly shared file pages, no goal)", idleAfter), mib(medianKB(idle))+" (all "+mibList(idle)+")")
	return r
}

// phaseBurst: resident memory before, at the peak of, and after a burst of
// 16 frames of 3 MiB, one per connection, sent at once. Each is an
// agents.invoke whose params the daemon decodes in full before refusing it
// (the adapter does not exist), so the whole read and decode path carries
// the 3 MiB.
func phaseBurst(ctx context.Context, h *harness) *result {
	r := &result{}
	const frames, size = 16, 3 << 20
	const settle, after = 10 * time.Second, 30 * time.Second
	d, err := h.start(ctx, daemonSetup{})
	if err != nil {
		r.fail("start", err)
		return r
	}
	defer d.stop(10 * time.Second)
	time.Sleep(time.Until(d.started.Add(settle)))
	idle := procStatus(d.pid(), "VmRSS")

	frame := []byte(`{"jsonrpc":"2.0","id":1,"method":"agents.invoke","params":{"id":"no-such-agent","task":"` +
		strings.Repeat("x", size-100) + `"}}`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var firstErr error
	start := time.Now()
	for i := 0; i < frames; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rawDial(ctx, d)
			if err == nil {
				defer c.Close(websocket.StatusNormalClosure, "")
				var m map[string]any
				m, err = ask(ctx, c, websocket.MessageText, frame)
				mu.Lock()
				codes[errCode(m)]++
				mu.Unlock()
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		r.fail("burst", firstErr)
		return r
	}
	end := time.Now()
	peak := procStatus(d.pid(), "VmHWM")
	var samples []string
	var last int64
	for _, at := range []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, after} {
		time.Sleep(time.Until(end.Add(at)))
		last = procStatus(d.pid(), "VmRSS")
		samples = append(samples, fmt.Sprintf("%v: %s", at, mib(last)))
	}
	r.info("burst", fmt.Sprintf("%d frames of %d MiB, one per connection, at once; answered in %s with codes %v", frames, size>>20, ms(took), codes))
	r.info("RSS idle before (baseline)", mib(idle))
	r.info("peak RSS (VmHWM)", mib(peak))
	r.info("RSS after the burst", strings.Join(samples, ", "))
	r.add(fmt.Sprintf("RSS %v after / idle", after), fmt.Sprintf("%.2fx (%s / %s)", float64(last)/float64(idle), mib(last), mib(idle)), "<= 2x", last <= 2*idle)
	return r
}

// phaseRestart: a restarted daemon's first agents.detect with the real
// CLIs installed, against the slowest single `--version` and against the
// first start's, side by side. It needs e2e/agents/node_modules (npm ci in
// e2e/agents) and node.
func phaseRestart(ctx context.Context, h *harness) *result {
	r := &result{}
	binDir := filepath.Join(moduleRoot(), "e2e", "agents", "node_modules", ".bin")
	node, err := exec.LookPath("node")
	if err != nil {
		return r.skip("node is not on PATH")
	}
	var bins []string
	for _, b := range []string{"claude", "codex", "gemini", "copilot", "droid", "pi", "opencode", "qwen"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return r.skip("the real agent CLIs are not installed in " + binDir + " (npm ci in e2e/agents)")
		}
		bins = append(bins, b)
	}
	userHome := filepath.Join(h.tmp, "restart-user")
	if err := os.MkdirAll(userHome, 0o700); err != nil {
		r.fail("home", err)
		return r
	}
	pathValue := strings.Join([]string{binDir, filepath.Dir(node), "/usr/local/bin", "/usr/bin", "/bin"}, ":")
	env := []string{"PATH=" + pathValue, "HOME=" + userHome}

	// The baseline: each CLI's --version alone, one after another.
	printed := map[string]string{}
	var slowest time.Duration
	var slowestName string
	for _, b := range bins {
		cmd := exec.Command(filepath.Join(binDir, b), "--version")
		cmd.Env, cmd.Dir = env, userHome
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		el := time.Since(t0)
		if err != nil {
			r.fail(b+" --version", err)
			return r
		}
		printed[b] = detect.ParseVersion(string(out))
		if el > slowest {
			slowest, slowestName = el, b
		}
	}
	r.info("baseline: slowest single --version", ms(slowest)+" ("+slowestName+")")

	detectAll := func(d *liveDaemon) (time.Duration, map[string]string, error) {
		c, err := d.dial(ctx)
		if err != nil {
			return 0, nil, err
		}
		defer c.Close()
		specs, err := c.Detect(ctx, api.DetectParams{})
		if err != nil {
			return 0, nil, err
		}
		el := time.Since(d.started)
		got := map[string]string{}
		for _, s := range specs {
			got[filepath.Base(s.BinaryPath)] = s.Version
		}
		return el, got, nil
	}

	d, err := h.start(ctx, daemonSetup{env: env})
	if err != nil {
		r.fail("first start", err)
		return r
	}
	home := d.home
	el, got, err := detectAll(d)
	if err != nil {
		d.kill()
		r.fail("first agents.detect", err)
		return r
	}
	r.info("first start: start to agents.detect answered", fmt.Sprintf("%s (%.3fx the slowest --version), versions %s", ms(el), float64(el)/float64(slowest), versionsMatch(got, printed)))
	// The background confirmation runs every CLI and leaves the cache.
	cacheFile := filepath.Join(home, "detection.json")
	waitStart := time.Now()
	for cachedEntries(cacheFile) < len(bins) && time.Since(waitStart) < 2*time.Minute {
		time.Sleep(200 * time.Millisecond)
	}
	r.info("first start: CLIs confirmed by a probe and cached", fmt.Sprintf("%d of %d after %s (a probe past the 5 s deadline on a busy machine leaves its CLI uncached; a restart then reads it from its package)", cachedEntries(cacheFile), len(bins), ms(time.Since(d.started))))
	if _, err := d.stop(10 * time.Second); err != nil {
		r.fail("stop", err)
		return r
	}

	const rounds = 5
	var fromStart, fromReady []time.Duration
	match := ""
	for i := 0; i < rounds; i++ {
		d, err := h.start(ctx, daemonSetup{home: home, env: env})
		if err != nil {
			r.fail("restart", err)
			return r
		}
		el, got, err := detectAll(d)
		if err != nil {
			d.kill()
			r.fail("agents.detect after a restart", err)
			return r
		}
		fromStart = append(fromStart, el)
		fromReady = append(fromReady, el-d.ready.Sub(d.started))
		match = versionsMatch(got, printed)
		if _, err := d.stop(10 * time.Second); err != nil {
			r.fail("stop", err)
			return r
		}
	}
	m := median(fromStart)
	r.add("restart: start to agents.detect answered (median)", ms(m)+" (all "+msList(fromStart)+")", "<= 100 ms", m <= 100*time.Millisecond)
	r.info("restart: of which after daemon.json (median)", ms(median(fromReady)))
	r.info("restart / slowest --version", fmt.Sprintf("%.3fx", float64(m)/float64(slowest)))
	goal := fmt.Sprintf("all %d", len(bins))
	r.add("restart: every version equals --version", match, goal, match == goal+" equal")
	return r
}

func versionsMatch(got, printed map[string]string) string {
	var bad []string
	for b, v := range printed {
		if got[b] != v {
			bad = append(bad, fmt.Sprintf("%s %q != %q", b, got[b], v))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return strings.Join(bad, "; ")
	}
	return fmt.Sprintf("all %d equal", len(printed))
}

func cachedEntries(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var f struct {
		Entries []json.RawMessage `json:"entries"`
	}
	_ = json.Unmarshal(b, &f)
	return len(f.Entries)
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func medianKB(v []int64) int64 {
	s := append([]int64(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func msList(d []time.Duration) string {
	var parts []string
	for _, x := range d {
		parts = append(parts, fmt.Sprintf("%.1f", float64(x.Microseconds())/1000))
	}
	return strings.Join(parts, ", ") + " ms"
}

func mibList(v []int64) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmt.Sprintf("%.1f", float64(x)/1024))
	}
	return strings.Join(parts, ", ") + " MiB"
}
