package daemon

import (
	"maps"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/card-dev/card/internal/proc"
)

// probeGrace is the SIGTERM→SIGKILL gap for what a previous daemon's probes
// left running: the same short grace a probe gets when it times out.
const probeGrace = 300 * time.Millisecond

// probeTag is what every probe of this daemon carries in proc.ProbeEnv:
// which start of which home ran it. The start comes first and holds no
// space, so the home after the first space is read back whole, whatever
// its path holds.
func probeTag(home string, pid int, started time.Time) string {
	return strconv.Itoa(pid) + "." + strconv.FormatInt(started.UnixNano(), 36) + " " + home
}

// leftoverProbe says whether a tag names an earlier start of home: only
// one daemon serves a home at a time (it holds the lock), so a process
// carrying another start's tag was left by a daemon that is gone.
func leftoverProbe(home, ownTag string) func(string) bool {
	return func(tag string) bool {
		_, h, ok := strings.Cut(tag, " ")
		return ok && h == home && tag != ownTag
	}
}

// endLeftoverProbes ends what the probes of a daemon that died on this
// home left running. A probe's leader dies with its daemon (Pdeathsig),
// but not what the leader started: Copilot's launcher runs its native
// binary as a child, and a first `--version` in a fresh home unpacks the
// package there for seconds. Runs and warm agents have their own records;
// a probe is too short-lived to record, so it is found by its tag.
func endLeftoverProbes(home, ownTag string, log *zap.Logger) {
	if n := proc.EndTagged(proc.ProbeEnv, leftoverProbe(home, ownTag), probeGrace); n > 0 {
		log.Info("ended processes a previous card's probes left running", zap.Int("count", n))
	}
}

// withProbeTag is env with the probe tag set, for the detector: the
// daemon's own environment map is left as it was read.
func withProbeTag(env map[string]string, tag string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	out[proc.ProbeEnv] = tag
	return out
}
