package detect

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// cacheRig is a home with a detection cache and one fake Gemini whose
// `--version` prints what its version file holds, so a test can tell an
// answer from the cache (the old version) from one a probe gave (the new).
type cacheRig struct {
	t       *testing.T
	bin     string // the search path's first dir
	home    string
	search  SearchPath
	cache   string
	cli     string
	version string // the version file
	delay   string // seconds the CLI sleeps before answering
	runs    func() int
	logs    *logLines
}

type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func newCacheRig(t *testing.T) *cacheRig {
	t.Helper()
	r := &cacheRig{t: t, bin: t.TempDir(), home: t.TempDir(), cache: filepath.Join(t.TempDir(), "detection.json"), logs: &logLines{}}
	r.version = filepath.Join(t.TempDir(), "version")
	r.delay = filepath.Join(t.TempDir(), "delay")
	r.setVersion("1.0.0")
	must(t, os.WriteFile(r.delay, []byte("0\n"), 0o644))
	count, runs := counter(t)
	r.runs = runs
	r.cli = fakeCLI(t, r.bin, "gemini", fmt.Sprintf("echo run >> %s; sleep $(cat %s); cat %s", count, r.delay, r.version))
	r.search = NewSearchPath(r.bin + ":" + toolsDir(t))
	return r
}

func (r *cacheRig) setVersion(v string) {
	must(r.t, os.WriteFile(r.version, []byte(v+"\n"), 0o644))
}

// start is one daemon start: a new detector on the same home and cache.
func (r *cacheRig) start(opts ...func(*Options)) *Detector {
	o := Options{Search: r.search, Home: r.home, Env: testEnv(), ScratchDirs: []string{},
		ProbeTimeout: 5 * time.Second, Quick: true, CacheFile: r.cache, Logf: r.logs.logf}
	for _, f := range opts {
		f(&o)
	}
	d := New(o)
	r.t.Cleanup(d.Close)
	return d
}

func (r *cacheRig) detect(d *Detector) api.ExternalAgentSpec {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range d.Detect(ctx, false) {
		if s.ID == agent.Gemini {
			return s
		}
	}
	r.t.Fatal("gemini not detected")
	return api.ExternalAgentSpec{}
}

// detectAndSettle detects and then closes the detector, which waits for any
// background confirmation: the cache file is final afterwards.
func (r *cacheRig) detectAndSettle(d *Detector) api.ExternalAgentSpec {
	s := r.detect(d)
	d.Close()
	return s
}

func TestARestartedDetectorAnswersFromTheCacheAndConfirmsInTheBackground(t *testing.T) {
	r := newCacheRig(t)
	first := r.detectAndSettle(r.start())
	assert.Equal(t, "1.0.0", first.Version)
	require.Equal(t, 1, r.runs())
	fi, err := os.Stat(r.cache)
	require.NoError(t, err, "the first detection leaves the cache behind")
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// The CLI now prints another version although its file is unchanged:
	// only an answer from the cache can still say 1.0.0.
	r.setVersion("2.0.0")
	d := r.start()
	s := r.detect(d)
	assert.Equal(t, "1.0.0", s.Version, "answered from the cache, without running the CLI")
	assert.True(t, s.Execution.IsRunnable())
	gen := d.Generation()

	// The confirmation runs it and the cached detection follows the probe.
	require.Eventually(t, func() bool { return r.detect(d).Version == "2.0.0" }, 10*time.Second, 20*time.Millisecond)
	assert.Greater(t, d.Generation(), gen, "a changed answer is a new generation")
	assert.Equal(t, 2, r.runs())
}

func TestAConfirmationThatAgreesKeepsTheGeneration(t *testing.T) {
	r := newCacheRig(t)
	r.detectAndSettle(r.start())
	d := r.start()
	r.detect(d)
	gen := d.Generation()
	require.Eventually(t, func() bool { return r.runs() == 2 }, 10*time.Second, 20*time.Millisecond)
	d.Close() // waits for the confirmation to finish
	assert.Equal(t, gen, d.Generation(), "an unchanged answer keeps its encoding valid")
}

// A cached answer holds only while every file it came from is as it was;
// any change, or another command path or PATH, means running it again.
func TestTheCacheIsNotUsedOnceTheBinaryOrItsPlaceChanges(t *testing.T) {
	cases := []struct {
		name   string
		change func(r *cacheRig) []func(*Options)
	}{
		{"the binary's size changed", func(r *cacheRig) []func(*Options) {
			must(r.t, os.WriteFile(r.cli, append(mustRead(r.t, r.cli), []byte("# upgraded\n")...), 0o755))
			return nil
		}},
		{"the binary's mtime changed", func(r *cacheRig) []func(*Options) {
			later := time.Now().Add(time.Hour)
			must(r.t, os.Chtimes(r.cli, later, later))
			return nil
		}},
		{"the binary was replaced by a file of the same size and mtime (as npm writes them)", func(r *cacheRig) []func(*Options) {
			fi, err := os.Stat(r.cli)
			must(r.t, err)
			b := mustRead(r.t, r.cli)
			tmp := r.cli + ".new"
			must(r.t, os.WriteFile(tmp, b, 0o755))
			must(r.t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
			time.Sleep(20 * time.Millisecond) // a change time the old file cannot have
			must(r.t, os.Rename(tmp, r.cli))
			return nil
		}},
		{"the command is found at another path", func(r *cacheRig) []func(*Options) {
			moved := r.t.TempDir()
			must(r.t, os.Rename(r.cli, filepath.Join(moved, "gemini")))
			r.search = NewSearchPath(moved + ":" + strings.Join(r.search.Dirs[1:], ":"))
			return nil
		}},
		{"the PATH the command runs with changed", func(r *cacheRig) []func(*Options) {
			r.search = NewSearchPath(r.search.PATH() + ":" + r.t.TempDir())
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newCacheRig(t)
			r.detectAndSettle(r.start())
			require.Equal(t, 1, r.runs())
			opts := tc.change(r)
			r.setVersion("2.0.0")
			s := r.detect(r.start(opts...))
			assert.Equal(t, "2.0.0", s.Version, "the first answer already comes from running it")
		})
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return b
}

// A bad cache file costs a probe, never a failed detection, and is replaced
// by a good one.
func TestABadCacheFileMeansProbingAgain(t *testing.T) {
	cases := []struct {
		name  string
		plant func(t *testing.T, path string)
		why   string
	}{
		{"garbage", func(t *testing.T, p string) { must(t, os.WriteFile(p, []byte("\x00\x01 not json"), 0o600)) }, "not valid"},
		{"truncated", func(t *testing.T, p string) {
			must(t, os.WriteFile(p, []byte(`{"format":1,"entries":[{"adapter":"gemini","pa`), 0o600))
		}, "not valid"},
		{"another format", func(t *testing.T, p string) { must(t, os.WriteFile(p, []byte(`{"format":99,"entries":[]}`), 0o600)) }, "format 99"},
		{"a directory", func(t *testing.T, p string) { must(t, os.Mkdir(p, 0o700)) }, "not a regular file"},
		{"a symlink", func(t *testing.T, p string) {
			target := filepath.Join(t.TempDir(), "elsewhere.json")
			must(t, os.WriteFile(target, []byte(`{"format":1,"entries":[]}`), 0o600))
			must(t, os.Symlink(target, p))
		}, "symlink"},
		{"wrong shapes", func(t *testing.T, p string) {
			must(t, os.WriteFile(p, []byte(`{"format":1,"entries":[{"adapter":7,"files":"x"}]}`), 0o600))
		}, "not valid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newCacheRig(t)
			tc.plant(t, r.cache)
			s := r.detectAndSettle(r.start())
			assert.Equal(t, "1.0.0", s.Version)
			assert.Equal(t, 1, r.runs(), "probed")
			assert.Contains(t, r.logs.String(), tc.why)
			if tc.name == "a directory" {
				return // nothing can replace a directory; detection still works
			}
			fi, err := os.Lstat(r.cache)
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "replaced by a regular file")
			r.setVersion("2.0.0")
			assert.Equal(t, "1.0.0", r.detect(r.start()).Version, "and the new file is used")
		})
	}
}

// A failed probe is not kept: its reason quotes what the CLI printed, which
// could be anything, and the next start runs it again anyway.
func TestOnlyVersionsAreKeptNeverWhatAFailingCLIPrinted(t *testing.T) {
	r := newCacheRig(t)
	must(t, os.WriteFile(r.cli, []byte("#!/bin/sh\necho 'error: key sk-secret-123 rejected' >&2\nexit 3\n"), 0o755))
	s := r.detectAndSettle(r.start())
	reason, unusable := s.UnusableReason()
	require.True(t, unusable)
	assert.Contains(t, reason, "sk-secret-123", "the wire still says why")
	b, err := os.ReadFile(r.cache)
	if !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	assert.NotContains(t, string(b), "sk-secret")
	assert.NotContains(t, string(b), `"gemini"`, "no entry for an install that does not run")
}

// The login shell's PATH is asked in the background: a restarted detector
// answers on the path it resolved last time without waiting for the shell.
func TestTheLoginShellPathIsResolvedOffTheCriticalPathAndReusedAfterARestart(t *testing.T) {
	r := newCacheRig(t)
	var resolves atomic.Int32
	release := make(chan struct{})
	resolve := func(block bool) func(*Options) {
		return func(o *Options) {
			base := o.Search
			o.Search = NewSearchPath("/nonexistent") // what is known before the shell answers
			o.ResolveSearch = func(ctx context.Context) SearchPath {
				resolves.Add(1)
				if block {
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
				return base
			}
		}
	}
	first := r.detectAndSettle(r.start(resolve(false)))
	require.Equal(t, "1.0.0", first.Version, "the first start waits for the shell: there is no other path")
	require.EqualValues(t, 1, resolves.Load())

	d := r.start(resolve(true))
	done := make(chan api.ExternalAgentSpec, 1)
	go func() { done <- r.detect(d) }()
	select {
	case s := <-done:
		assert.Equal(t, "1.0.0", s.Version, "found on the path the shell gave last time")
	case <-time.After(5 * time.Second):
		t.Fatal("the restarted detector waited for the login shell")
	}
	assert.Equal(t, r.bin, d.SearchPath().Dirs[0])
	close(release)
	require.Eventually(t, func() bool { return resolves.Load() == 2 }, 5*time.Second, 10*time.Millisecond,
		"the shell is still asked, in the background")
}

// A probe past its deadline says the install runs but not its version; the
// version the cache holds for the unchanged files is kept, by the
// background confirmation and by a refresh alike.
func TestAProbeThatTimesOutKeepsTheVersionTheUnchangedFilesHad(t *testing.T) {
	r := newCacheRig(t)
	r.detectAndSettle(r.start())
	must(t, os.WriteFile(r.delay, []byte("3\n"), 0o644)) // the script itself is unchanged
	short := func(o *Options) { o.ProbeTimeout = 300 * time.Millisecond }
	d := r.start(short)
	assert.Equal(t, "1.0.0", r.detect(d).Version)
	require.Eventually(t, func() bool { return r.runs() == 2 }, 10*time.Second, 20*time.Millisecond, "the confirmation ran it")
	time.Sleep(time.Second) // past the probe's deadline and its kill grace: the confirmation has finished
	d.Close()
	assert.Equal(t, "1.0.0", r.detect(d).Version, "kept after the confirmation timed out")

	d = r.start(short)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	specs := d.Detect(ctx, true)
	require.Len(t, specs, 1)
	assert.Equal(t, "1.0.0", specs[0].Version, "kept by a refresh that timed out")
	assert.True(t, specs[0].Execution.IsRunnable())
}
