package daemon_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
)

// How a daemon ended is there for whoever looks next, even when its
// supervisor restarted it silently: a Go crash (SIGQUIT's dump is written
// as one) leaves its output in a log under the home, a death nothing in the
// process saw (SIGKILL) leaves the mark of a run that never finished, and a
// clean stop leaves neither. The next start's daemon.info names it.
func TestTheNextStartReportsHowThePreviousDaemonEnded(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("signals")
	}
	bin := daemontest.Build(t)
	cases := []struct {
		name   string
		signal syscall.Signal
		exit   int
		kind   api.CrashKind
		first  string
	}{
		{name: "a SIGQUIT dump is a crash with its output kept", signal: syscall.SIGQUIT, exit: 2, kind: api.CrashOutput, first: "SIGQUIT: quit"},
		{name: "a SIGKILL is an unclean exit", signal: syscall.SIGKILL, exit: -1, kind: api.CrashUncleanExit},
		{name: "a SIGTERM is a clean stop and reports nothing", signal: syscall.SIGTERM, exit: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := daemontest.Context(t)
			first := daemontest.Serve(t, bin, daemontest.Options{NoClient: true})
			pid := first.Cmd.Process.Pid
			require.NoError(t, first.Cmd.Process.Signal(tc.signal))
			assert.Equal(t, tc.exit, first.Wait(t, 15*time.Second))

			next := daemontest.Serve(t, bin, daemontest.Options{Home: first.Home})
			info, err := next.Client.Info(ctx)
			require.NoError(t, err)
			logs, _ := filepath.Glob(filepath.Join(first.Home, daemon.CrashDirName, "card-*.log"))
			if tc.kind == "" {
				assert.Nil(t, info.LastCrash, "a clean stop is no crash")
				assert.Len(t, logs, 1, "only the running daemon's own, empty log is there: %v", logs)
				return
			}
			require.NotNil(t, info.LastCrash, "daemon.info names the last crash")
			lc := info.LastCrash
			assert.Equal(t, tc.kind, lc.Kind)
			assert.Equal(t, pid, lc.PID)
			assert.NotEmpty(t, lc.StartedAt)
			assert.NotEmpty(t, lc.NoticedAt)
			assert.Contains(t, lc.Summary, "pid")
			if tc.kind == api.CrashOutput {
				require.NotEmpty(t, lc.FirstLines)
				assert.Equal(t, tc.first, lc.FirstLines[0])
				assert.True(t, strings.HasPrefix(lc.File, filepath.Join(first.Home, daemon.CrashDirName)+string(filepath.Separator)), lc.File)
				b, err := os.ReadFile(lc.File)
				require.NoError(t, err, "the crash log is kept")
				assert.Contains(t, string(b), "goroutine", "the whole dump, stacks and all")
				st, err := os.Stat(lc.File)
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "a dump can hold a prompt: it is the user's alone")
			} else {
				assert.Empty(t, lc.File)
			}
			log, err := os.ReadFile(next.LogPath)
			require.NoError(t, err)
			assert.Contains(t, string(log), "did not stop cleanly", "the log says so too")

			// A later, clean restart still shows the last crash: two
			// silent restarts in a row do not wipe the one trace.
			require.NoError(t, next.Client.Close())
			next.Client = nil
			require.NoError(t, next.Cmd.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 0, next.Wait(t, 15*time.Second))
			again := daemontest.Serve(t, bin, daemontest.Options{Home: first.Home})
			info, err = again.Client.Info(ctx)
			require.NoError(t, err)
			require.NotNil(t, info.LastCrash)
			assert.Equal(t, pid, info.LastCrash.PID)
		})
	}
}
