package spawn

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/internal/testskip"
)

// nodeBin is Node, or the test is skipped (failed under CARD_E2E_REQUIRED=1).
func nodeBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		testskip.Skip(t, testskip.Gap{Why: "no node on PATH for the Node-like child", Enable: "install Node.js 20+", Install: true}, "")
	}
	return p
}

// burstThenExit is what Gemini does with a big prompt: one big write of
// the stream (its echo of the prompt, then the answer) and process.exit at
// once, with writes still queued when stdout is a pipe.
const burstThenExit = `const line = 'x'.repeat(99) + '\n';
process.stdout.write(line.repeat(20000) + 'THE ANSWER\n');
process.exit(0);`

const burstBytes = 20000*100 + len("THE ANSWER\n")

func TestANodeChildExitingRightAfterABigWriteIsReadWholeThroughTheStdoutFile(t *testing.T) {
	node := nodeBin(t)
	for _, tc := range []struct {
		name   string
		toFile bool
	}{{"stdout a file", true}, {"stdout a pipe", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := &rawParser{}
			plan := Plan{Program: node, Args: []string{"-e", burstThenExit}, Dir: t.TempDir(), StdoutToFile: tc.toFile}
			_, err := Run(context.Background(), RunSpec{Plan: plan, Parser: p, TempDir: t.TempDir()})
			require.NoError(t, err)
			if tc.toFile {
				assert.Equal(t, burstBytes, p.b.Len(), "every byte the child wrote was read")
				assert.True(t, strings.HasSuffix(p.b.String(), "THE ANSWER\n"), "the last line arrived")
				return
			}
			// Why the file is needed: through a pipe Node drops what
			// the kernel had not taken when it exited.
			assert.Less(t, p.b.Len(), burstBytes, "Node wrote this through a pipe whole; the stdout file may no longer be needed")
		})
	}
}

// stallingParser blocks on its first line, as a slow consumer would hold
// card's reader.
type stallingParser struct {
	rawParser
	once sync.Once
}

func (s *stallingParser) Feed(line []byte) []Event {
	s.once.Do(func() { time.Sleep(300 * time.Millisecond) })
	return nil
}

// A file does not hold the child back the way a full pipe does: the limit
// must be kept on the file's size, even while card's reader is busy, or an
// agent printing without end fills the disk.
func TestTheOutputLimitHoldsOnTheStdoutFileWhileTheReaderIsBusy(t *testing.T) {
	const limit = 1 << 20
	var fd1 *os.File
	start := time.Now()
	plan := Plan{Program: tool(t, "yes"), Args: []string{"spam"}, Dir: t.TempDir(), StdoutToFile: true}
	res, err := Run(context.Background(), RunSpec{Plan: plan, Parser: &stallingParser{}, TempDir: t.TempDir(),
		Limits: Limits{MaxOutput: limit, KillGrace: time.Second},
		OnStart: func(pid, _ int) {
			// The same (unlinked) file the child writes, to measure it.
			f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/fd/1")
			if err == nil {
				fd1 = f
			}
		}})
	assert.Equal(t, api.KindOutputLimit, runErr(t, err).Kind)
	assert.Equal(t, api.KindOutputLimit, res.Error.Kind)
	assert.Less(t, time.Since(start), 5*time.Second)
	if fd1 == nil {
		t.Skip("no /proc to measure the file by")
	}
	defer fd1.Close()
	st, err := fd1.Stat()
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(2*limit), "the stdout file was emptied once past the limit")
}

// The stdout file keeps every guarantee of the pipe: lines arrive as the
// child writes them, cancel and a member left behind end the whole group,
// and nothing of the file is left on disk.
func TestAStdoutFileRunStreamsLiveAndLeavesNoProcessOrFileBehind(t *testing.T) {
	t.Run("lines arrive while the child runs", func(t *testing.T) {
		start := time.Now()
		var firstAt time.Duration
		_, err := Run(context.Background(), RunSpec{
			Plan:    Plan{Program: "/bin/sh", Args: []string{"-c", "echo first; sleep 1; echo second"}, Dir: t.TempDir(), StdoutToFile: true},
			TempDir: t.TempDir(),
			OnEvent: func(ev Event) {
				if ev.Text == "first" {
					firstAt = time.Since(start)
				}
			}})
		require.NoError(t, err)
		require.NotZero(t, firstAt, "the first line arrived")
		assert.Less(t, firstAt, 700*time.Millisecond, "the first line arrived before the child's second")
	})
	t.Run("a member left behind is ended", func(t *testing.T) {
		var pid int
		tmp := t.TempDir()
		start := time.Now()
		_, err := Run(context.Background(), RunSpec{
			Plan:    Plan{Program: "/bin/sh", Args: []string{"-c", "sleep 600 & echo $!; exit 0"}, Dir: t.TempDir(), StdoutToFile: true},
			TempDir: tmp,
			OnEvent: func(ev Event) {
				if p, err := strconv.Atoi(strings.TrimSpace(ev.Text)); err == nil {
					pid = p
				}
			},
			Limits: Limits{KillGrace: 500 * time.Millisecond},
		})
		require.NoError(t, err)
		require.NotZero(t, pid)
		assert.False(t, proc.Alive(pid), "grandchild %d outlived its agent", pid)
		assert.Less(t, time.Since(start), 5*time.Second)
		left, _ := os.ReadDir(tmp)
		assert.Empty(t, left, "the run's private directory and its stdout file are gone")
	})
	t.Run("a writer that escaped the group cannot hold the run open", func(t *testing.T) {
		var escaped int
		t.Cleanup(func() {
			if escaped > 0 {
				_ = syscall.Kill(escaped, syscall.SIGKILL)
			}
		})
		start := time.Now()
		_, err := Run(context.Background(), RunSpec{
			// setsid puts the writer in a session and group of its own,
			// out of card's reach; it keeps the stdout file open and
			// growing.
			Plan:    Plan{Program: "/bin/sh", Args: []string{"-c", "setsid sh -c 'while :; do echo spam; done' & echo $!; exit 0"}, Dir: t.TempDir(), StdoutToFile: true},
			TempDir: t.TempDir(),
			OnEvent: func(ev Event) {
				if p, err := strconv.Atoi(strings.TrimSpace(ev.Text)); err == nil && escaped == 0 {
					escaped = p
				}
			},
			Limits: Limits{KillGrace: 300 * time.Millisecond},
		})
		require.NotZero(t, escaped, "the escaped writer's pid was read")
		assert.Less(t, time.Since(start), 5*time.Second, "the run ended (%v)", err)
	})
	t.Run("cancel ends the group", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var pgid int
		_, err := Run(ctx, RunSpec{
			Plan:    Plan{Program: "/bin/sh", Args: []string{"-c", "sleep 600 & echo started; sleep 600"}, Dir: t.TempDir(), StdoutToFile: true},
			TempDir: t.TempDir(),
			OnStart: func(_, g int) { pgid = g },
			OnEvent: func(ev Event) {
				if ev.Text == "started" {
					cancel()
				}
			},
			Limits: Limits{KillGrace: time.Second},
		})
		assert.Equal(t, api.KindCancelled, runErr(t, err).Kind)
		members, _ := proc.GroupMembers(pgid)
		assert.Empty(t, members, "process group %d survived", pgid)
	})
}

// Which CLIs need the file is a fact of each adapter, and only a one-shot
// run gets it: a conversation's child is ended by card after its turn.
func TestGeminiCopilotAndDroidOneShotRunsAloneWriteStdoutToAFile(t *testing.T) {
	for _, id := range IDs() {
		for _, mode := range []Mode{ModeReadOnly, ModeAsk} {
			a, _ := Lookup(id)
			if mode == ModeAsk && !a.Capabilities.Ask {
				continue
			}
			req := Request{Adapter: id, Cwd: t.TempDir(), Mode: mode}
			p, err := Build("/usr/bin/"+id, req)
			require.NoError(t, err, "%s %s", id, mode)
			want := (id == "gemini" || id == "copilot" || id == "droid") && mode != ModeAsk
			assert.Equal(t, want, p.StdoutToFile, "%s %s", id, mode)
		}
	}
}
