package detect

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Qwen Code (0.24.4) has no status command (`qwen auth` says "removed"),
// and its initialize offers the same auth method whatever its state. What
// decides is the auth type in ~/.qwen/settings.json (security.auth,
// gemini-cli's layout) and the key that type needs: in the environment,
// in the settings, or in the .env file it loads. Without one, its
// session/new answers "Authentication required", so a missing key is
// not configured; an auth type card cannot check is unknown.

// qwenTypeKeys are the key variables each auth type reads.
var qwenTypeKeys = map[string][]string{
	"openai":           {"OPENAI_API_KEY"},
	"openai-responses": {"OPENAI_API_KEY"},
	"anthropic":        {"ANTHROPIC_API_KEY"},
	"vertex-ai":        {"GOOGLE_API_KEY"},
}

// qwenEnvNames are the variables the decision reports as set.
var qwenEnvNames = []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"}

// qwenFacts is what the Qwen Code decision looks at: names only.
type qwenFacts struct {
	Dir          string // its settings directory, as shown to a person
	SettingsErr  error
	SelectedType string
	// SettingsKey: security.auth.apiKey is set.
	SettingsKey bool
	EnvSet      map[string]bool
	DotEnv      string
	DotEnvSet   map[string]bool
	OAuthCreds  bool
}

func qwenDir(home string, getenv func(string) string) string {
	if d := strings.TrimSpace(getenv("QWEN_HOME")); d != "" {
		return d
	}
	return filepath.Join(home, ".qwen")
}

func readQwenFacts(home string, getenv func(string) string) qwenFacts {
	dir := qwenDir(home, getenv)
	f := qwenFacts{Dir: displayPath(home, dir), EnvSet: envSet(getenv, qwenEnvNames...)}
	settings, exists, err := readJSONShape(filepath.Join(dir, "settings.json"))
	f.SettingsErr = err
	if exists && err == nil {
		var sec struct {
			Auth struct {
				SelectedType string          `json:"selectedType"`
				APIKey       json.RawMessage `json:"apiKey"`
			} `json:"auth"`
		}
		if raw, ok := settings["security"]; ok {
			_ = json.Unmarshal(raw, &sec)
		}
		f.SelectedType = sec.Auth.SelectedType
		f.SettingsKey = rawPresent(map[string]json.RawMessage{"k": sec.Auth.APIKey}, "k")
	}
	for _, p := range []string{filepath.Join(dir, ".env"), filepath.Join(home, ".env")} {
		if names := dotenvNames(p); names != nil {
			f.DotEnv, f.DotEnvSet = displayPath(home, p), names
			break
		}
	}
	f.OAuthCreds = regularFile(filepath.Join(dir, "oauth_creds.json"))
	return f
}

// effectiveQwenAuth is the auth type a run uses: the one in settings,
// else openai when its key is set (how Qwen Code 0.24.4 starts with only
// OPENAI_API_KEY in its environment).
func effectiveQwenAuth(f qwenFacts) string {
	switch {
	case f.SelectedType != "":
		return f.SelectedType
	case f.EnvSet["OPENAI_API_KEY"] || f.DotEnvSet["OPENAI_API_KEY"]:
		return "openai"
	}
	return ""
}

func qwenAuthKind(in AuthInput) api.AuthKind {
	v := qwenVerdict(readQwenFacts(in.Home, in.Getenv))
	if m := AuthMethod(stringDetail(v.Details, "auth_method")); m != "" {
		return m.Kind()
	}
	if v.Status == api.StatusNotConfigured {
		return api.AuthUnauthenticated
	}
	return api.AuthKindUnknown
}

func stringDetail(d map[string]any, k string) string {
	s, _ := d[k].(string)
	return s
}

// qwenFileBased is appended to every Qwen Code reason.
const qwenFileBased = " (decided from ~/.qwen/settings.json, its .env file and the daemon's environment: Qwen Code has no status command)"

func qwenHealth(_ context.Context, in HealthInput) HealthVerdict {
	return qwenVerdict(readQwenFacts(in.Home, in.Getenv))
}

// qwenVerdict is the pure decision over the facts.
func qwenVerdict(f qwenFacts) HealthVerdict {
	auth := effectiveQwenAuth(f)
	details := map[string]any{
		"decided_from":  "files",
		"selected_type": auth,
		"env_set":       toAny(namesIn(f.EnvSet, qwenEnvNames)),
	}
	if f.DotEnv != "" {
		details["dotenv_file"] = f.DotEnv
	}
	v := func(s api.HealthStatus, reason string) HealthVerdict {
		return HealthVerdict{Status: s, Reason: reason + qwenFileBased, Details: details}
	}
	if f.SettingsErr != nil {
		return v(api.StatusUnknown, f.Dir+"/settings.json could not be read ("+f.SettingsErr.Error()+"); fix or remove it")
	}
	if auth == "" {
		return v(api.StatusNotConfigured, "Qwen Code has no auth type and no OPENAI_API_KEY: set OPENAI_API_KEY (with OPENAI_BASE_URL and OPENAI_MODEL for your endpoint) in card.toml [adapters.qwen-code] env, or choose an auth type in "+f.Dir+"/settings.json")
	}
	if auth == "qwen-oauth" {
		if f.OAuthCreds {
			withAuth(details, MethodSubscription, f.Dir+"/oauth_creds.json")
			return v(api.StatusReady, "signed in with Qwen OAuth ("+f.Dir+"/oauth_creds.json is there; card cannot tell whether it is still valid)")
		}
		return v(api.StatusNotConfigured, "Qwen Code is set to Qwen OAuth but has no saved login; run `qwen` interactively to sign in")
	}
	keys, known := qwenTypeKeys[auth]
	if !known {
		return v(api.StatusUnknown, "Qwen Code uses the auth type "+auth+", which card cannot check")
	}
	for _, k := range keys {
		switch {
		case f.EnvSet[k]:
			withAuth(details, MethodAPIKey, k)
			return v(api.StatusReady, "uses the "+auth+" key in "+k)
		case f.DotEnvSet[k]:
			withAuth(details, MethodAPIKey, k+" in "+f.DotEnv)
			return v(api.StatusReady, "uses the "+auth+" key in "+k+" in "+f.DotEnv)
		}
	}
	if f.SettingsKey {
		withAuth(details, MethodAPIKey, "security.auth.apiKey in "+f.Dir+"/settings.json")
		return v(api.StatusReady, "uses the "+auth+" key saved in "+f.Dir+"/settings.json")
	}
	return v(api.StatusNotConfigured, "Qwen Code is set to "+auth+" but "+strings.Join(keys, ", ")+" is not set in the daemon's environment, card.toml [adapters.qwen-code] env, its .env file or its settings")
}

// qwenPackage: cli-entry.js is the launcher, and it answers --version
// from the package.
var qwenPackage = &npmPackage{Name: "@qwen-code/qwen-code"}

// qwenProbe is how detection reads Qwen Code's sign-in, health and version.
var qwenProbe = Probe{For: agent.QwenCode, AuthKind: qwenAuthKind, Health: qwenHealth, Package: qwenPackage}
