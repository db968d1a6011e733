package detect

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/internal/atomicfile"

	"golang.org/x/sys/unix"
)

// versionCache keeps what running each install taught detection, in a
// small file in the daemon's home, so a restarted daemon can answer at once
// instead of starting every CLI again: for each command it ran, the files
// the answer depends on (with their size, times and inode) and the version
// the command printed.
//
// Only what the wire already shows is kept: paths and versions. A probe
// that failed is not kept at all, since its reason quotes whatever the CLI
// printed, and a broken install is probed again on every start anyway. The
// file is a cache, never a requirement: one that is missing, unreadable,
// corrupt, of another format, a symlink or someone else's is ignored and
// every install is probed again.
type versionCache struct {
	path string
	logf func(string, ...any)

	mu      sync.Mutex
	loaded  bool
	entries map[cacheKey]cacheEntry
	search  *cachedSearch
	// written and writtenSearch are what the file holds, so an unchanged
	// detection does not rewrite it.
	written       map[cacheKey]cacheEntry
	writtenSearch *cachedSearch
}

// cacheFormat is bumped when the file's meaning changes; a file of another
// format is ignored.
const cacheFormat = 1

// cacheLimit bounds what is read: six adapters' entries are a few KiB.
const cacheLimit = 1 << 20

type cacheFile struct {
	Format  int           `json:"format"`
	Search  *cachedSearch `json:"search_path,omitempty"`
	Entries []cacheEntry  `json:"entries"`
}

// cachedSearch is the search path the login shell gave at the last start,
// so the next start can detect before the shell answers again. Key digests
// what it was resolved from (see Detector.searchKey).
type cachedSearch struct {
	Key  string      `json:"key"`
	Dirs []searchDir `json:"dirs"`
}

type searchDir struct {
	Dir    string     `json:"dir"`
	Source api.Source `json:"source"`
}

func toCachedSearch(key string, sp SearchPath) *cachedSearch {
	cs := &cachedSearch{Key: key, Dirs: make([]searchDir, 0, len(sp.Dirs))}
	for _, d := range sp.Dirs {
		cs.Dirs = append(cs.Dirs, searchDir{Dir: d, Source: sp.SourceOf(d)})
	}
	return cs
}

func (cs *cachedSearch) searchPath() SearchPath {
	var sp SearchPath
	for _, d := range cs.Dirs {
		sp.add(d.Dir, d.Source)
	}
	return sp
}

func (cs *cachedSearch) equal(o *cachedSearch) bool {
	if cs == nil || o == nil {
		return cs == o
	}
	return cs.Key == o.Key && slices.Equal(cs.Dirs, o.Dirs)
}

// cacheEntry is one command detection ran and what it printed.
type cacheEntry struct {
	Adapter string `json:"adapter"`
	// Path is the candidate as found on the search path (or pinned).
	Path string `json:"path"`
	// Search is a digest of the PATH the probe ran with: a script's
	// interpreter is looked up on it, so the same file may run under one
	// PATH and not under another.
	Search  string      `json:"search"`
	Files   []fileStamp `json:"files"`
	Version string      `json:"version"`
}

type cacheKey struct{ adapter, path, search string }

func (e cacheEntry) key() cacheKey { return cacheKey{e.Adapter, e.Path, e.Search} }

// fileStamp identifies one version of a file. npm sets every file's mtime
// to the same fixed date, so an upgrade can leave size and mtime as they
// were; the change time and inode of the new file cannot be set that way.
type fileStamp struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
	Inode   uint64 `json:"inode"`
	Dev     uint64 `json:"dev"`
}

func searchDigest(pathValue string) string {
	sum := sha256.Sum256([]byte(pathValue))
	return hex.EncodeToString(sum[:12])
}

// stampFiles stamps each file; ok is false when one cannot be read.
func stampFiles(files []string) ([]fileStamp, bool) {
	out := make([]fileStamp, 0, len(files))
	for _, f := range files {
		var st unix.Stat_t
		if err := unix.Stat(f, &st); err != nil {
			return nil, false
		}
		out = append(out, fileStamp{
			Path:    f,
			Size:    st.Size,
			MtimeNs: st.Mtim.Nano(),
			CtimeNs: st.Ctim.Nano(),
			Inode:   uint64(st.Ino),
			Dev:     uint64(st.Dev),
		})
	}
	return out, true
}

func newVersionCache(path string, logf func(string, ...any)) *versionCache {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &versionCache{path: path, logf: logf}
}

// load reads the file once.
func (c *versionCache) load() {
	if c.loaded {
		return
	}
	c.loaded = true
	c.entries = map[cacheKey]cacheEntry{}
	c.written = map[cacheKey]cacheEntry{}
	cf, err := readCacheFile(c.path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.logf("ignoring the detection cache %s (%v); every agent CLI is probed again", c.path, err)
		}
		return
	}
	if cf.Search != nil && cf.Search.Key != "" && len(cf.Search.Dirs) > 0 {
		c.search, c.writtenSearch = cf.Search, cf.Search
	}
	for _, e := range cf.Entries {
		if e.Adapter == "" || e.Path == "" || e.Version == "" || len(e.Files) == 0 {
			continue
		}
		c.entries[e.key()] = e
		c.written[e.key()] = e
	}
}

func readCacheFile(path string) (*cacheFile, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, errors.New("it is a symlink")
		}
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("it is not a regular file")
	}
	if int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("it belongs to uid %d, not to this user", st.Uid)
	}
	b, err := io.ReadAll(io.LimitReader(f, cacheLimit+1))
	if err != nil {
		return nil, err
	}
	if len(b) > cacheLimit {
		return nil, fmt.Errorf("it is larger than %d bytes", cacheLimit)
	}
	var cf cacheFile
	if err := json.Unmarshal(b, &cf); err != nil {
		return nil, fmt.Errorf("it is not valid: %w", err)
	}
	if cf.Format != cacheFormat {
		return nil, fmt.Errorf("it has format %d, not %d", cf.Format, cacheFormat)
	}
	return &cf, nil
}

// searchPath returns the cached search path resolved from key's inputs.
func (c *versionCache) searchPath(key string) (SearchPath, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	if c.search == nil || c.search.Key != key {
		return SearchPath{}, false
	}
	return c.search.searchPath(), true
}

// setSearch keeps a freshly resolved search path; the next commit writes it.
func (c *versionCache) setSearch(key string, sp SearchPath) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	c.search = toCachedSearch(key, sp)
}

// lookup returns the version a run of this command printed, if every file
// its answer depends on is as it was then.
func (c *versionCache) lookup(k cacheKey, stamps []fileStamp) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	e, ok := c.entries[k]
	if !ok || !slices.Equal(e.Files, stamps) {
		return "", false
	}
	return e.Version, true
}

// session collects one detection's entries: the cache file is rewritten to
// hold exactly what the last complete detection used, so an uninstalled CLI
// leaves no entry behind.
type cacheSession struct {
	c       *versionCache
	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
}

func (c *versionCache) session() *cacheSession {
	return &cacheSession{c: c, entries: map[cacheKey]cacheEntry{}}
}

func (s *cacheSession) keep(e cacheEntry) {
	s.mu.Lock()
	s.entries[e.key()] = e
	s.mu.Unlock()
}

// commit makes the session's entries the cache's, and writes the file when
// they differ from what it holds.
func (s *cacheSession) commit() {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load()
	c.entries = s.entries
	if mapsEqual(c.written, s.entries) && c.search.equal(c.writtenSearch) {
		return
	}
	if err := writeCacheFile(c.path, c.search, s.entries); err != nil {
		c.logf("could not write the detection cache %s: %v", c.path, err)
		return
	}
	c.written, c.writtenSearch = s.entries, c.search
}

func mapsEqual(a, b map[cacheKey]cacheEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || x.Version != y.Version || !slices.Equal(x.Files, y.Files) {
			return false
		}
	}
	return true
}

// writeCacheFile replaces the file atomically (a temp file renamed over
// it), readable by the user alone: a crash mid-write leaves the old file or
// the new one, never half of one.
func writeCacheFile(path string, search *cachedSearch, entries map[cacheKey]cacheEntry) error {
	cf := cacheFile{Format: cacheFormat, Search: search, Entries: make([]cacheEntry, 0, len(entries))}
	for _, e := range entries {
		cf.Entries = append(cf.Entries, e)
	}
	slices.SortFunc(cf.Entries, func(a, b cacheEntry) int {
		if a.Adapter != b.Adapter {
			if a.Adapter < b.Adapter {
				return -1
			}
			return 1
		}
		if a.Path < b.Path {
			return -1
		}
		if a.Path > b.Path {
			return 1
		}
		return 0
	})
	b, err := json.MarshalIndent(cf, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}
