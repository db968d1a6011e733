package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon"
	homedir "github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/internal/proc"
)

// harness knows how to start live daemons for the phases.
type harness struct {
	bin  string
	tmp  string
	opts options
	n    int
}

func buildCard(ctx context.Context, out string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.Command("go", "build", "-o", out, "./cmd/card")
	cmd.Dir = moduleRoot()
	cmd.Env = os.Environ()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := proc.Start(cmd)
	if err == nil {
		err = proc.Wait(ctx, cmd, 0)
	}
	if err != nil {
		return fmt.Errorf("go build ./cmd/card in %s: %v\n%s", cmd.Dir, err, stderr.String())
	}
	return syncFile(out)
}

// syncFile writes a file's pages to disk. A binary the linker has just
// written is dirty in the page cache, and its mapped pages count as the
// daemon's Private_Dirty until they are written back: measured before
// that, the figure is the build's, not the daemon's.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// moduleRoot walks up from the working directory to go.mod, so the soak can
// be run from anywhere inside the repository.
func moduleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// liveDaemon is one `card serve` child in its own process group.
type liveDaemon struct {
	home   string
	url    string
	token  string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	log    string
	// started is just before the process started; ready when its
	// daemon.json was first seen (polled every millisecond).
	started, ready time.Time
}

// daemonSetup says how to start a daemon.
type daemonSetup struct {
	home   string // reuse a home (restart after a crash); empty makes a new one
	config string // card.toml text
	env    []string
}

func (h *harness) start(ctx context.Context, s daemonSetup) (*liveDaemon, error) {
	h.n++
	home := s.home
	if home == "" {
		home = filepath.Join(h.tmp, fmt.Sprintf("home-%d", h.n))
		if err := os.MkdirAll(home, 0o700); err != nil {
			return nil, err
		}
		if s.config != "" {
			if err := os.WriteFile(filepath.Join(home, daemon.ConfigFileName), []byte(s.config), 0o600); err != nil {
				return nil, err
			}
		}
	}
	_ = os.Remove(filepath.Join(home, homedir.DiscoveryFileName))
	logPath := filepath.Join(h.tmp, fmt.Sprintf("daemon-%d.log", h.n))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(h.bin, "serve", "--home", home, "--addr", "127.0.0.1:0", "--log-level", "info")
	cmd.Dir = home
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), s.env...)
	cmd.SysProcAttr = proc.NewGroup()
	started := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s serve: %w", h.bin, err)
	}
	d := &liveDaemon{home: home, cmd: cmd, exited: make(chan struct{}), log: logPath, started: started}
	go func() {
		d.err = cmd.Wait()
		logf.Close()
		close(d.exited)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if disc, err := daemon.ReadDiscovery(home); err == nil && disc.PID == cmd.Process.Pid {
			d.url = disc.URL
			d.ready = time.Now()
			break
		}
		select {
		case <-d.exited:
			return nil, fmt.Errorf("card serve exited before it was ready (%v); log %s:\n%s", d.err, logPath, tail(logPath, 2000))
		case <-ctx.Done():
			d.kill()
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.kill()
			return nil, fmt.Errorf("card serve wrote no daemon.json within 20s; log %s", logPath)
		}
	}
	if d.token, err = daemon.ReadToken(home); err != nil {
		d.kill()
		return nil, err
	}
	return d, nil
}

// startPhase starts a phase's daemon; when it cannot, d is nil and the
// phase's result says why.
func (h *harness) startPhase(ctx context.Context, s daemonSetup) (d *liveDaemon, r *result) {
	r = &result{}
	d, err := h.start(ctx, s)
	if err != nil {
		r.fail("start daemon", err)
		return nil, r
	}
	return d, r
}

func (d *liveDaemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM and waits for a clean exit, SIGKILLing the group after
// the grace period; it returns the exit code (-1 when killed).
func (d *liveDaemon) stop(grace time.Duration) (int, error) {
	_ = syscall.Kill(d.pid(), syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(grace):
		d.kill()
		return -1, fmt.Errorf("card serve did not exit within %s of SIGTERM", grace)
	}
	proc.EndGroup(context.Background(), d.pid(), 0, d.exited) // anything left in its group
	return d.cmd.ProcessState.ExitCode(), nil
}

// kill SIGKILLs the daemon alone (a crash), not its group: the point of the
// crash phase is what a restarted daemon does about children left behind.
func (d *liveDaemon) crash() {
	_ = syscall.Kill(d.pid(), syscall.SIGKILL)
	<-d.exited
}

func (d *liveDaemon) kill() {
	proc.EndGroup(context.Background(), d.pid(), 0, d.exited)
	<-d.exited
}

func (d *liveDaemon) dial(ctx context.Context) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.Dial(ctx, client.Options{URL: d.url, Token: d.token})
}

// procStatus reads a field (in kB for the memory ones) of /proc/<pid>/status.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return -1
}

// privateDirty is Private_Dirty of /proc/<pid>/smaps_rollup in kB: every
// page of the process that no other process shares and the kernel cannot
// drop without writing it somewhere (heap, stacks, written file pages).
func privateDirty(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Private_Dirty:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return -1
}

func countDir(path string) int {
	es, err := os.ReadDir(path)
	if err != nil {
		return -1
	}
	return len(es)
}

// procSnap is what the soak can see of the daemon from outside. card exposes
// no goroutine count, so threads (/proc/<pid>/task) and open descriptors
// (/proc/<pid>/fd) stand in: a leaked connection holds a descriptor.
type procSnap struct {
	rssKB, hwmKB int64
	threads, fds int
}

func snap(pid int) procSnap {
	return procSnap{
		rssKB:   procStatus(pid, "VmRSS"),
		hwmKB:   procStatus(pid, "VmHWM"),
		threads: countDir(fmt.Sprintf("/proc/%d/task", pid)),
		fds:     countDir(fmt.Sprintf("/proc/%d/fd", pid)),
	}
}

func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// latencies summarises durations.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := append(latencies(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// result is one phase's table: rows of metric, value, goal, ok.
type result struct {
	rows    [][4]string
	misses  int
	skipped string
}

func (r *result) add(metric, value, goal string, ok bool) {
	mark := "ok"
	if goal == "" {
		mark = ""
	} else if !ok {
		mark = "MISSED"
		r.misses++
	}
	r.rows = append(r.rows, [4]string{metric, value, goal, mark})
}

func (r *result) info(metric, value string) { r.add(metric, value, "", true) }

func (r *result) fail(metric string, err error) {
	r.add(metric, "error: "+err.Error(), "no error", false)
}

func (r *result) skip(why string) *result { r.skipped = why; return r }

func (r *result) failed() bool { return r.misses > 0 }

func (r *result) verdict() string {
	switch {
	case r.skipped != "":
		return "SKIPPED (" + r.skipped + ")"
	case r.misses > 0:
		return fmt.Sprintf("%d goal(s) MISSED", r.misses)
	}
	return "all goals met"
}

func (r *result) print(w io.Writer) {
	if r.skipped != "" && len(r.rows) == 0 {
		fmt.Fprintf(w, "SKIPPED: %s\n", r.skipped)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "| metric\t| value\t| goal\t| \t|")
	fmt.Fprintln(tw, "| ---\t| ---\t| ---\t| ---\t|")
	for _, row := range r.rows {
		fmt.Fprintf(tw, "| %s\t| %s\t| %s\t| %s\t|\n", row[0], row[1], row[2], row[3])
	}
	_ = tw.Flush()
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// countLog counts log lines containing s.
func countLog(path, s string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte(s))
}
