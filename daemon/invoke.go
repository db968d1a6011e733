package daemon

import (
	"github.com/card-dev/card/daemon/plan"
	"github.com/card-dev/card/rpc"
	"github.com/card-dev/card/spawn"
)

// invokeAccessRules are the classes agents.invoke (and its CAR name) needs
// beyond agents, by what the run may do. The invariant they keep: a
// connection holding only read and agents (a web page's default grants)
// starts no run that can write a file or run a command outside a read-only
// boundary, and answers no question. So a run that writes or asks needs
// write (answering its questions is approve, on their own); bypass, which
// turns the agent's protections off, needs host, which allow_bypass alone
// never gives a web page; read_only on an adapter that does not enforce it
// is only a request to the model, so acknowledging that is write; and an
// MCP server handed to the agent acts through its own tools, which no
// permission mode bounds.
var invokeAccessRules = []rpc.AccessRule{
	{Param: "permission_mode", Value: string(spawn.ModeEdit), Access: rpc.AccessWrite},
	{Param: "permission_mode", Value: string(spawn.ModeAsk), Access: rpc.AccessWrite},
	{Param: "permission_mode", Value: string(spawn.ModeBypass), Access: rpc.AccessHost},
	{Param: "acknowledge_unenforced_read_only", Value: true, Access: rpc.AccessWrite},
	{Param: "mcp_endpoint", Access: rpc.AccessWrite},
}

// agentFacts is what the planner asks detection: the search path the
// agents get, and the binaries card runs for each adapter.
type agentFacts struct{ d *Daemon }

func (f agentFacts) SearchDirs() []string {
	if f.d.detector == nil {
		return nil
	}
	return f.d.detector.SearchPath().Dirs
}

// Binaries are the one detection found for each adapter (cached; the
// first call waits for a detection, which the run needs anyway), and the
// operator's bin = pin, whether or not it was found usable. An edit run in
// the directory of any of them could change what runs as that agent, so
// every adapter's count, not only the run's.
func (f agentFacts) Binaries() map[string][]string {
	out := map[string][]string{}
	for id, a := range f.d.cfg.Adapters {
		if a.Bin != "" {
			out[id] = append(out[id], a.Bin)
		}
	}
	if f.d.detector != nil {
		for _, s := range f.d.detector.Detect(f.d.ctx, false) {
			if s.BinaryPath != "" {
				out[s.ID] = append(out[s.ID], s.BinaryPath)
			}
		}
	}
	return out
}

// newPlanner is the daemon's planner over its configuration.
func (d *Daemon) newPlanner(cwd plan.CwdPolicy) *plan.Planner {
	extras := map[string]spawn.Extras{}
	for id, a := range d.cfg.Adapters {
		extras[id] = spawn.Extras{Args: a.Args, Env: a.Env}
	}
	return plan.New(plan.Config{
		Attachments: d.cfg.Attachments, MaxAPIRetries: d.cfg.MaxAPIRetries, StallSecs: d.cfg.StallSecs, StallKillSecs: d.cfg.StallKillSecs,
		ApprovalTimeoutSecs: d.cfg.ApprovalTimeoutSecs, Extras: extras, Home: d.home, Env: d.env,
	}, cwd, agentFacts{d})
}
