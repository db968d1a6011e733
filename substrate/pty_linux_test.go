//go:build linux

package substrate_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/card-dev/card/internal/proc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sessionOf reads the session id of pid from /proc (0 when it is gone).
func sessionOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	sid, _ := strconv.Atoi(f[3])
	return sid
}

// liveInSession lists the processes of session sid that are not zombies.
func liveInSession(sid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !processAlive(pid) {
			continue
		}
		if sessionOf(pid) == sid {
			out = append(out, pid)
		}
	}
	return out
}

// TestPTYKillEndsEveryProcessOfTheSessionAndNeverWaitsOnTheReader is the
// terminal that used to hang pty_kill: a shell with job control puts itself
// and each job in a process group of its own, and a child that called setsid
// left the session while holding the terminal open. Ending the leader's group
// left them all holding the pty, and pty_kill waited on the reader forever.
func TestPTYKillEndsEveryProcessOfTheSessionAndNeverWaitsOnTheReader(t *testing.T) {
	// jobs starts a setsid child that records its pid and keeps the terminal
	// open, and a background job, then says READY (typed as RE''ADY, so the
	// terminal's echo of the input does not match).
	jobs := func(pidFile string) string {
		return "setsid sh -c 'echo $$ > " + pidFile + "; exec sleep 1000' &\n" +
			"sleep 1000 & echo JOB=$!\n" +
			"echo SHELL=$$ RE''ADY\n"
	}
	cases := []struct {
		name string
		// start is the pty's command for the jobs script; typed means the
		// script is typed into it instead.
		start func(script string) string
		typed bool
	}{
		{"an interactive shell in a group of its own", func(string) string { return "sh" }, true},
		{"a script with job control that ignores SIGTERM and SIGHUP", func(script string) string {
			return "trap '' TERM HUP; set -m\n" + script + "wait"
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := newLocal(t)
			l.KillGrace = 300 * time.Millisecond
			escapedFile := filepath.Join(t.TempDir(), "escaped.pid")
			script := jobs(escapedFile)
			pid, err := l.PTYStart(ctx, tc.start(script))
			require.NoError(t, err)
			// The setsid child is outside the session Close ends; make sure a
			// failing run does not leave it behind.
			t.Cleanup(func() {
				if b, err := os.ReadFile(escapedFile); err == nil {
					if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 1 {
						_ = syscall.Kill(p, syscall.SIGKILL)
					}
				}
			})
			if tc.typed {
				require.NoError(t, l.PTYInput(ctx, pid, script))
			}
			out := readUntil(t, l, pid, "READY")
			m := regexp.MustCompile(`JOB=(\d+)`).FindStringSubmatch(out)
			require.NotNil(t, m, out)
			job, _ := strconv.Atoi(m[1])
			sh := regexp.MustCompile(`SHELL=(\d+) READY`).FindStringSubmatch(out)
			require.NotNil(t, sh, out)
			shell, _ := strconv.Atoi(sh[1])
			var escaped int
			require.Eventually(t, func() bool {
				b, err := os.ReadFile(escapedFile)
				escaped, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil && escaped > 0 && sessionOf(escaped) != pid
			}, 5*time.Second, 10*time.Millisecond, "the setsid child never started")
			require.Equal(t, pid, sessionOf(job), "the job is in the terminal's session")
			jobGroup := groupOf(t, job)
			require.NotEqual(t, pid, jobGroup, "the job leads a group of its own")

			require.True(t, processAlive(pid), "the terminal's own program still runs when it is killed")
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- l.PTYKill(ctx, pid) }()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("pty_kill did not return within 10 s")
			}
			took := time.Since(start)
			t.Logf("pty_kill took %s", took)
			assert.Less(t, took, l.KillGrace+proc.KillWait+time.Second, "pty_kill returned promptly")
			for what, p := range map[string]int{"the shell": shell, "the job": job, "the setsid child": escaped, "the leader": pid} {
				assert.False(t, processAlive(p), "%s (pid %d) survived pty_kill", what, p)
			}
			assert.Empty(t, liveInSession(pid), "no process of the terminal's session survives")
			_, err = l.PTYRead(ctx, pid)
			require.ErrorContains(t, err, "no open pty")
		})
	}
}

func groupOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	g, err := strconv.Atoi(f[2])
	require.NoError(t, err)
	return g
}
