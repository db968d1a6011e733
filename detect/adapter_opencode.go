package detect

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sort"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// OpenCode keeps its logins in $XDG_DATA_HOME/opencode/auth.json
// (~/.local/share/opencode/auth.json), one entry per provider, each
// {"type": "api" | "oauth" | "wellknown", ...}; OPENCODE_AUTH_CONTENT
// replaces the file. A provider's own key variable counts as a login too,
// and so does a provider declared in its config with an apiKey. Its
// status command (`opencode auth list`) prints for a terminal only, so
// card reads what that command reads, by name and type, never a value.
//
// With none of these OpenCode still runs: its free models need no
// account, only the network. So no credential is not "not configured":
// the verdict is unknown, with why.

// openCodeKeyEnv are provider key variables OpenCode 1.18.33 reads
// (through its models.dev catalogue; these are the common ones).
var openCodeKeyEnv = []string{
	"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY", "OPENROUTER_API_KEY",
	"GROQ_API_KEY", "XAI_API_KEY", "DEEPSEEK_API_KEY", "MISTRAL_API_KEY", "CEREBRAS_API_KEY", "FIREWORKS_API_KEY",
	"TOGETHER_AI_API_KEY", "MOONSHOT_API_KEY", "ZHIPU_API_KEY", "OPENCODE_API_KEY", "AZURE_API_KEY",
	"AWS_BEARER_TOKEN_BEDROCK", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "GITHUB_TOKEN",
}

// openCodeFacts is what the OpenCode decision looks at: names only.
type openCodeFacts struct {
	// AuthFile is where the logins were read from, as shown to a person.
	AuthFile string
	// Logins are the providers auth.json (or OPENCODE_AUTH_CONTENT) holds
	// a login for, with its type.
	Logins  map[string]string
	AuthErr error
	EnvSet  []string
	// ConfigProviders are providers OPENCODE_CONFIG_CONTENT declares with
	// an apiKey (how card.toml points OpenCode at an endpoint).
	ConfigProviders []string
}

func readOpenCodeFacts(home string, getenv func(string) string) openCodeFacts {
	f := openCodeFacts{Logins: map[string]string{}}
	for _, n := range openCodeKeyEnv {
		if strings.TrimSpace(getenv(n)) != "" {
			f.EnvSet = append(f.EnvSet, n)
		}
	}
	var auth map[string]json.RawMessage
	if content := getenv("OPENCODE_AUTH_CONTENT"); strings.TrimSpace(content) != "" {
		f.AuthFile = "OPENCODE_AUTH_CONTENT"
		if err := json.Unmarshal([]byte(content), &auth); err != nil {
			f.AuthErr = errors.New("not a JSON object")
		}
	} else {
		data := getenv("XDG_DATA_HOME")
		if data == "" {
			data = filepath.Join(home, ".local", "share")
		}
		path := filepath.Join(data, "opencode", "auth.json")
		f.AuthFile = displayPath(home, path)
		var err error
		auth, _, err = readJSONShape(path)
		f.AuthErr = err
	}
	for provider := range auth {
		if !rawPresent(auth, provider) {
			continue
		}
		// Only the non-secret "type" field is decoded.
		var entry struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(auth[provider], &entry)
		f.Logins[provider] = entry.Type
	}
	var cfg struct {
		Provider map[string]struct {
			Options map[string]json.RawMessage `json:"options"`
		} `json:"provider"`
	}
	if json.Unmarshal([]byte(getenv("OPENCODE_CONFIG_CONTENT")), &cfg) == nil {
		for name, p := range cfg.Provider {
			if rawPresent(p.Options, "apiKey") {
				f.ConfigProviders = append(f.ConfigProviders, name)
			}
		}
		sort.Strings(f.ConfigProviders)
	}
	return f
}

func openCodeAuthKind(in AuthInput) api.AuthKind {
	f := readOpenCodeFacts(in.Home, in.Getenv)
	for _, kind := range f.Logins {
		if kind == "oauth" {
			return api.AuthSubscription
		}
	}
	if len(f.Logins) > 0 || len(f.EnvSet) > 0 || len(f.ConfigProviders) > 0 {
		return api.AuthAPIKey
	}
	return api.AuthKindUnknown
}

// openCodeFileBased is appended to every OpenCode reason.
const openCodeFileBased = " (decided from OpenCode's auth.json, OPENCODE_CONFIG_CONTENT and the provider key variables, by name: `opencode auth list` prints for a terminal only)"

func openCodeHealth(_ context.Context, in HealthInput) HealthVerdict {
	return openCodeVerdict(readOpenCodeFacts(in.Home, in.Getenv))
}

// openCodeVerdict is the pure decision over the facts.
func openCodeVerdict(f openCodeFacts) HealthVerdict {
	details := map[string]any{
		"decided_from":     "files",
		"env_set":          toAny(f.EnvSet),
		"login_providers":  toAny(sortedKeys(f.Logins)),
		"config_providers": toAny(f.ConfigProviders),
	}
	v := func(s api.HealthStatus, reason string) HealthVerdict {
		return HealthVerdict{Status: s, Reason: reason + openCodeFileBased, Details: details}
	}
	switch {
	case f.AuthErr != nil:
		return v(api.StatusUnknown, f.AuthFile+" could not be read ("+f.AuthErr.Error()+"); fix or remove it, or sign in again with `opencode auth login`")
	case len(f.Logins) > 0:
		m := MethodAPIKey
		for _, kind := range f.Logins {
			if kind == "oauth" {
				m = MethodSubscription
			}
		}
		withAuth(details, m, "the login(s) in "+f.AuthFile)
		return v(api.StatusReady, "signed in to "+strings.Join(sortedKeys(f.Logins), ", ")+" (in "+f.AuthFile+")")
	case len(f.ConfigProviders) > 0:
		withAuth(details, MethodAPIKey, "OPENCODE_CONFIG_CONTENT")
		return v(api.StatusReady, "the provider(s) "+strings.Join(f.ConfigProviders, ", ")+" declared with a key in OPENCODE_CONFIG_CONTENT")
	case len(f.EnvSet) > 0:
		m := MethodAPIKey
		if strings.HasPrefix(f.EnvSet[0], "AWS_") {
			m = MethodCloud
		}
		withAuth(details, m, f.EnvSet[0])
		return v(api.StatusReady, "a provider key is set in "+strings.Join(f.EnvSet, ", "))
	}
	return v(api.StatusUnknown, "OpenCode has no login and no provider key; it can still run its free models (OpenCode Zen, no account, over the network), so card cannot tell whether a run will answer. Sign in with `opencode auth login`, or point it at a provider in card.toml [adapters.opencode] env")
}

// openCodePackage: the install script hard-links the platform's native
// binary over bin/opencode.exe (a shell placeholder until it runs).
var openCodePackage = &npmPackage{Name: "opencode-ai", Native: true}

// openCodeProbe is how detection reads OpenCode's sign-in, health and version.
var openCodeProbe = Probe{For: agent.OpenCode, AuthKind: openCodeAuthKind, Health: openCodeHealth, Package: openCodePackage}
