package daemon_test

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/rpc/rpcclient"
)

// bigPNGs writes n files of size bytes that sniff as PNG.
func bigPNGs(t *testing.T, n, size int) []api.Attachment {
	t.Helper()
	dir := t.TempDir()
	atts := make([]api.Attachment, n)
	for i := range atts {
		b := make([]byte, size)
		copy(b, testPNG(t, color.RGBA{R: uint8(i), A: 255}))
		p := filepath.Join(dir, fmt.Sprintf("shot-%d.png", i))
		require.NoError(t, os.WriteFile(p, b, 0o600))
		atts[i] = api.Attachment{Path: p}
	}
	return atts
}

// allocated is what this process has allocated so far, in bytes: the test
// daemon runs in it, so its reads count.
func allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// A request refused at max_concurrent_runs costs what its checks cost (a
// stat and the first bytes of each file), never its attachments' bytes:
// eight refused requests of 10 × 2 MiB allocate a small fraction of the
// 160 MiB a read of them would. An accepted one streams its images into
// card's private copies and onto Claude's stdin without holding them
// either, and the agent still gets every byte.
func TestARefusedRequestNeverReadsItsAttachmentsAndAnAcceptedOneStreamsThem(t *testing.T) {
	rd := startRunsDaemon(t, "max_concurrent_runs = 1\nmax_inflight_per_connection = 16\n")
	const n, size = 10, 2 << 20
	atts := bigPNGs(t, n, size)
	hold, err := rd.Client.Stream(daemontest.Context(t), api.InvokeParams{AgentSettings: api.AgentSettings{ID: "codex", Cwd: rd.cwd}, Task: "SLEEP"}, nil)
	require.NoError(t, err)

	before := allocated()
	var wg sync.WaitGroup
	codes := make(chan int64, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := rd.params("claude-code", "look")
			p.Attachments = atts
			_, err := rd.Client.Invoke(daemontest.Context(t), p)
			var re *rpcclient.Error
			if errors.As(err, &re) {
				codes <- re.Code
			} else {
				codes <- 0
			}
		}()
	}
	wg.Wait()
	close(codes)
	spent := allocated() - before
	for c := range codes {
		assert.Equal(t, daemon.CodeTooManyRuns, c)
	}
	t.Logf("8 refused requests of %d MiB each allocated %.1f MiB in all", n*size>>20, float64(spent)/(1<<20))
	assert.Less(t, spent, uint64(8*n*size/20), "8 refused requests allocated %d MiB", spent>>20)

	_, err = rd.Client.Cancel(daemontest.Context(t), hold.RunID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		list, err := rd.Client.Runs(daemontest.Context(t), api.ListParams{Status: "running"})
		return err == nil && len(list) == 0
	}, 10*time.Second, 20*time.Millisecond)

	before = allocated()
	p := rd.params("claude-code", "look")
	p.Attachments = atts
	res := rd.finished(t, p)
	spent = allocated() - before
	require.Equal(t, api.StatusSucceeded, res.Status, "%+v", res.Error)
	t.Logf("an accepted run with %d MiB of images allocated %.1f MiB", n*size>>20, float64(spent)/(1<<20))
	assert.Less(t, spent, uint64(n*size/4), "an accepted run allocated %d MiB for %d MiB of images", spent>>20, n*size>>20)
	rec, err := rd.Client.Run(daemontest.Context(t), res.RunID)
	require.NoError(t, err)
	require.Len(t, rec.Attachments, n)
	first, err := os.ReadFile(atts[0].Path)
	require.NoError(t, err)
	assert.Equal(t, sha(first), rec.Attachments[0].SHA256, "the digest is of what was read")
	assert.Equal(t, int64(size), rec.Attachments[0].Size)
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "card-run-*", "attachment-*"))
	for _, l := range left {
		assert.NotContains(t, l, res.RunID)
	}
}

// A path on a kernel file system is refused at once, before any read, and
// leaves no descriptor open: /proc/kmsg's read would wait for the kernel's
// next message for ever, and /proc's other files are no images either.
func TestAnAttachmentOnAKernelFileSystemIsRefusedAtOnceAndLeavesNoDescriptor(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux's kernel file systems")
	}
	rd := startRunsDaemon(t, "")
	// holding is whether this process (the test daemon's) has path open:
	// other tests' descriptors come and go, so the check is by name.
	holding := func(path string) bool {
		self, err := filepath.EvalSymlinks("/proc/self")
		require.NoError(t, err)
		want := strings.Replace(path, "/proc/self/", self+"/", 1)
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target == want {
				return true
			}
		}
		return false
	}
	for _, path := range []string{"/proc/kmsg", "/proc/self/status", "/sys/kernel/mm/transparent_hugepage/enabled"} {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		t.Run(path, func(t *testing.T) {
			p := rd.params("claude-code", "look")
			p.Attachments = []api.Attachment{{Name: "ok.png", DataB64: b64(testPNG(t, color.White)), MimeType: "image/png"}, {Path: path}}
			start := time.Now()
			_, err := rd.Client.Invoke(daemontest.Context(t), p)
			re := rpcCode(t, err)
			assert.Less(t, time.Since(start), 3*time.Second)
			assert.Equal(t, rpcclient.CodeInvalidParams, re.Code)
			assert.Equal(t, "attachments[1].path", errData(t, re)["field"])
			if os.Geteuid() == 0 || path != "/proc/kmsg" {
				assert.Contains(t, re.Message, "kernel file system")
			}
			assert.False(t, holding(path), "a descriptor of %s stayed open", path)
		})
	}
}

// The sweep at start removes what a crashed daemon left in the temporary
// directory, and a private directory another daemon holds stays.
func TestADeadDaemonsPrivateDirectoriesAreSweptAtStart(t *testing.T) {
	tmp := t.TempDir()
	dead := filepath.Join(tmp, "card-run-123")
	require.NoError(t, os.Mkdir(dead, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dead, ".card-owner"), []byte("99999\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dead, "attachment-1.png"), []byte("x"), 0o600))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(dead, old, old))
	fresh := filepath.Join(tmp, "card-run-456") // just made by a live daemon, not locked yet
	require.NoError(t, os.Mkdir(fresh, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(fresh, ".card-owner"), []byte("1\n"), 0o600))

	startRunsDaemon(t, "", "TMPDIR="+tmp)
	_, err := os.Stat(dead)
	assert.True(t, os.IsNotExist(err), "the dead daemon's directory is still there")
	_, err = os.Stat(fresh)
	assert.NoError(t, err, "a directory that may be about to be locked was swept")
}
