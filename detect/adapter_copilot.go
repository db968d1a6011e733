package detect

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// copilotTokenEnv are the variables Copilot CLI takes a GitHub token from,
// in its own order of precedence (`copilot help environment`).
var copilotTokenEnv = []string{"COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN"}

// copilotFacts is what the Copilot decision looks at: names and presence
// only, never a token.
type copilotFacts struct {
	TokenEnv []string // which of copilotTokenEnv are set
	// BYOK: a custom provider (COPILOT_PROVIDER_BASE_URL) needs no GitHub
	// sign-in at all, but does need a model named.
	ProviderURL   bool
	ProviderModel bool
	ProviderKey   bool
	// LoggedInUser: ~/.copilot/config.json records a /login account (the
	// token itself lives in the OS keychain).
	LoggedInUser bool
	ConfigErr    error
	// GHHost: the GitHub CLI has a login for the host Copilot signs in to
	// (GHHostName: github.com unless COPILOT_GH_HOST or GH_HOST says
	// otherwise), which Copilot falls back to.
	GHHost     bool
	GHHostName string
}

func copilotHome(home string, getenv func(string) string) string {
	if h := strings.TrimSpace(getenv("COPILOT_HOME")); h != "" {
		return h
	}
	return filepath.Join(home, ".copilot")
}

// readCopilotFacts is the thin edge over env and files.
func readCopilotFacts(home string, getenv func(string) string) copilotFacts {
	var f copilotFacts
	for _, n := range copilotTokenEnv {
		if strings.TrimSpace(getenv(n)) != "" {
			f.TokenEnv = append(f.TokenEnv, n)
		}
	}
	f.ProviderURL = strings.TrimSpace(getenv("COPILOT_PROVIDER_BASE_URL")) != ""
	f.ProviderModel = strings.TrimSpace(getenv("COPILOT_MODEL")) != "" || strings.TrimSpace(getenv("COPILOT_PROVIDER_MODEL_ID")) != ""
	for _, n := range []string{"COPILOT_PROVIDER_API_KEY", "COPILOT_PROVIDER_BEARER_TOKEN", "COPILOT_PROVIDER_API_KEY_COMMAND"} {
		if strings.TrimSpace(getenv(n)) != "" {
			f.ProviderKey = true
		}
	}
	keys, exists, err := readJSONShape(filepath.Join(copilotHome(home, getenv), "config.json"))
	f.ConfigErr = err
	if exists && err == nil {
		f.LoggedInUser = rawPresent(keys, "logged_in_users") || rawPresent(keys, "last_logged_in_user")
	}
	f.GHHostName = "github.com"
	for _, n := range []string{"COPILOT_GH_HOST", "GH_HOST"} {
		if h := strings.TrimSpace(getenv(n)); h != "" {
			f.GHHostName = strings.TrimPrefix(strings.TrimPrefix(h, "https://"), "http://")
			break
		}
	}
	f.GHHost = ghHasLogin(home, getenv, f.GHHostName)
	return f
}

// ghHasLogin reports whether the GitHub CLI's hosts.yml has an entry for
// host. It reads host names only (top-level keys), never a token line.
func ghHasLogin(home string, getenv func(string) string, host string) bool {
	dir := strings.TrimSpace(getenv("GH_CONFIG_DIR"))
	if dir == "" {
		if x := strings.TrimSpace(getenv("XDG_CONFIG_HOME")); x != "" {
			dir = filepath.Join(x, "gh")
		} else {
			dir = filepath.Join(home, ".config", "gh")
		}
	}
	fh, err := os.Open(filepath.Join(dir, "hosts.yml"))
	if err != nil {
		return false
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), host+":") {
			return true
		}
	}
	return false
}

func copilotAuthKind(in AuthInput) api.AuthKind {
	f := readCopilotFacts(in.Home, in.Getenv)
	switch {
	case f.ConfigErr != nil:
		return api.AuthKindUnknown
	case f.ProviderURL:
		return api.AuthAPIKey
	case len(f.TokenEnv) > 0 || f.LoggedInUser || f.GHHost:
		return api.AuthSubscription
	}
	return api.AuthUnauthenticated
}

// copilotFileBased is appended to every Copilot reason: `copilot login` is
// interactive OAuth and there is no offline status command, so the answer
// rests on the environment and files, not on asking GitHub.
const copilotFileBased = " (decided from the daemon's environment, ~/.copilot/config.json and the GitHub CLI's hosts.yml: Copilot CLI has no offline status command)"

const copilotLoginHint = "run `copilot` once and use /login, set COPILOT_GITHUB_TOKEN (a fine-grained token with the Copilot Requests permission) in the daemon's environment, or run `gh auth login`"

func copilotHealth(_ context.Context, in HealthInput) HealthVerdict {
	return copilotVerdict(readCopilotFacts(in.Home, in.Getenv))
}

// copilotVerdict is the pure decision over the facts.
func copilotVerdict(f copilotFacts) HealthVerdict {
	env := make([]any, 0, len(f.TokenEnv))
	for _, n := range f.TokenEnv {
		env = append(env, n)
	}
	details := map[string]any{
		"decided_from":       "files",
		"env_set":            env,
		"byok_provider":      f.ProviderURL,
		"login_recorded":     f.LoggedInUser,
		"gh_cli_github_host": f.GHHost,
	}
	v := func(s api.HealthStatus, reason string) HealthVerdict {
		return HealthVerdict{Status: s, Reason: reason + copilotFileBased, Details: details}
	}
	switch {
	case f.ConfigErr != nil:
		return v(api.StatusUnknown, "~/.copilot/config.json could not be read ("+f.ConfigErr.Error()+"); fix or remove it")
	case f.ProviderURL && !f.ProviderModel:
		return v(api.StatusNotConfigured, "COPILOT_PROVIDER_BASE_URL is set but COPILOT_MODEL is not; a custom provider needs the model named")
	case f.ProviderURL && f.ProviderKey:
		withAuth(details, MethodAPIKey, "COPILOT_PROVIDER_BASE_URL")
		return v(api.StatusReady, "uses the custom provider in COPILOT_PROVIDER_BASE_URL with a key from the environment (no GitHub sign-in needed)")
	case f.ProviderURL:
		withAuth(details, MethodAPIKey, "COPILOT_PROVIDER_BASE_URL")
		return v(api.StatusReady, "uses the custom provider in COPILOT_PROVIDER_BASE_URL without a key (a local provider)")
	case len(f.TokenEnv) > 0:
		withAuth(details, MethodSubscription, f.TokenEnv[0])
		return v(api.StatusReady, "a GitHub token is set in "+f.TokenEnv[0]+"; card did not ask GitHub whether it is valid or has Copilot access")
	case f.LoggedInUser:
		withAuth(details, MethodSubscription, "the /login account recorded in ~/.copilot/config.json")
		return v(api.StatusReady, "~/.copilot/config.json records a /login account (its token is in the OS keychain, which card does not read)")
	case f.GHHost:
		withAuth(details, MethodSubscription, "the GitHub CLI's login")
		return v(api.StatusReady, "the GitHub CLI is signed in to "+f.GHHostName+", which Copilot uses when nothing else is set")
	}
	return v(api.StatusNotConfigured, "GitHub Copilot CLI is not signed in: "+copilotLoginHint)
}

// copilotPackage: npm-loader.js runs the native binary of the
// @github/copilot-<platform>-<arch> package (musl builds are named
// linuxmusl); that package's version is the one `copilot --version` prints.
var copilotPackage = &npmPackage{Name: "@github/copilot", Platform: func(goos, goarch string) []platformBinary {
	out := []platformBinary{{Package: "@github/copilot-" + nodePlatform[goos] + "-" + nodeArch[goarch], Binary: "copilot", Version: true}}
	if goos == "linux" {
		out = append(out, platformBinary{Package: "@github/copilot-linuxmusl-" + nodeArch[goarch], Binary: "copilot", Version: true})
	}
	return out
}}

// copilotProbe is how detection reads Copilot CLI's sign-in, health and version.
var copilotProbe = Probe{For: agent.Copilot, AuthKind: copilotAuthKind, Health: copilotHealth, Package: copilotPackage}
