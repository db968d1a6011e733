package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/guard"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/rpc"
)

// HealthAnswer is agents.health_external's result: one adapter's health with
// id, every detected adapter's without.
type HealthAnswer = rpc.Either[api.ExternalAgentHealth, []api.ExternalAgentHealth]

// DetectionCacheFileName is where, in the home, detection keeps what
// running the agent CLIs taught it (paths, file stamps, versions; never a
// credential or a CLI's output), so a restarted daemon answers at once.
const DetectionCacheFileName = "detection.json"

// newDetector builds the detector the way the daemon does: the search path is
// the startup PATH plus the login shell's PATH and the well-known install
// dirs, because a supervisor-started daemon sees only /usr/bin:/bin. The
// login shell is asked by the detector when it first detects, not here: a
// heavy profile takes a quarter of a second or more, and the daemon is
// ready without it. login_shell_path = false drops only the login shell:
// the well-known dirs are card's own list, and they are listed again before
// every detection so a CLI installed after startup is found on refresh.
func newDetector(cfg Config, env map[string]string, home string, log *zap.Logger) *detect.Detector {
	getenv := func(k string) string { return env[k] }
	userHome := env["HOME"]
	opts := detect.Options{
		Search:       detect.BareSearchPath(env, userHome),
		WellKnown:    func() []string { return detect.WellKnownDirs(userHome, getenv) },
		Home:         userHome,
		Env:          env,
		Getenv:       getenv,
		Pins:         map[string]string{},
		Adapters:     map[string]detect.AdapterSettings{},
		ProbeTimeout: time.Duration(cfg.ProbeTimeoutSec) * time.Second,
		// probe_timeout_secs is documented as the bound of every probe, the
		// sign-in checks included: an operator on a slow machine raises one
		// number, not two.
		HealthTimeout: time.Duration(cfg.ProbeTimeoutSec) * time.Second,
		Quick:         true,
		CacheFile:     filepath.Join(home, DetectionCacheFileName),
		Logf:          func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) },
	}
	if cfg.LoginShellPath == nil || *cfg.LoginShellPath {
		opts.ResolveSearch = func(ctx context.Context) detect.SearchPath {
			return detect.ResolveSearchPath(ctx, env, userHome)
		}
	}
	for id, a := range cfg.Adapters {
		if a.Bin != "" {
			opts.Pins[id] = a.Bin
		}
		opts.Adapters[id] = detect.AdapterSettings{Args: a.Args, Env: a.Env}
	}
	for id, a := range cfg.Agents {
		// A declared agent's env is part of every run of it, so its
		// probes see it too; [adapters.<id>] env, if any, goes over it.
		s := opts.Adapters[id]
		env := map[string]string{}
		for k, v := range a.Env {
			env[k] = v
		}
		for k, v := range s.Env {
			env[k] = v
		}
		s.Env = env
		opts.Adapters[id] = s
	}
	return detect.New(opts)
}

// detectInBackground fills the detection cache without holding up
// readiness: a client's first agents.detect then finds it warm. It runs once
// the daemon listens, so a daemon that cannot take its port says only that,
// not "detected agents" first.
//
// It ends before the detector closes (a closer registered after the
// detector's runs first): a detection still starting when a quick shutdown
// closes the detector would otherwise race Close.
func (d *Daemon) detectInBackground() {
	ctx, cancel := context.WithCancel(d.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		specs := d.detector.Detect(ctx, false)
		if ctx.Err() == nil {
			d.log.Info("detected agents", zap.Int("count", len(specs)), zap.Duration("took", time.Since(start)))
		}
	}()
	d.onClose(func(context.Context) {
		cancel()
		<-done
	})
}

// LocalDetector builds, for the CLI's no-daemon fallback, the same detector
// a daemon on home would use.
func LocalDetector(ctx context.Context, home string, environ []string) (*detect.Detector, error) {
	cfg, err := LoadConfig(filepath.Join(home, ConfigFileName))
	if err != nil {
		return nil, err
	}
	// The agents the home declares are detected as the daemon detects
	// them, so `card detect` without a daemon lists them too.
	if err := cfg.declareAgents(); err != nil {
		return nil, err
	}
	// No probe tag: this detector's probes are the CLI's, and a daemon
	// starting on the home must not take them for a dead daemon's.
	env := envMap(environ)
	delete(env, proc.ProbeEnv)
	return newDetector(cfg, env, home, zap.NewNop()), nil
}

// setupAgents reads the guard's inputs once and builds the detector;
// detection itself starts once the daemon listens (detectInBackground).
func (d *Daemon) setupAgents() error {
	d.guard = guard.Snapshot{
		Ancestry: guard.ParseAncestry(d.env[guard.AncestryEnv]),
		MaxChain: guard.ParseMaxChain(d.env[guard.MaxChainEnv]),
	}
	d.detector = newDetector(d.cfg, withProbeTag(d.env, d.probeTag), d.home, d.log.Named("detect"))
	d.onClose(func(context.Context) { d.detector.Close() })

	detectDoc := "Each installed adapter as an ExternalAgentSpec: where it was found, its version, whether it can run (`execution`), the deprecated `auth_kind`, and with `include_health` its health. An install that cannot run also carries `health: {status: \"not_executable\", reason}` without `include_health`, for clients that predate `execution`. Adapters this caller could not spawn (the guard) carry `spawn_block_reason`."
	rpc.Register(d.registry, "agents.detect", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "List the installed agent CLIs, whether each can run and, optionally, whether each is signed in.",
		Description: detectDoc + " Served from the cache unless `refresh`, which runs every CLI's `--version` again and, with `include_health`, checks health again too. Right after the daemon starts, versions come from what the previous daemon learned by running each CLI (kept while the CLI's files are unchanged) or from the CLI's own npm package.json, and are confirmed by running the CLIs in the background.",
	}, func(ctx context.Context, p api.DetectParams) (rpc.Encoded[[]api.ExternalAgentSpec], error) {
		return d.detectAgents(ctx, p, p.Refresh)
	})
	rpc.Fast(d.registry, "agents.detect", d.detectFromMemory)
	rpc.Register(d.registry, "agents.list_external", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "CAR's name for the cached detection: agents.detect without re-detecting (unless `refresh`), health from its 30 s cache.",
		Description: detectDoc,
	}, func(ctx context.Context, p api.DetectParams) (rpc.Encoded[[]api.ExternalAgentSpec], error) {
		return d.detectAgents(ctx, p, p.Refresh)
	})
	rpc.Fast(d.registry, "agents.list_external", d.detectFromMemory)
	rpc.Register(d.registry, "agents.detect_external", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "CAR's name for a fresh detection: re-detects every time, and with `include_health` checks health again instead of serving the 30 s cache, so a CLI just installed or signed in reads right at once.",
		Description: detectDoc,
	}, func(ctx context.Context, p api.DetectParams) (rpc.Encoded[[]api.ExternalAgentSpec], error) {
		return d.detectAgents(ctx, p, true)
	})
	rpc.Register(d.registry, "agents.health_external", rpc.Doc{
		Access:      rpc.AccessRead,
		Summary:     "Whether each agent is ready to invoke: signed in, expired, not configured, not executable.",
		Description: "With `id`, one ExternalAgentHealth (an adapter that is not installed answers not_executable saying how to install or pin it); without, an array for every detected adapter, as CAR defines it. Answers are cached for 30 s per adapter and concurrent callers share one probe; `force` bypasses the cache. Only `ready` means invoke it; every other status carries a `reason`. `details.auth_method` (subscription, api_key or cloud) and `details.auth_source` say how a ready adapter signs in.",
	}, func(ctx context.Context, p api.HealthParams) (HealthAnswer, error) {
		if p.ID == "" {
			hs := d.detector.HealthDetected(ctx, p.Force)
			out := make([]api.ExternalAgentHealth, len(hs))
			for i, h := range hs {
				out[i] = d.withRateLimits(h)
			}
			return rpc.Second[api.ExternalAgentHealth](out), nil
		}
		h, err := d.detector.Health(ctx, p.ID, p.Force)
		if err != nil {
			return HealthAnswer{}, err
		}
		return rpc.First[api.ExternalAgentHealth, []api.ExternalAgentHealth](d.withRateLimits(h)), nil
	})
	return nil
}

// withRateLimits is h with the latest rate-limit windows its adapter's runs
// reported. h is a copy: the detector's cached answer is never changed.
func (d *Daemon) withRateLimits(h api.ExternalAgentHealth) api.ExternalAgentHealth {
	if rl := d.runs.RateLimits(h.ID); len(rl) > 0 {
		h.RateLimits = rl
	}
	return h
}

// detectAgents answers the three detection methods. The answer without
// health is encoded once per detection and caller (the guard's verdicts
// depend on invoked_by) and reused until detection changes: a host that
// polls the list must not cost the daemon an encoding of every spec each
// time. refresh re-detects and, with include_health, checks health again
// rather than serving its cache: a caller that asked for a fresh answer
// after installing or signing in must not read the state from before.
func (d *Daemon) detectAgents(ctx context.Context, p api.DetectParams, refresh bool) (rpc.Encoded[[]api.ExternalAgentSpec], error) {
	cacheable := !p.IncludeHealth && d.detectJSON.keyable(p.InvokedBy)
	if !refresh {
		if e, ok := d.detectFromMemory(ctx, p); ok {
			return e, nil
		}
	}
	specs, gen := d.detector.DetectGen(ctx, refresh)
	if p.IncludeHealth {
		specs = d.detector.WithHealth(ctx, specs, refresh)
		for i, s := range specs {
			if s.Health != nil {
				h := d.withRateLimits(*s.Health)
				specs[i].Health = &h
			}
		}
	}
	e, err := rpc.Encode(d.guardVerdicts(specs, p.InvokedBy))
	if err == nil && cacheable {
		d.detectJSON.put(gen, p.InvokedBy, e)
	}
	return e, err
}

// detectFromMemory is agents.detect's answer when it is already encoded for
// the current detection: what a host polling the list asks for, answered
// without waiting for anything.
func (d *Daemon) detectFromMemory(ctx context.Context, p api.DetectParams) (rpc.Encoded[[]api.ExternalAgentSpec], bool) {
	if p.Refresh || p.IncludeHealth || !d.detectJSON.keyable(p.InvokedBy) {
		return rpc.Encoded[[]api.ExternalAgentSpec]{}, false
	}
	return d.detectJSON.get(d.detector.Generation(), p.InvokedBy)
}

// guardVerdicts marks the adapters this caller could not spawn.
func (d *Daemon) guardVerdicts(specs []api.ExternalAgentSpec, invokedBy string) []api.ExternalAgentSpec {
	if specs == nil {
		specs = []api.ExternalAgentSpec{} // an empty list, never null
	}
	for i, s := range specs {
		if r, _ := d.guard.Check(s.ID, invokedBy); r != nil {
			specs[i].SpawnBlockReason = r.Error()
		}
		specs[i] = specs[i].WithCompatHealth()
	}
	return specs
}

// encodedDetections keeps agents.detect's encoded answers for one detection
// generation, by invoked_by. Only the empty caller and the adapter ids are
// kept, so a client cannot grow it with made-up names.
type encodedDetections struct {
	mu   sync.Mutex
	gen  uint64
	byID map[string]rpc.Encoded[[]api.ExternalAgentSpec]
}

func (c *encodedDetections) keyable(invokedBy string) bool {
	if invokedBy == "" {
		return true
	}
	_, ok := agent.Lookup(invokedBy)
	return ok
}

func (c *encodedDetections) get(gen uint64, invokedBy string) (rpc.Encoded[[]api.ExternalAgentSpec], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == 0 || gen != c.gen {
		return rpc.Encoded[[]api.ExternalAgentSpec]{}, false
	}
	e, ok := c.byID[invokedBy]
	return e, ok
}

func (c *encodedDetections) put(gen uint64, invokedBy string, e rpc.Encoded[[]api.ExternalAgentSpec]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen < c.gen {
		return // a newer detection is already kept
	}
	if gen != c.gen || c.byID == nil {
		c.gen, c.byID = gen, map[string]rpc.Encoded[[]api.ExternalAgentSpec]{}
	}
	c.byID[invokedBy] = e
}
