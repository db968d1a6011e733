package detect

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// claudeCloud are Claude Code's cloud-provider switches, in the order it
// reads them, with the apiProvider name `claude auth status` prints.
var claudeCloud = []struct{ env, provider, name string }{
	{"CLAUDE_CODE_USE_BEDROCK", "bedrock", "Amazon Bedrock"},
	{"CLAUDE_CODE_USE_VERTEX", "vertex", "Google Vertex AI"},
	{"CLAUDE_CODE_USE_FOUNDRY", "foundry", "Microsoft Foundry"},
	{"CLAUDE_CODE_USE_ANTHROPIC_AWS", "anthropicAws", "Claude in AWS"},
	{"CLAUDE_CODE_USE_MANTLE", "mantle", "Mantle"},
}

// claudeEnvNames are the variables the Claude decision looks at, by name.
var claudeEnvNames = []string{
	"ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN",
	// Bedrock: the AWS SDK's credential sources that live in the environment.
	"AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK", "AWS_WEB_IDENTITY_TOKEN_FILE",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "CLAUDE_CODE_SKIP_BEDROCK_AUTH",
	// Vertex: Google's application default credentials.
	"GOOGLE_APPLICATION_CREDENTIALS", "CLAUDE_CODE_SKIP_VERTEX_AUTH",
	// Foundry: a key, or Microsoft Entra ID.
	"ANTHROPIC_FOUNDRY_API_KEY", "ANTHROPIC_FOUNDRY_RESOURCE", "ANTHROPIC_FOUNDRY_BASE_URL", "CLAUDE_CODE_SKIP_FOUNDRY_AUTH",
}

// claudeFacts is everything the Claude decision looks at besides the status
// command's answer: names and presence, never a credential value.
type claudeFacts struct {
	GOOS string
	// Env: which of claudeEnvNames the runs' environment sets.
	Env map[string]bool
	// Cloud is the first CLAUDE_CODE_USE_* switch that is on ("" for none),
	// as its index into claudeCloud plus one.
	Cloud int
	// ConfigDir is ~/.claude or $CLAUDE_CONFIG_DIR, as shown in reasons.
	ConfigDir string
	// The saved claude.ai login in <config dir>/.credentials.json.
	CredsExist, OAuth, OAuthRefresh bool
	OAuthExpiresMillis              int64
	CredsErr                        error
	// AWSFiles: ~/.aws/credentials or ~/.aws/config exists (profiles, SSO).
	AWSFiles bool
	// GCloudADC: gcloud's application default credentials file exists.
	GCloudADC bool
}

func claudeConfigDir(home string, getenv func(string) string) string {
	if d := strings.TrimSpace(getenv("CLAUDE_CONFIG_DIR")); d != "" {
		return d
	}
	return filepath.Join(home, ".claude")
}

// readClaudeFacts is the thin edge over the environment and files.
func readClaudeFacts(home string, getenv func(string) string, goos string) claudeFacts {
	f := claudeFacts{GOOS: goos, Env: envSet(getenv, claudeEnvNames...)}
	for i, c := range claudeCloud {
		if envTruthy(getenv, c.env) {
			f.Cloud = i + 1
			break
		}
	}
	dir := claudeConfigDir(home, getenv)
	f.ConfigDir = displayPath(home, dir)
	keys, exists, err := readJSONShape(filepath.Join(dir, ".credentials.json"))
	f.CredsExist, f.CredsErr = exists, err
	if exists && err == nil && rawPresent(keys, "claudeAiOauth") {
		f.OAuth = true
		var oauth map[string]json.RawMessage
		if json.Unmarshal(keys["claudeAiOauth"], &oauth) == nil {
			f.OAuthRefresh = rawPresent(oauth, "refreshToken")
			var exp float64
			if raw, ok := oauth["expiresAt"]; ok && json.Unmarshal(raw, &exp) == nil {
				f.OAuthExpiresMillis = int64(exp)
			}
		}
	}
	awsCreds, awsConfig := getenv("AWS_SHARED_CREDENTIALS_FILE"), getenv("AWS_CONFIG_FILE")
	if awsCreds == "" {
		awsCreds = filepath.Join(home, ".aws", "credentials")
	}
	if awsConfig == "" {
		awsConfig = filepath.Join(home, ".aws", "config")
	}
	f.AWSFiles = regularFile(awsCreds) || regularFile(awsConfig)
	gcloud := getenv("CLOUDSDK_CONFIG")
	if gcloud == "" {
		gcloud = filepath.Join(home, ".config", "gcloud")
	}
	f.GCloudADC = regularFile(filepath.Join(gcloud, "application_default_credentials.json"))
	return f
}

// claudeAuthKind guesses the auth kind in Claude Code's own order: a cloud
// provider, then a key or token in the environment, then the saved login.
// Without a credentials file, macOS keeps the login in the keychain
// (unknown); elsewhere there is none.
func claudeAuthKind(in AuthInput) api.AuthKind {
	f := readClaudeFacts(in.Home, in.Getenv, in.GOOS)
	if m, _ := claudeEnvMethod(f); m != "" {
		return m.Kind()
	}
	switch {
	case f.CredsErr != nil:
		return api.AuthKindUnknown
	case f.OAuth:
		return api.AuthSubscription
	case f.CredsExist:
		return api.AuthKindUnknown
	case in.GOOS == "darwin":
		return api.AuthKindUnknown
	default:
		return api.AuthUnauthenticated
	}
}

// claudeEnvMethod is the sign-in the runs' environment selects, in Claude
// Code's precedence, or "" when the environment selects none (then the
// saved login is used).
func claudeEnvMethod(f claudeFacts) (AuthMethod, string) {
	switch {
	case f.Cloud > 0:
		return MethodCloud, claudeCloud[f.Cloud-1].env
	case f.Env["ANTHROPIC_AUTH_TOKEN"]:
		return MethodAPIKey, "ANTHROPIC_AUTH_TOKEN"
	case f.Env["ANTHROPIC_API_KEY"]:
		return MethodAPIKey, "ANTHROPIC_API_KEY"
	case f.Env["CLAUDE_CODE_OAUTH_TOKEN"]:
		// A long-lived token from `claude setup-token`: the subscription.
		return MethodSubscription, "CLAUDE_CODE_OAUTH_TOKEN"
	}
	return "", ""
}

const claudeLoginHint = "run `claude auth login` to sign in with a subscription, or set ANTHROPIC_API_KEY in the daemon's environment (or in card.toml [adapters.claude-code] env)"

// claudeNoSettings says why a sign-in kept in Claude Code's settings does
// not count: card runs it with --setting-sources "" because user and
// project settings can add hooks and permission rules that widen the
// boundary, and `claude auth status` cannot be told to do the same.
const claudeNoSettings = "card runs Claude Code without its settings files (--setting-sources \"\", so settings cannot add hooks or permissions), and there it is not signed in"

// claudeHealth runs `claude auth status`, which prints JSON with loggedIn,
// authMethod, apiProvider, apiKeySource and exits 1 when logged out, and
// reads which sign-in the runs' environment and files select.
func claudeHealth(ctx context.Context, in HealthInput) HealthVerdict {
	out := in.Run(ctx, "auth", "status")
	if v, done := commonHealthFailure("claude auth status", out); done {
		return v
	}
	return claudeVerdict(out, readClaudeFacts(in.Home, in.Getenv, in.GOOS), in.Now())
}

// claudeVerdict is the pure decision over the status command's output and
// the facts. The status command loads Claude Code's settings files and card's
// runs do not, so where its answer could come from settings (an
// apiKeyHelper, a variable in settings' env block) it is checked against
// what the runs' environment and saved login give.
func claudeVerdict(out ProbeOutput, f claudeFacts, nowMillis int64) HealthVerdict {
	var status map[string]any
	text := out.Stdout
	if i := strings.IndexByte(text, '{'); i >= 0 {
		text = text[i:]
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &status); err != nil {
		lower := strings.ToLower(out.Stdout + out.Stderr)
		if strings.Contains(lower, "expired") {
			return HealthVerdict{Status: api.StatusExpired, Reason: "Claude Code's login has expired: " + claudeLoginHint}
		}
		return HealthVerdict{Status: api.StatusUnknown, Reason: "`claude auth status` printed something card cannot read (exit " + itoa(out.ExitCode) + "): " + firstLine(out.Stderr, out.Stdout) + "; update Claude Code or run the command by hand"}
	}
	loggedIn, _ := status["loggedIn"].(bool)
	method, _ := status["authMethod"].(string)
	keySource, _ := status["apiKeySource"].(string)
	lower := strings.ToLower(out.Stdout + out.Stderr)
	switch {
	case !loggedIn && strings.Contains(lower, "expired"):
		return HealthVerdict{Status: api.StatusExpired, Reason: "Claude Code's login has expired: " + claudeLoginHint, Details: status}
	case !loggedIn:
		return HealthVerdict{Status: api.StatusNotConfigured, Reason: "Claude Code is not signed in: " + claudeLoginHint, Details: status}
	case out.ExitCode != 0:
		return HealthVerdict{Status: api.StatusUnknown, Reason: "`claude auth status` says logged in but exited " + itoa(out.ExitCode) + ": " + firstLine(out.Stderr), Details: status}
	}

	// The environment the runs get decides first, as it does for Claude.
	if m, source := claudeEnvMethod(f); m == MethodCloud {
		return claudeCloudVerdict(f, status)
	} else if m != "" {
		return HealthVerdict{Status: api.StatusReady, Details: withAuth(status, m, source)}
	}

	// Nothing in the environment: the runs use the saved login. A
	// claude.ai login (or the Console key `claude auth login` saves) is not
	// a setting, so the status command's answer holds for the runs.
	if method == "claude.ai" {
		if keySource == "/login managed key" {
			return HealthVerdict{Status: api.StatusReady, Details: withAuth(status, MethodAPIKey, "a Console API key saved by `claude auth login`")}
		}
		return claudeLoginVerdict(f, status, nowMillis, "")
	}
	// Any other answer came from the settings files.
	from := claudeSettingsSource(method, keySource, status)
	note := "`claude auth status` finds " + from + " in Claude Code's settings, but " + claudeNoSettings
	switch {
	case f.OAuth:
		return claudeLoginVerdict(f, status, nowMillis, "; "+from+" in the settings files is not used by card's runs")
	case f.GOOS == "darwin" && !f.CredsExist:
		return HealthVerdict{Status: api.StatusUnknown, Details: status,
			Reason: note + " unless a claude.ai login is in the macOS keychain, which card cannot see; " + claudeLoginHint}
	}
	return HealthVerdict{Status: api.StatusNotConfigured, Details: status,
		Reason: note + ": " + claudeLoginHint + " (a variable in settings' env block belongs in one of those two places instead)"}
}

// claudeSettingsSource names, for a reason, the settings entry the status
// command's answer came from.
func claudeSettingsSource(method, keySource string, status map[string]any) string {
	switch method {
	case "api_key_helper":
		return "an apiKeyHelper"
	case "third_party":
		p, _ := status["apiProvider"].(string)
		for _, c := range claudeCloud {
			if c.provider == p {
				return c.env + " (" + c.name + ")"
			}
		}
		return "the cloud provider " + p
	case "api_key":
		if keySource != "" {
			return keySource
		}
		return "an API key"
	case "oauth_token":
		return "ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN"
	}
	return "the sign-in " + method
}

// claudeLoginVerdict judges the saved claude.ai login. Claude refreshes an
// expired access token with its refresh token; one without a refresh token
// is sent as it is and the API refuses it (seen with 2.1.197), although
// `claude auth status` still says logged in.
func claudeLoginVerdict(f claudeFacts, status map[string]any, nowMillis int64, note string) HealthVerdict {
	details := withAuth(status, MethodSubscription, "the claude.ai login in "+f.ConfigDir+"/.credentials.json")
	if !f.CredsExist {
		details = withAuth(status, MethodSubscription, "the claude.ai login in the OS keychain")
	}
	if f.OAuth && !f.OAuthRefresh && f.OAuthExpiresMillis > 0 && f.OAuthExpiresMillis <= nowMillis {
		return HealthVerdict{Status: api.StatusExpired, Details: details,
			Reason: "the claude.ai login saved in " + f.ConfigDir + "/.credentials.json has expired and has no refresh token: run `claude auth login` again"}
	}
	v := HealthVerdict{Status: api.StatusReady, Details: details}
	if note != "" {
		v.Reason = "signed in with claude.ai" + note
	}
	return v
}

// claudeCloudVerdict judges a cloud provider the environment selects: the
// status command says "logged in" for any of them without looking at
// credentials (seen with 2.1.197), so card looks for them where the
// provider's SDK does. Ambient credentials (an instance role, a metadata
// server) are invisible from here, hence unknown rather than not configured.
func claudeCloudVerdict(f claudeFacts, status map[string]any) HealthVerdict {
	c := claudeCloud[f.Cloud-1]
	details := withAuth(status, MethodCloud, c.env)
	ready := func(how string) HealthVerdict {
		return HealthVerdict{Status: api.StatusReady, Details: details, Reason: "uses " + c.name + " (" + c.env + ") with " + how + "; card did not ask the provider whether it is valid"}
	}
	unknown := func(why string) HealthVerdict {
		return HealthVerdict{Status: api.StatusUnknown, Details: details, Reason: "Claude Code uses " + c.name + " (" + c.env + ") but " + why}
	}
	switch c.provider {
	case "bedrock":
		if f.Env["CLAUDE_CODE_SKIP_BEDROCK_AUTH"] {
			return ready("CLAUDE_CODE_SKIP_BEDROCK_AUTH (a gateway signs the requests)")
		}
		if n := anyOf(f.Env, "AWS_BEARER_TOKEN_BEDROCK", "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"); n != "" {
			return ready("AWS credentials from " + n)
		}
		if f.AWSFiles {
			return ready("the AWS profiles in ~/.aws")
		}
		return unknown("no AWS credentials are in the daemon's environment or ~/.aws; unless this machine has an instance role, set AWS_PROFILE (after `aws sso login` or `aws configure`) or AWS_BEARER_TOKEN_BEDROCK in the daemon's environment or card.toml [adapters.claude-code] env")
	case "vertex":
		if f.Env["CLAUDE_CODE_SKIP_VERTEX_AUTH"] {
			return ready("CLAUDE_CODE_SKIP_VERTEX_AUTH (a gateway signs the requests)")
		}
		if f.Env["GOOGLE_APPLICATION_CREDENTIALS"] {
			return ready("the credentials file in GOOGLE_APPLICATION_CREDENTIALS")
		}
		if f.GCloudADC {
			return ready("gcloud's application default credentials")
		}
		return unknown("no Google credentials are visible (GOOGLE_APPLICATION_CREDENTIALS, or gcloud's application default credentials); unless this machine has a service account, run `gcloud auth application-default login` as the daemon's user")
	case "foundry":
		if !f.Env["ANTHROPIC_FOUNDRY_RESOURCE"] && !f.Env["ANTHROPIC_FOUNDRY_BASE_URL"] {
			return HealthVerdict{Status: api.StatusNotConfigured, Details: details, Reason: "Claude Code is set to use Microsoft Foundry (CLAUDE_CODE_USE_FOUNDRY) but neither ANTHROPIC_FOUNDRY_RESOURCE nor ANTHROPIC_FOUNDRY_BASE_URL is set; set one in the daemon's environment or card.toml [adapters.claude-code] env"}
		}
		if n := anyOf(f.Env, "CLAUDE_CODE_SKIP_FOUNDRY_AUTH", "ANTHROPIC_FOUNDRY_API_KEY"); n != "" {
			return ready(n)
		}
		return unknown("ANTHROPIC_FOUNDRY_API_KEY is not set, so it will sign in with Microsoft Entra ID (`az login`), which card cannot check")
	}
	return unknown("card does not know how to check that provider's credentials; run `claude -p` by hand to see whether it answers")
}

// claudePackage: @anthropic-ai/claude-code's install script copies the
// native binary for this machine over bin/claude.exe (a placeholder until
// then), and the wrapper's version is the binary's. Its native installer
// keeps each version in a file named for it.
var claudePackage = &npmPackage{Name: "@anthropic-ai/claude-code", Native: true, VersionsDir: true}

// claudeProbe is how detection reads Claude Code's sign-in, health and version.
var claudeProbe = Probe{For: agent.ClaudeCode, AuthKind: claudeAuthKind, Health: claudeHealth, Package: claudePackage}
