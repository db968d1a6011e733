package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/daemon/store"
	"github.com/card-dev/card/internal/home"
	"github.com/card-dev/card/internal/testskip"
)

// chattyDeltas is how many text deltas the chatty fake prints.
const chattyDeltas = 5000

// chattyStream is a captured partial-messages Claude Code stream with its
// one text delta repeated deltas times and its status line left out: with
// chattyDeltas, 8 + 5,000 lines, about 1.3 MB, what an agent that thinks
// aloud prints.
func chattyStream(t testing.TB, deltas int) []byte {
	t.Helper()
	raw, err := os.ReadFile(daemontest.RepoFile(t, "spawn/testdata/claude-stream-partial.jsonl"))
	require.NoError(t, err)
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		switch {
		case strings.Contains(line, `"subtype":"status"`):
		case strings.Contains(line, `"text_delta"`):
			for range deltas {
				out.WriteString(line)
			}
		default:
			out.WriteString(line)
		}
	}
	return out.Bytes()
}

// chattyAgent writes the chatty fake: a Claude Code that reads its task and
// prints the chatty stream in one go, then exits. A task that says
// shortTask prints the same stream with one text delta instead, and one
// that says halfTask with half the deltas, so a bench can tell what a run
// costs per line from what it costs at all. lines, halfLines and
// shortLines are what each prints.
func chattyAgent(t testing.TB) (bin string, lines, halfLines, shortLines int) {
	t.Helper()
	stream, half, short := chattyStream(t, chattyDeltas), chattyStream(t, chattyDeltas/2), chattyStream(t, 1)
	dir := t.TempDir()
	file, halfFile, shortFile := filepath.Join(dir, "chatty.jsonl"), filepath.Join(dir, "half.jsonl"), filepath.Join(dir, "short.jsonl")
	require.NoError(t, os.WriteFile(file, stream, 0o644))
	require.NoError(t, os.WriteFile(halfFile, half, 0o644))
	require.NoError(t, os.WriteFile(shortFile, short, 0o644))
	bin = daemontest.Script(t, "claude", fmt.Sprintf(`case "$1" in
--version) echo "2.1.197 (Claude Code)"; exit 0;;
auth|login) exit 1;;
esac
case "$(cat)" in
*'%s'*) exec cat %q;;
*'%s'*) exec cat %q;;
esac
exec cat %q`, shortTask, shortFile, halfTask, halfFile, file))
	count := func(b []byte) int { return bytes.Count(b, []byte("\n")) }
	return bin, count(stream), count(half), count(short)
}

// shortTask, in a task, makes the chatty fake print one text delta;
// halfTask half of them.
const shortTask, halfTask = "say one thing", "say half of it"

// chattyPath is one way of running the chatty agent once: it returns when
// the caller has its answer (the finished run, or a streamed run's last
// event) and the id of the run, "" when card recorded none.
type chattyPath struct {
	name string
	run  func(ctx context.Context, task string) (runID string, err error)
}

// TestChattyRunAgainstReadingItsPipe runs an agent that prints a 5,008-line
// stream (5,000 text deltas, 1.3 MB) and exits, directly (fork/exec, task
// on stdin, stdout read to EOF) and through agents.invoke without and with
// stream (a raw WebSocket client that receives every event), alternated in
// one run. Right after each answer it counts the run's events in the store,
// which must all be there; it samples the heap throughout. Goal: each card
// path at most 1.5× the direct run at the median. Another way of running a
// turn (a session's) is one more chattyPath, and a control path repeats
// agents.invoke + stream on a socket of its own. Each path's long run is
// followed by a half-length and a one-delta run of the same path: a run's
// cost per line is its long run less its short one. Each run is followed by a
// pause in which what it left the daemon to do (its history checkpointed,
// its garbage collected) ends; that work is counted in the run's CPU time,
// where it would otherwise land in whichever run came next.
//
//	CARD_BENCH=1 go test -count=1 -run TestChattyRunAgainstReadingItsPipe -v ./daemon/
//
// CARD_BENCH_CHATTY_ROUNDS sets the rounds (default 30); CARD_BENCH_PROFILE
// names a directory for CPU and allocation profiles of the card runs alone.
func TestChattyRunAgainstReadingItsPipe(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Bench, "benchmark of a chatty run against reading its pipe (figures go to docs/performance.md)")
	}
	bin, lines, halfLines, shortLines := chattyAgent(t)
	d := daemontest.Start(t, daemontest.Options{
		Config: "login_shell_path = false\n",
		Agents: map[string]string{agent.ClaudeCode: bin},
		Logger: zap.NewNop(),
	})
	cwd := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(d.Home, home.RunsDBName), store.Options{})
	require.NoError(t, err)
	defer st.Close()

	direct := chattyPath{"direct", func(ctx context.Context, task string) (string, error) {
		cmd := exec.CommandContext(ctx, bin)
		cmd.Dir = cwd
		cmd.Stdin = strings.NewReader(task)
		out, err := cmd.Output()
		want := lines
		switch {
		case strings.Contains(task, shortTask):
			want = shortLines
		case strings.Contains(task, halfTask):
			want = halfLines
		}
		if err == nil && bytes.Count(out, []byte("\n")) != want {
			err = fmt.Errorf("read %d lines, want %d", bytes.Count(out, []byte("\n")), want)
		}
		return "", err
	}}
	ws := d.Raw(t)
	ws.SetReadLimit(16 << 20)
	var id atomic.Int64
	invoke := func(ws *websocket.Conn, stream bool) func(ctx context.Context, task string) (string, error) {
		return func(ctx context.Context, task string) (string, error) {
			req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id.Add(1), "method": "agents.invoke",
				"params": api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: cwd}, Task: task, Stream: stream}})
			if err := ws.Write(ctx, websocket.MessageText, req); err != nil {
				return "", err
			}
			var answer struct {
				Result struct {
					RunID  string `json:"run_id"`
					Status string `json:"status"`
				} `json:"result"`
				Error json.RawMessage `json:"error"`
			}
			_, frame, err := ws.Read(ctx)
			if err != nil {
				return "", err
			}
			if err := json.Unmarshal(frame, &answer); err != nil || answer.Error != nil {
				return "", fmt.Errorf("answer %s: %v", frame, err)
			}
			if !stream {
				if answer.Result.Status != string(api.StatusSucceeded) {
					return "", fmt.Errorf("run ended %s", frame)
				}
				return answer.Result.RunID, nil
			}
			for {
				_, frame, err := ws.Read(ctx)
				if err != nil {
					return "", err
				}
				// The terminal event is the only one with a status.
				if bytes.Contains(frame, []byte(`"status":"`)) {
					if !bytes.Contains(frame, []byte(`"kind":"done"`)) {
						return "", fmt.Errorf("run ended %.300s", frame)
					}
					return answer.Result.RunID, nil
				}
			}
		}
	}
	// The control does what agents.invoke + stream does, on a socket of
	// its own, as the session and ACP paths have: how far apart two
	// measurements of the same work come out in one sitting is how finely
	// the others can be told from it.
	control := d.Raw(t)
	control.SetReadLimit(16 << 20)
	paths := []chattyPath{direct, {"agents.invoke", invoke(ws, false)}, {"agents.invoke + stream", invoke(ws, true)},
		{"control: + stream again", invoke(control, true)},
		{"sessions.prompt (turn)", sessionTurns(t, d, cwd)}, {"ACP session/prompt", acpTurns(t, d, cwd)}}

	// The heap of the whole process (daemon and clients), sampled without
	// stopping the world.
	var peak atomic.Uint64
	stop := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	rounds := 30
	if v := os.Getenv("CARD_BENCH_CHATTY_ROUNDS"); v != "" {
		_, err := fmt.Sscan(v, &rounds)
		require.NoError(t, err)
	}
	ctx := daemontest.Context(t)
	if rounds > 40 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(t.Context(), time.Duration(rounds)*3*time.Second)
		defer cancel()
	}
	// The runs' wall times, by path, long, half and short runs apart.
	took, tookHalf, tookShort := make([][]time.Duration, len(paths)), make([][]time.Duration, len(paths)), make([][]time.Duration, len(paths))
	// The process's CPU time (daemon and bench clients) while each path
	// ran, long, short and half runs apart: what a path costs the machine,
	// which on two busy cores need not show in its wall time.
	cpu := make([][3]time.Duration, len(paths))
	var missing []string
	// events are the stored events of each path's long runs: the emitter
	// merges the deltas it reads in one go, so how many events a run
	// makes depends on how the reader keeps up with the pipe.
	events := make([][]int, len(paths))
	// settle is the pause after each run: long enough for what a run
	// leaves the daemon to do to end before the next run starts.
	const settle = 20 * time.Millisecond
	const long, short, half = 0, 1, 2 // a run's length, indexing cpu
	runOne := func(i int, length int) {
		task, into := "talk a lot", &took[i]
		switch length {
		case short:
			task, into = "please "+shortTask, &tookShort[i]
		case half:
			task, into = "please "+halfTask, &tookHalf[i]
		}
		start, cpu0 := time.Now(), processCPU()
		runID, err := paths[i].run(ctx, task)
		*into = append(*into, time.Since(start))
		used := processCPU() - cpu0
		require.NoError(t, err, paths[i].name)
		if runID != "" {
			// Right after the answer, before anything else: the whole history.
			evs, err := st.Events(context.Background(), runID, 0, store.MaxEventsLimit)
			require.NoError(t, err)
			if n := len(evs); n == 0 || evs[n-1].Kind != api.EventDone {
				missing = append(missing, fmt.Sprintf("%s: %d events stored at the answer", paths[i].name, n))
			} else if length == long {
				events[i] = append(events[i], n)
			}
		}
		// What the daemon does once the answer is out (the run's history
		// checkpointed into the database, its garbage collected) is this
		// run's cost too, and not the next run's: it is given time to end
		// and counted here, without the check above.
		settled := processCPU()
		time.Sleep(settle)
		used += processCPU() - settled
		cpu[i][length] += used
	}
	for range 3 { // warm caches
		for i := range paths {
			runOne(i, long)
			runOne(i, half)
			runOne(i, short)
		}
	}
	for i := range took {
		took[i], tookHalf[i], tookShort[i], events[i] = nil, nil, nil, nil
		cpu[i] = [3]time.Duration{}
	}
	missing = nil
	runtime.GC()
	idle := readHeap()
	peak.Store(0)
	stopProfile := startProfiles(t)
	for r := range rounds {
		// Rotate which path goes first, so none always follows another's
		// garbage; each path's half and short runs follow its long one.
		for k := range paths {
			runOne((r+k)%len(paths), long)
			runOne((r+k)%len(paths), half)
			runOne((r+k)%len(paths), short)
		}
	}
	stopProfile()
	close(stop)
	sampling.Wait()
	base := median(took[0])
	t.Logf("load: %s", loadAvg())
	t.Logf("%d rounds, each path once per round in rotating order; %d stream lines", rounds, lines)
	for i, p := range paths {
		m := median(took[i])
		stored := ""
		if len(events[i]) > 0 {
			stored = fmt.Sprintf(" | %d events stored (median)", median(events[i]))
		}
		t.Logf("%-24s median %7.2f ms (min %6.2f, max %7.2f) | %.2fx direct, %+.2f ms, %.2f µs per line%s",
			p.name, ms(m), ms(minOf(took[i])), ms(maxOf(took[i])), float64(m)/float64(base), ms(m-base), float64(m-base)/float64(lines)/1e3, stored)
	}
	// What a path costs per line is the difference between its long and
	// its short run, both taken in this sitting: the short run holds what
	// every run pays once (the process, the answer, the turn's bookkeeping).
	t.Logf("per line: each path's long run less its short run (%d lines), over the %d lines between them", shortLines, lines-shortLines)
	perLine := make([]float64, len(paths))
	for i, p := range paths {
		perLine[i] = float64(median(took[i])-median(tookShort[i])) / float64(lines-shortLines) / 1e3
		ratio := ""
		if i > 1 {
			ratio = fmt.Sprintf(" | %.2fx agents.invoke's, %.2fx agents.invoke + stream's", perLine[i]/perLine[1], perLine[i]/perLine[2])
		}
		t.Logf("%-24s short median %6.2f ms | %.2f µs per line%s", p.name, ms(median(tookShort[i])), perLine[i], ratio)
	}
	t.Logf("CPU per line: the process's CPU time while each path's long runs went, less its short runs', over the lines between them")
	cpuLine := make([]float64, len(paths))
	for i, p := range paths {
		cpuLine[i] = float64(cpu[i][long]-cpu[i][short]) / float64(rounds) / float64(lines-shortLines) / 1e3
		ratio := ""
		if i > 1 {
			ratio = fmt.Sprintf(" | %.2fx agents.invoke + stream's", cpuLine[i]/cpuLine[2])
		}
		t.Logf("%-24s CPU %6.2f ms a long run, %5.2f ms a short | %.2f µs per line%s", p.name,
			ms(cpu[i][long]/time.Duration(rounds)), ms(cpu[i][short]/time.Duration(rounds)), cpuLine[i], ratio)
	}
	// Long less short takes a run's cost as a fixed part and a part per
	// line that simply add; the half-length run checks that, each half of
	// the lines on its own. It also keeps a path's short run from coming
	// right after its long one: in that rhythm the control, which does the
	// same work as agents.invoke + stream, came out as far as 18% from it.
	t.Logf("each half of the lines on its own: half less short (%d lines), long less half (%d lines)", halfLines-shortLines, lines-halfLines)
	for i, p := range paths {
		first := float64(median(tookHalf[i])-median(tookShort[i])) / float64(halfLines-shortLines) / 1e3
		second := float64(median(took[i])-median(tookHalf[i])) / float64(lines-halfLines) / 1e3
		cpuFirst := float64(cpu[i][half]-cpu[i][short]) / float64(rounds) / float64(halfLines-shortLines) / 1e3
		cpuSecond := float64(cpu[i][long]-cpu[i][half]) / float64(rounds) / float64(lines-halfLines) / 1e3
		t.Logf("%-24s half median %6.2f ms | %.2f µs per line in the first half, %.2f in the second; CPU %.2f and %.2f",
			p.name, ms(median(tookHalf[i])), first, second, cpuFirst, cpuSecond)
	}
	t.Logf("heap in objects: %.1f MiB idle after GC, peak %.1f MiB while the runs went", mib(idle), mib(peak.Load()))
	for _, m := range missing {
		t.Errorf("not every event was stored by the answer: %s", m)
	}
}

// call sends one JSON-RPC request on ws and reads frames until its answer,
// returning the answer's result; notifications before it are skipped.
func call(ctx context.Context, ws *websocket.Conn, id int, method string, params any) (json.RawMessage, error) {
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := ws.Write(ctx, websocket.MessageText, req); err != nil {
		return nil, err
	}
	for {
		_, frame, err := ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		var m struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(frame, &m) != nil || m.ID == nil || *m.ID != id {
			continue
		}
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, m.Error)
		}
		return m.Result, nil
	}
}

// sessionTurns is the chatty run as turns of one session (sessions.start
// once, subscribed on its own socket): each round one sessions.prompt,
// until the turn's terminal sessions.event. The turns are cold (the
// daemon keeps no warm agent here), as a session turn of the fake is.
func sessionTurns(t *testing.T, d *daemontest.Daemon, cwd string) func(ctx context.Context, task string) (string, error) {
	ws := d.Raw(t)
	ws.SetReadLimit(16 << 20)
	return sessionTurnsOn(t, ws, cwd)
}

// sessionTurnsOn is sessionTurns over a connection the caller dialled.
func sessionTurnsOn(t *testing.T, ws *websocket.Conn, cwd string) func(ctx context.Context, task string) (string, error) {
	ctx := daemontest.Context(t)
	res, err := call(ctx, ws, 1, "sessions.start", map[string]any{"id": agent.ClaudeCode, "cwd": cwd})
	require.NoError(t, err)
	var started struct {
		SessionID string `json:"session_id"`
	}
	require.NoError(t, json.Unmarshal(res, &started))
	_, err = call(ctx, ws, 2, "sessions.subscribe", map[string]any{"session_id": started.SessionID, "after_seq": 0})
	require.NoError(t, err)
	next := 2
	return func(ctx context.Context, task string) (string, error) {
		next++
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": next, "method": "sessions.prompt",
			"params": map[string]any{"session_id": started.SessionID, "task": task}})
		if err := ws.Write(ctx, websocket.MessageText, req); err != nil {
			return "", err
		}
		var runID string
		answered, ended := false, false
		for !answered || !ended {
			_, frame, err := ws.Read(ctx)
			if err != nil {
				return "", err
			}
			switch {
			case bytes.Contains(frame, []byte(`"method":"sessions.event"`)):
				// The terminal event is the only one with a status.
				if bytes.Contains(frame, []byte(`"status":"`)) {
					if !bytes.Contains(frame, []byte(`"kind":"done"`)) {
						return "", fmt.Errorf("turn ended %.300s", frame)
					}
					ended = true
				}
			default:
				var a struct {
					Result struct {
						RunID string `json:"run_id"`
					} `json:"result"`
					Error json.RawMessage `json:"error"`
				}
				if err := json.Unmarshal(frame, &a); err != nil || a.Error != nil {
					return "", fmt.Errorf("answer %s: %v", frame, err)
				}
				runID, answered = a.Result.RunID, true
			}
		}
		return runID, nil
	}
}

// acpTurns is the chatty run as turns of one ACP session on the daemon's
// /acp endpoint (initialize and session/new once): each round one
// session/prompt, until its answer, the session/update notifications of
// the turn read on the way.
func acpTurns(t *testing.T, d *daemontest.Daemon, cwd string) func(ctx context.Context, task string) (string, error) {
	ctx := daemontest.Context(t)
	ws, _, err := websocket.Dial(ctx, strings.Replace(d.URL, "/rpc", "/acp", 1),
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Token}}})
	require.NoError(t, err)
	t.Cleanup(func() { ws.CloseNow() })
	id := acpSession(t, ws, cwd)
	next := 2
	return func(ctx context.Context, task string) (string, error) {
		next++
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": next, "method": "session/prompt",
			"params": map[string]any{"sessionId": id, "prompt": []any{map[string]any{"type": "text", "text": task}}}})
		if err := ws.Write(ctx, websocket.MessageText, req); err != nil {
			return "", err
		}
		var last []byte // the turn's last session/update: its _meta names the run
		for {
			_, frame, err := ws.Read(ctx)
			if err != nil {
				return "", err
			}
			if bytes.Contains(frame, []byte(`"method":"session/update"`)) {
				last = frame
				continue
			}
			if !bytes.Contains(frame, []byte(`"stopReason":"end_turn"`)) {
				return "", fmt.Errorf("answer %.300s", frame)
			}
			var u struct {
				Params struct {
					Meta struct {
						Card struct {
							RunID string `json:"runId"`
						} `json:"card"`
					} `json:"_meta"`
				} `json:"params"`
			}
			_ = json.Unmarshal(last, &u)
			return u.Params.Meta.Card.RunID, nil
		}
	}
}

func readHeap() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func minOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}

func maxOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// loadAvg is /proc/loadavg's first three fields, for the figures' context.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// startProfiles starts a CPU profile into $CARD_BENCH_PROFILE/cpu.pprof,
// when that is set, and returns what stops it and writes the allocations
// since into allocs.pprof. The direct runs are in it too: they cost this
// process only the reading of a pipe.
func startProfiles(t *testing.T) func() {
	dir := os.Getenv("CARD_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	require.NoError(t, err)
	require.NoError(t, pprof.StartCPUProfile(cpu))
	return func() {
		pprof.StopCPUProfile()
		require.NoError(t, cpu.Close())
		f, err := os.Create(filepath.Join(dir, "allocs.pprof"))
		require.NoError(t, err)
		require.NoError(t, pprof.Lookup("allocs").WriteTo(f, 0))
		require.NoError(t, f.Close())
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
