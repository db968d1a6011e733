package detect

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/card-dev/card/api"
)

// Defaults for Options.
const (
	// DefaultProbeTimeout: real `gemini --version` takes about 3 s on an idle
	// machine; the 2 s some tools use loses its version.
	DefaultProbeTimeout  = 5 * time.Second
	DefaultHealthTimeout = 5 * time.Second
	// DefaultHealthTTL bounds how stale a health answer may be while keeping
	// ten windows opening at once from each running `claude auth status`.
	DefaultHealthTTL = 30 * time.Second
)

// Options configures a Detector. Zero values take the defaults; only Search
// is required for detection to find anything.
type Options struct {
	// Search is the resolved search path (see ResolveSearchPath). Probes run
	// with PATH set to it.
	Search SearchPath
	// Home is the user's home directory (credential files live under it).
	Home string
	// Env is the daemon's environment as read at startup: the base of every
	// probe's environment and, by default, what Getenv reads. nil is an
	// empty environment; nothing here reads the process's live one. Its
	// proc.ProbeEnv, when set, is the tag every probe carries (the daemon
	// sets it, so that its next start can end what a probe left running).
	Env map[string]string
	// Getenv reads pins and auth variables; default: a lookup in Env.
	Getenv func(string) string
	// Pins maps adapter id → binary path from card.toml. The environment
	// variable (Descriptor.PinEnv) wins over it.
	Pins map[string]string
	// Adapters holds, by adapter id, the operator's card.toml args and env
	// that every run of the adapter carries. Health reads sign-in through
	// them: a key set only in [adapters.<id>] env is one the runs have.
	Adapters map[string]AdapterSettings
	// WellKnown, when set, lists the well-known install directories (see
	// WellKnownDirs). It is called before every detection and the path
	// grows by what it adds, so a CLI installed after startup into a
	// directory that did not exist then is found on refresh.
	WellKnown func() []string
	// ProbeTimeout bounds each `--version` probe; HealthTimeout each status
	// command; HealthTTL how long a health answer is reused.
	ProbeTimeout, HealthTimeout, HealthTTL time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// ScratchDirs are never searched (pins are exempt). nil means
	// DefaultScratchDirs; a non-nil empty slice disables the rule (tests,
	// whose temp dirs live under /tmp).
	ScratchDirs []string
	// GOOS is the platform for auth heuristics; default runtime.GOOS.
	GOOS string

	// ResolveSearch, when set, finds the search path the slow way
	// (ResolveSearchPath asks the user's login shell, which can take a
	// second with a heavy profile). The detector calls it when it first
	// needs the path, not the caller at startup; until then Search is the
	// path, and with Quick and a CacheFile the path it returned last time
	// is used while it runs again in the background.
	ResolveSearch func(ctx context.Context) SearchPath
	// Quick lets the first detection answer without running an install it
	// can vouch for otherwise: from CacheFile while every file the cached
	// answer came from is unchanged, or from the install's own package.json
	// for the npm layouts each adapter describes. Every answer given that
	// way is then confirmed by running the installs in the background, one
	// at a time, and the cached detection replaced if the two differ.
	// Refreshes always run them.
	Quick bool
	// CacheFile is where what running the installs taught is kept across
	// restarts (see versionCache); empty keeps nothing.
	CacheFile string
	// Logf reports what a caller may want in its log (a cache file that
	// was ignored); nil discards it.
	Logf func(format string, args ...any)
}

// Detector finds the adapters and answers health checks, caching both.
// It is safe for concurrent use.
type Detector struct {
	opts Options

	// base outlives callers: a shared probe must not die because the first
	// caller that asked for it went away. Close cancels it.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	cache *versionCache // nil without a CacheFile
	// searchResolved is set once ResolveSearch has run (or there is none);
	// searchMu lets one caller run it at a time.
	searchResolved atomic.Bool
	searchMu       sync.Mutex

	mu sync.Mutex
	// search is the current search path (see Options.WellKnown and
	// Options.ResolveSearch); a detection reads it once when it starts.
	search SearchPath
	// skipped holds, by adapter id, the installs the last detection saw
	// in a scratch directory and did not use.
	skipped   map[string][]string
	specs     []api.ExternalAgentSpec
	haveSpecs bool
	// gen counts the detections stored in specs (0: none yet), so a caller
	// that keeps something derived from an answer (its encoding) knows when
	// it is stale without comparing specs.
	gen       atomic.Uint64
	detecting *flight[[]api.ExternalAgentSpec]
	health    map[string]healthEntry
	probing   map[string]*flight[api.ExternalAgentHealth]
}

type healthEntry struct {
	h  api.ExternalAgentHealth
	at time.Time
}

// flight is one in-progress computation that several callers wait on.
type flight[T any] struct {
	done chan struct{}
	val  T
	gen  uint64
}

// New returns a Detector. It starts nothing until the first call.
func New(opts Options) *Detector {
	if opts.Getenv == nil {
		env := opts.Env
		opts.Getenv = func(k string) string { return env[k] }
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	if opts.HealthTTL <= 0 {
		opts.HealthTTL = DefaultHealthTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ScratchDirs == nil {
		opts.ScratchDirs = DefaultScratchDirs
	}
	if opts.GOOS == "" {
		opts.GOOS = runtime.GOOS
	}
	base, cancel := context.WithCancel(context.Background())
	d := &Detector{
		opts:    opts,
		base:    base,
		cancel:  cancel,
		search:  opts.Search.clone(),
		skipped: map[string][]string{},
		health:  map[string]healthEntry{},
		probing: map[string]*flight[api.ExternalAgentHealth]{},
	}
	if opts.CacheFile != "" {
		d.cache = newVersionCache(opts.CacheFile, opts.Logf)
	}
	d.searchResolved.Store(opts.ResolveSearch == nil)
	return d
}

// Close stops in-flight probes (their process groups are killed) and waits
// for them. Calls after Close return promptly with timed-out probes.
func (d *Detector) Close() {
	d.cancel()
	d.wg.Wait()
}

func (d *Detector) unixNow() uint64 { return uint64(d.opts.Now().Unix()) }

// Detect returns one spec per installed adapter, in registry order. Adapters
// with no binary at all are left out; a pinned adapter whose pin does not
// resolve, and installs that do not run, are included with an unusable
// execution so a person can find what is broken. The first call detects; later
// calls return the cached answer unless refresh is set. Concurrent callers
// share one detection. If ctx ends first the caller gets what is cached (nil if
// nothing), and the detection finishes in the background.
func (d *Detector) Detect(ctx context.Context, refresh bool) []api.ExternalAgentSpec {
	specs, _ := d.DetectGen(ctx, refresh)
	return specs
}

// Generation is the number of the detection Detect would answer from the
// cache now; 0 before the first has finished. It changes whenever the
// cached answer does.
func (d *Detector) Generation() uint64 { return d.gen.Load() }

// DetectGen is Detect, also returning the generation of the answer.
func (d *Detector) DetectGen(ctx context.Context, refresh bool) ([]api.ExternalAgentSpec, uint64) {
	d.mu.Lock()
	if d.haveSpecs && !refresh {
		out := cloneSpecs(d.specs)
		gen := d.gen.Load()
		d.mu.Unlock()
		return out, gen
	}
	f := d.detecting
	if f == nil {
		f = &flight[[]api.ExternalAgentSpec]{done: make(chan struct{})}
		d.detecting = f
		quick := d.opts.Quick && !refresh && !d.haveSpecs
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			run := d.newRun(quick, 0)
			if !quick {
				d.resolveSearch(d.base)
			} else if !d.searchResolved.Load() {
				d.useCachedSearch()
			}
			specs := d.detectAll(d.base, run)
			// A detection Close cut short is not written down; one that
			// finished is, even if Close comes while it is being written.
			complete := d.base.Err() == nil
			d.mu.Lock()
			f.val = specs
			d.specs, d.haveSpecs = specs, true
			f.gen = d.gen.Add(1)
			d.detecting = nil
			d.mu.Unlock()
			close(f.done)
			if !complete {
				return
			}
			run.commit()
			if d.base.Err() != nil {
				return
			}
			if run.unconfirmed.Load() || !d.searchResolved.Load() {
				d.confirm(f.gen)
			}
		}()
	}
	d.mu.Unlock()

	select {
	case <-f.done:
		return cloneSpecs(f.val), f.gen
	case <-ctx.Done():
		d.mu.Lock()
		defer d.mu.Unlock()
		return cloneSpecs(d.specs), d.gen.Load()
	}
}

// Cached returns the last detection and whether there has been one.
func (d *Detector) Cached() ([]api.ExternalAgentSpec, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return cloneSpecs(d.specs), d.haveSpecs
}

func cloneSpecs(in []api.ExternalAgentSpec) []api.ExternalAgentSpec {
	if in == nil {
		return nil
	}
	out := make([]api.ExternalAgentSpec, len(in))
	copy(out, in)
	return out
}

// detectAll detects every adapter concurrently, on the search path as it
// is when it starts, grown by the well-known directories that appeared.
func (d *Detector) detectAll(ctx context.Context, run *detectRun) []api.ExternalAgentSpec {
	search := d.refreshSearch()
	all := descriptors()
	results := make([]*api.ExternalAgentSpec, len(all))
	skipped := make([][]string, len(all))
	var wg sync.WaitGroup
	for i, desc := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], skipped[i] = d.detectOne(ctx, run, search, desc)
		}()
	}
	wg.Wait()
	var out []api.ExternalAgentSpec
	d.mu.Lock()
	for i, r := range results {
		if r != nil {
			out = append(out, *r)
		}
		d.skipped[all[i].ID] = skipped[i]
	}
	d.mu.Unlock()
	return out
}

// pin returns the pin for an adapter: the environment variable first (a
// per-launch override), then card.toml.
func (d *Detector) pin(desc Descriptor) (setting pinSetting, value string, ok bool) {
	if v := strings.TrimSpace(d.opts.Getenv(desc.PinEnv)); v != "" {
		return pinSetting{env: desc.PinEnv}, v, true
	}
	if v := strings.TrimSpace(d.opts.Pins[desc.ID]); v != "" {
		return pinSetting{adapter: desc.ID}, v, true
	}
	return pinSetting{}, "", false
}

// A pinSetting is where a pin was set, so a broken one is named as the
// person wrote it: CAR_CODEX_BIN=/x in the environment, or bin = "/x" under
// [adapters.codex] in card.toml.
type pinSetting struct{ env, adapter string }

// name is the setting alone: what to fix or remove.
func (p pinSetting) name() string {
	if p.env != "" {
		return p.env
	}
	return "bin under [adapters." + p.adapter + "] in card.toml"
}

// set is the setting with its value, as written.
func (p pinSetting) set(value string) string {
	if p.env != "" {
		return p.env + "=" + value
	}
	return fmt.Sprintf("bin = %q under [adapters.%s] in card.toml", value, p.adapter)
}

func (d *Detector) baseSpec(desc Descriptor) api.ExternalAgentSpec {
	kind := api.AuthKindUnknown
	if desc.AuthKind != nil {
		kind = desc.AuthKind(AuthInput{Home: d.opts.Home, Getenv: d.adapterGetenv(desc.ID), GOOS: d.opts.GOOS, Args: d.opts.Adapters[desc.ID].Args})
	}
	return api.ExternalAgentSpec{
		ID:                  desc.ID,
		DisplayName:         desc.DisplayName,
		AuthKind:            kind,
		Capabilities:        api.Capabilities(desc.Capabilities),
		DetectedAt:          d.unixNow(),
		Execution:           Runnable(),
		ReadOnlyEnforcement: desc.ReadOnly,
		EditEnforcement:     editEnforcement(desc),
	}
}

// editEnforcement is not_enforced for an adapter whose edit mode card
// cannot hold, and empty (held as documented) otherwise.
func editEnforcement(a Descriptor) api.ReadOnlyEnforcement {
	if a.EditUnenforced {
		return api.NotEnforced
	}
	return ""
}

// detectOne resolves one adapter on search; nil means not installed. It
// also returns the installs it skipped for being in a scratch directory.
func (d *Detector) detectOne(ctx context.Context, run *detectRun, search SearchPath, desc Descriptor) (*api.ExternalAgentSpec, []string) {
	spec := d.baseSpec(desc)
	pathValue := search.PATH()

	if setting, value, ok := d.pin(desc); ok {
		// A pin is the person's explicit choice: when it is broken we say so
		// rather than silently running some other binary from PATH.
		spec.Source = api.SourcePin
		path, err := resolvePin(setting, value, d.opts.Home, search)
		if err != nil {
			spec.BinaryPath = value
			spec.Execution = Unusable(err.Error(), d.unixNow())
			return &spec, nil
		}
		spec.BinaryPath = path
		r := d.versionOf(ctx, run, desc, path, pathValue)
		if !r.runs {
			spec.Execution = Unusable(fmt.Sprintf("pinned by %s: %s", setting.set(value), r.reason), d.unixNow())
			return &spec, nil
		}
		spec.Version = r.version
		return &spec, nil
	}

	cands, skipped := findCandidates(desc.Binary, search, d.opts.ScratchDirs)
	if len(cands) == 0 {
		return nil, skipped
	}
	idx, results := d.firstRunnable(ctx, run, desc, cands, pathValue)
	if idx < 0 {
		// Report the first install on the search path: it is the one a
		// person's shell would run, so the one they need to fix.
		var reasons []string
		for _, r := range results {
			reasons = append(reasons, r.reason)
		}
		spec.BinaryPath = cands[0].path
		spec.Source = cands[0].source
		reason := reasons[0]
		if len(reasons) > 1 {
			reason = fmt.Sprintf("none of %d installs of %s runs: %s", len(reasons), desc.Binary, strings.Join(reasons, "; "))
		}
		spec.Execution = Unusable(reason, d.unixNow())
		return &spec, skipped
	}
	spec.BinaryPath = cands[idx].path
	spec.Source = cands[idx].source
	spec.Version = results[idx].version
	return &spec, skipped
}

type versionResult struct {
	runs    bool
	version string
	reason  string
}

// versionOf learns whether the install at path runs and its version: in a
// quick run from the cache or the install's files when they can tell, else
// by running `--version`.
func (d *Detector) versionOf(ctx context.Context, run *detectRun, desc Descriptor, path, pathValue string) versionResult {
	if reason, ok := preflight(path); !ok {
		return versionResult{reason: reason}
	}
	facts := readInstall(desc, path, pathValue, d.opts.GOOS, runtime.GOARCH)
	stamps, stamped := stampFiles(facts.files)
	key := cacheKey{adapter: desc.ID, path: path, search: searchDigest(pathValue)}
	if run.quick {
		if v, ok := d.cachedVersion(key, stamps, stamped); ok {
			run.answered(cacheEntry{Adapter: desc.ID, Path: path, Search: key.search, Files: stamps, Version: v})
			return versionResult{runs: true, version: v}
		}
		if facts.version != "" {
			run.answered(cacheEntry{})
			return versionResult{runs: true, version: facts.version}
		}
	}
	if !run.acquire(ctx) {
		return versionResult{reason: path + ": detection stopped before it could run `--version`"}
	}
	r := d.probeVersion(ctx, desc, path, pathValue)
	run.release()
	if r.runs && r.version != "" && stamped {
		run.learned(cacheEntry{Adapter: desc.ID, Path: path, Search: key.search, Files: stamps, Version: r.version})
	}
	if r.runs && r.version == "" {
		// A probe past its deadline counts as runnable without a version
		// (slow is not broken). On a busy machine that is Node CLIs more
		// often than not; what the files or the last run said still holds
		// while the files are unchanged, so it is not thrown away.
		if v, ok := d.cachedVersion(key, stamps, stamped); ok {
			r.version = v
			run.learned(cacheEntry{Adapter: desc.ID, Path: path, Search: key.search, Files: stamps, Version: v})
		} else if facts.version != "" {
			r.version = facts.version
		}
	}
	return r
}

func (d *Detector) cachedVersion(key cacheKey, stamps []fileStamp, stamped bool) (string, bool) {
	if !stamped || d.cache == nil {
		return "", false
	}
	return d.cache.lookup(key, stamps)
}

// probeVersion runs `--version`, or a declared agent's version_args. A
// declared agent without them is not run at all: card does not know
// what its binary does with arguments it was not told about, and counts
// the install runnable without a version.
func (d *Detector) probeVersion(ctx context.Context, desc Descriptor, path, pathValue string) versionResult {
	args := []string{"--version"}
	if desc.Declared != nil {
		if len(desc.Declared.VersionArgs) == 0 {
			return versionResult{runs: true}
		}
		args = desc.Declared.VersionArgs
	}
	env := probeEnv(d.opts.Env, pathValue, d.opts.Home)
	out := runProbe(ctx, path, args, env, probeDir(d.opts.Home, d.opts.Env), d.opts.ProbeTimeout)
	reason, runs := classifyVersionProbe(path, out, pathValue)
	r := versionResult{runs: runs, reason: reason}
	if runs && !out.TimedOut {
		r.version = ParseVersion(out.Stdout)
		if r.version == "" {
			r.version = ParseVersion(out.Stderr)
		}
	}
	return r
}

// firstRunnable probes all candidates concurrently and returns the index of
// the first, in search-path order, that runs — so a broken install earlier on
// PATH cannot shadow a working one, and a slow earlier one is not skipped for
// a faster later one. It returns as soon as the answer is certain and kills
// the probes still running. idx is -1 when none runs.
func (d *Detector) firstRunnable(ctx context.Context, run *detectRun, desc Descriptor, cands []candidate, pathValue string) (int, []versionResult) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type indexed struct {
		i int
		r versionResult
	}
	ch := make(chan indexed, len(cands))
	for i, c := range cands {
		go func() { ch <- indexed{i, d.versionOf(ctx, run, desc, c.path, pathValue)} }()
	}
	results := make([]versionResult, len(cands))
	got := make([]bool, len(cands))
	received := 0
	winner := -1
	for received < len(cands) {
		x := <-ch
		received++
		results[x.i], got[x.i] = x.r, true
		if winner >= 0 {
			continue
		}
		for j := range cands {
			if !got[j] {
				break
			}
			if results[j].runs {
				winner = j
				cancel() // the rest cannot change the answer
				break
			}
		}
	}
	return winner, results
}
