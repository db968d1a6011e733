package detect

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// signin reads what a real CLI printed for one sign-in state, captured by
// e2e/fixtures/cli/signin/capture.sh: stdout, stderr and the exit code.
func signin(t *testing.T, name string) ProbeOutput {
	t.Helper()
	dir := filepath.Join("..", "e2e", "fixtures", "cli", "signin")
	read := func(ext string) string {
		b, err := os.ReadFile(filepath.Join(dir, name+ext))
		if os.IsNotExist(err) {
			return ""
		}
		require.NoError(t, err)
		return string(b)
	}
	code, err := strconv.Atoi(strings.TrimSpace(read(".exit")))
	require.NoError(t, err, "%s.exit", name)
	return ProbeOutput{Stdout: read(".stdout"), Stderr: read(".stderr"), ExitCode: code}
}

// home lays out files (path relative to the home → content) in a new home.
func home(t *testing.T, files map[string]string) string {
	t.Helper()
	h := t.TempDir()
	for p, content := range files {
		writeFile(t, filepath.Join(h, p), content)
	}
	return h
}

func claudeCreds(expiresAt int64, refresh bool) string {
	extra := ""
	if refresh {
		extra = `,"refreshToken":"` + fakeSecret + `"`
	}
	return fmt.Sprintf(`{"claudeAiOauth":{"accessToken":"%s","expiresAt":%d,"scopes":["user:inference"]%s}}`, fakeSecret, expiresAt, extra)
}

// Each Claude Code sign-in method, with what `claude auth status` printed for
// it (captured) and the environment and files card's runs would see. The
// status command loads Claude Code's settings files and card's runs do not
// (--setting-sources ""), so a sign-in kept only in settings is not one the
// runs have.
func TestEveryClaudeSignInStateReadsRight(t *testing.T) {
	now := time.Unix(1_800_000_000, 0).UnixMilli()
	day := int64(24 * time.Hour / time.Millisecond)
	cases := []struct {
		name    string
		capture string
		env     []string
		files   map[string]string
		goos    string
		want    api.HealthStatus
		method  AuthMethod
		source  string
		reason  string
	}{
		{"never signed in", "claude-none", nil, nil, "linux", api.StatusNotConfigured, "", "", "claude auth login"},
		{"ANTHROPIC_API_KEY in the environment", "claude-api-key-env", []string{"ANTHROPIC_API_KEY=" + fakeSecret}, nil, "linux", api.StatusReady, MethodAPIKey, "ANTHROPIC_API_KEY", ""},
		{"ANTHROPIC_AUTH_TOKEN for a gateway", "claude-auth-token-env", []string{"ANTHROPIC_AUTH_TOKEN=" + fakeSecret}, nil, "linux", api.StatusReady, MethodAPIKey, "ANTHROPIC_AUTH_TOKEN", ""},
		{"CLAUDE_CODE_OAUTH_TOKEN from claude setup-token", "claude-oauth-token-env", []string{"CLAUDE_CODE_OAUTH_TOKEN=" + fakeSecret}, nil, "linux", api.StatusReady, MethodSubscription, "CLAUDE_CODE_OAUTH_TOKEN", ""},
		{"subscription login with a refresh token", "claude-claude-ai", nil, map[string]string{".claude/.credentials.json": claudeCreds(now-day, true)}, "linux", api.StatusReady, MethodSubscription, "~/.claude/.credentials.json", ""},
		{"subscription login still valid", "claude-claude-ai", nil, map[string]string{".claude/.credentials.json": claudeCreds(now+day, false)}, "linux", api.StatusReady, MethodSubscription, "~/.claude/.credentials.json", ""},
		{"subscription login expired without a refresh token", "claude-claude-ai-expired-no-refresh", nil, map[string]string{".claude/.credentials.json": claudeCreds(now-day, false)}, "linux", api.StatusExpired, MethodSubscription, "", "claude auth login"},
		{"subscription login in CLAUDE_CONFIG_DIR", "claude-claude-ai", []string{"CLAUDE_CONFIG_DIR=/HOME/cfg"}, map[string]string{"cfg/.credentials.json": claudeCreds(now-day, false)}, "linux", api.StatusExpired, MethodSubscription, "", "~/cfg/.credentials.json"},
		{"subscription login in the macOS keychain", "claude-claude-ai", nil, nil, "darwin", api.StatusReady, MethodSubscription, "keychain", ""},
		{"Console key saved by /login", "claude-managed-key", nil, nil, "linux", api.StatusReady, MethodAPIKey, "Console API key", ""},
		{"apiKeyHelper in settings only", "claude-api-key-helper", nil, map[string]string{".claude/settings.json": `{"apiKeyHelper":"echo x"}`}, "linux", api.StatusNotConfigured, "", "", "--setting-sources"},
		{"apiKeyHelper in settings, and a subscription login the runs use", "claude-api-key-helper", nil, map[string]string{".claude/.credentials.json": claudeCreds(now+day, true)}, "linux", api.StatusReady, MethodSubscription, "", "apiKeyHelper"},
		{"apiKeyHelper in settings on macOS, keychain unseen", "claude-api-key-helper", nil, nil, "darwin", api.StatusUnknown, "", "", "keychain"},
		{"ANTHROPIC_API_KEY only in settings' env block", "claude-api-key-env", nil, nil, "linux", api.StatusNotConfigured, "", "", "ANTHROPIC_API_KEY"},
		{"Bedrock only in settings' env block", "claude-settings-env-bedrock", nil, nil, "linux", api.StatusNotConfigured, "", "", "CLAUDE_CODE_USE_BEDROCK"},
		{"Bedrock with an AWS profile", "claude-bedrock", []string{"CLAUDE_CODE_USE_BEDROCK=1", "AWS_PROFILE=dev"}, nil, "linux", api.StatusReady, MethodCloud, "CLAUDE_CODE_USE_BEDROCK", "AWS_PROFILE"},
		{"Bedrock with a Bedrock API key", "claude-bedrock", []string{"CLAUDE_CODE_USE_BEDROCK=true", "AWS_BEARER_TOKEN_BEDROCK=" + fakeSecret}, nil, "linux", api.StatusReady, MethodCloud, "", "AWS_BEARER_TOKEN_BEDROCK"},
		{"Bedrock with ~/.aws", "claude-bedrock", []string{"CLAUDE_CODE_USE_BEDROCK=1"}, map[string]string{".aws/config": "[default]\nregion = us-east-1\n"}, "linux", api.StatusReady, MethodCloud, "", "~/.aws"},
		{"Bedrock with no credentials in sight", "claude-bedrock", []string{"CLAUDE_CODE_USE_BEDROCK=1"}, nil, "linux", api.StatusUnknown, MethodCloud, "", "no AWS credentials"},
		{"Vertex with application default credentials", "claude-vertex", []string{"CLAUDE_CODE_USE_VERTEX=1"}, map[string]string{".config/gcloud/application_default_credentials.json": `{"type":"authorized_user"}`}, "linux", api.StatusReady, MethodCloud, "CLAUDE_CODE_USE_VERTEX", "application default"},
		{"Vertex with a service account file", "claude-vertex", []string{"CLAUDE_CODE_USE_VERTEX=1", "GOOGLE_APPLICATION_CREDENTIALS=/k.json"}, nil, "linux", api.StatusReady, MethodCloud, "", "GOOGLE_APPLICATION_CREDENTIALS"},
		{"Vertex with no credentials in sight", "claude-vertex", []string{"CLAUDE_CODE_USE_VERTEX=1"}, nil, "linux", api.StatusUnknown, MethodCloud, "", "gcloud auth application-default login"},
		{"Foundry with a key and a resource", "claude-foundry", []string{"CLAUDE_CODE_USE_FOUNDRY=1", "ANTHROPIC_FOUNDRY_RESOURCE=r", "ANTHROPIC_FOUNDRY_API_KEY=" + fakeSecret}, nil, "linux", api.StatusReady, MethodCloud, "", "ANTHROPIC_FOUNDRY_API_KEY"},
		{"Foundry without a resource", "claude-foundry", []string{"CLAUDE_CODE_USE_FOUNDRY=1"}, nil, "linux", api.StatusNotConfigured, MethodCloud, "", "ANTHROPIC_FOUNDRY_RESOURCE"},
		{"Foundry through Entra ID", "claude-foundry", []string{"CLAUDE_CODE_USE_FOUNDRY=1", "ANTHROPIC_FOUNDRY_RESOURCE=r"}, nil, "linux", api.StatusUnknown, MethodCloud, "", "Entra ID"},
		{"the environment wins over settings", "claude-api-key-helper", []string{"ANTHROPIC_API_KEY=" + fakeSecret}, nil, "linux", api.StatusReady, MethodAPIKey, "ANTHROPIC_API_KEY", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := home(t, c.files)
			env := make([]string, len(c.env))
			for i, e := range c.env {
				env[i] = strings.ReplaceAll(e, "/HOME", h)
			}
			getenv := envOf(env...)
			v := claudeVerdict(signin(t, c.capture), readClaudeFacts(h, getenv, c.goos), now)
			assert.Equal(t, c.want, v.Status, v.Reason)
			assert.Equal(t, string(c.method), fmt.Sprint(orEmpty(v.Details["auth_method"])), "auth_method")
			if c.source != "" {
				assert.Contains(t, v.Details["auth_source"], c.source)
			}
			assert.Contains(t, v.Reason, c.reason)
			if c.want != api.StatusReady {
				assert.NotEmpty(t, v.Reason, "every status but ready says what to do")
			}
			noSecret(t, v)
			// The file-shape guess agrees wherever it can see: not into the
			// macOS keychain, and not into ~/.claude.json (where /login keeps
			// a Console key beside a large project history).
			if c.want == api.StatusReady && c.goos != "darwin" && c.capture != "claude-managed-key" {
				assert.Equal(t, c.method.Kind(), claudeAuthKind(AuthInput{Home: h, Getenv: getenv, GOOS: c.goos}), "auth_kind agrees")
			}
		})
	}
}

func orEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}

// noSecret fails when a credential value reached a verdict.
func noSecret(t *testing.T, v HealthVerdict) {
	t.Helper()
	b, err := json.Marshal(Redact(v.Details))
	require.NoError(t, err)
	assert.NotContains(t, string(b)+v.Reason, "SECRETVALUE")
	assert.NotContains(t, string(b)+v.Reason, "FAKE")
}

// Each Codex CLI sign-in method, with what `codex login status` printed for
// it (captured, 0.171.0).
func TestEveryCodexSignInStateReadsRight(t *testing.T) {
	cases := []struct {
		name    string
		capture string
		env     []string
		args    []string
		want    api.HealthStatus
		method  AuthMethod
		source  string
		reason  string
	}{
		{"never signed in", "codex-none", nil, nil, api.StatusNotConfigured, "", "", "codex login"},
		{"an API key stored by codex login --with-api-key", "codex-api-key-stored", nil, nil, api.StatusReady, MethodAPIKey, "codex login --with-api-key", ""},
		{"a ChatGPT login", "codex-chatgpt", nil, nil, api.StatusReady, MethodSubscription, "ChatGPT", ""},
		{"a saved login Codex cannot read", "codex-broken-auth", nil, nil, api.StatusUnknown, "", "", "auth.json"},
		{"OPENAI_API_KEY in the environment, which Codex does not read", "codex-openai-api-key-env", []string{"OPENAI_API_KEY=" + fakeSecret}, nil, api.StatusNotConfigured, "", "", "codex login --with-api-key"},
		{"CODEX_API_KEY in the environment, which codex exec reads", "codex-codex-api-key-env", []string{"CODEX_API_KEY=" + fakeSecret}, nil, api.StatusReady, MethodAPIKey, "CODEX_API_KEY", ""},
		{"CODEX_API_KEY over a ChatGPT login", "codex-chatgpt", []string{"CODEX_API_KEY=" + fakeSecret}, nil, api.StatusReady, MethodAPIKey, "CODEX_API_KEY", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := readCodexFacts(AuthInput{Home: "/home/user", Getenv: envOf(c.env...), Args: c.args})
			v := codexVerdict(signin(t, c.capture), f)
			assert.Equal(t, c.want, v.Status, v.Reason)
			assert.Equal(t, string(c.method), fmt.Sprint(orEmpty(v.Details["auth_method"])))
			if c.source != "" {
				assert.Contains(t, v.Details["auth_source"], c.source)
			}
			assert.Contains(t, v.Reason, c.reason)
			noSecret(t, v)
			assert.NotContains(t, fmt.Sprint(v.Details), "***", "the masked key is not passed on")
		})
	}
}

// A model provider chosen in card.toml [adapters.codex] args signs the runs
// in with its own key, whatever `codex login status` says: the status
// command is not even run.
func TestACodexProviderInCardTomlArgsIsReadyWithoutALogin(t *testing.T) {
	dir := t.TempDir()
	cnt, runs := counter(t)
	statusCLI(t, dir, "codex", "codex-cli 0.171.0", "", "Not logged in", 1, "0", cnt)
	for _, args := range [][]string{
		{"-c", `model_providers.local={name="l", base_url="http://127.0.0.1:1/v1", env_key="K"}`, "-c", `model_provider="local"`},
		{"--config=model_provider=local"},
	} {
		d := newDetectorWith(t, Options{Adapters: map[string]AdapterSettings{"codex": {Args: args}}}, dir)
		h, err := d.Health(ctx, "codex", true)
		require.NoError(t, err)
		assert.Equal(t, api.StatusReady, h.Status, h.Reason)
		assert.Equal(t, "api_key", h.Details["auth_method"])
		assert.Contains(t, h.Reason, "local")
	}
	assert.Equal(t, 0, runs())
	assert.Equal(t, "", codexProvider([]string{"-c", `model_provider="openai"`}), "Codex's own provider is its own login")
}

// A key set only in card.toml [adapters.<id>] env reaches the runs, so it
// counts: the status command sees it, and so do the file-based decisions.
func TestAKeyInCardTomlAdapterEnvCounts(t *testing.T) {
	dir := t.TempDir()
	cnt, _ := counter(t)
	// This fake status command answers like the real one: logged in only
	// when the key is in its environment.
	fakeCLI(t, dir, "claude", `case "$1" in --version) echo 2.1.197;; *) echo run >> `+cnt+`
if [ -n "$ANTHROPIC_API_KEY" ]; then echo '`+strings.ReplaceAll(claudeAPIKey, "\n", "")+`'; exit 0; fi
echo '`+strings.ReplaceAll(claudeLoggedOut, "\n", "")+`'; exit 1;; esac`)
	d := newDetectorWith(t, Options{Adapters: map[string]AdapterSettings{
		"claude-code": {Env: map[string]string{"ANTHROPIC_API_KEY": fakeSecret}},
		"gemini":      {Env: map[string]string{"GEMINI_API_KEY": fakeSecret}},
	}}, dir)
	h, err := d.Health(ctx, "claude-code", false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusReady, h.Status, h.Reason)
	assert.Equal(t, "ANTHROPIC_API_KEY", h.Details["auth_source"])

	desc, _ := Lookup("gemini")
	v := desc.Health(ctx, HealthInput{Home: t.TempDir(), Getenv: d.adapterGetenv("gemini"), Now: func() int64 { return 0 }})
	assert.Equal(t, api.StatusReady, v.Status, v.Reason)
	v = desc.Health(ctx, HealthInput{Home: t.TempDir(), Getenv: d.adapterGetenv("claude-code"), Now: func() int64 { return 0 }})
	assert.Equal(t, api.StatusNotConfigured, v.Status, "another adapter's env is not this one's")
}

// Gemini CLI has no status command. Each state below is one whose headless
// run 0.61.0 refuses before any request (exit 41, captured with its
// message), so card must not call it ready; and each ready state is one it
// accepts.
func TestEveryGeminiSignInStateReadsRight(t *testing.T) {
	settings := func(auth string) map[string]string {
		return map[string]string{".gemini/settings.json": `{"security":{"auth":{` + auth + `}}}`}
	}
	merge := func(a, b map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		name    string
		refused string // the captured refusal of this state, "" when Gemini accepts it
		env     []string
		files   map[string]string
		goos    string
		want    api.HealthStatus
		method  AuthMethod
		reason  string
	}{
		{"nothing configured", "gemini-none", nil, settings(""), "linux", api.StatusNotConfigured, "", "GEMINI_API_KEY"},
		{"a gateway URL with a key and no selected type", "gemini-gateway-env", []string{"GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:9", "GEMINI_API_KEY=" + fakeSecret}, settings(""), "linux", api.StatusNotConfigured, "", "Invalid auth method selected"},
		{"an API key selected, none set", "gemini-api-key-selected-no-key", nil, settings(`"selectedType":"gemini-api-key"`), "linux", api.StatusNotConfigured, "", "GEMINI_API_KEY"},
		{"an API key selected, a key saved by /auth maybe", "", nil, merge(settings(`"selectedType":"gemini-api-key"`), map[string]string{".gemini/gemini-credentials.json": "ciphertext"}), "linux", api.StatusUnknown, "", "/auth"},
		{"an API key selected, in ~/.gemini/.env", "", nil, merge(settings(`"selectedType":"gemini-api-key"`), map[string]string{".gemini/.env": "GEMINI_API_KEY=" + fakeSecret + "\n"}), "linux", api.StatusReady, MethodAPIKey, "~/.gemini/.env"},
		{"an API key selected, in ~/.env", "", nil, merge(settings(`"selectedType":"gemini-api-key"`), map[string]string{".env": "export GEMINI_API_KEY='" + fakeSecret + "'\n"}), "linux", api.StatusReady, MethodAPIKey, "~/.env"},
		{"a key only in ~/.gemini/.env, no selected type", "gemini-none", nil, merge(settings(""), map[string]string{".gemini/.env": "GEMINI_API_KEY=" + fakeSecret + "\n"}), "linux", api.StatusNotConfigured, "", "selectedType"},
		{"the legacy cloud-shell type", "gemini-cloud-shell-selected", nil, settings(`"selectedType":"cloud-shell"`), "linux", api.StatusNotConfigured, "", "Invalid auth method selected"},
		{"an enforced type the selection does not match", "gemini-enforced-mismatch", []string{"GEMINI_API_KEY=" + fakeSecret}, settings(`"selectedType":"gemini-api-key","enforcedType":"vertex-ai"`), "linux", api.StatusNotConfigured, "", "enforce"},
		{"Vertex AI without a project or key", "gemini-vertex-no-project", nil, settings(`"selectedType":"vertex-ai"`), "linux", api.StatusNotConfigured, "", "GOOGLE_CLOUD_PROJECT"},
		{"Vertex AI express mode", "", []string{"GOOGLE_API_KEY=" + fakeSecret}, settings(`"selectedType":"vertex-ai"`), "linux", api.StatusReady, MethodCloud, "express"},
		{"compute credentials with an ADC file", "", []string{"GEMINI_CLI_USE_COMPUTE_ADC=true"}, map[string]string{".config/gcloud/application_default_credentials.json": "{}"}, "linux", api.StatusReady, MethodCloud, "application default"},
		{"compute credentials from the metadata server", "", []string{"GEMINI_CLI_USE_COMPUTE_ADC=true"}, nil, "linux", api.StatusUnknown, "", "cannot check"},
		{"GEMINI_API_KEY alone", "", []string{"GEMINI_API_KEY=" + fakeSecret}, nil, "linux", api.StatusReady, MethodAPIKey, "GEMINI_API_KEY"},
		{"a Google login", "", nil, merge(settings(`"selectedType":"oauth-personal"`), map[string]string{".gemini/oauth_creds.json": `{"refresh_token":"` + fakeSecret + `"}`}), "linux", api.StatusReady, MethodSubscription, "Google"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.refused != "" {
				out := signin(t, c.refused)
				require.Equal(t, 41, out.ExitCode, "the captured run was refused before any request")
				assert.Equal(t, api.StatusNotConfigured, c.want, "a state Gemini refuses is never ready or unknown")
			}
			h := home(t, c.files)
			getenv := envOf(c.env...)
			v := geminiVerdict(readGeminiFactsOn(h, getenv, c.goos), getenv, 0)
			assert.Equal(t, c.want, v.Status, v.Reason)
			assert.Contains(t, v.Reason, c.reason)
			if c.want == api.StatusReady {
				assert.Equal(t, string(c.method), v.Details["auth_method"])
			}
			noSecret(t, v)
		})
	}
}

// The file-decided adapters record how a ready one signs in, in the same
// words as the others.
func TestCopilotDroidAndPiSayHowTheySignIn(t *testing.T) {
	cases := []struct {
		id     string
		env    []string
		files  map[string]string
		method AuthMethod
		source string
	}{
		{"copilot", []string{"COPILOT_GITHUB_TOKEN=" + fakeSecret}, nil, MethodSubscription, "COPILOT_GITHUB_TOKEN"},
		{"copilot", nil, map[string]string{".copilot/config.json": `{"logged_in_users":[{"login":"u"}]}`}, MethodSubscription, "/login"},
		{"copilot", []string{"COPILOT_PROVIDER_BASE_URL=http://127.0.0.1:1", "COPILOT_MODEL=m"}, nil, MethodAPIKey, "COPILOT_PROVIDER_BASE_URL"},
		{"copilot", []string{"GH_HOST=ghe.example.com"}, map[string]string{".config/gh/hosts.yml": "ghe.example.com:\n    user: u\n"}, MethodSubscription, "GitHub CLI"},
		{"droid", []string{"FACTORY_API_KEY=" + fakeSecret}, nil, MethodAPIKey, "FACTORY_API_KEY"},
		{"droid", nil, map[string]string{".factory/auth.v2.file": "x"}, MethodSubscription, "auth.v2.file"},
		{"pi", []string{"OPENAI_API_KEY=" + fakeSecret}, nil, MethodAPIKey, "OPENAI_API_KEY"},
		{"pi", []string{"AWS_PROFILE=dev"}, nil, MethodCloud, "AWS_PROFILE"},
		{"pi", nil, map[string]string{".pi/agent/auth.json": `{"anthropic":{"type":"oauth"}}`}, MethodSubscription, "auth.json"},
	}
	for _, c := range cases {
		t.Run(c.id+" "+string(c.method)+" "+c.source, func(t *testing.T) {
			desc, _ := Lookup(c.id)
			v := desc.Health(ctx, HealthInput{Home: home(t, c.files), Getenv: envOf(c.env...), Now: func() int64 { return 0 }})
			require.Equal(t, api.StatusReady, v.Status, v.Reason)
			assert.Equal(t, string(c.method), v.Details["auth_method"])
			assert.Contains(t, v.Details["auth_source"], c.source)
			noSecret(t, v)
		})
	}
	// A GitHub CLI login for github.com is not one for the host Copilot
	// is told to use.
	desc, _ := Lookup("copilot")
	v := desc.Health(ctx, HealthInput{Home: home(t, map[string]string{".config/gh/hosts.yml": "github.com:\n    user: u\n"}), Getenv: envOf("COPILOT_GH_HOST=ghe.example.com"), Now: func() int64 { return 0 }})
	assert.Equal(t, api.StatusNotConfigured, v.Status, v.Reason)
}

// With health asked for, auth_kind follows what health found rather than
// the file-shape guess.
func TestAuthKindFollowsHealthWhenHealthIsAskedFor(t *testing.T) {
	dir := t.TempDir()
	cnt, _ := counter(t)
	statusCLI(t, dir, "codex", "codex-cli 0.171.0", "", "Not logged in", 1, "0", cnt)
	d := newDetectorWith(t, Options{Env: testEnv("CODEX_API_KEY=" + fakeSecret)}, dir)
	specs := d.Detect(ctx, false)
	require.Len(t, specs, 1)
	assert.Equal(t, api.AuthAPIKey, specs[0].AuthKind, "CODEX_API_KEY is an API key even before health")
	with := d.WithHealth(ctx, specs, false)
	assert.Equal(t, api.AuthAPIKey, with[0].AuthKind)
	assert.Equal(t, api.StatusReady, with[0].Health.Status)
}
