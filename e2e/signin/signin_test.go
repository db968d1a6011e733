// Package signin_test drives each sign-in state the real agent CLIs offer
// that can be set up offline (fake credential files of the right shape,
// fake keys, never a real secret) and holds card's health answer to what
// the CLI itself does in that state: its own status command where it has
// one, and a run with card's argv where that is what tells. Like every
// real-CLI test it runs only with CARD_E2E=1 (or CARD_E2E_REQUIRED=1).
package signin_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
	"github.com/card-dev/card/daemon/daemontest"
	"github.com/card-dev/card/detect"
	"github.com/card-dev/card/e2e/standin"
	"github.com/card-dev/card/internal/proc"
	"github.com/card-dev/card/spawn"
)

func TestMain(m *testing.M) { daemontest.VerifyTestMain(m) }

// pathWith is node's directory and the system dirs: the CLI itself is
// pinned, and leaving its npm .bin directory out keeps detection from
// probing the five other CLIs installed beside it.
func pathWith(t *testing.T, _ string) string {
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node must be on PATH to run the npm-installed CLIs")
	return strings.Join([]string{filepath.Dir(node), "/usr/bin", "/bin"}, ":")
}

func writeFiles(t *testing.T, home string, files map[string]string) {
	for p, content := range files {
		full := filepath.Join(home, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o700))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o600))
	}
}

// health is card's answer for adapter id with the real CLI pinned, in home,
// with env as the daemon's environment.
func health(t *testing.T, id, pinVar, bin, home string, env []string) api.ExternalAgentHealth {
	t.Helper()
	d := detect.New(detect.Options{Search: detect.NewSearchPath(pathWith(t, bin)), Home: home,
		Env: proc.EnvMap(append(env, pinVar+"="+bin)), ScratchDirs: []string{}, ProbeTimeout: time.Minute, HealthTimeout: time.Minute})
	t.Cleanup(d.Close)
	h, err := d.Health(context.Background(), id, true)
	require.NoError(t, err)
	return h
}

// runPlan runs card's argv for adapter (read_only, the given operator args)
// with the prompt on stdin, and returns its output and exit code.
func runPlan(t *testing.T, adapter, bin, home string, env, extraArgs []string) (string, int) {
	t.Helper()
	cwd := filepath.Join(home, "project")
	require.NoError(t, os.MkdirAll(cwd, 0o755))
	plan, err := spawn.Build(bin, spawn.Request{Adapter: adapter, Cwd: cwd, Extras: spawn.Extras{Args: extraArgs}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, plan.Program, plan.Args...)
	cmd.Dir = cwd
	cmd.Env = env
	cmd.Stdin = strings.NewReader("say pong")
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "%s did not finish: %s", adapter, out)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return string(out), code
}

func credentials(expiresAt time.Time, refresh bool) string {
	extra := ""
	if refresh {
		extra = `,"refreshToken":"sk-ant-ort01-card-e2e-fake"`
	}
	return fmt.Sprintf(`{"claudeAiOauth":{"accessToken":"sk-ant-oat01-card-e2e-fake","expiresAt":%d,"scopes":["user:inference","user:profile"]%s}}`, expiresAt.UnixMilli(), extra)
}

// Each Claude Code sign-in method, read by card through the real `claude auth
// status`. For the first-party ones, card's own argv is then run against a
// stand-in that refuses every key: a state card calls ready or expired sends
// credentials to the API, one card calls not_configured stops with "Not
// logged in" before any request (card runs Claude Code without its
// settings files, where an apiKeyHelper or a settings env block lives).
func TestEveryClaudeSignInStateReadsRightWithTheRealCLI(t *testing.T) {
	bin := standin.CLI(t, "claude")
	now := time.Now()
	cases := []struct {
		name   string
		env    []string
		files  map[string]string
		want   api.HealthStatus
		method string
		cloud  bool
	}{
		{"never signed in", nil, nil, api.StatusNotConfigured, "", false},
		{"ANTHROPIC_API_KEY", []string{"ANTHROPIC_API_KEY=sk-ant-card-e2e-fake"}, nil, api.StatusReady, "api_key", false},
		{"ANTHROPIC_AUTH_TOKEN", []string{"ANTHROPIC_AUTH_TOKEN=card-e2e-fake"}, nil, api.StatusReady, "api_key", false},
		{"CLAUDE_CODE_OAUTH_TOKEN", []string{"CLAUDE_CODE_OAUTH_TOKEN=sk-ant-oat01-card-e2e-fake"}, nil, api.StatusReady, "subscription", false},
		{"claude.ai login", nil, map[string]string{".claude/.credentials.json": credentials(now.Add(24*time.Hour), true)}, api.StatusReady, "subscription", false},
		{"claude.ai login expired, no refresh token", nil, map[string]string{".claude/.credentials.json": credentials(now.Add(-24*time.Hour), false)}, api.StatusExpired, "subscription", false},
		{"Console key saved by /login", nil, map[string]string{".claude.json": `{"primaryApiKey":"sk-ant-api03-card-e2e-fake"}`}, api.StatusReady, "api_key", false},
		{"apiKeyHelper in settings", nil, map[string]string{".claude/settings.json": `{"apiKeyHelper":"echo sk-ant-card-e2e-fake"}`}, api.StatusNotConfigured, "", false},
		{"ANTHROPIC_API_KEY in settings' env block", nil, map[string]string{".claude/settings.json": `{"env":{"ANTHROPIC_API_KEY":"sk-ant-card-e2e-fake"}}`}, api.StatusNotConfigured, "", false},
		{"Bedrock with an AWS profile", []string{"CLAUDE_CODE_USE_BEDROCK=1", "AWS_PROFILE=card-e2e"}, nil, api.StatusReady, "cloud", true},
		{"Bedrock with no credentials", []string{"CLAUDE_CODE_USE_BEDROCK=1"}, nil, api.StatusUnknown, "cloud", true},
		{"Vertex with a credentials file", []string{"CLAUDE_CODE_USE_VERTEX=1", "GOOGLE_APPLICATION_CREDENTIALS=/nonexistent/key.json"}, nil, api.StatusReady, "cloud", true},
		{"Bedrock only in settings' env block", nil, map[string]string{".claude/settings.json": `{"env":{"CLAUDE_CODE_USE_BEDROCK":"1"}}`}, api.StatusNotConfigured, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := standin.NewAnthropic(t, standin.Script{Status: 401})
			home := t.TempDir()
			writeFiles(t, home, c.files)
			env := append([]string{"HOME=" + home, "PATH=" + pathWith(t, bin), "ANTHROPIC_BASE_URL=" + s.URL, "CLAUDE_CODE_MAX_RETRIES=0",
				"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1"}, c.env...)
			h := health(t, "claude-code", "CAR_CLAUDE_CODE_BIN", bin, home, env)
			assert.Equal(t, c.want, h.Status, h.Reason)
			if c.method != "" {
				assert.Equal(t, c.method, h.Details["auth_method"], "%v", h.Details)
			}
			b, _ := json.Marshal(h)
			assert.NotContains(t, string(b), "card-e2e-fake", "no credential value reaches the answer")
			if c.cloud {
				return // the run would go to the cloud provider, not the stand-in
			}
			out, _ := runPlan(t, "claude-code", bin, home, env, nil)
			sent := len(s.ModelCalls()) > 0
			switch c.want {
			case api.StatusReady, api.StatusExpired:
				assert.True(t, sent, "card says %s, so the run must reach the API with credentials: %s", c.want, out)
			case api.StatusNotConfigured:
				assert.False(t, sent, "card says not_configured, so the run must not get to the API")
				assert.Contains(t, out, "Not logged in")
			}
		})
	}
}

// fakeJWT is an unsigned token with the claims Codex reads from a ChatGPT
// login; it is not a credential.
func fakeJWT() string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]any{"alg": "none"}) + "." + enc(map[string]any{"email": "user@example.com", "exp": 4102444800,
		"https://api.openai.com/auth": map[string]any{"chatgpt_plan_type": "plus", "chatgpt_account_id": "acc-card-e2e-fake"}}) + ".c2ln"
}

// Each Codex CLI sign-in method, read by card through the real `codex login
// status`; the stored API key is made by the real `codex login
// --with-api-key`.
func TestEveryCodexSignInStateReadsRightWithTheRealCLI(t *testing.T) {
	bin := standin.CLI(t, "codex")
	chatgpt, _ := json.Marshal(map[string]any{"auth_mode": "chatgpt", "OPENAI_API_KEY": nil, "last_refresh": "2026-01-01T00:00:00Z",
		"tokens": map[string]any{"id_token": fakeJWT(), "access_token": fakeJWT(), "refresh_token": "rt-card-e2e-fake", "account_id": "acc-card-e2e-fake"}})
	cases := []struct {
		name   string
		login  bool // run `codex login --with-api-key` first
		env    []string
		files  map[string]string
		want   api.HealthStatus
		method string
		reason string
	}{
		{"never signed in", false, nil, nil, api.StatusNotConfigured, "", "codex login"},
		{"stored API key", true, nil, nil, api.StatusReady, "api_key", ""},
		{"ChatGPT login", false, nil, map[string]string{".codex/auth.json": string(chatgpt)}, api.StatusReady, "subscription", ""},
		{"a saved login Codex cannot read", false, nil, map[string]string{".codex/auth.json": `{"auth_mode":"chatgpt","tokens":{"id_token":"x"}}`}, api.StatusUnknown, "", "auth.json"},
		{"OPENAI_API_KEY in the environment", false, []string{"OPENAI_API_KEY=sk-card-e2e-fake"}, nil, api.StatusNotConfigured, "", "OPENAI_API_KEY"},
		{"CODEX_API_KEY in the environment", false, []string{"CODEX_API_KEY=sk-card-e2e-fake"}, nil, api.StatusReady, "api_key", ""},
		{"stored API key under CODEX_HOME", true, []string{"CODEX_HOME=/HOME/codex-home"}, nil, api.StatusReady, "api_key", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			writeFiles(t, home, c.files)
			env := []string{"HOME=" + home, "PATH=" + pathWith(t, bin)}
			for _, e := range c.env {
				env = append(env, strings.ReplaceAll(e, "/HOME", home))
			}
			if c.login {
				if v := proc.EnvMap(env)["CODEX_HOME"]; v != "" {
					require.NoError(t, os.MkdirAll(v, 0o700))
				}
				cmd := exec.Command(bin, "login", "--with-api-key")
				cmd.Env, cmd.Dir = env, home
				cmd.Stdin = strings.NewReader("sk-card-e2e-fake-stored\n")
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s", out)
			}
			h := health(t, "codex", "CAR_CODEX_BIN", bin, home, env)
			assert.Equal(t, c.want, h.Status, h.Reason)
			if c.method != "" {
				assert.Equal(t, c.method, h.Details["auth_method"], "%v", h.Details)
			}
			assert.Contains(t, h.Reason, c.reason)
			b, _ := json.Marshal(h)
			assert.NotContains(t, string(b), "card-e2e-fake")
		})
	}
}

// Gemini CLI has no status command; card decides from its settings, .env
// files and environment. Each state is held to what the real CLI does in a
// headless run with card's argv: it refuses the states card calls
// not_configured before any request (exit 41), and goes on to the API in
// the others.
func TestEveryGeminiSignInStateReadsRightWithTheRealCLI(t *testing.T) {
	bin := standin.CLI(t, "gemini")
	settings := func(auth string) string {
		return `{"security":{"auth":{` + auth + `}},"general":{"maxAttempts":1,"enableAutoUpdate":false},"privacy":{"usageStatisticsEnabled":false}}`
	}
	const refused = "http://127.0.0.1:9" // nothing listens: a request fails at once
	cases := []struct {
		name  string
		env   []string
		files map[string]string
		want  api.HealthStatus
	}{
		{"nothing configured", nil, map[string]string{".gemini/settings.json": settings("")}, api.StatusNotConfigured},
		{"API key selected and set", []string{"GEMINI_API_KEY=card-e2e-fake", "GOOGLE_GEMINI_BASE_URL=" + refused}, map[string]string{".gemini/settings.json": settings(`"selectedType":"gemini-api-key"`)}, api.StatusReady},
		{"API key selected, in ~/.gemini/.env", []string{"GOOGLE_GEMINI_BASE_URL=" + refused}, map[string]string{".gemini/settings.json": settings(`"selectedType":"gemini-api-key"`), ".gemini/.env": "GEMINI_API_KEY=card-e2e-fake\n"}, api.StatusReady},
		{"API key selected, none set", []string{"GOOGLE_GEMINI_BASE_URL=" + refused}, map[string]string{".gemini/settings.json": settings(`"selectedType":"gemini-api-key"`)}, api.StatusNotConfigured},
		{"a key only in ~/.gemini/.env, nothing selected", nil, map[string]string{".gemini/settings.json": settings(""), ".gemini/.env": "GEMINI_API_KEY=card-e2e-fake\n"}, api.StatusNotConfigured},
		{"a gateway URL with a key, nothing selected", []string{"GEMINI_API_KEY=card-e2e-fake", "GOOGLE_GEMINI_BASE_URL=" + refused}, map[string]string{".gemini/settings.json": settings("")}, api.StatusNotConfigured},
		{"cloud-shell selected", nil, map[string]string{".gemini/settings.json": settings(`"selectedType":"cloud-shell"`)}, api.StatusNotConfigured},
		{"an enforced type not matched", []string{"GEMINI_API_KEY=card-e2e-fake"}, map[string]string{".gemini/settings.json": settings(`"selectedType":"gemini-api-key","enforcedType":"vertex-ai"`)}, api.StatusNotConfigured},
		{"Vertex AI without project or key", nil, map[string]string{".gemini/settings.json": settings(`"selectedType":"vertex-ai"`)}, api.StatusNotConfigured},
		{"Vertex AI express mode", []string{"GOOGLE_API_KEY=card-e2e-fake", "GOOGLE_GEMINI_BASE_URL=" + refused}, map[string]string{".gemini/settings.json": settings(`"selectedType":"vertex-ai"`)}, api.StatusReady},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			writeFiles(t, home, c.files)
			env := append([]string{"HOME=" + home, "PATH=" + pathWith(t, bin), "NO_COLOR=1"}, c.env...)
			h := health(t, "gemini", "CAR_GEMINI_BIN", bin, home, env)
			assert.Equal(t, c.want, h.Status, h.Reason)
			b, _ := json.Marshal(h)
			assert.NotContains(t, string(b), "card-e2e-fake")

			// Workspace trust is the operator's to give (card.toml args).
			out, code := runPlan(t, "gemini", bin, home, env, []string{"--skip-trust"})
			if c.want == api.StatusNotConfigured {
				assert.Equal(t, 41, code, "Gemini refuses this state before any request:\n%s", out)
			} else {
				assert.NotEqual(t, 41, code, "Gemini accepts this state's auth and goes on to the API:\n%s", out)
			}
		})
	}
}
