package detect

import "github.com/card-dev/card/internal/proc"

// AdapterSettings are one adapter's card.toml args and env.
type AdapterSettings struct {
	Args []string
	Env  map[string]string
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
	// The probe tag is the daemon's, not the operator's to set: a value
	// from card.toml would make the next start end, or miss, the wrong
	// processes.
	delete(env, proc.ProbeEnv)
	if tag, ok := d.opts.Env[proc.ProbeEnv]; ok {
		env[proc.ProbeEnv] = tag
	}
	return env
}
