package standin

// CopilotEnv returns the complete environment for GitHub Copilot CLI to use
// this stand-in through its BYOK mode (COPILOT_PROVIDER_*): with
// COPILOT_PROVIDER_BASE_URL set it skips GitHub's model routing and needs no
// GitHub sign-in, and COPILOT_OFFLINE=true stops every other network call
// (auth, telemetry, GitHub MCP server, auto-update). The Anthropic stand-in is
// served as provider type "anthropic", the OpenAI one as "openai" over Chat
// Completions.
func (s *Server) CopilotEnv(home, path string) []string {
	env := []string{
		"HOME=" + home,
		"PATH=" + path,
		"COPILOT_PROVIDER_API_KEY=" + APIKey,
		"COPILOT_MODEL=" + s.Model,
		"COPILOT_OFFLINE=true",
		"COPILOT_AUTO_UPDATE=false",
		"NO_COLOR=1",
	}
	switch s.Vendor {
	case Anthropic:
		env = append(env, "COPILOT_PROVIDER_TYPE=anthropic", "COPILOT_PROVIDER_BASE_URL="+s.URL)
	default:
		env = append(env, "COPILOT_PROVIDER_TYPE=openai", "COPILOT_PROVIDER_WIRE_API=completions", "COPILOT_PROVIDER_BASE_URL="+s.URL+"/v1")
	}
	return env
}
