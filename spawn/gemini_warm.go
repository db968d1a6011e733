package spawn

import "github.com/card-dev/card/agent"

// buildGeminiWarm keeps Gemini warm over ACP (warm_acp.go), a new session
// only. Seen with Gemini CLI 0.61.0 against a stand-in: session/load of a
// session its ACP mode had made (and a one-shot --resume had continued)
// failed with "No previous sessions found for this project.", so a cold
// turn continues a Gemini conversation one-shot, with --resume.
func buildGeminiWarm(bin string, req Request) (Plan, error) {
	if req.Resume != "" {
		return Plan{}, errUnsupported("resume", agent.Gemini, "Gemini's ACP mode does not load its sessions (session/load finds none); resume in a one-shot turn")
	}
	return buildACPWarm(bin, req)
}
