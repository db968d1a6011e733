package detect

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// Real texts from testdata/auth-status.txt (TestTheStatusTextsAreTheCapturedOnes).
const (
	claudeLoggedOut = `{
  "loggedIn": false,
  "authMethod": "none",
  "apiProvider": "firstParty"
}`
	claudeAPIKey = `{
  "loggedIn": true,
  "authMethod": "api_key",
  "apiProvider": "firstParty",
  "apiKeySource": "ANTHROPIC_API_KEY"
}`
	codexTmpWarning = `WARNING: proceeding, even though we could not create PATH aliases: Refusing to create helper binaries under temporary dir "/tmp" (codex_home: AbsolutePathBuf("/home/user/.codex"))`
)

// The texts above are what the real CLIs printed, not a paraphrase.
func TestTheStatusTextsAreTheCapturedOnes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "auth-status.txt"))
	require.NoError(t, err)
	for _, s := range []string{claudeLoggedOut, claudeAPIKey} {
		assert.Contains(t, string(b), s)
	}
}

// statusCLI writes a fake CLI that prints version for --version and, for the
// status subcommand, appends to the counter, sleeps, prints out/err and exits.
func statusCLI(t *testing.T, dir, name, version, stdout, stderr string, exit int, sleep string, cnt string) {
	t.Helper()
	outFile := filepath.Join(t.TempDir(), "out")
	errFile := filepath.Join(t.TempDir(), "err")
	must(t, os.WriteFile(outFile, []byte(stdout), 0o644))
	must(t, os.WriteFile(errFile, []byte(stderr), 0o644))
	fakeCLI(t, dir, name, `if [ "$1" = "--version" ]; then echo "`+version+`"; exit 0; fi
echo run >> '`+cnt+`'
sleep `+sleep+`
cat '`+outFile+`'
cat '`+errFile+`' >&2
exit `+itoa(exit))
}

func TestClaudeHealthFollowsAuthStatus(t *testing.T) {
	cases := []struct {
		name, stdout, stderr string
		exit                 int
		want                 api.HealthStatus
		reason               string
	}{
		{"logged out", claudeLoggedOut, "", 1, api.StatusNotConfigured, "claude auth login"},
		{"api key in the environment", claudeAPIKey, "", 0, api.StatusReady, ""},
		{"api key only in the settings files", claudeAPIKey, "", 0, api.StatusNotConfigured, "--setting-sources"},
		{"expired login", `{"loggedIn": false, "authMethod": "claude.ai", "error": "OAuth token expired"}`, "", 1, api.StatusExpired, "claude auth login"},
		{"network failure", "", "Error: getaddrinfo ENOTFOUND api.anthropic.com", 1, api.StatusNetworkError, "network"},
		{"output card cannot read", "Usage: claude [options]", "", 2, api.StatusUnknown, "cannot read"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cnt, runs := counter(t)
			statusCLI(t, dir, "claude", "2.1.197 (Claude Code)", c.stdout, c.stderr, c.exit, "0", cnt)
			env := testEnv("ANTHROPIC_API_KEY=sk-ant-fake")
			if c.want != api.StatusReady {
				env = testEnv()
			}
			d := newDetectorWith(t, Options{Env: env}, dir)
			h, err := d.Health(ctx, agent.ClaudeCode, false)
			require.NoError(t, err)
			assert.Equal(t, c.want, h.Status, h.Reason)
			assert.Equal(t, agent.ClaudeCode, h.ID)
			assert.Contains(t, h.Reason, c.reason)
			assert.Equal(t, 1, runs())
			if c.want != api.StatusReady {
				assert.NotEmpty(t, h.Reason, "every status but ready says what to do")
			}
		})
	}
}

func TestClaudeReadyDetailsKeepTheKeySourceButNoSecret(t *testing.T) {
	dir := t.TempDir()
	cnt, _ := counter(t)
	statusCLI(t, dir, "claude", "2.1.197", `{"loggedIn": true, "authMethod": "api_key", "apiKeySource": "ANTHROPIC_API_KEY", "apiKey": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "oauthToken": "x"}`, "", 0, "0", cnt)
	d := newDetectorWith(t, Options{Env: testEnv("ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnopqrstuvwxyz")}, dir)
	h, err := d.Health(ctx, agent.ClaudeCode, false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusReady, h.Status)
	assert.Equal(t, "ANTHROPIC_API_KEY", h.Details["apiKeySource"])
	assert.Equal(t, true, h.Details["loggedIn"])
	b, _ := json.Marshal(h)
	assert.NotContains(t, string(b), "sk-ant")
	assert.NotContains(t, string(b), "oauthToken")
}

func TestCodexHealthFollowsLoginStatus(t *testing.T) {
	cases := []struct {
		name, stderr string
		exit         int
		want         api.HealthStatus
		method       string
	}{
		{"logged out (real text with the /tmp warning)", codexTmpWarning + "\nNot logged in\n", 1, api.StatusNotConfigured, ""},
		{"chatgpt", "Logged in using ChatGPT\n", 0, api.StatusReady, "subscription"},
		{"api key (before 0.171)", "Logged in using an API key - sk-proj-***************************ABCD\n", 0, api.StatusReady, "api_key"},
		{"api key (0.171, real text)", codexTmpWarning + "\nAPI key configured - sk-proj-***ABCD\nAuthentication is checked when you send a request.\n", 0, api.StatusReady, "api_key"},
		{"unreadable saved login", "Error checking login status: failed to deserialize CLI auth from file: invalid credential JSON (Data at line 1 column 51)\n", 1, api.StatusUnknown, ""},
		{"expired", "Error: your access token has expired; please log in again\n", 1, api.StatusExpired, ""},
		{"unrecognised", "panic: something\n", 101, api.StatusUnknown, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cnt, _ := counter(t)
			statusCLI(t, dir, "codex", "codex-cli 0.171.0", "", c.stderr, c.exit, "0", cnt)
			d := newTestDetector(t, "", dir)
			h, err := d.Health(ctx, agent.Codex, false)
			require.NoError(t, err)
			assert.Equal(t, c.want, h.Status, h.Reason)
			if c.method != "" {
				assert.Equal(t, c.method, h.Details["auth_method"])
			}
			if c.want != api.StatusReady {
				assert.NotEmpty(t, h.Reason)
			}
			b, _ := json.Marshal(h)
			assert.NotContains(t, string(b), "sk-proj", "the masked key is not passed on")
		})
	}
}

func TestAStatusCommandThatHangsIsKilledAndReportedUnknown(t *testing.T) {
	dir := t.TempDir()
	cnt, _ := counter(t)
	statusCLI(t, dir, "codex", "codex-cli 0.171.0", "", "Logged in using ChatGPT", 0, "30", cnt)
	d := newDetectorWith(t, Options{HealthTimeout: 300 * time.Millisecond}, dir)
	start := time.Now()
	h, err := d.Health(ctx, agent.Codex, false)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Equal(t, api.StatusUnknown, h.Status)
	assert.Contains(t, h.Reason, "did not answer")
}

func TestAnUnusableBinaryIsNotExecutableWithDetectionsReasonAndNoStatusCommandRuns(t *testing.T) {
	dir := t.TempDir()
	cnt, runs := counter(t)
	must(t, os.WriteFile(filepath.Join(dir, "claude"), []byte("#!/bin/sh\necho run >> "+cnt+"\n"), 0o644))
	d := newTestDetector(t, "", dir)
	spec, _ := specByID(d.Detect(ctx, false), agent.ClaudeCode)
	detReason, _ := spec.UnusableReason()

	h, err := d.Health(ctx, agent.ClaudeCode, true)
	require.NoError(t, err)
	assert.Equal(t, api.StatusNotExecutable, h.Status)
	assert.Equal(t, detReason, h.Reason)
	assert.Equal(t, 0, runs())

	after, _ := specByID(d.Detect(ctx, false), agent.ClaudeCode)
	assert.Equal(t, spec.Execution, after.Execution, "a health check never changes execution")
}

func TestAnAdapterThatIsNotInstalledIsNotExecutableSayingHowToInstallIt(t *testing.T) {
	d := newTestDetector(t, "", t.TempDir())
	h, err := d.Health(ctx, agent.Codex, false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusNotExecutable, h.Status)
	assert.Contains(t, h.Reason, "npm install -g @openai/codex")
}

func TestAnUnknownIDIsATypedErrorListingTheKnownIDs(t *testing.T) {
	d := newTestDetector(t, "", t.TempDir())
	_, err := d.Health(ctx, "cursor", false)
	var ue *UnknownAdapterError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, "cursor", ue.ID)
	assert.ElementsMatch(t, agent.IDs(), ue.Known)
	assert.Contains(t, err.Error(), "claude-code, codex, copilot, droid, gemini, opencode, pi, qwen-code")

	_, _, err = d.Binary(ctx, "cursor")
	require.ErrorAs(t, err, &ue)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestHealthIsCachedForTheTTLAndForceBypassesIt(t *testing.T) {
	dir := t.TempDir()
	cnt, runs := counter(t)
	statusCLI(t, dir, "claude", "2.1.197", claudeAPIKey, "", 0, "0", cnt)
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	d := newDetectorWith(t, Options{Now: clock.Now, Env: testEnv("ANTHROPIC_API_KEY=sk-ant-fake")}, dir)

	h1, err := d.Health(ctx, agent.ClaudeCode, false)
	require.NoError(t, err)
	assert.Equal(t, uint64(1_800_000_000), h1.CheckedAt)
	clock.Advance(29 * time.Second)
	h2, _ := d.Health(ctx, agent.ClaudeCode, false)
	assert.Equal(t, 1, runs(), "within 30 s the cached answer is served")
	assert.Equal(t, h1.CheckedAt, h2.CheckedAt)

	clock.Advance(2 * time.Second)
	h3, _ := d.Health(ctx, agent.ClaudeCode, false)
	assert.Equal(t, 2, runs(), "after the TTL the status command runs again")
	assert.Equal(t, uint64(1_800_000_031), h3.CheckedAt)

	_, _ = d.Health(ctx, agent.ClaudeCode, true)
	assert.Equal(t, 3, runs(), "force bypasses the cache")
}

func TestConcurrentHealthCallersShareOneStatusCommand(t *testing.T) {
	dir := t.TempDir()
	cnt, runs := counter(t)
	statusCLI(t, dir, "claude", "2.1.197", claudeAPIKey, "", 0, "0.3", cnt)
	d := newDetectorWith(t, Options{Env: testEnv("ANTHROPIC_API_KEY=sk-ant-fake")}, dir)
	d.Detect(ctx, false)

	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := d.Health(ctx, agent.ClaudeCode, true)
			assert.NoError(t, err)
			assert.Equal(t, api.StatusReady, h.Status)
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, runs(), "ten windows opening at once start one `claude auth status`")
}

func TestACallerThatGivesUpDoesNotKillTheSharedProbe(t *testing.T) {
	dir := t.TempDir()
	cnt, runs := counter(t)
	statusCLI(t, dir, "claude", "2.1.197", claudeAPIKey, "", 0, "0.3", cnt)
	d := newDetectorWith(t, Options{Env: testEnv("ANTHROPIC_API_KEY=sk-ant-fake")}, dir)
	d.Detect(ctx, false)
	c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := d.Health(c, agent.ClaudeCode, false)
	require.Error(t, err)
	h, err := d.Health(ctx, agent.ClaudeCode, false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusReady, h.Status)
	assert.Equal(t, 1, runs())
}

func TestHealthAllAnswersForEveryKnownAdapterInOrder(t *testing.T) {
	dir := t.TempDir()
	cnt, _ := counter(t)
	statusCLI(t, dir, "claude", "2.1.197", claudeLoggedOut, "", 1, "0", cnt)
	statusCLI(t, dir, "codex", "codex-cli 0.171.0", "", "Not logged in", 1, "0", cnt)
	d := newTestDetector(t, "", dir)
	all := d.HealthAll(ctx, false)
	require.Len(t, all, 8)
	var ids []string
	for _, h := range all {
		ids = append(ids, h.ID)
	}
	assert.Equal(t, []string{agent.ClaudeCode, agent.Codex, agent.Gemini, agent.Copilot, agent.Droid, agent.Pi, agent.OpenCode, agent.QwenCode}, ids)
	assert.Equal(t, api.StatusNotConfigured, all[0].Status)
	assert.Equal(t, api.StatusNotConfigured, all[1].Status)
	assert.Equal(t, api.StatusNotExecutable, all[2].Status, "gemini is not installed here")

	specs := d.WithHealth(ctx, d.Detect(ctx, false), false)
	require.Len(t, specs, 2)
	require.NotNil(t, specs[0].Health)
	assert.Equal(t, api.StatusNotConfigured, specs[0].Health.Status)
}

func TestGeminiIsNeverRunForHealthAndSaysItsAnswerIsFileBased(t *testing.T) {
	dir, home := t.TempDir(), t.TempDir()
	cnt, runs := counter(t)
	statusCLI(t, dir, "gemini", "0.61.0", "", "", 0, "0", cnt)
	d := newTestDetector(t, home, dir)
	h, err := d.Health(ctx, agent.Gemini, false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusNotConfigured, h.Status)
	assert.Contains(t, h.Reason, "no status command")
	assert.Contains(t, h.Reason, "GEMINI_API_KEY")
	assert.Equal(t, 0, runs(), "running gemini bare would open a browser login")
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o700))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	must(t, os.WriteFile(path, b, 0o600))
}

func TestGeminiHealthIsDecidedFromSettingsEnvironmentAndSavedLogin(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	past, future := now.Add(-time.Hour).UnixMilli(), now.Add(time.Hour).UnixMilli()
	settings := func(typ string) map[string]any {
		return map[string]any{"security": map[string]any{"auth": map[string]any{"selectedType": typ}}}
	}
	cases := []struct {
		name     string
		settings map[string]any
		creds    map[string]any
		env      []string
		want     api.HealthStatus
		kind     api.AuthKind
	}{
		{"nothing configured", nil, nil, nil, api.StatusNotConfigured, api.AuthUnauthenticated},
		{"GEMINI_API_KEY alone", nil, nil, []string{"GEMINI_API_KEY=x"}, api.StatusReady, api.AuthAPIKey},
		{"api key selected but not set", settings("gemini-api-key"), nil, nil, api.StatusNotConfigured, api.AuthAPIKey},
		{"api key selected and set", settings("gemini-api-key"), nil, []string{"GEMINI_API_KEY=x"}, api.StatusReady, api.AuthAPIKey},
		{"vertex with an API key", nil, nil, []string{"GOOGLE_GENAI_USE_VERTEXAI=true", "GOOGLE_API_KEY=x"}, api.StatusReady, api.AuthAPIKey},
		{"vertex with a project, a location and credentials", settings("vertex-ai"), nil, []string{"GOOGLE_CLOUD_PROJECT=p", "GOOGLE_CLOUD_LOCATION=us", "GOOGLE_APPLICATION_CREDENTIALS=/k.json"}, api.StatusReady, api.AuthAPIKey},
		{"vertex with a project and location but no visible credentials", settings("vertex-ai"), nil, []string{"GOOGLE_CLOUD_PROJECT=p", "GOOGLE_CLOUD_LOCATION=us"}, api.StatusUnknown, api.AuthAPIKey},
		{"vertex with nothing", settings("vertex-ai"), nil, nil, api.StatusNotConfigured, api.AuthAPIKey},
		{"google login with a refresh token", settings("oauth-personal"), map[string]any{"access_token": "a", "refresh_token": "r", "expiry_date": past}, nil, api.StatusReady, api.AuthSubscription},
		{"google login expired without a refresh token", settings("oauth-personal"), map[string]any{"access_token": "a", "expiry_date": past}, nil, api.StatusExpired, api.AuthSubscription},
		{"google login still valid without a refresh token", settings("oauth-personal"), map[string]any{"access_token": "a", "expiry_date": future}, nil, api.StatusReady, api.AuthSubscription},
		{"google login selected but never done", settings("oauth-personal"), nil, nil, api.StatusNotConfigured, api.AuthUnauthenticated},
		{"GCA from the environment with a saved login", nil, map[string]any{"refresh_token": "r"}, []string{"GOOGLE_GENAI_USE_GCA=true"}, api.StatusReady, api.AuthSubscription},
		{"older settings key", map[string]any{"selectedAuthType": "gemini-api-key"}, nil, []string{"GEMINI_API_KEY=x"}, api.StatusReady, api.AuthAPIKey},
		{"cloud shell, which 0.61 refuses headless", settings("cloud-shell"), nil, nil, api.StatusNotConfigured, api.AuthKindUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			if c.settings != nil {
				writeJSON(t, filepath.Join(home, ".gemini", "settings.json"), c.settings)
			}
			if c.creds != nil {
				writeJSON(t, filepath.Join(home, ".gemini", "oauth_creds.json"), c.creds)
			}
			getenv := envFunc(c.env)
			f := readGeminiFacts(home, getenv)
			v := geminiVerdict(f, getenv, now.UnixMilli())
			assert.Equal(t, c.want, v.Status, v.Reason)
			assert.Contains(t, v.Reason, "no status command")
			assert.Equal(t, c.kind, geminiAuthKind(AuthInput{Home: home, Getenv: getenv}))
			b, _ := json.Marshal(Redact(v.Details))
			assert.NotContains(t, string(b), `"r"`, "no credential value reaches details")
		})
	}
}

func TestABrokenGeminiSettingsFileIsUnknownNotReady(t *testing.T) {
	home := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(home, ".gemini"), 0o700))
	must(t, os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), []byte("{not json"), 0o600))
	v := geminiVerdict(readGeminiFacts(home, envFunc(nil)), envFunc([]string{"GEMINI_API_KEY=x"}), 0)
	assert.Equal(t, api.StatusUnknown, v.Status)
	assert.Contains(t, v.Reason, "settings.json")
}

func envFunc(kv []string) func(string) string {
	return func(k string) string {
		for _, e := range kv {
			if n, v, ok := cutEnv(e); ok && n == k {
				return v
			}
		}
		return ""
	}
}

func cutEnv(e string) (string, string, bool) {
	for i := 0; i < len(e); i++ {
		if e[i] == '=' {
			return e[:i], e[i+1:], true
		}
	}
	return "", "", false
}

func TestAuthKindIsReadFromCredentialFileShape(t *testing.T) {
	home := t.TempDir()
	in := AuthInput{Home: home, Getenv: envFunc(nil), GOOS: "linux"}
	assert.Equal(t, api.AuthUnauthenticated, claudeAuthKind(in))
	assert.Equal(t, api.AuthKindUnknown, claudeAuthKind(AuthInput{Home: home, Getenv: envFunc(nil), GOOS: "darwin"}), "macOS keeps the login in the keychain")
	assert.Equal(t, api.AuthAPIKey, claudeAuthKind(AuthInput{Home: home, Getenv: envFunc([]string{"ANTHROPIC_API_KEY=x"}), GOOS: "linux"}))
	writeJSON(t, filepath.Join(home, ".claude", ".credentials.json"), map[string]any{"claudeAiOauth": map[string]any{"accessToken": "x"}})
	assert.Equal(t, api.AuthSubscription, claudeAuthKind(in))
	writeJSON(t, filepath.Join(home, ".claude", ".credentials.json"), map[string]any{"somethingNew": 1})
	assert.Equal(t, api.AuthKindUnknown, claudeAuthKind(in))

	assert.Equal(t, api.AuthUnauthenticated, codexAuthKind(in))
	writeJSON(t, filepath.Join(home, ".codex", "auth.json"), map[string]any{"auth_mode": "chatgpt", "tokens": map[string]any{"id_token": "x"}})
	assert.Equal(t, api.AuthSubscription, codexAuthKind(in))
	writeJSON(t, filepath.Join(home, ".codex", "auth.json"), map[string]any{"OPENAI_API_KEY": "sk-x", "tokens": nil})
	assert.Equal(t, api.AuthAPIKey, codexAuthKind(in))
	custom := t.TempDir()
	writeJSON(t, filepath.Join(custom, "auth.json"), map[string]any{"auth_mode": "apikey"})
	assert.Equal(t, api.AuthAPIKey, codexAuthKind(AuthInput{Home: home, Getenv: envFunc([]string{"CODEX_HOME=" + custom})}))
	writeJSON(t, filepath.Join(home, ".codex", "auth.json"), map[string]any{"OPENAI_API_KEY": nil, "tokens": nil})
	assert.Equal(t, api.AuthKindUnknown, codexAuthKind(in))
}

func TestRedactDropsSecretShapedKeysAndValues(t *testing.T) {
	in := map[string]any{
		"loggedIn":     true,
		"apiKeySource": "ANTHROPIC_API_KEY",
		"apiKey":       "whatever",
		"access_token": "short",
		"password":     "p",
		"email":        "a@example.com",
		"note":         "Logged in using ChatGPT",
		"blob":         "AbCdEf0123456789AbCdEf0123456789AbCdEf",
		"jwt":          "eyJhbGciOiJIUzI1NiJ9.e30.x",
		"nested":       map[string]any{"refreshToken": "r", "plan": "max"},
		"list":         []any{"sk-ant-api03-xxxxxxxx", "ok"},
	}
	out := Redact(in)
	assert.Equal(t, map[string]any{
		"loggedIn":     true,
		"apiKeySource": "ANTHROPIC_API_KEY",
		"email":        "a@example.com",
		"note":         "Logged in using ChatGPT",
		"nested":       map[string]any{"plan": "max"},
		"list":         []any{"ok"},
	}, out)
	assert.Nil(t, Redact(nil))
}
