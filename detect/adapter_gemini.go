package detect

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Gemini CLI auth types, as written to settings.json (0.61.0's AuthType).
const (
	geminiOAuth      = "oauth-personal"
	geminiAPIKey     = "gemini-api-key"
	geminiVertex     = "vertex-ai"
	geminiCloudShell = "cloud-shell"
	geminiComputeADC = "compute-default-credentials"
	geminiGateway    = "gateway"
)

// geminiFacts is everything the Gemini decision looks at: names and presence
// only, never a credential value.
type geminiFacts struct {
	SettingsErr  error
	SelectedType string // security.auth.selectedType, "" when unset
	EnforcedType string // security.auth.enforcedType, "" when unset
	// EnvSet: which of geminiEnvNames the runs' environment sets.
	EnvSet map[string]bool
	// DotEnv is the home .env file Gemini would load (~/.gemini/.env, else
	// ~/.env), "" for none, and DotEnvSet the names it sets.
	DotEnv    string
	DotEnvSet map[string]bool
	// StoredKey: a key saved with /auth may be in the encrypted file store
	// (~/.gemini/gemini-credentials.json); on macOS it is in the keychain.
	StoredKeyFile bool
	GOOS          string
	// ADC: Google application default credentials are visible.
	ADC             bool
	OAuthExists     bool
	OAuthErr        error
	HasRefreshToken bool
	HasAccessToken  bool
	ExpiryMillis    int64 // 0 when absent
}

var geminiEnvNames = []string{"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
	"GOOGLE_CLOUD_LOCATION", "GOOGLE_GENAI_USE_GCA", "GOOGLE_GEMINI_BASE_URL", "CLOUD_SHELL", "GEMINI_CLI_USE_COMPUTE_ADC",
	"GOOGLE_APPLICATION_CREDENTIALS"}

// readGeminiFacts is the thin edge that touches the filesystem and env.
func readGeminiFacts(home string, getenv func(string) string) geminiFacts {
	return readGeminiFactsOn(home, getenv, "")
}

func readGeminiFactsOn(home string, getenv func(string) string, goos string) geminiFacts {
	f := geminiFacts{EnvSet: envSet(getenv, geminiEnvNames...), GOOS: goos}
	dir := filepath.Join(home, ".gemini")
	settings, exists, err := readJSONShape(filepath.Join(dir, "settings.json"))
	f.SettingsErr = err
	if exists && err == nil {
		var sec struct {
			Auth struct {
				SelectedType string `json:"selectedType"`
				EnforcedType string `json:"enforcedType"`
			} `json:"auth"`
		}
		if raw, ok := settings["security"]; ok {
			_ = json.Unmarshal(raw, &sec)
		}
		f.SelectedType, f.EnforcedType = sec.Auth.SelectedType, sec.Auth.EnforcedType
		if f.SelectedType == "" { // settings written by older releases
			f.SelectedType = rawString(settings, "selectedAuthType")
		}
	}
	// Gemini loads the first .env it finds walking up from the working
	// directory; a run's directory is not known here, so the home fallback
	// it ends at is what is read.
	for _, p := range []string{filepath.Join(dir, ".env"), filepath.Join(home, ".env")} {
		if names := dotenvNames(p); names != nil {
			f.DotEnv, f.DotEnvSet = displayPath(home, p), names
			break
		}
	}
	f.StoredKeyFile = regularFile(filepath.Join(dir, "gemini-credentials.json"))
	gcloud := getenv("CLOUDSDK_CONFIG")
	if gcloud == "" {
		gcloud = filepath.Join(home, ".config", "gcloud")
	}
	f.ADC = f.EnvSet["GOOGLE_APPLICATION_CREDENTIALS"] || regularFile(filepath.Join(gcloud, "application_default_credentials.json"))
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
	return f.EnvSet[name] && strings.ToLower(strings.TrimSpace(getenv(name))) == "true"
}

// effectiveGeminiAuth is the auth type Gemini uses headless: the one in
// settings, else the one its environment selects, in 0.61.0's order
// (getAuthTypeFromEnv). A .env file is not read at this point, so a
// GEMINI_API_KEY set only there selects nothing.
func effectiveGeminiAuth(f geminiFacts, getenv func(string) string) string {
	switch {
	case f.SelectedType != "":
		return f.SelectedType
	case envTrue(f, getenv, "GOOGLE_GENAI_USE_GCA"):
		return geminiOAuth
	case envTrue(f, getenv, "GOOGLE_GENAI_USE_VERTEXAI"):
		return geminiVertex
	case f.EnvSet["GOOGLE_GEMINI_BASE_URL"]:
		return geminiGateway
	case f.EnvSet["GEMINI_API_KEY"]:
		return geminiAPIKey
	case envTrue(f, getenv, "CLOUD_SHELL"), envTrue(f, getenv, "GEMINI_CLI_USE_COMPUTE_ADC"):
		return geminiComputeADC
	}
	return ""
}

func geminiAuthKind(in AuthInput) api.AuthKind {
	f := readGeminiFacts(in.Home, in.Getenv)
	switch effectiveGeminiAuth(f, in.Getenv) {
	case geminiAPIKey, geminiVertex, geminiComputeADC:
		return api.AuthAPIKey
	case geminiOAuth:
		if f.OAuthExists {
			return api.AuthSubscription
		}
		return api.AuthUnauthenticated
	case "":
		if f.OAuthExists {
			return api.AuthSubscription
		}
		return api.AuthUnauthenticated
	}
	return api.AuthKindUnknown
}

// geminiFileBased is appended to every Gemini reason: there is no status
// command, and running the CLI bare to find out would open a browser login,
// so the answer is only as good as the files and environment it reads.
const geminiFileBased = " (decided from ~/.gemini/settings.json, ~/.gemini/oauth_creds.json, the home .env file and the daemon's environment: Gemini CLI has no status command)"

// geminiHealth never runs the binary.
func geminiHealth(_ context.Context, in HealthInput) HealthVerdict {
	return geminiVerdict(readGeminiFactsOn(in.Home, in.Getenv, in.GOOS), in.Getenv, in.Now())
}

// geminiVerdict is the pure decision over the facts. Each refusal below is
// one Gemini CLI 0.61.0 makes before any request in a headless run (exit
// 41), checked against the real CLI.
func geminiVerdict(f geminiFacts, getenv func(string) string, nowMillis int64) HealthVerdict {
	auth := effectiveGeminiAuth(f, getenv)
	details := map[string]any{
		"decided_from":        "files",
		"selected_type":       auth,
		"oauth_creds_present": f.OAuthExists,
		"env_set":             toAny(namesIn(f.EnvSet, geminiEnvNames)),
	}
	if f.DotEnv != "" {
		details["dotenv_file"] = f.DotEnv
		details["dotenv_set"] = toAny(namesIn(f.DotEnvSet, geminiEnvNames))
	}
	v := func(s api.HealthStatus, reason string) HealthVerdict {
		return HealthVerdict{Status: s, Reason: reason + geminiFileBased, Details: details}
	}
	ready := func(m AuthMethod, source, reason string) HealthVerdict {
		withAuth(details, m, source)
		return v(api.StatusReady, reason)
	}
	// has: set in the environment, or in the .env file Gemini loads once
	// an auth type is chosen.
	has := func(name string) (string, bool) {
		switch {
		case f.EnvSet[name]:
			return name, true
		case f.DotEnvSet[name]:
			return name + " in " + f.DotEnv, true
		}
		return "", false
	}
	if f.SettingsErr != nil {
		return v(api.StatusUnknown, "~/.gemini/settings.json could not be read ("+f.SettingsErr.Error()+"); fix or remove it")
	}
	if f.EnforcedType != "" && auth != f.EnforcedType {
		return v(api.StatusNotConfigured, "Gemini CLI's settings enforce the auth type "+f.EnforcedType+" but it would use "+orNone(auth)+"; sign in with that type (run `gemini` once interactively)")
	}
	switch auth {
	case "":
		return v(api.StatusNotConfigured, "Gemini CLI has no auth method: set security.auth.selectedType in ~/.gemini/settings.json (run `gemini` once interactively), or set GEMINI_API_KEY in the daemon's environment (or card.toml [adapters.gemini] env)")
	case geminiAPIKey:
		if src, ok := has("GEMINI_API_KEY"); ok {
			return ready(MethodAPIKey, src, "uses the Gemini API key in "+src)
		}
		if f.StoredKeyFile || f.GOOS == "darwin" {
			return v(api.StatusUnknown, "Gemini CLI is set to use an API key and none is in the daemon's environment; a key saved with /auth may be in the OS keychain or ~/.gemini/gemini-credentials.json, which card cannot read; set GEMINI_API_KEY to be sure")
		}
		return v(api.StatusNotConfigured, "Gemini CLI is set to use an API key but GEMINI_API_KEY is not set in the daemon's environment, card.toml [adapters.gemini] env or ~/.gemini/.env")
	case geminiVertex:
		if src, ok := has("GOOGLE_API_KEY"); ok {
			return ready(MethodCloud, src, "uses Vertex AI in express mode with the key in "+src)
		}
		_, project := has("GOOGLE_CLOUD_PROJECT")
		_, location := has("GOOGLE_CLOUD_LOCATION")
		if !project || !location {
			return v(api.StatusNotConfigured, "Gemini CLI is set to use Vertex AI but neither GOOGLE_API_KEY nor GOOGLE_CLOUD_PROJECT with GOOGLE_CLOUD_LOCATION is set in the daemon's environment")
		}
		if f.ADC {
			return ready(MethodCloud, "GOOGLE_CLOUD_PROJECT", "uses Vertex AI with Google application default credentials")
		}
		return v(api.StatusUnknown, "Gemini CLI uses Vertex AI but no Google credentials are visible (GOOGLE_APPLICATION_CREDENTIALS, or gcloud's application default credentials); unless this machine has a service account, run `gcloud auth application-default login` as the daemon's user")
	case geminiOAuth:
		withAuth(details, MethodSubscription, "the Google login in ~/.gemini/oauth_creds.json")
		switch {
		case f.OAuthErr != nil:
			return v(api.StatusUnknown, "~/.gemini/oauth_creds.json could not be read ("+f.OAuthErr.Error()+"); sign in again by running `gemini` interactively")
		case !f.OAuthExists:
			delete(details, "auth_method")
			delete(details, "auth_source")
			return v(api.StatusNotConfigured, "Gemini CLI is set to sign in with Google but has no saved login; run `gemini` interactively once to sign in")
		case f.HasRefreshToken:
			return v(api.StatusReady, "signed in with Google (a refresh token is saved)")
		case f.ExpiryMillis > 0 && f.ExpiryMillis <= nowMillis:
			return v(api.StatusExpired, "the saved Google login has expired and has no refresh token; run `gemini` interactively to sign in again")
		case f.HasAccessToken:
			return v(api.StatusReady, "signed in with Google (the saved token has not expired)")
		}
		return v(api.StatusUnknown, "~/.gemini/oauth_creds.json has an unrecognised shape; run `gemini` interactively to sign in again")
	case geminiComputeADC:
		if f.ADC {
			return ready(MethodCloud, "application default credentials", "uses Google application default credentials")
		}
		return v(api.StatusUnknown, "Gemini CLI uses the machine's Google credentials (compute-default-credentials), which card cannot check without calling Google")
	case geminiGateway, geminiCloudShell:
		from := "security.auth.selectedType in ~/.gemini/settings.json"
		if f.SelectedType == "" {
			from = "GOOGLE_GEMINI_BASE_URL in the daemon's environment"
		}
		return v(api.StatusNotConfigured, "Gemini CLI's auth type is "+auth+" (from "+from+"), which it refuses in a headless run (\"Invalid auth method selected.\"); set security.auth.selectedType to gemini-api-key (a gateway at GOOGLE_GEMINI_BASE_URL still works with it)")
	}
	return v(api.StatusUnknown, "Gemini CLI's auth type "+auth+" is not one card knows; run `gemini` by hand to check it")
}

// geminiPackage: bundle/gemini.js is the whole program.
var geminiPackage = &npmPackage{Name: "@google/gemini-cli"}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// geminiProbe is how detection reads Gemini CLI's sign-in, health and version.
var geminiProbe = Probe{For: agent.Gemini, AuthKind: geminiAuthKind, Health: geminiHealth, Package: geminiPackage}
