package detect

import "context"

// SearchPath is the path probes use; spawns should use the same. Before
// the first detection it may still be the provisional one (see
// Options.ResolveSearch).
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

// setSearch replaces the search path; the next detection grows it by the
// well-known directories again.
func (d *Detector) setSearch(sp SearchPath) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.search = sp.clone()
}

// searchKey names what the search path was resolved from: a cached path
// stands only for the same starting PATH, shell and home.
func (d *Detector) searchKey() string {
	return searchDigest(d.opts.Search.PATH() + "\x00" + d.opts.Env["SHELL"] + "\x00" + d.opts.Home)
}

// resolveSearch runs ResolveSearch once, keeping its answer as the search
// path (and in the cache, for the next start).
func (d *Detector) resolveSearch(ctx context.Context) {
	if d.searchResolved.Load() {
		return
	}
	d.searchMu.Lock()
	defer d.searchMu.Unlock()
	if d.searchResolved.Load() {
		return
	}
	sp := d.opts.ResolveSearch(ctx)
	if ctx.Err() != nil {
		return
	}
	d.setSearch(sp)
	d.searchResolved.Store(true)
	if d.cache != nil {
		d.cache.setSearch(d.searchKey(), sp)
	}
}

// useCachedSearch takes the search path resolved at the last start, if it
// was resolved from the same inputs; otherwise it resolves it now.
func (d *Detector) useCachedSearch() {
	if d.cache != nil {
		if sp, ok := d.cache.searchPath(d.searchKey()); ok {
			d.setSearch(sp)
			return
		}
	}
	d.resolveSearch(d.base)
}
