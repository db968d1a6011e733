package detect

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
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
	// empty environment; nothing here reads the process's live one.
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
}

// AdapterSettings are one adapter's card.toml args and env.
type AdapterSettings struct {
	Args []string
	Env  map[string]string
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

	mu sync.Mutex
	// search is the current search path; see Options.WellKnown.
	search SearchPath
	// skipped holds, by adapter id, the installs the last detection saw
	// in a scratch directory and did not use.
	skipped   map[string][]string
	specs     []ExternalAgentSpec
	haveSpecs bool
	detecting *flight[[]ExternalAgentSpec]
	health    map[string]healthEntry
	probing   map[string]*flight[ExternalAgentHealth]
}

type healthEntry struct {
	h  ExternalAgentHealth
	at time.Time
}

// flight is one in-progress computation that several callers wait on.
type flight[T any] struct {
	done chan struct{}
	val  T
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
	return &Detector{
		opts:    opts,
		base:    base,
		cancel:  cancel,
		search:  opts.Search.clone(),
		skipped: map[string][]string{},
		health:  map[string]healthEntry{},
		probing: map[string]*flight[ExternalAgentHealth]{},
	}
}

// Close stops in-flight probes (their process groups are killed) and waits
// for them. Calls after Close return promptly with timed-out probes.
func (d *Detector) Close() {
	d.cancel()
	d.wg.Wait()
}

// SearchPath is the path probes use; spawns should use the same.
func (d *Detector) SearchPath() SearchPath {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.search.clone()
}

// refreshSearch adds the well-known directories the path lacks and returns
// the path a detection searches.
func (d *Detector) refreshSearch() SearchPath {
	var wk []string
	if d.opts.WellKnown != nil {
		wk = d.opts.WellKnown()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.search.AddWellKnown(wk)
	return d.search.clone()
}

// adapterGetenv reads the environment adapter id's runs get: its card.toml
// env over the daemon's.
func (d *Detector) adapterGetenv(id string) func(string) string {
	extra := d.opts.Adapters[id].Env
	if len(extra) == 0 {
		return d.opts.Getenv
	}
	return func(k string) string {
		if v, ok := extra[k]; ok {
			return v
		}
		return d.opts.Getenv(k)
	}
}

// adapterEnv is the base of adapter id's probe environment: the daemon's,
// with the adapter's card.toml env over it, as its runs get.
func (d *Detector) adapterEnv(id string) map[string]string {
	extra := d.opts.Adapters[id].Env
	if len(extra) == 0 {
		return d.opts.Env
	}
	env := make(map[string]string, len(d.opts.Env)+len(extra))
	for k, v := range d.opts.Env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func (d *Detector) unixNow() uint64 { return uint64(d.opts.Now().Unix()) }

// Detect returns one spec per installed adapter, in registry order. Adapters
// with no binary at all are left out; a pinned adapter whose pin does not
// resolve, and installs that do not run, are included with an unusable
// execution so a person can find what is broken. The first call detects; later
// calls return the cached answer unless refresh is set. Concurrent callers
// share one detection. If ctx ends first the caller gets what is cached (nil if
// nothing), and the detection finishes in the background.
func (d *Detector) Detect(ctx context.Context, refresh bool) []ExternalAgentSpec {
	d.mu.Lock()
	if d.haveSpecs && !refresh {
		out := cloneSpecs(d.specs)
		d.mu.Unlock()
		return out
	}
	f := d.detecting
	if f == nil {
		f = &flight[[]ExternalAgentSpec]{done: make(chan struct{})}
		d.detecting = f
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			specs := d.detectAll(d.base)
			d.mu.Lock()
			f.val = specs
			d.specs, d.haveSpecs = specs, true
			d.detecting = nil
			d.mu.Unlock()
			close(f.done)
		}()
	}
	d.mu.Unlock()

	select {
	case <-f.done:
		return cloneSpecs(f.val)
	case <-ctx.Done():
		specs, _ := d.Cached()
		return specs
	}
}

// Cached returns the last detection and whether there has been one.
func (d *Detector) Cached() ([]ExternalAgentSpec, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return cloneSpecs(d.specs), d.haveSpecs
}

func cloneSpecs(in []ExternalAgentSpec) []ExternalAgentSpec {
	if in == nil {
		return nil
	}
	out := make([]ExternalAgentSpec, len(in))
	copy(out, in)
	return out
}

// detectAll probes every adapter concurrently.
func (d *Detector) detectAll(ctx context.Context) []ExternalAgentSpec {
	search := d.refreshSearch()
	results := make([]*ExternalAgentSpec, len(registry))
	skipped := make([][]string, len(registry))
	var wg sync.WaitGroup
	for i, desc := range registry {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], skipped[i] = d.detectOne(ctx, desc, search)
		}()
	}
	wg.Wait()
	var out []ExternalAgentSpec
	d.mu.Lock()
	for i, r := range results {
		if r != nil {
			out = append(out, *r)
		}
		d.skipped[registry[i].ID] = skipped[i]
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

func (d *Detector) baseSpec(desc Descriptor) ExternalAgentSpec {
	kind := AuthKindUnknown
	if desc.AuthKind != nil {
		kind = desc.AuthKind(AuthInput{Home: d.opts.Home, Getenv: d.adapterGetenv(desc.ID), GOOS: d.opts.GOOS, Args: d.opts.Adapters[desc.ID].Args})
	}
	return ExternalAgentSpec{
		ID:                  desc.ID,
		DisplayName:         desc.DisplayName,
		AuthKind:            kind,
		Capabilities:        Capabilities(desc.Capabilities),
		DetectedAt:          d.unixNow(),
		Execution:           Runnable(),
		ReadOnlyEnforcement: desc.ReadOnly,
	}
}

// detectOne resolves one adapter on search; nil means not installed. It
// also returns the installs it skipped for being in a scratch directory.
func (d *Detector) detectOne(ctx context.Context, desc Descriptor, search SearchPath) (*ExternalAgentSpec, []string) {
	spec := d.baseSpec(desc)
	pathValue := search.PATH()

	if setting, value, ok := d.pin(desc); ok {
		// A pin is the person's explicit choice: when it is broken we say so
		// rather than silently running some other binary from PATH.
		spec.Source = SourcePin
		path, err := resolvePin(setting, value, d.opts.Home, search)
		if err != nil {
			spec.BinaryPath = value
			spec.Execution = Unusable(err.Error(), d.unixNow())
			return &spec, nil
		}
		spec.BinaryPath = path
		r := d.probeVersion(ctx, path, pathValue)
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
	idx, results := d.firstRunnable(ctx, cands, pathValue)
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

func (d *Detector) probeVersion(ctx context.Context, path, pathValue string) versionResult {
	if reason, ok := preflight(path); !ok {
		return versionResult{reason: reason}
	}
	env := probeEnv(d.opts.Env, pathValue, d.opts.Home)
	out := runProbe(ctx, path, []string{"--version"}, env, probeDir(d.opts.Home, d.opts.Env), d.opts.ProbeTimeout)
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
func (d *Detector) firstRunnable(ctx context.Context, cands []candidate, pathValue string) (int, []versionResult) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type indexed struct {
		i int
		r versionResult
	}
	ch := make(chan indexed, len(cands))
	for i, c := range cands {
		go func() { ch <- indexed{i, d.probeVersion(ctx, c.path, pathValue)} }()
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
