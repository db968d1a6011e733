package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/rpc/rpcclient"
)

// fakeAgentArg re-executes the soak binary as a fake Claude Code CLI
// (through a wrapper script the daemon is pinned to with
// CAR_CLAUDE_CODE_BIN), so the agents and crash phases need no real agent,
// account or network, and the fake can misbehave on cue.
const fakeAgentArg = "__card_soak_fake_agent"

// fakeAgent speaks enough of Claude Code's stream-json to be parsed. The
// task text (stdin) is its script: "exit=N sleep=SECS children=K
// ignore-term". children start `sleep 600` in the agent's process group,
// like the tool processes a real agent leaves running; ignore-term makes
// SIGTERM useless so only the runner's SIGKILL ends it.
func fakeAgent(args []string) int {
	for _, a := range args {
		if a == "--version" || a == "-v" {
			fmt.Println("2.1.197 (Claude Code)")
			return 0
		}
	}
	task, _ := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	exit, sleep, children, ignoreTerm := 0, 0.0, 0, false
	events, size := 0, 0
	for _, f := range strings.Fields(string(task)) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "exit":
			exit, _ = strconv.Atoi(v)
		case "sleep":
			sleep, _ = strconv.ParseFloat(v, 64)
		case "children":
			children, _ = strconv.Atoi(v)
		case "ignore-term":
			ignoreTerm = true
		case "events":
			events, _ = strconv.Atoi(v)
		case "size":
			size, _ = strconv.Atoi(v)
		}
	}
	if ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	for i := 0; i < children; i++ {
		c := exec.Command("sleep", "600")
		c.Dir = "/"
		_ = c.Start() // same process group and environment as the agent
	}
	session := "00000000-0000-4000-8000-" + fmt.Sprintf("%012d", os.Getpid())
	emit := func(v any) {
		b, _ := json.Marshal(v)
		os.Stdout.Write(append(b, '\n'))
	}
	emit(map[string]any{"type": "system", "subtype": "init", "cwd": mustWd(), "session_id": session, "tools": []string{"Read"}, "model": "claude-fake"})
	// events=N size=B prints N text events of B bytes at once, for a run
	// whose event log is full while it is still going.
	for i := 0; i < events; i++ {
		emit(map[string]any{"type": "assistant", "session_id": session, "message": map[string]any{
			"id": "msg_soak", "type": "message", "role": "assistant", "model": "claude-fake",
			"content": []any{map[string]any{"type": "text", "text": strings.Repeat("e", size)}}}})
	}
	end := time.Now().Add(time.Duration(sleep * float64(time.Second)))
	for time.Now().Before(end) {
		emit(map[string]any{"type": "assistant", "session_id": session, "message": map[string]any{
			"id": "msg_soak", "type": "message", "role": "assistant", "model": "claude-fake",
			"content": []any{map[string]any{"type": "text", "text": "working"}}}})
		time.Sleep(min(200*time.Millisecond, time.Until(end)))
	}
	if exit != 0 {
		fmt.Fprintf(os.Stderr, "fake agent failing with exit %d as scripted\n", exit)
		return exit
	}
	emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "num_turns": 1, "result": "soak done",
		"session_id": session, "total_cost_usd": 0, "usage": map[string]any{"input_tokens": 1, "output_tokens": 1}})
	return 0
}

func mustWd() string { d, _ := os.Getwd(); return d }

// fakeAgentSetup writes the wrapper script and returns the daemon env that
// pins Claude Code to it.
func fakeAgentSetup(h *harness) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	wrapper := filepath.Join(h.tmp, "fake-claude")
	script := "#!/bin/sh\nexec " + strconv.Quote(self) + " " + fakeAgentArg + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return nil, err
	}
	return []string{"CAR_CLAUDE_CODE_BIN=" + wrapper}, nil
}

// hasMethod reports whether the daemon registers name (via rpc.discover).
func hasMethod(ctx context.Context, d *liveDaemon, name string) (bool, error) {
	c, err := d.dial(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	doc, err := c.Discover(cctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(doc.Methods, func(m rpcclient.OpenRPCMethod) bool { return m.Name == name }), nil
}

// leftovers lists live processes whose environment carries CARD_RUN_ID=id,
// which card sets on every agent and which every process it starts
// inherits: the one reliable way to find a run's processes after its
// daemon died.
func leftovers(ids map[string]bool) map[string][]int {
	return envLeftovers("CARD_RUN_ID=", ids)
}

// envLeftovers lists live processes whose environment has prefix followed
// by one of ids, by that id.
func envLeftovers(prefix string, ids map[string]bool) map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && len(st) > i+2 && st[i+2] == 'Z' {
				continue // a zombie holds nothing
			}
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte(prefix)); ok && ids[string(v)] {
				out[string(v)] = append(out[string(v)], pid)
			}
		}
	}
	return out
}

// waitNoLeftovers waits up to d for the runs' processes to be gone.
func waitNoLeftovers(ids map[string]bool, d time.Duration) map[string][]int {
	deadline := time.Now().Add(d)
	for {
		left := leftovers(ids)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func killLeftovers(left map[string][]int) {
	for _, pids := range left {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

func invoke(ctx context.Context, c *client.Client, task string, timeoutSecs int, cwd string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	a, err := c.Stream(cctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: cwd, TimeoutSecs: timeoutSecs}, Task: task}, nil)
	if err == nil && a.RunID == "" {
		err = errors.New("agents.invoke answered without a run_id")
	}
	return a.RunID, err
}

func getRun(ctx context.Context, c *client.Client, id string) (api.Run, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, err := c.Run(cctx, id)
	return rec.Run, err
}

// waitTerminal polls runs.get until the run has ended.
func waitTerminal(ctx context.Context, c *client.Client, id string, d time.Duration) (api.Run, error) {
	deadline := time.Now().Add(d)
	for {
		run, err := getRun(ctx, c, id)
		if err != nil {
			return run, err
		}
		if run.Status.Terminal() {
			return run, nil
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("run %s still %s after %s", id, run.Status, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scenario is one kind of misbehaving run and the status it must end with.
type scenario struct {
	name    string
	task    string
	timeout int
	act     string // "", "cancel" or "disconnect"
	want    api.Status
}

var scenarios = []scenario{
	{"exit 0", "exit=0 sleep=0.3", 30, "", api.StatusSucceeded},
	{"exit 3", "exit=3 sleep=0.2", 30, "", api.StatusFailed},
	{"exit 1 with a child", "exit=1 sleep=0.2 children=1", 30, "", api.StatusFailed},
	{"timeout", "sleep=30 children=1", 1, "", api.StatusTimedOut},
	{"timeout, SIGTERM ignored", "sleep=30 children=2 ignore-term", 1, "", api.StatusTimedOut},
	{"cancel", "sleep=30 children=1", 30, "cancel", api.StatusCancelled},
	{"cancel, SIGTERM ignored", "sleep=30 children=2 ignore-term", 30, "cancel", api.StatusCancelled},
	// A run belongs to the daemon and outlives its client's socket (unless
	// cancel_on_disconnect is set), so a disconnect must not change it.
	{"client disconnects", "exit=0 sleep=1", 30, "disconnect", api.StatusSucceeded},
}

func phaseAgents(ctx context.Context, h *harness) *result {
	env, err := fakeAgentSetup(h)
	if err != nil {
		r := &result{}
		r.fail("fake agent", err)
		return r
	}
	d, r := h.startPhase(ctx, daemonSetup{config: soakConfig, env: env})
	if d == nil {
		return r
	}
	defer d.stop(15 * time.Second)
	if ok, err := hasMethod(ctx, d, "agents.invoke"); err != nil || !ok {
		return r.skip(fmt.Sprintf("agents.invoke is not registered in this build of card (%v)", err))
	}
	cwd := filepath.Join(h.tmp, "agents-cwd")
	_ = os.MkdirAll(cwd, 0o755)

	rng := rand.New(rand.NewPCG(10, 50))
	n := h.opts.invokes
	plan := make([]scenario, n)
	delays := make([]time.Duration, n)
	for i := range plan {
		delays[i] = time.Duration(200+rng.IntN(400)) * time.Millisecond
		plan[i] = scenarios[i%len(scenarios)] // every kind at least once
		if i >= len(scenarios) {
			plan[i] = scenarios[rng.IntN(len(scenarios))]
		}
	}
	type outcome struct {
		sc   scenario
		id   string
		got  api.Status
		err  error
		took time.Duration
	}
	outcomes := make([]outcome, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8) // the daemon's default max_concurrent_runs
	for i := range plan {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			sc := plan[i]
			o := outcome{sc: sc}
			defer func() { outcomes[i] = o }()
			t0 := time.Now()
			c, err := d.dial(ctx)
			if err != nil {
				o.err = err
				return
			}
			o.id, o.err = invoke(ctx, c, sc.task, sc.timeout, cwd)
			if o.err != nil {
				c.Close()
				return
			}
			switch sc.act {
			case "cancel":
				time.Sleep(delays[i])
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, o.err = c.Cancel(cctx, o.id)
				cancel()
			case "disconnect":
				c.Close()
				if c, err = d.dial(ctx); err != nil {
					o.err = err
					return
				}
			}
			defer c.Close()
			if o.err != nil {
				return
			}
			run, err := waitTerminal(ctx, c, o.id, 30*time.Second)
			o.got, o.err, o.took = run.Status, err, time.Since(t0)
		}(i)
	}
	wg.Wait()

	ids := map[string]bool{}
	perKind := map[string][2]int{}
	wrong := 0
	var firstWrong string
	for _, o := range outcomes {
		if o.id != "" {
			ids[o.id] = true
		}
		k := perKind[o.sc.name]
		k[0]++
		if o.err == nil && o.got == o.sc.want {
			k[1]++
		} else {
			wrong++
			if firstWrong == "" {
				firstWrong = fmt.Sprintf("%s (run %s): want %s, got %q, err %v", o.sc.name, o.id, o.sc.want, o.got, o.err)
			}
		}
		perKind[o.sc.name] = k
	}
	r.add("invokes of the fake agent", fmt.Sprintf("%d (%d recorded with a run id)", n, len(ids)), "every one recorded", len(ids) == n)
	for _, sc := range scenarios {
		k := perKind[sc.name]
		r.add("  "+sc.name+" → "+string(sc.want), fmt.Sprintf("%d/%d", k[1], k[0]), "all", k[0] == k[1])
	}
	r.add("runs with the wrong status or an error", fmt.Sprint(wrong), "0", wrong == 0)
	if firstWrong != "" {
		r.info("first wrong", firstWrong)
	}
	left := waitNoLeftovers(ids, 3*time.Second)
	r.add("processes left in any run's group (CARD_RUN_ID scan of /proc)", fmt.Sprint(countPIDs(left)), "0", len(left) == 0)
	killLeftovers(left)
	return r
}

func countPIDs(m map[string][]int) int {
	n := 0
	for _, p := range m {
		n += len(p)
	}
	return n
}

func phaseCrash(ctx context.Context, h *harness) *result {
	r := &result{}
	env, err := fakeAgentSetup(h)
	if err != nil {
		r.fail("fake agent", err)
		return r
	}
	cwd := filepath.Join(h.tmp, "crash-cwd")
	_ = os.MkdirAll(cwd, 0o755)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		if !crashRound(ctx, h, r, env, cwd, sig) {
			break
		}
	}
	return r
}

// crashRound starts 8 long runs, signals the daemon, restarts it on the same
// home and checks every run is there, interrupted, with no process left.
func crashRound(ctx context.Context, h *harness, r *result, env []string, cwd string, sig syscall.Signal) bool {
	name := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}[sig]
	d, err := h.start(ctx, daemonSetup{config: soakConfig, env: env})
	if err != nil {
		r.fail(name+": start daemon", err)
		return false
	}
	if ok, err := hasMethod(ctx, d, "agents.invoke"); err != nil || !ok {
		d.kill()
		r.skip(fmt.Sprintf("agents.invoke is not registered in this build of card (%v)", err))
		return false
	}
	c, err := d.dial(ctx)
	if err != nil {
		d.kill()
		r.fail(name+": dial", err)
		return false
	}
	ids := map[string]bool{}
	var order []string
	for i := 0; i < 8; i++ {
		id, err := invoke(ctx, c, "sleep=120 children=1", 600, cwd)
		if err != nil {
			r.fail(fmt.Sprintf("%s: invoke %d", name, i), err)
			continue
		}
		ids[id] = true
		order = append(order, id)
	}
	// Let every agent start and spawn its child, so the crash leaves real
	// orphans (the agent dies with the daemon through Pdeathsig; its child
	// does not) for the restarted daemon to find.
	withChild := func() int {
		n := 0
		for _, pids := range leftovers(ids) {
			if len(pids) >= 2 {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && withChild() < len(ids) {
		time.Sleep(100 * time.Millisecond)
	}
	running := withChild()
	c.Close()

	exitCode := -1
	t0 := time.Now()
	if sig == syscall.SIGKILL {
		d.crash()
	} else {
		_ = syscall.Kill(d.pid(), syscall.SIGTERM)
		select {
		case <-d.exited:
			exitCode = d.cmd.ProcessState.ExitCode()
		case <-time.After(30 * time.Second):
			d.kill()
		}
	}
	stopTook := time.Since(t0)

	// After SIGTERM nothing may be left even before a restart; after
	// SIGKILL the children are orphans until the next daemon ends them.
	leftBefore := countPIDs(leftovers(ids))

	d2, err := h.start(ctx, daemonSetup{home: d.home, env: env})
	if err != nil {
		r.fail(name+": restart", err)
		killLeftovers(leftovers(ids))
		return false
	}
	defer d2.stop(15 * time.Second)
	c2, err := d2.dial(ctx)
	if err != nil {
		r.fail(name+": dial after restart", err)
		return false
	}
	defer c2.Close()
	statuses := map[api.Status]int{}
	missing := 0
	for _, id := range order {
		run, err := getRun(ctx, c2, id)
		if err != nil {
			missing++
			continue
		}
		statuses[run.Status]++
	}
	left := waitNoLeftovers(ids, 5*time.Second)

	r.add(name+": runs started / agents seen running with a child", fmt.Sprintf("%d / %d", len(order), running), "8 / 8", len(order) == 8 && running == 8)
	if sig == syscall.SIGTERM {
		r.add(name+": daemon exit code", fmt.Sprintf("%d after %s", exitCode, stopTook.Round(time.Millisecond)), "0", exitCode == 0)
		r.add(name+": processes left right after exit", fmt.Sprint(leftBefore), "0", leftBefore == 0)
	} else {
		r.info(name+": orphans before restart", fmt.Sprint(leftBefore))
	}
	r.add(name+": runs missing after restart", fmt.Sprint(missing), "0", missing == 0)
	r.add(name+": statuses after restart", fmt.Sprint(statuses), "all interrupted", statuses[api.StatusInterrupted] == len(order) && len(order) > 0)
	r.add(name+": processes left after restart", fmt.Sprint(countPIDs(left)), "0", len(left) == 0)
	killLeftovers(left)
	return true
}
