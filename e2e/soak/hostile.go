package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/card-dev/card/rpc"
)

// control keeps asking daemon.info on its own connection while the attacks
// run: the question this phase answers is whether other clients are still
// served, and how fast.
type control struct {
	mu   sync.Mutex
	lat  latencies
	errs int
	stop chan struct{}
	done chan struct{}
}

func startControl(ctx context.Context, d *liveDaemon) (*control, error) {
	c, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	ctl := &control{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(ctl.done)
		defer c.Close()
		for {
			select {
			case <-ctl.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			t0 := time.Now()
			_, err := c.Info(cctx)
			el := time.Since(t0)
			cancel()
			ctl.mu.Lock()
			if err != nil {
				ctl.errs++
			} else {
				ctl.lat = append(ctl.lat, el)
			}
			ctl.mu.Unlock()
		}
	}()
	return ctl, nil
}

// window returns the control's figures since the last call and resets them.
func (c *control) window() (latencies, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, e := c.lat, c.errs
	c.lat, c.errs = nil, 0
	return l, e
}

func (c *control) close() { close(c.stop); <-c.done }

func rawDial(ctx context.Context, d *liveDaemon) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, d.url, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + d.token}},
	})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(64 << 20)
	return c, nil
}

// ask writes one frame and reads one answer.
func ask(ctx context.Context, c *websocket.Conn, typ websocket.MessageType, frame []byte) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := c.Write(ctx, typ, frame); err != nil {
		return nil, err
	}
	_, b, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("answer %q is not a JSON object: %v", b, err)
	}
	return m, nil
}

func errCode(m map[string]any) int {
	e, _ := m["error"].(map[string]any)
	if e == nil {
		return 0
	}
	f, _ := e["code"].(float64)
	return int(f)
}

func phaseHostile(ctx context.Context, h *harness) *result {
	d, r := h.startPhase(ctx, daemonSetup{config: soakConfig})
	if d == nil {
		return r
	}
	defer d.stop(15 * time.Second)
	ctl, err := startControl(ctx, d)
	if err != nil {
		r.fail("control client", err)
		return r
	}
	defer ctl.close()
	time.Sleep(500 * time.Millisecond)
	base, _ := ctl.window()
	r.info("control p50 / p99 before any attack", fmt.Sprintf("%s / %s (n=%d)", ms(base.pct(0.5)), ms(base.pct(0.99)), len(base)))

	report := func(name string, attack func() (string, bool)) {
		ctl.window()
		t0 := time.Now()
		value, ok := attack()
		el := time.Since(t0)
		lat, cerrs := ctl.window()
		r.add(name, value+fmt.Sprintf(" [%s]", el.Round(time.Millisecond)), "refused cleanly", ok)
		r.add("  control during it: p50 / p99 / errors", fmt.Sprintf("%s / %s / %d (n=%d)", ms(lat.pct(0.5)), ms(lat.pct(0.99)), cerrs, len(lat)), "answered, 0 errors", cerrs == 0 && len(lat) > 0)
	}

	report("oversize frames (20 × 5 MiB, limit 4 MiB)", func() (string, bool) {
		big := []byte(`{"jsonrpc":"2.0","id":1,"method":"daemon.info","params":{"x":"` + strings.Repeat("a", 5<<20) + `"}}`)
		var closed1009, other atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := rawDial(ctx, d)
				if err != nil {
					other.Add(1)
					return
				}
				defer c.CloseNow()
				_, err = ask(ctx, c, websocket.MessageText, big)
				if websocket.CloseStatus(err) == websocket.StatusMessageTooBig {
					closed1009.Add(1)
				} else {
					other.Add(1)
				}
			}()
		}
		wg.Wait()
		return fmt.Sprintf("%d closed with 1009, %d otherwise", closed1009.Load(), other.Load()), closed1009.Load() == 20
	})

	report("deep JSON nesting (100,000 levels, bare and inside params)", func() (string, bool) {
		c, err := rawDial(ctx, d)
		if err != nil {
			return err.Error(), false
		}
		defer c.CloseNow()
		depth := 100000
		bare := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		inParams := []byte(`{"jsonrpc":"2.0","id":7,"method":"daemon.info","params":{"x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`)
		a1, err1 := ask(ctx, c, websocket.MessageText, bare)
		a2, err2 := ask(ctx, c, websocket.MessageText, inParams)
		a3, err3 := ask(ctx, c, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":8,"method":"daemon.info"}`))
		ok := err1 == nil && err2 == nil && err3 == nil && errCode(a1) != 0 && errCode(a2) != 0 && errCode(a3) == 0
		return fmt.Sprintf("answers %d, %d; same socket then answers daemon.info: %v (errs %v %v %v)", errCode(a1), errCode(a2), err3 == nil && errCode(a3) == 0, err1, err2, err3), ok
	})

	// answeredWith sends frame 500 times on one socket and counts the
	// answers with code: each must be refused, and the socket kept.
	answeredWith := func(typ websocket.MessageType, frame string, code int) (string, bool) {
		c, err := rawDial(ctx, d)
		if err != nil {
			return err.Error(), false
		}
		defer c.CloseNow()
		n := 0
		for i := 0; i < 500; i++ {
			a, err := ask(ctx, c, typ, []byte(frame))
			if err == nil && errCode(a) == code {
				n++
			}
		}
		return fmt.Sprintf("%d/500 answered %d, socket kept", n, code), n == 500
	}
	report("invalid UTF-8 (500 frames)", func() (string, bool) {
		return answeredWith(websocket.MessageText, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.info\",\"params\":{\"x\":\"\xff\xfe\"}}", -32700)
	})
	report("binary frames (500)", func() (string, bool) {
		return answeredWith(websocket.MessageBinary, `{"jsonrpc":"2.0","id":1,"method":"daemon.info"}`, -32600)
	})

	report("slow-loris upgrades (200 sockets dribbling headers)", func() (string, bool) {
		host := strings.TrimSuffix(strings.TrimPrefix(d.url, "ws://"), "/rpc")
		var closedBy atomic.Int64 // milliseconds of the slowest close
		var closed, stillOpen atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := net.DialTimeout("tcp", host, 5*time.Second)
				if err != nil {
					return
				}
				defer conn.Close()
				t0 := time.Now()
				_, _ = fmt.Fprintf(conn, "GET /rpc HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n", host)
				rd := bufio.NewReader(conn)
				deadline := t0.Add(20 * time.Second)
				for time.Now().Before(deadline) {
					// One header byte a second, never finishing the request.
					if _, err := conn.Write([]byte("X")); err != nil {
						break
					}
					_ = conn.SetReadDeadline(time.Now().Add(time.Second))
					if _, err := rd.ReadByte(); err != nil {
						if ne, ok := err.(net.Error); ok && ne.Timeout() {
							continue
						}
						break
					}
				}
				el := time.Since(t0)
				if time.Now().Before(deadline) {
					closed.Add(1)
					for {
						cur := closedBy.Load()
						if el.Milliseconds() <= cur || closedBy.CompareAndSwap(cur, el.Milliseconds()) {
							break
						}
					}
				} else {
					stillOpen.Add(1)
				}
			}()
		}
		wg.Wait()
		return fmt.Sprintf("%d closed by the daemon (slowest after %d ms), %d still open at 20 s", closed.Load(), closedBy.Load(), stillOpen.Load()), stillOpen.Load() == 0
	})

	report(fmt.Sprintf("%d requests pipelined on one socket", h.opts.pipelined), func() (string, bool) {
		c, err := rawDial(ctx, d)
		if err != nil {
			return err.Error(), false
		}
		defer c.CloseNow()
		n := h.opts.pipelined
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		writeErr := make(chan error, 1)
		go func() {
			for i := 1; i <= n; i++ {
				if err := c.Write(pctx, websocket.MessageText, []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"daemon.info"}`, i))); err != nil {
					writeErr <- err
					return
				}
			}
			writeErr <- nil
		}()
		var ok, busy, other int
		seen := make(map[int]bool, n)
		for ok+busy+other < n {
			_, b, err := c.Read(pctx)
			if err != nil {
				break
			}
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				other++
				continue
			}
			id, _ := m["id"].(float64)
			seen[int(id)] = true
			switch errCode(m) {
			case 0:
				ok++
			case -32001:
				busy++
			default:
				other++
			}
		}
		werr := <-writeErr
		return fmt.Sprintf("%d answered: %d results, %d too_many_requests (-32001), %d other, %d unanswered; write err %v", len(seen), ok, busy, other, n-len(seen), werr),
			len(seen) == n && other == 0 && werr == nil
	})

	report("1,000 upgrades with a wrong token (8 at a time)", func() (string, bool) {
		var got401, other atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for i := 0; i < 1000; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				c, resp, err := websocket.Dial(dctx, d.url, &websocket.DialOptions{
					HTTPHeader: http.Header{"Authorization": {fmt.Sprintf("Bearer wrong-%064d", i)}},
				})
				if c != nil {
					c.CloseNow()
				}
				if err != nil && resp != nil && resp.StatusCode == http.StatusUnauthorized {
					got401.Add(1)
				} else {
					other.Add(1)
				}
			}(i)
		}
		wg.Wait()
		// Give the log writer a moment. Refusals are logged at a bounded
		// rate: the first few of a reason in a minute, then a count.
		time.Sleep(200 * time.Millisecond)
		logged := countLog(d.log, `"refused websocket upgrade"`)
		return fmt.Sprintf("%d answered 401, %d otherwise; %d refusal log lines", got401.Load(), other.Load(), logged),
			got401.Load() == 1000 && logged >= 1 && logged <= rpc.DefaultRefusalLogBurst
	})

	const floodFor = 10 * time.Second
	var flooded int64
	report(fmt.Sprintf("flood of refused upgrades for %s (64 workers; 1 KiB Host or Origin)", floodFor), func() (string, bool) {
		lines0, bytes0 := logSize(d.log)
		n, byStatus, err := floodRefusals(ctx, d, floodFor, 64)
		time.Sleep(200 * time.Millisecond)
		lines, bytes := logSize(d.log)
		flooded = n
		return fmt.Sprintf("%d refused (%.0f/s; %v), errors %v; the log grew %d lines, %s", n, float64(n)/floodFor.Seconds(), byStatus, err,
				lines-lines0, kib(bytes-bytes0)),
			err == nil && n > 0 && lines-lines0 <= 3*rpc.DefaultRefusalLogBurst && bytes-bytes0 < 64<<10
	})

	accessAttacks(ctx, h, r)

	if b, err := os.ReadFile(d.log); err == nil && bytes.Contains(b, []byte(d.token)) {
		r.add("daemon log holds the token", "YES", "never", false)
	}
	s := snap(d.pid())
	r.info("daemon RSS / peak after the attacks", fmt.Sprintf("%s / %s", mib(s.rssKB), mib(s.hwmKB)))

	// The count of what was not logged one by one is written when its
	// minute ends or at shutdown: stop the daemon and read it.
	if _, err := d.stop(15 * time.Second); err != nil {
		r.fail("stop the daemon", err)
		return r
	}
	suppressed := sumSuppressed(d.log)
	lines, size := logSize(d.log)
	r.add("refusals counted in summary lines, after the stop", fmt.Sprintf("%d (the whole log: %d lines, %s)", suppressed, lines, kib(size)),
		"≥ the flood's refusals", suppressed >= flooded)
	return r
}

// floodRefusals sends upgrades the gate refuses, as fast as workers
// keep-alive connections allow, until d ends: a third with a 1 KiB Host
// (403), a third with a 1 KiB Origin (403), a third without a token (401).
// It returns how many were answered, by status.
func floodRefusals(ctx context.Context, d *liveDaemon, dur time.Duration, workers int) (int64, map[int]int64, error) {
	hostport := strings.TrimSuffix(strings.TrimPrefix(d.url, "ws://"), "/rpc")
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	long := strings.Repeat("a", 1024)
	var mu sync.Mutex
	byStatus := map[int]int64{}
	var total atomic.Int64
	var firstErr error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			local := map[int]int64{}
			for i := w; ctx.Err() == nil; i++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostport+"/rpc", nil)
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
				switch i % 3 {
				case 0:
					req.Host = long + ".example"
				case 1:
					req.Header.Set("Origin", "https://"+long+".example")
				}
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
					break
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				local[resp.StatusCode]++
				total.Add(1)
			}
			mu.Lock()
			for k, v := range local {
				byStatus[k] += v
			}
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	return total.Load(), byStatus, firstErr
}

// logSize is the lines and bytes of a log file.
func logSize(path string) (lines, size int64) {
	b, _ := os.ReadFile(path)
	return int64(bytes.Count(b, []byte("\n"))), int64(len(b))
}

// sumSuppressed adds up the "suppressed" counts of the daemon's summary
// lines.
func sumSuppressed(path string) int64 {
	b, _ := os.ReadFile(path)
	var n int64
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.Contains(line, []byte("refused websocket upgrades not logged one by one")) {
			continue
		}
		var rec struct {
			Suppressed int64 `json:"suppressed"`
		}
		if json.Unmarshal(line, &rec) == nil {
			n += rec.Suppressed
		}
	}
	return n
}
