package daemon

import (
	"runtime/debug"
)

// BuildStamp is what `card version` tells about the binary: the release it
// is, or, for a build from a clone, the commit the toolchain saw.
type BuildStamp struct {
	Version string
	// Commit is the full commit hash; empty when nothing recorded one (a
	// clone built with -buildvcs=false, or outside its checkout).
	Commit string
	// Date is the commit's time (RFC 3339): a release stamps it rather
	// than the hour it was built, so two builds of one commit are the same
	// bytes; empty when unknown.
	Date string
	// Dev marks a build that no release stamped.
	Dev bool
	// Modified: a dev build made from a checkout with uncommitted changes,
	// so Commit alone does not say what is in it.
	Modified bool
}

// Build is this binary's stamp: the release's ldflags when it has them,
// else the version control facts `go build` records.
func Build() BuildStamp {
	info, _ := debug.ReadBuildInfo()
	return stampOf(Version, Commit, Date, info)
}

// stampOf decides over explicit inputs, so a test can give it a release's
// ldflags or a clone's build info without building either.
func stampOf(version, commit, date string, info *debug.BuildInfo) BuildStamp {
	if commit != "" {
		return BuildStamp{Version: version, Commit: commit, Date: date}
	}
	b := BuildStamp{Version: version, Dev: true}
	if info == nil {
		return b
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Date = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}
