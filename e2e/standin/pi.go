package standin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// PiProvider is the custom provider name PiSetup registers in models.json.
const PiProvider = "cardstandin"

// piAPI maps a stand-in's dialect to Pi's provider "api" value.
var piAPI = map[Vendor]string{
	Anthropic: "anthropic-messages",
	OpenAI:    "openai-completions",
}

// PiSetup points Pi at this stand-in from an empty HOME: it writes
// ~/.pi/agent/models.json with a custom provider for the server's dialect
// (Anthropic Messages or OpenAI Chat Completions; Pi's google provider is not
// wired to the Gemini stand-in), and ~/.pi/agent/settings.json with retries
// off (Pi retries transient errors 3 times with 2 s, 4 s, 8 s backoff by
// default, on top of the SDK's own retries). It returns the complete env and
// the args that select the model: --provider and --model.
//
// PI_OFFLINE=1 stops Pi's startup network calls (update checks, install
// telemetry), which only add latency with no network.
//
// The model declares text and image input, as Pi's own entries for the
// vendors' vision models do: Pi sends an attached image only to a model
// that declares it (PiSetupInput chooses otherwise).
func (s *Server) PiSetup(home, path string) (env, args []string, err error) {
	return s.piSetup(home, path, noPiRetries(), "text", "image")
}

// PiSetupInput is PiSetup with the model's declared input kinds.
func (s *Server) PiSetupInput(home, path string, input ...string) (env, args []string, err error) {
	return s.piSetup(home, path, noPiRetries(), input...)
}

// PiSetupRetrying is PiSetup with Pi's own retries left at its defaults (3
// retries at 2, 4 and 8 s, announced as auto_retry_start), as a user who
// never changed them has it: what bounds them is card.
func (s *Server) PiSetupRetrying(home, path string) (env, args []string, err error) {
	return s.piSetup(home, path, map[string]any{}, "text", "image")
}

// noPiRetries are settings that turn Pi's own retries off, so a test of one
// failed call sees it fail once.
func noPiRetries() map[string]any {
	return map[string]any{"retry": map[string]any{"enabled": false, "maxRetries": 0,
		"provider": map[string]any{"maxRetries": 0}}}
}

func (s *Server) piSetup(home, path string, settings map[string]any, input ...string) (env, args []string, err error) {
	api, ok := piAPI[s.Vendor]
	if !ok {
		return nil, nil, fmt.Errorf("pi stand-in: Pi has no provider API for the %s stand-in; use NewAnthropic or NewOpenAI", s.Vendor)
	}
	base := s.URL
	if s.Vendor == OpenAI {
		base += "/v1"
	}
	models := map[string]any{"providers": map[string]any{PiProvider: map[string]any{
		"baseUrl": base, "api": api, "apiKey": APIKey,
		"models": []any{map[string]any{"id": s.Model, "name": "card stand-in", "reasoning": false, "input": input,
			"contextWindow": 200000, "maxTokens": 8192}},
	}}}
	dir := filepath.Join(home, ".pi", "agent")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("pi stand-in: create %s: %w", dir, err)
	}
	for name, v := range map[string]any{"models.json": models, "settings.json": settings} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, nil, fmt.Errorf("pi stand-in: write %s: %w", name, err)
		}
	}
	env = []string{"HOME=" + home, "PATH=" + path, "PI_OFFLINE=1", "PI_SKIP_VERSION_CHECK=1", "PI_TELEMETRY=0", "NO_COLOR=1"}
	return env, []string{"--provider", PiProvider, "--model", s.Model}, nil
}
