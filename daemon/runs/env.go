package runs

import "github.com/card-dev/card/guard"

// RunIDEnv is set in every agent's environment to its run id, so a daemon
// restarted after a crash can tell a leftover process of its own run from an
// unrelated process that happens to reuse the recorded process group id.
const RunIDEnv = "CARD_RUN_ID"

// childEnv is the agent's environment: the daemon's startup environment
// with PATH set to the resolved search path (a supervisor-started daemon's
// own PATH would not find node), the guard's stamp, the run id, and without
// NOTIFY_SOCKET (an agent must not be able to tell systemd the daemon is
// stopping). The operator's adapter env is added later by the plan.
func childEnv(base map[string]string, path string, child []string, runID string) []string {
	out := make([]string, 0, len(base)+2)
	for k, v := range base {
		switch k {
		case "PATH", "NOTIFY_SOCKET", RunIDEnv:
			continue
		}
		out = append(out, k+"="+v)
	}
	if path != "" {
		out = append(out, "PATH="+path)
	}
	out = append(out, RunIDEnv+"="+runID)
	return guard.StampEnv(out, child)
}
