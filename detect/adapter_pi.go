package detect

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// piKeyEnv are the provider credentials `pi --help` (0.73.1) documents.
// Any one of them lets Pi run against that provider.
var piKeyEnv = []string{
	"ANTHROPIC_API_KEY", "ANTHROPIC_OAUTH_TOKEN", "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "DEEPSEEK_API_KEY",
	"GEMINI_API_KEY", "GROQ_API_KEY", "CEREBRAS_API_KEY", "XAI_API_KEY", "FIREWORKS_API_KEY", "OPENROUTER_API_KEY",
	"AI_GATEWAY_API_KEY", "ZAI_API_KEY", "MISTRAL_API_KEY", "MINIMAX_API_KEY", "MOONSHOT_API_KEY", "OPENCODE_API_KEY",
	"KIMI_API_KEY", "CLOUDFLARE_API_KEY", "XIAOMI_API_KEY", "AWS_BEARER_TOKEN_BEDROCK", "AWS_ACCESS_KEY_ID", "AWS_PROFILE",
}

// piFacts is what the Pi decision looks at: names and presence only.
type piFacts struct {
	EnvSet []string // which of piKeyEnv are set
	// AuthProviders are the providers ~/.pi/agent/auth.json holds a login
	// for, with the kind Pi recorded ("oauth" or "api_key").
	AuthProviders map[string]string
	AuthErr       error
	// ModelProviders are custom providers in models.json with a key or
	// pointing at a keyless (local) endpoint.
	ModelProviders []string
	ModelsErr      error
}

func piAgentDir(home string, getenv func(string) string) string {
	if d := strings.TrimSpace(getenv("PI_CODING_AGENT_DIR")); d != "" {
		return d
	}
	return filepath.Join(home, ".pi", "agent")
}

func readPiFacts(home string, getenv func(string) string) piFacts {
	f := piFacts{AuthProviders: map[string]string{}}
	for _, n := range piKeyEnv {
		if strings.TrimSpace(getenv(n)) != "" {
			f.EnvSet = append(f.EnvSet, n)
		}
	}
	dir := piAgentDir(home, getenv)
	auth, exists, err := readJSONShape(filepath.Join(dir, "auth.json"))
	f.AuthErr = err
	if exists && err == nil {
		for provider, raw := range auth {
			if !rawPresent(auth, provider) {
				continue
			}
			// Only the non-secret "type" field is decoded.
			var entry struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(raw, &entry)
			f.AuthProviders[provider] = entry.Type
		}
	}
	models, exists, err := readJSONShape(filepath.Join(dir, "models.json"))
	f.ModelsErr = err
	if exists && err == nil && rawPresent(models, "providers") {
		var providers map[string]map[string]json.RawMessage
		if json.Unmarshal(models["providers"], &providers) == nil {
			for name, p := range providers {
				if rawPresent(p, "baseUrl") || rawPresent(p, "apiKey") {
					f.ModelProviders = append(f.ModelProviders, name)
				}
			}
			sort.Strings(f.ModelProviders)
		}
	}
	return f
}

func piAuthKind(in AuthInput) api.AuthKind {
	f := readPiFacts(in.Home, in.Getenv)
	for _, kind := range f.AuthProviders {
		if kind == "oauth" {
			return api.AuthSubscription
		}
	}
	switch {
	case len(f.AuthProviders) > 0 || len(f.EnvSet) > 0 || len(f.ModelProviders) > 0:
		return api.AuthAPIKey
	case f.AuthErr != nil || f.ModelsErr != nil:
		return api.AuthKindUnknown
	}
	return api.AuthUnauthenticated
}

// piFileBased is appended to every Pi reason: Pi has no status command, so
// the answer comes from the provider variables it documents and its own
// files, by presence only.
const piFileBased = " (decided from the provider variables `pi --help` lists and ~/.pi/agent/auth.json and models.json: Pi has no status command)"

const piLoginHint = "run `pi` once and use /login, or set a provider key such as ANTHROPIC_API_KEY or OPENAI_API_KEY in the daemon's environment"

func piHealth(_ context.Context, in HealthInput) HealthVerdict {
	return piVerdict(readPiFacts(in.Home, in.Getenv))
}

// piVerdict is the pure decision over the facts.
func piVerdict(f piFacts) HealthVerdict {
	providers := make([]any, 0, len(f.AuthProviders))
	for _, p := range sortedKeys(f.AuthProviders) {
		providers = append(providers, p)
	}
	env := make([]any, 0, len(f.EnvSet))
	for _, n := range f.EnvSet {
		env = append(env, n)
	}
	custom := make([]any, 0, len(f.ModelProviders))
	for _, n := range f.ModelProviders {
		custom = append(custom, n)
	}
	details := map[string]any{
		"decided_from":     "files",
		"env_set":          env,
		"login_providers":  providers,
		"custom_providers": custom,
	}
	v := func(s api.HealthStatus, reason string) HealthVerdict {
		return HealthVerdict{Status: s, Reason: reason + piFileBased, Details: details}
	}
	switch {
	case f.AuthErr != nil:
		return v(api.StatusUnknown, "~/.pi/agent/auth.json could not be read ("+f.AuthErr.Error()+"); fix or remove it, or sign in again with /login")
	case len(f.AuthProviders) > 0:
		m := MethodAPIKey
		for _, kind := range f.AuthProviders {
			if kind == "oauth" {
				m = MethodSubscription
			}
		}
		withAuth(details, m, "the login(s) in ~/.pi/agent/auth.json")
		return v(api.StatusReady, "signed in to "+strings.Join(sortedKeys(f.AuthProviders), ", ")+" (saved in ~/.pi/agent/auth.json)")
	case len(f.EnvSet) > 0:
		m := MethodAPIKey
		switch {
		case strings.HasPrefix(f.EnvSet[0], "AWS_"):
			m = MethodCloud
		case f.EnvSet[0] == "ANTHROPIC_OAUTH_TOKEN":
			m = MethodSubscription
		}
		withAuth(details, m, f.EnvSet[0])
		return v(api.StatusReady, "a provider key is set in "+strings.Join(f.EnvSet, ", "))
	case len(f.ModelProviders) > 0:
		withAuth(details, MethodAPIKey, "the custom provider(s) in ~/.pi/agent/models.json")
		return v(api.StatusReady, "custom provider(s) in ~/.pi/agent/models.json; invoke with that provider's model")
	case f.ModelsErr != nil:
		return v(api.StatusUnknown, "~/.pi/agent/models.json could not be read ("+f.ModelsErr.Error()+"); fix or remove it")
	}
	return v(api.StatusNotConfigured, "Pi has no provider credentials: "+piLoginHint)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// piPackage: dist/cli.js is the whole program.
var piPackage = &npmPackage{Name: "@mariozechner/pi-coding-agent"}

// piProbe is how detection reads Pi's sign-in, health and version.
var piProbe = Probe{For: agent.Pi, AuthKind: piAuthKind, Health: piHealth, Package: piPackage}
