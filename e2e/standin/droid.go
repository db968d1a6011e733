package standin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// DroidModelID is the model id Droid gives the custom model DroidSetup
// registers: "custom:" + display name + "-" + its index in customModels.
const DroidModelID = "custom:cardstandin-0"

// droidProvider maps a stand-in's dialect to Droid's customModels provider.
var droidProvider = map[Vendor]string{
	Anthropic: "anthropic",
	OpenAI:    "generic-chat-completion-api",
}

// DroidSetup points Factory Droid at this stand-in from an empty HOME through
// a BYOK custom model in ~/.factory/settings.json, and returns the complete
// env and the args that select it (-m DroidModelID). Whether Droid runs a
// custom model without a Factory sign-in is for the caller's test to show;
// docs/e2e-notes.md records what was seen.
func (s *Server) DroidSetup(home, path string) (env, args []string, err error) {
	provider, ok := droidProvider[s.Vendor]
	if !ok {
		return nil, nil, fmt.Errorf("droid stand-in: Droid has no custom-model provider for the %s stand-in; use NewAnthropic or NewOpenAI", s.Vendor)
	}
	base := s.URL
	if s.Vendor == OpenAI {
		base += "/v1"
	}
	settings := map[string]any{"customModels": []any{map[string]any{
		"model": s.Model, "displayName": "cardstandin", "baseUrl": base, "apiKey": APIKey,
		"provider": provider, "maxOutputTokens": 8192,
	}}}
	dir := filepath.Join(home, ".factory")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("droid stand-in: create %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), b, 0o600); err != nil {
		return nil, nil, fmt.Errorf("droid stand-in: write settings: %w", err)
	}
	return []string{"HOME=" + home, "PATH=" + path, "NO_COLOR=1"}, []string{"-m", DroidModelID}, nil
}
