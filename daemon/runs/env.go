package runs

import "github.com/card-dev/card/internal/proc"

// childEnv is the agent's environment: the daemon's startup environment
// minus the variables no child inherits, with PATH set to the resolved
// search path (a supervisor-started daemon's own PATH would not find node),
// the guard's stamp and the run id. The operator's adapter env is added
// later by the plan.
func childEnv(base map[string]string, path string, child []string, runID string) []string {
	return proc.AgentEnv(base, path, child, runID)
}

// endLeftoverGroup ends what is left of a run's process group after a crash:
// only processes that carry the run's id, since the recorded pgid may have
// been reused by now.
func endLeftoverGroup(pgid int, runID string) int {
	return proc.EndTaggedGroup(pgid, proc.RunIDEnv, runID, killGrace)
}
