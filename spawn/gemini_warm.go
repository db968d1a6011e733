package spawn

import "github.com/card-dev/card/agent"

// buildGeminiWarm keeps Gemini warm over ACP (warm_acp.go), a new session
// only: its session/load loses the session it loads (geminiNoLoad), so a
// cold turn continues a Gemini conversation one-shot, with --resume, and
// in ask mode not at all.
func buildGeminiWarm(bin string, req Request) (Plan, error) {
	if req.Resume != "" {
		return Plan{}, errUnsupported("resume", agent.Gemini, geminiNoLoad+"; resume in a one-shot turn")
	}
	return buildACPWarm(bin, req)
}
