package detect

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/api"
)

// OpenCode runs its free models with no credential at all, so no login
// is unknown, never not configured; a login, a key or a provider declared
// with a key in its config content is ready. No credential value is
// reported, only where it is.
func TestOpenCodesSignInIsReadFromItsFilesAndEnvByName(t *testing.T) {
	cases := []struct {
		name   string
		files  map[string]string
		env    map[string]string
		status api.HealthStatus
		method AuthMethod
	}{
		{name: "nothing", status: api.StatusUnknown},
		{name: "an api login", files: map[string]string{".local/share/opencode/auth.json": `{"anthropic":{"type":"api","key":"sk-secret"}}`},
			status: api.StatusReady, method: MethodAPIKey},
		{name: "an oauth login", files: map[string]string{".local/share/opencode/auth.json": `{"anthropic":{"type":"oauth","refresh":"r-secret","access":"a","expires":1}}`},
			status: api.StatusReady, method: MethodSubscription},
		{name: "XDG_DATA_HOME moves the file", files: map[string]string{"data/opencode/auth.json": `{"openai":{"type":"api","key":"sk-secret"}}`},
			env: map[string]string{"XDG_DATA_HOME": "@/data"}, status: api.StatusReady, method: MethodAPIKey},
		{name: "a broken auth file", files: map[string]string{".local/share/opencode/auth.json": `{`}, status: api.StatusUnknown},
		{name: "OPENCODE_AUTH_CONTENT replaces the file", env: map[string]string{"OPENCODE_AUTH_CONTENT": `{"openai":{"type":"api","key":"sk-secret"}}`},
			status: api.StatusReady, method: MethodAPIKey},
		{name: "a provider key", env: map[string]string{"OPENROUTER_API_KEY": "sk-secret"}, status: api.StatusReady, method: MethodAPIKey},
		{name: "a provider in the config content", env: map[string]string{"OPENCODE_CONFIG_CONTENT": `{"provider":{"mine":{"options":{"baseURL":"http://127.0.0.1:9/v1","apiKey":"sk-secret"}}}}`},
			status: api.StatusReady, method: MethodAPIKey},
		{name: "a provider with no key", env: map[string]string{"OPENCODE_CONFIG_CONTENT": `{"provider":{"mine":{"options":{"baseURL":"http://127.0.0.1:9/v1"}}}}`},
			status: api.StatusUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			for p, content := range c.files {
				writeFile(t, filepath.Join(home, p), content)
			}
			getenv := func(k string) string {
				v := c.env[k]
				if len(v) > 0 && v[0] == '@' {
					return home + v[1:]
				}
				return v
			}
			v := openCodeHealth(ctx, HealthInput{Home: home, Getenv: getenv})
			assert.Equal(t, c.status, v.Status, v.Reason)
			assert.Equal(t, c.method, MethodOf(api.ExternalAgentHealth{Details: v.Details}))
			assert.NotContains(t, v.Reason, "secret")
			assert.NotContains(t, toJSON(t, v.Details), "secret")
			if c.status == api.StatusUnknown && len(c.files) == 0 {
				assert.Contains(t, v.Reason, "free models")
			}
		})
	}
}

// Qwen Code refuses a session with no key for its auth type, so a missing
// key is not configured; its key may be in the environment, its .env file
// or its settings.
func TestQwenCodesSignInIsItsAuthTypeAndThatTypesKey(t *testing.T) {
	cases := []struct {
		name     string
		settings string
		dotenv   string
		env      map[string]string
		status   api.HealthStatus
	}{
		{name: "nothing", status: api.StatusNotConfigured},
		{name: "OPENAI_API_KEY alone", env: map[string]string{"OPENAI_API_KEY": "sk-secret", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, status: api.StatusReady},
		{name: "openai in settings, no key", settings: `{"security":{"auth":{"selectedType":"openai"}}}`, status: api.StatusNotConfigured},
		{name: "openai in settings with its key", settings: `{"security":{"auth":{"selectedType":"openai","apiKey":"sk-secret"}}}`, status: api.StatusReady},
		{name: "a key in its .env", dotenv: "OPENAI_API_KEY=sk-secret\n", status: api.StatusReady},
		{name: "anthropic with its key", settings: `{"security":{"auth":{"selectedType":"anthropic"}}}`, env: map[string]string{"ANTHROPIC_API_KEY": "sk-secret"}, status: api.StatusReady},
		{name: "qwen oauth, no login", settings: `{"security":{"auth":{"selectedType":"qwen-oauth"}}}`, status: api.StatusNotConfigured},
		{name: "a type card does not know", settings: `{"security":{"auth":{"selectedType":"something-new"}}}`, status: api.StatusUnknown},
		{name: "broken settings", settings: `{`, status: api.StatusUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			if c.settings != "" {
				writeFile(t, filepath.Join(home, ".qwen", "settings.json"), c.settings)
			}
			if c.dotenv != "" {
				writeFile(t, filepath.Join(home, ".qwen", ".env"), c.dotenv)
			}
			v := qwenHealth(ctx, HealthInput{Home: home, Getenv: func(k string) string { return c.env[k] }})
			assert.Equal(t, c.status, v.Status, v.Reason)
			assert.NotContains(t, toJSON(t, v.Details), "secret")
			if c.status == api.StatusReady {
				assert.Equal(t, MethodAPIKey, MethodOf(api.ExternalAgentHealth{Details: v.Details}))
			}
		})
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
