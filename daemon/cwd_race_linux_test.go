//go:build linux

package daemon_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// A writing run's cwd is judged by name, and a directory on the way can be
// swapped for a symlink to a forbidden one between that check and the
// agent's start. Here a project directory and a symlink to the home's
// .ssh trade names all the time (one atomic rename exchange after
// another) while edit runs start there: a run is refused at the check (the
// name led to .ssh, or changed while it was resolved), or
// refused at the start because the directory is no longer the one
// checked, or runs in the project, and none starts or writes in .ssh.
func TestNoRunStartsInAForbiddenDirSwappedInAfterItsCwdWasChecked(t *testing.T) {
	home := t.TempDir()
	forbidden := filepath.Join(home, ".ssh")
	require.NoError(t, os.MkdirAll(forbidden, 0o700))
	rd := startRunsDaemon(t, "", "HOME="+home)
	claude := rd.agents["claude-code"]
	script, err := os.ReadFile(claude.Path)
	require.NoError(t, err)
	// Replaced by rename, never written in place: the daemon's detection
	// may be running the fake's --version right now, and an executable open
	// for writing cannot be run (ETXTBSY).
	newScript := claude.Path + ".next"
	require.NoError(t, os.WriteFile(newScript, []byte(strings.Replace(string(script), "*FAIL*)",
		"*WHERE*) pwd -P > '"+claude.Dir+"'/cwd-\"$CARD_RUN_ID\"; : > ./wrote-\"$CARD_RUN_ID\"; cat '"+
			daemontest.RepoFile(t, "spawn/testdata/claude-stream-success.jsonl")+"'; exit 0;;\n*FAIL*)", 1)), 0o755))
	require.NoError(t, os.Rename(newScript, claude.Path))

	base := t.TempDir()
	proj, alt := filepath.Join(base, "proj"), filepath.Join(base, "alt")
	require.NoError(t, os.Mkdir(proj, 0o755))
	require.NoError(t, os.Symlink(forbidden, alt))
	stop, swapped := make(chan struct{}), make(chan struct{})
	var swaps atomic.Int64
	go func() {
		defer close(swapped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, proj, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE) == nil {
				swaps.Add(1)
			}
			// Each state held for up to half a millisecond, about the
			// time from the check to the start: runs meet both.
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
		}
	}()

	const runs, workers = 240, 6
	var refusedAtCheck, refusedAtStart, ranInProject, ranInForbidden, other atomic.Int64
	ctx := daemontest.Context(t)
	var wg sync.WaitGroup
	next := make(chan int, runs)
	for i := range runs {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				p := rd.params("claude-code", "WHERE do you run?")
				p.Cwd, p.PermissionMode = proj, "edit"
				res, err := rd.Client.Invoke(ctx, p)
				switch {
				case err != nil:
					if re := (*rpcclient.Error)(nil); errors.As(err, &re) && re.Code == rpcclient.CodeInvalidParams && strings.HasPrefix(re.Message, "invalid params: cwd: ") {
						refusedAtCheck.Add(1)
					} else {
						other.Add(1)
						t.Errorf("run refused for another reason: %v", err)
					}
				case res.IsError:
					if res.Error != nil && strings.Contains(res.Error.Message, "changed after it was checked") {
						refusedAtStart.Add(1)
					} else {
						other.Add(1)
						t.Errorf("run failed for another reason: %+v", res.Error)
					}
				default:
					b, err := os.ReadFile(filepath.Join(claude.Dir, "cwd-"+res.RunID))
					if err != nil {
						other.Add(1)
						t.Errorf("run %s left no record of where it ran: %v", res.RunID, err)
						continue
					}
					if where := strings.TrimSpace(string(b)); where == forbidden || strings.HasPrefix(where, forbidden+"/") {
						ranInForbidden.Add(1)
					} else {
						ranInProject.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-swapped
	wrote, _ := filepath.Glob(filepath.Join(forbidden, "wrote-*"))
	t.Logf("%d runs while the names traded %d times: %d refused at the check, %d refused at the start, %d ran in the project, %d ran in .ssh (%d files written there), %d other",
		runs, swaps.Load(), refusedAtCheck.Load(), refusedAtStart.Load(), ranInProject.Load(), ranInForbidden.Load(), len(wrote), other.Load())
	assert.Zero(t, ranInForbidden.Load(), "runs started inside the forbidden directory")
	assert.Empty(t, wrote, "an agent wrote in the forbidden directory")
	assert.Positive(t, ranInProject.Load(), "no run got to start at all, so the test proves nothing")
	assert.Positive(t, refusedAtCheck.Load()+refusedAtStart.Load(), fmt.Sprintf("the swap never met a run (%d swaps)", swaps.Load()))
}
