package detect

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
)

// Gemini CLI auth types, as written to settings.json.
const (
	geminiOAuth    = "oauth-personal"
	geminiAPIKey   = "gemini-api-key"
	geminiVertex   = "vertex-ai"
	geminiCloudEnv = "cloud-shell"
)

// geminiFacts is everything the Gemini decision looks at: names and presence
// only, never a credential value.
type geminiFacts struct {
	SettingsErr     error
	SelectedType    string // from settings.json, "" when unset
	EnvSet          map[string]bool
	OAuthExists     bool
	OAuthErr        error
	HasRefreshToken bool
	HasAccessToken  bool
	ExpiryMillis    int64 // 0 when absent
}

var geminiEnvNames = []string{"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_GENAI_USE_GCA"}

// readGeminiFacts is the thin edge that touches the filesystem and env.
func readGeminiFacts(home string, getenv func(string) string) geminiFacts {
	f := geminiFacts{EnvSet: map[string]bool{}}
	for _, n := range geminiEnvNames {
		if strings.TrimSpace(getenv(n)) != "" {
			f.EnvSet[n] = true
		}
	}
	dir := filepath.Join(home, ".gemini")
	settings, exists, err := readJSONShape(filepath.Join(dir, "settings.json"))
	f.SettingsErr = err
	if exists && err == nil {
		var sec struct {
			Auth struct {
				SelectedType string `json:"selectedType"`
			} `json:"auth"`
		}
		if raw, ok := settings["security"]; ok {
			_ = json.Unmarshal(raw, &sec)
		}
		f.SelectedType = sec.Auth.SelectedType
		if f.SelectedType == "" { // settings written by older releases
			f.SelectedType = rawString(settings, "selectedAuthType")
		}
	}
	creds, exists, err := readJSONShape(filepath.Join(dir, "oauth_creds.json"))
	f.OAuthExists, f.OAuthErr = exists, err
	if exists && err == nil {
		f.HasRefreshToken = rawPresent(creds, "refresh_token")
		f.HasAccessToken = rawPresent(creds, "access_token")
		var exp float64
		if raw, ok := creds["expiry_date"]; ok && json.Unmarshal(raw, &exp) == nil {
			f.ExpiryMillis = int64(exp)
		}
	}
	return f
}

func envTrue(f geminiFacts, getenv func(string) string, name string) bool {
	if !f.EnvSet[name] {
		return false
	}
	v := strings.ToLower(strings.TrimSpace(getenv(name)))
	return v == "true" || v == "1"
}

// effectiveGeminiAuth is the auth type Gemini would use headless: the one in
// settings, else the one its environment variables select, as the CLI does.
func effectiveGeminiAuth(f geminiFacts, getenv func(string) string) string {
	switch {
	case f.SelectedType != "":
		return f.SelectedType
	case envTrue(f, getenv, "GOOGLE_GENAI_USE_GCA"):
		return geminiOAuth
	case envTrue(f, getenv, "GOOGLE_GENAI_USE_VERTEXAI"):
		return geminiVertex
	case f.EnvSet["GEMINI_API_KEY"]:
		return geminiAPIKey
	}
	return ""
}

func geminiAuthKind(in AuthInput) AuthKind {
	f := readGeminiFacts(in.Home, in.Getenv)
	switch effectiveGeminiAuth(f, in.Getenv) {
	case geminiAPIKey, geminiVertex:
		return AuthAPIKey
	case geminiOAuth:
		if f.OAuthExists {
			return AuthSubscription
		}
		return AuthUnauthenticated
	case "":
		if f.OAuthExists {
			return AuthSubscription
		}
		return AuthUnauthenticated
	}
	return AuthKindUnknown
}

// geminiFileBased is appended to every Gemini reason: there is no status
// command, and running the CLI bare to find out would open a browser login,
// so the answer is only as good as the files and environment it reads.
const geminiFileBased = " (decided from ~/.gemini/settings.json, ~/.gemini/oauth_creds.json and the daemon's environment: Gemini CLI has no status command)"

// geminiHealth never runs the binary.
func geminiHealth(_ context.Context, in HealthInput) HealthVerdict {
	return geminiVerdict(readGeminiFacts(in.Home, in.Getenv), in.Getenv, in.Now())
}

// geminiVerdict is the pure decision over the facts.
func geminiVerdict(f geminiFacts, getenv func(string) string, nowMillis int64) HealthVerdict {
	auth := effectiveGeminiAuth(f, getenv)
	var envNames []any
	for _, n := range geminiEnvNames {
		if f.EnvSet[n] {
			envNames = append(envNames, n)
		}
	}
	details := map[string]any{
		"decided_from":        "files",
		"selected_type":       auth,
		"oauth_creds_present": f.OAuthExists,
		"env_set":             envNames,
	}
	if envNames == nil {
		details["env_set"] = []any{}
	}
	v := func(s HealthStatus, reason string) HealthVerdict {
		return HealthVerdict{Status: s, Reason: reason + geminiFileBased, Details: details}
	}
	if f.SettingsErr != nil {
		return v(StatusUnknown, "~/.gemini/settings.json could not be read ("+f.SettingsErr.Error()+"); fix or remove it")
	}
	switch auth {
	case "":
		return v(StatusNotConfigured, "Gemini CLI has no auth method: set security.auth.selectedType in ~/.gemini/settings.json (run `gemini` once interactively), or set GEMINI_API_KEY in the daemon's environment")
	case geminiAPIKey:
		if f.EnvSet["GEMINI_API_KEY"] {
			return v(StatusReady, "uses the GEMINI_API_KEY API key")
		}
		return v(StatusNotConfigured, "Gemini CLI is set to use an API key but GEMINI_API_KEY is not set in the daemon's environment; set it and restart the daemon")
	case geminiVertex:
		if f.EnvSet["GOOGLE_API_KEY"] || (f.EnvSet["GOOGLE_CLOUD_PROJECT"] && f.EnvSet["GOOGLE_CLOUD_LOCATION"]) {
			return v(StatusReady, "uses Vertex AI")
		}
		return v(StatusNotConfigured, "Gemini CLI is set to use Vertex AI but neither GOOGLE_API_KEY nor GOOGLE_CLOUD_PROJECT with GOOGLE_CLOUD_LOCATION is set in the daemon's environment")
	case geminiOAuth:
		switch {
		case f.OAuthErr != nil:
			return v(StatusUnknown, "~/.gemini/oauth_creds.json could not be read ("+f.OAuthErr.Error()+"); sign in again by running `gemini` interactively")
		case !f.OAuthExists:
			return v(StatusNotConfigured, "Gemini CLI is set to sign in with Google but has no saved login; run `gemini` interactively once to sign in")
		case f.HasRefreshToken:
			return v(StatusReady, "signed in with Google (a refresh token is saved)")
		case f.ExpiryMillis > 0 && f.ExpiryMillis <= nowMillis:
			return v(StatusExpired, "the saved Google login has expired and has no refresh token; run `gemini` interactively to sign in again")
		case f.HasAccessToken:
			return v(StatusReady, "signed in with Google (the saved token has not expired)")
		}
		return v(StatusUnknown, "~/.gemini/oauth_creds.json has an unrecognised shape; run `gemini` interactively to sign in again")
	case geminiCloudEnv, "compute-default-credentials":
		return v(StatusUnknown, "Gemini CLI uses ambient Google Cloud credentials ("+auth+"), which card cannot check without calling Google")
	}
	return v(StatusUnknown, "Gemini CLI's auth type "+auth+" is not one card knows; run `gemini` by hand to check it")
}

// geminiPackage: bundle/gemini.js is the whole program.
var geminiPackage = &npmPackage{Name: "@google/gemini-cli"}
