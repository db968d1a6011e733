package detect

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/card-dev/card/acp"
	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// UnknownAdapterError is returned for an id no adapter has. The daemon maps
// it to JSON-RPC -32602; the message lists the known ids so the caller can
// fix the request.
type UnknownAdapterError struct {
	ID    string
	Known []string
}

func (e *UnknownAdapterError) Error() string {
	return fmt.Sprintf("unknown agent %q: known agents are %s", e.ID, strings.Join(e.Known, ", "))
}

// NotInstalledError: detection found no binary for the adapter it may use.
type NotInstalledError struct {
	ID, Binary, PinEnv, InstallHint string
	// Skipped are installs detection saw in a scratch directory and did
	// not use.
	Skipped []string
}

func (e *NotInstalledError) Error() string {
	pin := func(path string) string {
		return fmt.Sprintf("set %s=%s in the daemon's environment, or bin = %q under [adapters.%s] in card.toml", e.PinEnv, path, path, e.ID)
	}
	if len(e.Skipped) > 0 {
		return fmt.Sprintf("%s is not installed where card may run it: `%s` was found at %s but skipped, because card never takes a binary from a world-writable scratch directory (%s), where anyone on this machine can plant one; "+
			"if that is your install, pin it (%s) and refresh detection, or %s",
			e.ID, e.Binary, strings.Join(e.Skipped, ", "), strings.Join(trimSlashes(DefaultScratchDirs), ", "), pin(e.Skipped[0]), e.InstallHint)
	}
	return fmt.Sprintf("%s is not installed: no `%s` on the daemon's search path; %s, or pin an install (%s), then refresh detection",
		e.ID, e.Binary, e.InstallHint, pin("/path/to/"+e.Binary))
}

func trimSlashes(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = strings.TrimSuffix(d, "/")
	}
	return out
}

// notInstalled is the error for an adapter the last detection did not find.
func (d *Detector) notInstalled(desc Descriptor) error {
	d.mu.Lock()
	skipped := append([]string(nil), d.skipped[desc.ID]...)
	d.mu.Unlock()
	return &NotInstalledError{ID: desc.ID, Binary: desc.Binary, PinEnv: desc.PinEnv, InstallHint: desc.InstallHint, Skipped: skipped}
}

// UnusableError: detection found the binary but the OS will not run it.
type UnusableError struct {
	ID, Path, Reason string
}

func (e *UnusableError) Error() string {
	return fmt.Sprintf("%s cannot run: %s", e.ID, e.Reason)
}

func unknownAdapter(id string) error { return &UnknownAdapterError{ID: id, Known: sortedKnown()} }

// Binary returns the binary to invoke for id, from detection (cached unless
// nothing is cached yet), or a typed error: *UnknownAdapterError,
// *NotInstalledError or *UnusableError carrying detection's reason.
func (d *Detector) Binary(ctx context.Context, id string) (string, api.ExternalAgentSpec, error) {
	desc, ok := Lookup(id)
	if !ok {
		return "", api.ExternalAgentSpec{}, unknownAdapter(id)
	}
	spec, found := d.specFor(ctx, id)
	if !found {
		return "", api.ExternalAgentSpec{}, d.notInstalled(desc)
	}
	if reason, bad := spec.UnusableReason(); bad {
		return "", spec, &UnusableError{ID: id, Path: spec.BinaryPath, Reason: reason}
	}
	return spec.BinaryPath, spec, nil
}

func (d *Detector) specFor(ctx context.Context, id string) (api.ExternalAgentSpec, bool) {
	for _, s := range d.Detect(ctx, false) {
		if s.ID == id {
			return s, true
		}
	}
	return api.ExternalAgentSpec{}, false
}

// Health answers whether adapter id is ready to invoke. Answers are cached for
// HealthTTL; force bypasses the cache. Concurrent callers for the same adapter
// share one probe, so a burst of requests starts one status command. Health
// never changes a spec's execution: a binary detection found unusable is
// reported not_executable with detection's reason and no command is run.
func (d *Detector) Health(ctx context.Context, id string, force bool) (api.ExternalAgentHealth, error) {
	desc, ok := Lookup(id)
	if !ok {
		return api.ExternalAgentHealth{}, unknownAdapter(id)
	}
	spec, found := d.specFor(ctx, id)
	if !found {
		return d.stamp(id, HealthVerdict{Status: api.StatusNotExecutable, Reason: d.notInstalled(desc).Error()}), nil
	}
	if reason, bad := spec.UnusableReason(); bad {
		return d.stamp(id, HealthVerdict{Status: api.StatusNotExecutable, Reason: reason}), nil
	}

	d.mu.Lock()
	if e, ok := d.health[id]; ok && !force && d.opts.Now().Sub(e.at) < d.opts.HealthTTL {
		d.mu.Unlock()
		return e.h, nil
	}
	f := d.probing[id]
	if f == nil {
		f = &flight[api.ExternalAgentHealth]{done: make(chan struct{})}
		d.probing[id] = f
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			h := d.probeHealth(d.base, desc, spec.BinaryPath)
			d.mu.Lock()
			f.val = h
			d.health[id] = healthEntry{h: h, at: d.opts.Now()}
			delete(d.probing, id)
			d.mu.Unlock()
			close(f.done)
		}()
	}
	d.mu.Unlock()

	select {
	case <-f.done:
		return f.val, nil
	case <-ctx.Done():
		return api.ExternalAgentHealth{}, fmt.Errorf("health check of %s abandoned: %w", id, ctx.Err())
	}
}

// HealthAll checks every known adapter concurrently, in registry order.
// Adapters that are not installed are included as not_executable, so a host
// can show why an agent it expected is missing.
func (d *Detector) HealthAll(ctx context.Context, force bool) []api.ExternalAgentHealth {
	return d.healthOf(ctx, agent.IDs(), force)
}

// HealthDetected checks every detected adapter (installed, whether or not
// it can run) concurrently, in registry order: what CAR's
// agents.health_external answers without an id.
func (d *Detector) HealthDetected(ctx context.Context, force bool) []api.ExternalAgentHealth {
	specs := d.Detect(ctx, false)
	ids := make([]string, len(specs))
	for i, s := range specs {
		ids[i] = s.ID
	}
	return d.healthOf(ctx, ids, force)
}

func (d *Detector) healthOf(ctx context.Context, ids []string, force bool) []api.ExternalAgentHealth {
	out := make([]api.ExternalAgentHealth, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := d.Health(ctx, id, force)
			if err != nil {
				h = d.stamp(id, HealthVerdict{Status: api.StatusUnknown, Reason: err.Error()})
			}
			out[i] = h
		}()
	}
	wg.Wait()
	return out
}

// WithHealth returns specs with Health filled in for each (the
// include_health form of agents.detect).
func (d *Detector) WithHealth(ctx context.Context, specs []api.ExternalAgentSpec, force bool) []api.ExternalAgentSpec {
	out := cloneSpecs(specs)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := d.Health(ctx, out[i].ID, force)
			if err != nil {
				h = d.stamp(out[i].ID, HealthVerdict{Status: api.StatusUnknown, Reason: err.Error()})
			}
			out[i].Health = &h
			// The sign-in health found is better evidence than the
			// file-shape guess detection made.
			if k := MethodOf(h).Kind(); h.Status == api.StatusReady && k != api.AuthKindUnknown {
				out[i].AuthKind = k
			}
		}()
	}
	wg.Wait()
	return out
}

func (d *Detector) stamp(id string, v HealthVerdict) api.ExternalAgentHealth {
	details := Redact(v.Details)
	if details == nil {
		details = map[string]any{}
	}
	return api.ExternalAgentHealth{ID: id, Status: v.Status, Details: details, Reason: v.Reason, CheckedAt: d.unixNow()}
}

func (d *Detector) probeHealth(ctx context.Context, desc Descriptor, bin string) api.ExternalAgentHealth {
	if desc.Health == nil {
		return d.stamp(desc.ID, HealthVerdict{Status: api.StatusUnknown, Reason: "card has no health check for " + desc.DisplayName})
	}
	pathValue := d.SearchPath().PATH()
	env := probeEnv(d.adapterEnv(desc.ID), pathValue, d.opts.Home)
	dir := probeDir(d.opts.Home, d.opts.Env)
	in := HealthInput{
		Binary: bin,
		Home:   d.opts.Home,
		Getenv: d.adapterGetenv(desc.ID),
		Args:   d.opts.Adapters[desc.ID].Args,
		GOOS:   d.opts.GOOS,
		Now:    func() int64 { return d.opts.Now().UnixMilli() },
		Run: func(ctx context.Context, args ...string) ProbeOutput {
			return runProbe(ctx, bin, args, env, dir, d.opts.HealthTimeout)
		},
		Initialize: func(ctx context.Context, args ...string) (*acp.InitializeResponse, ProbeOutput) {
			return acpInitialize(ctx, bin, args, env, dir, d.opts.HealthTimeout)
		},
	}
	v := desc.Health(ctx, in)
	if v.Status != api.StatusReady && v.Reason == "" {
		v.Reason = desc.DisplayName + " reported no reason; run its status command by hand to see why"
	}
	return d.stamp(desc.ID, v)
}

// commonHealthFailure maps a status command that did not answer to a
// verdict, or returns false when the output should be parsed.
func commonHealthFailure(name string, out ProbeOutput) (HealthVerdict, bool) {
	switch {
	case out.TimedOut:
		return HealthVerdict{Status: api.StatusUnknown, Reason: fmt.Sprintf("`%s` did not answer within the health timeout; try again, or run it by hand to see whether it is waiting on the network", name)}, true
	case out.StartErr != nil:
		return HealthVerdict{Status: api.StatusUnknown, Reason: fmt.Sprintf("`%s` could not be started: %v", name, out.StartErr)}, true
	case out.Signal != 0:
		return HealthVerdict{Status: api.StatusUnknown, Reason: fmt.Sprintf("`%s` was killed by signal %d (%s)", name, int(out.Signal), out.Signal)}, true
	}
	if looksLikeNetworkError(out.Stdout + "\n" + out.Stderr) {
		return HealthVerdict{Status: api.StatusNetworkError, Reason: fmt.Sprintf("`%s` could not reach the vendor: %s; check the network or proxy settings", name, firstLine(out.Stderr, out.Stdout))}, true
	}
	return HealthVerdict{}, false
}

func looksLikeNetworkError(s string) bool {
	s = strings.ToLower(s)
	for _, m := range []string{"enotfound", "econnrefused", "econnreset", "etimedout", "eai_again", "network error", "getaddrinfo", "unable to connect", "could not resolve host"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}
