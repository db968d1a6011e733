package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/client"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/internal/testskip"
)

// timedAgentEnv names the FIFO a re-executed test binary writes its copy of
// every line to, when it plays the timed agent.
const timedAgentEnv = "CARD_TIMED_AGENT_FIFO"

// Lines the timed agent writes, and the pause between two.
const (
	timedLines = 2000
	timedPause = 2 * time.Millisecond
)

// timedAgent is a fake Claude Code that writes timedLines text deltas, each
// carrying its index and the wall-clock time it was written, to fifo (for
// the test to read straight from a pipe) and then to stdout (for card),
// timedPause apart.
func timedAgent(fifo string) int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	pipe, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pipe.Close()
	const session = `"session_id":"7c5ad0a4-2a35-4e41-9d6b-2a8e2d1b0c11"`
	fmt.Printf(`{"type":"system","subtype":"init",%s,"model":"claude-timed"}`+"\n", session)
	fmt.Printf(`{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_timed"}},%s}`+"\n", session)
	for i := 0; i < timedLines; i++ {
		line := fmt.Sprintf(`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"%d:%d "}},%s}`+"\n",
			i, time.Now().UnixNano(), session)
		// The test's copy first: card's copy then starts a write later, so
		// what card is measured to add is, if anything, too much.
		if _, err := pipe.WriteString(line); err != nil {
			return 1
		}
		if _, err := os.Stdout.WriteString(line); err != nil {
			return 1
		}
		time.Sleep(timedPause)
	}
	fmt.Printf(`{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"timed",%s}`+"\n", session)
	return 0
}

// stamp reads "i:unixnano" from a text delta.
func stamp(text string) (int, time.Time, bool) {
	a, b, ok := strings.Cut(strings.TrimSpace(text), ":")
	if !ok {
		return 0, time.Time{}, false
	}
	i, err1 := strconv.Atoi(a)
	ns, err2 := strconv.ParseInt(b, 10, 64)
	return i, time.Unix(0, ns), err1 == nil && err2 == nil
}

// From an agent writing a line of text to a subscribed client receiving it
// as an agents.event, against reading the same line straight from a pipe,
// in the same run: the agent writes each text delta, with the time it
// wrote it, to a FIFO this test reads itself and to its stdout, read by
// card (runner, Claude parser, retry guard, event log, fan-out, WebSocket,
// the typed client).
//
//	CARD_BENCH=1 go test -count=1 -run TestLiveTextLatencyAgainstReadingThePipe -v ./daemon/
func TestLiveTextLatencyAgainstReadingThePipe(t *testing.T) {
	if os.Getenv("CARD_BENCH") != "1" {
		testskip.Skip(t, testskip.Bench, "benchmark of live-text latency (figures go to docs/performance.md)")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	const rounds = 3
	var viaCard, viaPipe []time.Duration
	for round := 0; round < rounds; round++ {
		dir := t.TempDir()
		fifo := filepath.Join(dir, "lines")
		require.NoError(t, syscall.Mkfifo(fifo, 0o600))
		agentBin := daemontest.Script(t, "claude", fmt.Sprintf(`case "$1" in
--version) echo "2.1.197 (Claude Code)"; exit 0;;
auth) exit 1;;
esac
%s=%q exec %q "$@"`, timedAgentEnv, fifo, exe))

		var mu sync.Mutex
		var cardLat []time.Duration
		done := make(chan struct{})
		d := daemontest.Start(t, daemontest.Options{
			Config: "login_shell_path = false\nmax_events_per_run = 10000\n",
			Agents: map[string]string{agent.ClaudeCode: agentBin},
		})
		pipeLat := make(chan []time.Duration, 1)
		go func() {
			var lat []time.Duration
			defer func() { pipeLat <- lat }()
			f, err := os.Open(fifo) // blocks until the agent opens its end
			if err != nil {
				return
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64<<10), 64<<10)
			for sc.Scan() {
				now := time.Now()
				line := sc.Text()
				i := strings.Index(line, `"text":"`)
				if i < 0 {
					continue
				}
				rest := line[i+len(`"text":"`):]
				if _, at, ok := stamp(rest[:strings.IndexByte(rest, '"')]); ok {
					lat = append(lat, now.Sub(at))
				}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := d.Client.Stream(ctx, api.InvokeParams{AgentSettings: api.AgentSettings{ID: agent.ClaudeCode, Cwd: dir}, Task: "time me"}, func(ev api.AgentEvent) {
			now := time.Now()
			if ev.Kind == api.EventText {
				if _, at, ok := stamp(ev.Text); ok {
					mu.Lock()
					cardLat = append(cardLat, now.Sub(at))
					mu.Unlock()
				}
			}
			if client.Terminal(ev) {
				close(done)
			}
		})
		require.NoError(t, err)
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the timed run did not end")
		}
		cancel()
		pl := <-pipeLat
		mu.Lock()
		require.Len(t, cardLat, timedLines, "every line reached the client")
		require.Len(t, pl, timedLines, "every line came through the pipe")
		t.Logf("round %d: pipe median %v p99 %v | card median %v p99 %v", round+1,
			quantile(pl, 0.5), quantile(pl, 0.99), quantile(cardLat, 0.5), quantile(cardLat, 0.99))
		viaCard, viaPipe = append(viaCard, cardLat...), append(viaPipe, pl...)
		mu.Unlock()
	}
	mc, mp := quantile(viaCard, 0.5), quantile(viaPipe, 0.5)
	t.Logf("%d lines, %v apart, %d rounds: straight from the pipe median %v p99 %v; through card to the client median %v p99 %v; card adds %v at the median (goal ≤ +2ms), %v at p99",
		len(viaCard), timedPause, rounds, mp, quantile(viaPipe, 0.99), mc, quantile(viaCard, 0.99), mc-mp, quantile(viaCard, 0.99)-quantile(viaPipe, 0.99))
	assert.Positive(t, int64(mc), "the measurement measured something")
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))].Round(time.Microsecond)
}
