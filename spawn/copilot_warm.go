package spawn

import "fmt"

// buildCopilotWarm keeps Copilot warm over ACP (warm_acp.go) in read_only
// and ask only. Seen with Copilot CLI 1.0.102 against a stand-in: over
// ACP, --allow-tool write created a file outside the working dir unasked,
// where the one-shot run's path verification refuses it; edit and bypass
// turns run one-shot, inside that boundary.
func buildCopilotWarm(bin string, req Request) (Plan, error) {
	if m := req.EffectiveMode(); m == ModeEdit || m == ModeBypass {
		return Plan{}, fmt.Errorf("%s: in %s mode Copilot's ACP channel does not keep writes inside the working dir: %w", req.Adapter, m, ErrNoWarmChannel)
	}
	return buildACPWarm(bin, req)
}
