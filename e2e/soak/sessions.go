package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/store"
	homedir "github.com/card-dev/card/internal/home"
)

// The sessions phase: conversations under a queue, cancels, mode changes
// and a daemon that is stopped and killed under them. Several sessions run
// at once, each prompted by two connections that write bursts of prompts
// back to back; the daemon gets SIGTERM or SIGKILL, between turns or in
// the middle of them, and is started again on the same home each time.
// What must hold at the end is what a client builds on: every turn number
// has exactly one run, each connection's prompts took turns in the order
// it sent them and each turn ran its own prompt, nothing stays running
// after a restart, the daemon never died unasked, and its memory stayed
// bounded.

// sessionsConfig keeps fewer warm agents than there are sessions, so some
// turns run cold (every warm agent busy) and warm agents are ended for
// other sessions (least recently used) all the time.
const sessionsConfig = soakConfig + "\n[sessions]\nmax_warm = 3\n"

// The goals on the daemon's memory across the phase, every daemon sampled
// every 100 ms. Measured (docs/reliability.md): at most 13.7 MiB of
// private memory and 33.5 MiB of RSS, of which about 19 MiB are clean
// file pages of the binary and its libraries, shared and evictable. The goals leave room for the
// Go heap to double before a collection (GOGC=100) and for a larger
// binary, and still catch a daemon that holds on to turns, queued prompts
// or sessions: RssAnon at most about twice the peak, RSS half again.
const (
	sessionsMaxRSSKB  = 48 << 10
	sessionsMaxAnonKB = 24 << 10
)

// Durations of a turn, in tenths of a second, drawn for each prompt: half
// answer at once, the rest take up to three seconds.
var promptTenths = []int{0, 0, 0, 0, 0, 2, 5, 10, 15, 20, 30}

// signalKind is how one epoch of the daemon ends.
type signalKind struct {
	sig    syscall.Signal
	during bool // with turns running (else once every session is idle)
}

func (k signalKind) String() string {
	name := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}[k.sig]
	if k.during {
		return name + " during turns"
	}
	return name + " between turns"
}

var signalKinds = []signalKind{{syscall.SIGKILL, true}, {syscall.SIGTERM, true}, {syscall.SIGKILL, false}, {syscall.SIGTERM, false}}

// promptRec is one sessions.prompt a connection sent.
type promptRec struct {
	client   string // "A" or "B": the session's two connections
	seq      int    // the client's own count, in the order it sent
	text     string
	epoch    int
	sent     bool // its frame was written
	answered bool
	code     int64
	msg      string
	// turn is the turn its answer named, or the one whose run recorded
	// its text (byText: its answer never came, or was an error).
	turn   int
	byText bool
}

// cancelRec is one sessions.cancel.
type cancelRec struct {
	clear    bool
	epoch    int
	answered bool
	code     int64
	msg      string
	res      api.SessionCancelResult
}

// configRec is one sessions.configure (sent on connection A only, so its
// changes apply in the order they were sent).
type configRec struct {
	mode     string
	epoch    int
	answered bool
	code     int64
	msg      string
	res      api.SessionConfigureResult
}

// soakSession is one session and everything sent to it.
type soakSession struct {
	idx       int
	id        string
	cwd       string
	startMode string

	mu      sync.Mutex
	seq     map[string]int
	askMode string // the mode connection A last asked for
	prompts []*promptRec
	cancels []*cancelRec
	configs []*configRec
	// restarts are the session as each restarted daemon first showed it:
	// its turn count and mode.
	restarts []api.Session
}

// signalRec is one end of a daemon the soak caused.
type signalRec struct {
	kind            signalKind
	running, queued int
	exit            string
	ok              bool
	took            time.Duration
}

type sessionsSoak struct {
	h    *harness
	r    *result
	env  []string
	fake string
	seed uint64
	ses  []*soakSession

	peakRSS, peakAnon, peakHWM int64
	anonPeaks                  []int64 // each daemon's, in order
	daemons                    int
	signals                    []signalRec
	deaths                     []string
	runningAfterRestart        int
	crashReports               []string // wrong last_crash reports, described
	crashReportsSeen           map[api.CrashKind]int
	notIdleAfterRestart        []string
	leftAfterStop              int
	leftAfterRestart           int
	problems                   map[string][]string
}

func (s *sessionsSoak) problem(kind, detail string) {
	if s.problems == nil {
		s.problems = map[string][]string{}
	}
	s.problems[kind] = append(s.problems[kind], detail)
}

func phaseSessions(ctx context.Context, h *harness) *result {
	r := &result{}
	fake, env, err := sessionsFakeSetup(h)
	if err != nil {
		r.fail("fake agent", err)
		return r
	}
	seed := h.opts.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	s := &sessionsSoak{h: h, r: r, env: env, fake: fake, seed: seed, crashReportsSeen: map[api.CrashKind]int{}}
	s.run(ctx)
	return r
}

func (s *sessionsSoak) run(ctx context.Context) {
	r := s.r
	rng := rand.New(rand.NewPCG(s.seed, 38))
	d, err := s.h.start(ctx, daemonSetup{config: sessionsConfig, env: s.env})
	if err != nil {
		r.fail("start daemon", err)
		return
	}
	s.daemons++
	if ok, err := hasMethod(ctx, d, "sessions.configure"); err != nil || !ok {
		d.kill()
		r.skip(fmt.Sprintf("sessions.configure is not registered in this build of card (%v)", err))
		return
	}
	if err := s.startSessions(ctx, d); err != nil {
		d.kill()
		r.fail("sessions.start", err)
		return
	}

	rounds := s.h.opts.sessionRounds
	var plan []signalKind
	for len(plan) < rounds {
		cycle := slices.Clone(signalKinds)
		rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
		plan = append(plan, cycle...)
	}
	plan = plan[:rounds]
	began := time.Now()
	for e, kind := range plan {
		dur := time.Duration(8000+rng.IntN(6000)) * time.Millisecond
		s.epoch(ctx, d, e, kind, dur)
		if ctx.Err() != nil {
			d.kill()
			return
		}
		next, err := s.h.start(ctx, daemonSetup{home: d.home, env: s.env})
		if err != nil {
			r.fail(fmt.Sprintf("restart after epoch %d (%s)", e+1, kind), err)
			return
		}
		s.daemons++
		s.afterRestart(ctx, next, d, kind)
		d = next
	}

	// The last daemon: every session must be idle, its queue recorded; the
	// whole history is read and judged, then the daemon is stopped
	// gracefully and the history read once more straight from the store.
	c, err := d.dial(ctx)
	if err != nil {
		d.kill()
		r.fail("dial the last daemon", err)
		return
	}
	runs, err := allRuns(ctx, c)
	sessions := map[string]api.Session{}
	for _, ss := range s.ses {
		if err != nil {
			break
		}
		sessions[ss.id], err = c.Session(ctx, ss.id)
	}
	c.Close()
	if err != nil {
		d.kill()
		r.fail("read the history", err)
		return
	}
	code, err := d.stop(30 * time.Second)
	if err != nil || code != 0 {
		s.problem("last graceful stop", fmt.Sprintf("exit %d, %v", code, err))
	}
	s.leftAfterStop += countPIDs(sessionLeftovers(s.ids(), 3*time.Second))
	fromStore := s.storeTurns(ctx, d.home)
	s.judge(runs, sessions, fromStore, time.Since(began), len(plan))
}

func (s *sessionsSoak) ids() map[string]bool {
	ids := map[string]bool{}
	for _, ss := range s.ses {
		ids[ss.id] = true
	}
	return ids
}

// startSessions starts the sessions: half in read_only, half in edit, each
// in a directory of its own; two start their warm agent at once.
func (s *sessionsSoak) startSessions(ctx context.Context, d *liveDaemon) error {
	c, err := d.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	for i := 0; i < s.h.opts.sessions; i++ {
		ss := &soakSession{idx: i, cwd: filepath.Join(s.h.tmp, "sessions-cwd", strconv.Itoa(i)), seq: map[string]int{}}
		if err := os.MkdirAll(ss.cwd, 0o755); err != nil {
			return err
		}
		ss.startMode = "read_only"
		if i%2 == 1 {
			ss.startMode = "edit"
		}
		ss.askMode = ss.startMode
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		got, err := c.StartSession(cctx, api.SessionStartParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: ss.cwd, PermissionMode: ss.startMode}, Warm: i < 2})
		cancel()
		if err != nil {
			return err
		}
		ss.id = got.SessionID
		s.ses = append(s.ses, ss)
	}
	return nil
}

// epoch drives every session on one daemon for about dur, then ends the
// daemon as kind says.
func (s *sessionsSoak) epoch(ctx context.Context, d *liveDaemon, e int, kind signalKind, dur time.Duration) {
	mem := startMemSampler(d.pid())
	ctl, err := d.dial(ctx)
	if err != nil {
		// The next start on the home needs this daemon gone.
		s.problem("dial", err.Error())
		mem.close()
		d.kill()
		return
	}
	defer ctl.Close()
	type pair struct{ a, b *rawConn }
	conns := make([]pair, len(s.ses))
	for i := range s.ses {
		a, err1 := dialRawConn(ctx, d)
		b, err2 := dialRawConn(ctx, d)
		if err := errors.Join(err1, err2); err != nil {
			s.problem("dial", err.Error())
		}
		conns[i] = pair{a, b}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, ss := range s.ses {
		if conns[i].a == nil || conns[i].b == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(s.seed, uint64(e*1000+i)))
			ss.drive(ctx, e, stop, conns[i].a, conns[i].b, ctl, rng)
		}()
	}

	diedUnasked := false
	select {
	case <-time.After(dur):
	case <-d.exited:
		diedUnasked = true
	case <-ctx.Done():
	}
	stopped := false
	stopDrivers := func() {
		if !stopped {
			close(stop)
			wg.Wait()
			stopped = true
		}
	}
	rec := signalRec{kind: kind}
	if !diedUnasked && ctx.Err() == nil {
		if !kind.during {
			// Between turns: no more requests, every answer in, every
			// session idle with nothing queued.
			stopDrivers()
			for _, p := range conns {
				if p.a != nil && p.b != nil {
					p.a.settle(10 * time.Second)
					p.b.settle(10 * time.Second)
				}
			}
			if err := waitAllIdle(ctx, ctl, s.ids(), 2*time.Minute); err != nil {
				s.problem("sessions idle before a signal between turns", err.Error())
			}
		} else {
			// During turns: signal the moment a turn is running.
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if running, _ := countBusy(ctx, ctl, s.ids()); running > 0 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		rec.running, rec.queued = countBusy(ctx, ctl, s.ids())
		s.peakHWM = max(s.peakHWM, procStatus(d.pid(), "VmHWM"))
		t0 := time.Now()
		if kind.sig == syscall.SIGKILL {
			d.crash()
			st, _ := d.cmd.ProcessState.Sys().(syscall.WaitStatus)
			rec.ok = st.Signaled() && st.Signal() == syscall.SIGKILL
			rec.exit = d.cmd.ProcessState.String()
		} else {
			_ = syscall.Kill(d.pid(), syscall.SIGTERM)
			select {
			case <-d.exited:
				code := d.cmd.ProcessState.ExitCode()
				rec.ok, rec.exit = code == 0, fmt.Sprintf("exit %d", code)
			case <-time.After(30 * time.Second):
				d.kill()
				rec.exit = "still running 30 s after SIGTERM (killed)"
			}
		}
		rec.took = time.Since(t0)
		s.signals = append(s.signals, rec)
		if kind.sig == syscall.SIGTERM {
			// A graceful stop ends every agent it started before it exits.
			s.leftAfterStop += countPIDs(sessionLeftovers(s.ids(), 0))
		}
	}
	if diedUnasked {
		s.deaths = append(s.deaths, fmt.Sprintf("epoch %d: daemon pid %d ended unasked (%s); log %s: %s", e+1, d.pid(), d.cmd.ProcessState, d.log, tail(d.log, 600)))
	}
	stopDrivers()
	for _, p := range conns {
		if p.a != nil {
			p.a.close()
		}
		if p.b != nil {
			p.b.close()
		}
	}
	rss, anon := mem.close()
	s.peakRSS, s.peakAnon = max(s.peakRSS, rss), max(s.peakAnon, anon)
	s.anonPeaks = append(s.anonPeaks, anon)
}

// afterRestart checks what a restarted daemon shows before any new turn:
// no run still running, the last crash it reports, every session idle with
// an empty queue, and no process of the sessions left alive.
func (s *sessionsSoak) afterRestart(ctx context.Context, d, prev *liveDaemon, kind signalKind) {
	c, err := d.dial(ctx)
	if err != nil {
		s.problem("dial after a restart", err.Error())
		return
	}
	defer c.Close()
	running, err := c.Runs(ctx, api.ListParams{Status: api.StatusRunning, Limit: api.MaxListLimit})
	if err != nil {
		s.problem("runs.list after a restart", err.Error())
	}
	s.runningAfterRestart += len(running)
	info, err := c.Info(ctx)
	if err != nil {
		s.problem("daemon.info after a restart", err.Error())
	} else {
		lc := info.LastCrash
		if lc != nil {
			s.crashReportsSeen[lc.Kind]++
		}
		switch {
		case lc != nil && lc.Kind != api.CrashUncleanExit:
			s.crashReports = append(s.crashReports, fmt.Sprintf("after %s of pid %d: kind %s, pid %d: %s", kind, prev.pid(), lc.Kind, lc.PID, lc.Summary))
		case kind.sig == syscall.SIGKILL && (lc == nil || lc.PID != prev.pid()):
			s.crashReports = append(s.crashReports, fmt.Sprintf("after SIGKILL of pid %d: last_crash %+v", prev.pid(), lc))
		case kind.sig == syscall.SIGTERM && lc != nil && lc.PID == prev.pid():
			s.crashReports = append(s.crashReports, fmt.Sprintf("after a graceful stop of pid %d: last_crash names it: %+v", prev.pid(), lc))
		}
	}
	for _, ss := range s.ses {
		got, err := c.Session(ctx, ss.id)
		if err != nil {
			s.problem("sessions.get after a restart", err.Error())
			continue
		}
		ss.restarts = append(ss.restarts, got)
		if got.State != api.SessionIdle || len(got.Queue) > 0 || got.CurrentRunID != "" {
			s.notIdleAfterRestart = append(s.notIdleAfterRestart, fmt.Sprintf("%s: state %s, %d queued, current run %q", ss.id, got.State, len(got.Queue), got.CurrentRunID))
		}
	}
	left := sessionLeftovers(s.ids(), 5*time.Second)
	s.leftAfterRestart += countPIDs(left)
	killLeftovers(left)
}

// drive sends one session's requests on its two connections until stop:
// bursts of prompts from both at once, cancels, mode changes, and waits for
// the session to be idle (so changes also come between turns).
func (ss *soakSession) drive(ctx context.Context, epoch int, stop <-chan struct{}, a, b *rawConn, ctl *client.Client, rng *rand.Rand) {
	pause := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		switch p := rng.IntN(100); {
		case p < 50:
			ss.burst(ctx, epoch, a, b, rng)
		case p < 65:
			c := a
			if rng.IntN(2) == 0 {
				c = b
			}
			ss.cancel(ctx, epoch, c, rng.IntN(3) == 0)
		case p < 80:
			ss.configure(ctx, epoch, a)
		default:
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				got, err := ctl.Session(cctx, ss.id)
				cancel()
				if err != nil || (got.State == api.SessionIdle && len(got.Queue) == 0) || !pause(50*time.Millisecond) {
					break
				}
			}
			if rng.IntN(2) == 0 {
				ss.configure(ctx, epoch, a)
			}
		}
		if !pause(time.Duration(100+rng.IntN(1400)) * time.Millisecond) {
			return
		}
	}
}

// burst writes prompts on both connections at once, each connection's back
// to back; A's may carry a mode change or a cancel between its prompts.
func (ss *soakSession) burst(ctx context.Context, epoch int, a, b *rawConn, rng *rand.Rand) {
	type item struct {
		kind   string // prompt, configure, cancel
		tenths int
		clear  bool
	}
	plan := func(n int, extras bool) []item {
		var out []item
		for i := 0; i < n; i++ {
			out = append(out, item{kind: "prompt", tenths: promptTenths[rng.IntN(len(promptTenths))]})
		}
		if extras && n > 0 {
			switch rng.IntN(8) {
			case 0, 1:
				at := 1 + rng.IntN(n)
				out = slices.Insert(out, at, item{kind: "configure"})
			case 2:
				out = slices.Insert(out, 1, item{kind: "cancel", clear: rng.IntN(2) == 0})
			}
		}
		return out
	}
	sides := []struct {
		c     *rawConn
		name  string
		items []item
	}{{a, "A", plan(1+rng.IntN(2), true)}, {b, "B", plan(rng.IntN(3), false)}}
	var wg sync.WaitGroup
	for _, side := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, it := range side.items {
				switch it.kind {
				case "prompt":
					ss.prompt(ctx, epoch, side.c, side.name, it.tenths)
				case "configure":
					ss.configure(ctx, epoch, side.c)
				case "cancel":
					ss.cancel(ctx, epoch, side.c, it.clear)
				}
			}
		}()
	}
	wg.Wait()
}

func (ss *soakSession) prompt(ctx context.Context, epoch int, c *rawConn, name string, tenths int) {
	ss.mu.Lock()
	ss.seq[name]++
	p := &promptRec{client: name, seq: ss.seq[name], epoch: epoch}
	p.text = fmt.Sprintf("soak s%d %s%d T%d", ss.idx, name, p.seq, tenths)
	ss.prompts = append(ss.prompts, p)
	ss.mu.Unlock()
	err := c.send(ctx, "sessions.prompt", api.SessionPromptParams{SessionID: ss.id, Task: p.text}, func(a rpcAnswer) {
		var res api.SessionPromptResult
		if a.code == 0 {
			_ = json.Unmarshal(a.result, &res)
		}
		ss.mu.Lock()
		defer ss.mu.Unlock()
		p.answered, p.code, p.msg = true, a.code, a.msg
		if a.code == 0 {
			p.turn = res.Turn
		}
	})
	ss.mu.Lock()
	p.sent = err == nil
	ss.mu.Unlock()
}

func (ss *soakSession) cancel(ctx context.Context, epoch int, c *rawConn, clear bool) {
	rec := &cancelRec{clear: clear, epoch: epoch}
	ss.mu.Lock()
	ss.cancels = append(ss.cancels, rec)
	ss.mu.Unlock()
	_ = c.send(ctx, "sessions.cancel", api.SessionCancelParams{SessionID: ss.id, ClearQueue: clear}, func(a rpcAnswer) {
		var res api.SessionCancelResult
		if a.code == 0 {
			_ = json.Unmarshal(a.result, &res)
		}
		ss.mu.Lock()
		defer ss.mu.Unlock()
		rec.answered, rec.code, rec.msg, rec.res = true, a.code, a.msg, res
	})
}

// configure asks for the other mode (read_only ↔ edit); only connection A
// changes modes.
func (ss *soakSession) configure(ctx context.Context, epoch int, c *rawConn) {
	ss.mu.Lock()
	ss.askMode = map[string]string{"read_only": "edit", "edit": "read_only"}[ss.askMode]
	rec := &configRec{mode: ss.askMode, epoch: epoch}
	ss.configs = append(ss.configs, rec)
	ss.mu.Unlock()
	_ = c.send(ctx, "sessions.configure", api.SessionConfigureParams{SessionID: ss.id, PermissionMode: rec.mode}, func(a rpcAnswer) {
		var res api.SessionConfigureResult
		if a.code == 0 {
			_ = json.Unmarshal(a.result, &res)
		}
		ss.mu.Lock()
		defer ss.mu.Unlock()
		rec.answered, rec.code, rec.msg, rec.res = true, a.code, a.msg, res
	})
}

// countBusy is how many of the sessions run a turn, and how many prompts
// they hold queued.
func countBusy(ctx context.Context, c *client.Client, ids map[string]bool) (running, queued int) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := c.Sessions(cctx, api.SessionListParams{Limit: 500})
	if err != nil {
		return -1, -1
	}
	for _, s := range list.Sessions {
		if !ids[s.SessionID] {
			continue
		}
		if s.State == api.SessionRunning || s.State == api.SessionWaitingApproval {
			running++
		}
		queued += len(s.Queue)
	}
	return running, queued
}

func waitAllIdle(ctx context.Context, c *client.Client, ids map[string]bool, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		running, queued := countBusy(ctx, c, ids)
		if running == 0 && queued == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("after %s: %d sessions running, %d prompts queued", d, running, queued)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// allRuns pages through runs.list.
func allRuns(ctx context.Context, c *client.Client) ([]api.Run, error) {
	var out []api.Run
	before := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		page, err := c.Runs(cctx, api.ListParams{Limit: api.MaxListLimit, Before: before})
		cancel()
		if err != nil {
			return out, err
		}
		out = append(out, page...)
		if len(page) < api.MaxListLimit {
			return out, nil
		}
		before = page[len(page)-1].RunID
	}
}

// storeTurns reads each session's turns straight from the history, with
// no daemon running: the turn number of each of its runs.
func (s *sessionsSoak) storeTurns(ctx context.Context, home string) map[string][]int {
	st, err := store.Open(ctx, filepath.Join(home, homedir.RunsDBName), store.Options{})
	if err != nil {
		s.problem("open the store", err.Error())
		return nil
	}
	defer st.Close()
	out := map[string][]int{}
	for _, ss := range s.ses {
		runs, err := st.SessionRuns(ctx, ss.id)
		if err != nil {
			s.problem("read the store", err.Error())
			return nil
		}
		for _, r := range runs {
			out[ss.id] = append(out[ss.id], r.SessionTurn)
		}
	}
	return out
}

// sessionLeftovers lists live processes whose environment names one of the
// sessions (CARD_SESSION_ID, on every agent process of a session's turns,
// warm or cold, and inherited by what they start), waiting up to d for
// there to be none.
func sessionLeftovers(ids map[string]bool, d time.Duration) map[string][]int {
	deadline := time.Now().Add(d)
	for {
		left := envLeftovers("CARD_SESSION_ID=", ids)
		if len(left) == 0 || !time.Now().Before(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// memSampler samples a process's RSS and private memory (RssAnon) every
// 100 ms and keeps the highest of each.
type memSampler struct {
	rss, anon atomic.Int64
	stop      chan struct{}
	done      chan struct{}
}

func startMemSampler(pid int) *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if v := procStatus(pid, "VmRSS"); v > m.rss.Load() {
				m.rss.Store(v)
			}
			if v := procStatus(pid, "RssAnon"); v > m.anon.Load() {
				m.anon.Store(v)
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memSampler) close() (rss, anon int64) {
	close(m.stop)
	<-m.done
	return m.rss.Load(), m.anon.Load()
}

// judge reads the whole history against what was sent and fills the table.
func (s *sessionsSoak) judge(all []api.Run, sessions map[string]api.Session, fromStore map[string][]int, took time.Duration, epochs int) {
	r := s.r
	reads, err := promptsRead(s.fake)
	if err != nil {
		s.problem("read prompts.log", err.Error())
	}
	readsOf := map[string][]promptRead{} // by text
	for _, rd := range reads {
		readsOf[rd.text] = append(readsOf[rd.text], rd)
	}
	var (
		turnsTotal, withRun, sent, answered, unanswered, refusedByAnswer int
		statuses                                                         = map[api.Status]int{}
		refusals                                                         = map[string]int{}
		errCodes                                                         = map[int64]int{}
		cancelsRun, cancelsIdle, cancelsClear, cleared, clearedRecorded  int
		failed, lostClears, unwritten                                    int
		configsDuring, configsBetween, modeChecked, modeUnsure           int
		warmReads, coldReads                                             int
	)
	for _, rd := range reads {
		if rd.warm {
			warmReads++
		} else {
			coldReads++
		}
	}
	bySession := map[string][]api.Run{}
	for _, run := range all {
		if run.CardSessionID != "" {
			bySession[run.CardSessionID] = append(bySession[run.CardSessionID], run)
		}
	}
	for _, ss := range s.ses {
		sg := sessions[ss.id]
		n := sg.Turns
		turnsTotal += n
		turns := map[int][]api.Run{}
		for _, run := range bySession[ss.id] {
			turns[run.SessionTurn] = append(turns[run.SessionTurn], run)
			statuses[run.Status]++
			if run.Status == api.StatusFailed || run.Status == api.StatusTimedOut {
				failed++
				msg := ""
				if run.Error != nil {
					msg = run.Error.Kind + ": " + run.Error.Message
				}
				s.problem("turns failed or timed out", fmt.Sprintf("%s turn %d (%s): %s %s", ss.id, run.SessionTurn, run.RunID, run.Status, msg))
			}
			if run.Status == api.StatusRunning {
				s.problem("runs still running at the end", fmt.Sprintf("%s turn %d: %s", ss.id, run.SessionTurn, run.RunID))
			}
			if run.Status == api.StatusRefused {
				refusals[refusalClass(run.RefusalReason)]++
				if strings.Contains(run.RefusalReason, "clear_queue") {
					clearedRecorded++
				}
			}
		}
		for t := 1; t <= n; t++ {
			switch len(turns[t]) {
			case 1:
				withRun++
			case 0:
				s.problem("turn numbers with no run", fmt.Sprintf("%s turn %d of %d", ss.id, t, n))
			default:
				s.problem("turn numbers with more than one run", fmt.Sprintf("%s turn %d: %d runs", ss.id, t, len(turns[t])))
			}
		}
		for t := range turns {
			if t < 1 || t > n {
				s.problem("runs outside turns 1..N", fmt.Sprintf("%s turn %d (N = %d)", ss.id, t, n))
			}
		}
		if st := fromStore[ss.id]; fromStore != nil && len(st) != len(bySession[ss.id]) {
			s.problem("store and runs.list disagree", fmt.Sprintf("%s: %d runs in the store, %d listed", ss.id, len(st), len(bySession[ss.id])))
		}

		// Which prompt each turn is: its answer says so, or its run's task.
		byText := map[string]*promptRec{}
		turnOf := map[int]*promptRec{}
		unknown := 0 // prompts sent whose outcome the wire did not say
		for _, p := range ss.prompts {
			byText[p.text] = p
			if p.sent {
				sent++
			} else {
				unwritten++
			}
			switch {
			case p.answered && p.code == 0:
				answered++
				if q := turnOf[p.turn]; q != nil {
					s.problem("two prompts answered with one turn", fmt.Sprintf("%s turn %d: %q and %q", ss.id, p.turn, q.text, p.text))
				}
				turnOf[p.turn] = p
			case p.answered:
				answered++
				refusedByAnswer++
				errCodes[p.code]++
				unknown++ // a gate's refusal may still have taken a turn
			default:
				unanswered++
				unknown++
			}
		}
		for t, rs := range turns {
			run := rs[0]
			if run.Task == "" {
				continue
			}
			p := byText[run.Task]
			switch {
			case p == nil:
				s.problem("turns that ran a prompt nobody sent", fmt.Sprintf("%s turn %d: %q", ss.id, t, run.Task))
			case turnOf[t] != nil && turnOf[t] != p:
				s.problem("turns that ran another prompt than their answer named", fmt.Sprintf("%s turn %d ran %q, answered to %q", ss.id, t, run.Task, turnOf[t].text))
			case turnOf[t] == nil:
				if p.turn != 0 && p.turn != t {
					s.problem("prompts in two turns", fmt.Sprintf("%s: %q answered turn %d, ran in turn %d", ss.id, p.text, p.turn, t))
				}
				p.turn, p.byText = t, true
				turnOf[t] = p
				unknown--
			}
		}
		for t := 1; t <= n; t++ {
			if turnOf[t] != nil || len(turns[t]) == 0 {
				continue
			}
			// A turn no answer named and whose run has no prompt text: it
			// must be a prompt that never ran (recorded refused) of one
			// of the sends the wire left open.
			if run := turns[t][0]; run.Status != api.StatusRefused {
				s.problem("turns of no known prompt that ran", fmt.Sprintf("%s turn %d: %s", ss.id, t, run.Status))
			}
			unknown--
		}
		if unknown < 0 {
			s.problem("more turns of no known prompt than prompts left unanswered", fmt.Sprintf("%s: %d more", ss.id, -unknown))
		}

		// Each connection's prompts took turns in the order it sent them.
		for _, name := range []string{"A", "B"} {
			last, lastText := 0, ""
			for _, p := range ss.prompts {
				if p.client != name || p.turn == 0 {
					continue
				}
				if p.turn <= last {
					s.problem("prompts out of their connection's order", fmt.Sprintf("%s %s: %q is turn %d, after %q in turn %d", ss.id, name, p.text, p.turn, lastText, last))
				}
				last, lastText = p.turn, p.text
			}
		}
		// And the agents read them in turn order, each once, and never a
		// prompt whose turn was recorded refused.
		lastRead := 0
		for _, rd := range reads {
			if !strings.HasPrefix(rd.text, fmt.Sprintf("soak s%d ", ss.idx)) {
				continue
			}
			p := byText[rd.text]
			switch {
			case p == nil:
				s.problem("prompts an agent read that nobody sent", rd.text)
				continue
			case len(readsOf[rd.text]) > 1:
				s.problem("prompts an agent read more than once", fmt.Sprintf("%q read %d times", rd.text, len(readsOf[rd.text])))
			case p.turn == 0:
				s.problem("prompts an agent read that have no turn", rd.text)
				continue
			}
			if rs := turns[p.turn]; len(rs) > 0 && rs[0].Status == api.StatusRefused {
				s.problem("refused turns whose prompt reached an agent", fmt.Sprintf("%s turn %d: %q", ss.id, p.turn, rd.text))
			}
			if p.turn <= lastRead {
				s.problem("prompts an agent read out of turn order", fmt.Sprintf("%s: turn %d read after turn %d", ss.id, p.turn, lastRead))
			}
			lastRead = max(lastRead, p.turn)
		}
		for t, rs := range turns {
			if rs[0].Status == api.StatusSucceeded && (turnOf[t] == nil || len(readsOf[turnOf[t].text]) == 0) {
				s.problem("turns that succeeded without an agent reading their prompt", fmt.Sprintf("%s turn %d", ss.id, t))
			}
		}

		// Cancels: one that found a turn ended it cancelled; what
		// clear_queue dropped is recorded.
		for _, c := range ss.cancels {
			if c.clear && !c.answered {
				lostClears++
			}
			if !c.answered || c.code != 0 {
				if c.answered {
					errCodes[c.code]++
				}
				continue
			}
			cleared += c.res.Cleared
			if c.clear {
				cancelsClear++
			}
			if !c.res.Cancelled {
				cancelsIdle++
				continue
			}
			cancelsRun++
			found := false
			for _, run := range bySession[ss.id] {
				if run.RunID == c.res.RunID {
					found = true
					if run.Status != api.StatusCancelled {
						s.problem("cancelled turns not recorded cancelled", fmt.Sprintf("%s turn %d (%s): %s", ss.id, run.SessionTurn, run.RunID, run.Status))
					}
				}
			}
			if !found {
				s.problem("cancelled turns not recorded cancelled", fmt.Sprintf("%s: run %s not in the history", ss.id, c.res.RunID))
			}
		}

		// Modes: each turn that ran, ran in the mode the configure answers
		// (applies_from_turn) and each restart say it had.
		s.checkModes(ss, turns, n, epochs, &modeChecked, &modeUnsure, &configsDuring, &configsBetween, errCodes)
	}

	r.info("seed", fmt.Sprintf("%d (-seed %d repeats the plan; timings differ)", s.seed, s.seed))
	r.info("sessions / epochs of the daemon", fmt.Sprintf("%d sessions, 2 connections each; %d daemons over %s", len(s.ses), s.daemons, took.Round(time.Second)))
	sigs := map[string][]string{}
	var sigOrder []string
	badSignals := 0
	for _, sg := range s.signals {
		k := sg.kind.String()
		if _, ok := sigs[k]; !ok {
			sigOrder = append(sigOrder, k)
		}
		sigs[k] = append(sigs[k], fmt.Sprintf("%d running/%d queued → %s in %s", sg.running, sg.queued, sg.exit, sg.took.Round(time.Millisecond)))
		if !sg.ok {
			badSignals++
		}
	}
	sort.Strings(sigOrder)
	for _, k := range sigOrder {
		r.info("  "+k, strings.Join(sigs[k], "; "))
	}
	r.add("signals answered as expected (SIGTERM: exit 0; SIGKILL: killed)", fmt.Sprintf("%d of %d", len(s.signals)-badSignals, len(s.signals)), "all", badSignals == 0 && len(s.signals) == epochs)
	r.add("daemon deaths the soak did not cause", fmt.Sprint(len(s.deaths)), "0", len(s.deaths) == 0)
	r.add("daemon.info last_crash after each restart", fmt.Sprintf("%v; %d wrong", s.crashReportsSeen, len(s.crashReports)), "unclean_exit naming each SIGKILLed pid, never crash", len(s.crashReports) == 0)
	r.add("runs still running right after a restart", fmt.Sprint(s.runningAfterRestart), "0", s.runningAfterRestart == 0)
	r.add("sessions not idle with an empty queue after a restart", fmt.Sprint(len(s.notIdleAfterRestart)), "0", len(s.notIdleAfterRestart) == 0)
	r.add("processes of the sessions left (after each SIGTERM, after each restart, at the end)", fmt.Sprintf("%d, %d", s.leftAfterStop, s.leftAfterRestart), "0, 0", s.leftAfterStop == 0 && s.leftAfterRestart == 0)

	r.info("prompts written / answered / not answered (of which not written: the daemon was gone)", fmt.Sprintf("%d / %d / %d (%d)", sent, answered, unanswered, unwritten))
	r.info("prompts answered with an error, by code", fmt.Sprintf("%d %v", refusedByAnswer, errCodes))
	r.info("turns: statuses", fmt.Sprint(statuses))
	r.add("turns failed or timed out (the fake never fails)", fmt.Sprint(failed), "0", failed == 0)
	r.info("refused turns, by why", fmt.Sprint(refusals))
	r.info("prompts the agents read: warm / cold", fmt.Sprintf("%d / %d", warmReads, coldReads))
	r.info("cancels: ended a turn / found none / with clear_queue", fmt.Sprintf("%d / %d / %d", cancelsRun, cancelsIdle, cancelsClear))
	r.info("mode changes answered: during a turn / between turns", fmt.Sprintf("%d / %d", configsDuring, configsBetween))
	r.add("every turn number 1..N of every session has exactly one run", fmt.Sprintf("%d of %d", withRun, turnsTotal), "all", withRun == turnsTotal && turnsTotal > 0)
	r.add("prompts dropped by clear_queue / recorded refused for it", fmt.Sprintf("%d / %d (%d cancels with clear_queue unanswered)", cleared, clearedRecorded, lostClears),
		"equal (more recorded only where a kill lost a cancel's answer)", clearedRecorded == cleared || (lostClears > 0 && clearedRecorded > cleared))
	r.add("turns whose mode is checked / in the mode configured", fmt.Sprintf("%d / %d (%d not knowable: two configures' answers lost to one kill)", modeChecked, modeChecked-len(s.problems["turns run in another mode than configured"]), modeUnsure),
		"all", len(s.problems["turns run in another mode than configured"]) == 0 && modeChecked > 0)
	peak := max(s.peakRSS, s.peakHWM)
	r.add("peak RSS (VmRSS sampled every 100 ms, and VmHWM)", fmt.Sprintf("%s (sampled %s, VmHWM %s)", mib(peak), mib(s.peakRSS), mib(s.peakHWM)), fmt.Sprintf("<= %s", mib(sessionsMaxRSSKB)), peak > 0 && peak <= sessionsMaxRSSKB)
	r.add("peak private memory (RssAnon, sampled every 100 ms)", mib(s.peakAnon), fmt.Sprintf("<= %s", mib(sessionsMaxAnonKB)), s.peakAnon > 0 && s.peakAnon <= sessionsMaxAnonKB)
	r.info("  each daemon's peak RssAnon, in order (the history grows; a restart loads no session)", mibList(s.anonPeaks))

	kinds := make([]string, 0, len(s.problems))
	for k := range s.problems {
		kinds = append(kinds, k)
	}
	tabled := map[string]bool{"turns run in another mode than configured": true, "turns failed or timed out": true}
	sort.Strings(kinds)
	for _, k := range kinds {
		if tabled[k] {
			continue
		}
		r.add(k, fmt.Sprint(len(s.problems[k])), "0", false)
	}
	for _, k := range kinds {
		for i, detail := range s.problems[k] {
			if i == 3 {
				r.info("  …", fmt.Sprintf("%d more", len(s.problems[k])-3))
				break
			}
			r.info("  "+k, detail)
		}
	}
	for _, d := range s.deaths {
		r.info("  death", d)
	}
	for _, c := range s.crashReports {
		r.info("  last_crash", c)
	}
	for _, n := range s.notIdleAfterRestart {
		r.info("  not idle after a restart", n)
	}
}

// refusalClass names why a turn was recorded refused, in a word.
func refusalClass(reason string) string {
	switch {
	case strings.Contains(reason, "clear_queue"):
		return "cleared"
	case strings.Contains(reason, "card stopped before"):
		return "queued at a restart"
	case strings.Contains(reason, "card shut down before"):
		return "queued at a stop"
	case strings.Contains(reason, "shutting down"):
		return "prompted during a stop"
	case strings.Contains(reason, "closed"):
		return "session closed"
	}
	if len(reason) > 60 {
		reason = reason[:60] + "…"
	}
	return reason
}

// checkModes checks that each turn of ss that ran, ran in the mode the
// answers to sessions.configure said it would (from applies_from_turn on)
// and each restarted daemon showed. A configure whose answer a kill lost
// may or may not have been applied: the turns after it ran in the mode
// before it and then, from some turn on, in its mode, never back.
func (s *sessionsSoak) checkModes(ss *soakSession, turns map[int][]api.Run, n, epochs int, checked, unsure, during, between *int, errCodes map[int64]int) {
	type mark struct {
		from int
		mode string
	}
	marks := []mark{{1, ss.startMode}}
	// lost is an epoch's configures whose answers never came (the last
	// ones it sent: answers come in the order sent) and the span of turns
	// they may have changed.
	type lost struct {
		from, to int
		modes    []string
		switched bool
	}
	var spans []*lost
	for e := 0; e < epochs; e++ {
		l := &lost{}
		for _, c := range ss.configs {
			if c.epoch != e {
				continue
			}
			switch {
			case c.answered && c.code == 0:
				marks = append(marks, mark{c.res.AppliesFromTurn, c.res.Session.PermissionMode})
				l.from = max(l.from, c.res.AppliesFromTurn)
				if c.res.RunningTurn > 0 {
					*during++
				} else {
					*between++
				}
			case c.answered:
				errCodes[c.code]++
			default:
				l.modes = append(l.modes, c.mode)
			}
		}
		if e >= len(ss.restarts) {
			continue
		}
		rs := ss.restarts[e]
		if len(l.modes) > 0 {
			if e > 0 {
				l.from = max(l.from, ss.restarts[e-1].Turns+1)
			}
			l.to = rs.Turns
			spans = append(spans, l)
		}
		marks = append(marks, mark{rs.Turns + 1, rs.PermissionMode})
	}
	for t := 1; t <= n; t++ {
		if len(turns[t]) == 0 || turns[t][0].Status == api.StatusRefused {
			continue
		}
		want := ""
		for _, m := range marks {
			if m.from <= t {
				want = m.mode
			}
		}
		got := turns[t][0].PermissionMode
		var span *lost
		for _, l := range spans {
			if t >= l.from && t <= l.to {
				span = l
			}
		}
		if span != nil && !span.switched && got != want {
			span.switched = true
		}
		if span != nil && span.switched {
			if len(span.modes) > 1 {
				*unsure++
				continue
			}
			want = span.modes[0]
		}
		*checked++
		if got != want {
			s.problem("turns run in another mode than configured", fmt.Sprintf("%s turn %d: ran %s, configured %s", ss.id, t, got, want))
		}
	}
}
