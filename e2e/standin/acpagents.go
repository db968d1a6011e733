package standin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// PlainModel is the model id OpenCodeEnv and QwenSetup declare. It names no
// vendor's model on purpose: OpenCode gives a model whose id starts with
// "gpt-" an apply_patch tool in place of write and edit, and each CLI
// tunes its defaults to the models it knows; an id neither knows gets the
// generic tool set a user's own provider gets.
const PlainModel = "card-standin"

// OpenCodeProvider is the custom provider name OpenCodeEnv declares.
const OpenCodeProvider = "cardstandin"

// OpenCodePassword is the password OpenCodeEnv gives OpenCode's loopback
// HTTP server (OPENCODE_SERVER_PASSWORD). `opencode acp` serves its whole
// API on 127.0.0.1 (port 4096 when free) for its own ACP layer, and without
// a password any local process could drive the agent through it, past every
// answer its ACP client gives.
const OpenCodePassword = "card-standin-server-password"

// OpenCodeEnv returns the complete environment for OpenCode (`opencode
// acp`) to use this OpenAI stand-in over Chat Completions, from an empty
// HOME and with no account:
//
//   - OPENCODE_CONFIG_CONTENT declares a custom provider
//     (@ai-sdk/openai-compatible, bundled in the binary, so nothing is
//     installed for it) with the stand-in's base URL and key, and makes its
//     one model the default and small model. The model declares a context
//     limit and a price, without which OpenCode sends no usage_update (the
//     only place it reports cost).
//   - OPENCODE_DISABLE_MODELS_FETCH stops the startup fetch of the
//     models.dev catalogue, OPENCODE_DISABLE_AUTOUPDATE the update check.
//   - OPENCODE_SERVER_PASSWORD closes its loopback API (OpenCodePassword).
//
// extra is merged into the config's top level (a "permission" table, say).
func (s *Server) OpenCodeEnv(home, path string, extra map[string]any) ([]string, error) {
	if s.Vendor != OpenAI {
		return nil, fmt.Errorf("opencode stand-in: OpenCodeEnv speaks Chat Completions; use NewOpenAI, not the %s stand-in", s.Vendor)
	}
	cfg := map[string]any{
		"provider": map[string]any{OpenCodeProvider: map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "card stand-in",
			"options": map[string]any{"baseURL": s.URL + "/v1", "apiKey": APIKey},
			"models": map[string]any{PlainModel: map[string]any{
				"name":  "card stand-in",
				"limit": map[string]any{"context": 200000, "output": 8192},
				"cost":  map[string]any{"input": 3, "output": 15},
			}},
		}},
		"model":       OpenCodeProvider + "/" + PlainModel,
		"small_model": OpenCodeProvider + "/" + PlainModel,
		"autoupdate":  false,
		"share":       "disabled",
	}
	for k, v := range extra {
		cfg[k] = v
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("opencode stand-in: config does not encode: %w", err)
	}
	return []string{
		"HOME=" + home,
		"PATH=" + path,
		"OPENCODE_CONFIG_CONTENT=" + string(b),
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_SERVER_PASSWORD=" + OpenCodePassword,
		"NO_COLOR=1",
	}, nil
}

// QwenSettings is the ~/.qwen/settings.json QwenSetup writes: it turns off
// the work Qwen Code does after a turn on its own, each a further model
// call card never asked for and cannot see in the turn — the managed memory
// extraction (a subagent with read_file, write_file, edit and a read-only
// shell) and its "dream" consolidation, and the follow-up suggestion sent
// as the non-ACP notification qwen/notify/session/prompt-suggestion.
const QwenSettings = `{
  "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false},
  "ui": {"enableFollowupSuggestions": false},
  "privacy": {"usageStatisticsEnabled": false},
  "general": {"enableAutoUpdate": false}
}
`

// QwenSetup points Qwen Code (`qwen --acp`) at this OpenAI stand-in from an
// empty HOME: OPENAI_API_KEY, OPENAI_BASE_URL and OPENAI_MODEL are all it
// needs to answer session/new without an authenticate call (its one auth
// method, "openai", is that key). It writes QwenSettings and returns the
// complete environment.
func (s *Server) QwenSetup(home, path string) ([]string, error) {
	if s.Vendor != OpenAI {
		return nil, fmt.Errorf("qwen stand-in: Qwen Code's openai auth speaks Chat Completions; use NewOpenAI, not the %s stand-in", s.Vendor)
	}
	dir := filepath.Join(home, ".qwen")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("qwen stand-in: create %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), []byte(QwenSettings), 0o600); err != nil {
		return nil, fmt.Errorf("qwen stand-in: write settings: %w", err)
	}
	return []string{
		"HOME=" + home,
		"PATH=" + path,
		"OPENAI_API_KEY=" + APIKey,
		"OPENAI_BASE_URL=" + s.URL + "/v1",
		"OPENAI_MODEL=" + PlainModel,
		"NO_COLOR=1",
	}, nil
}
