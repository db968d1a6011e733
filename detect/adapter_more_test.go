package detect

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// capture reads a real CLI capture from e2e/fixtures/cli.
func capture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "e2e", "fixtures", "cli", name))
	require.NoError(t, err)
	return string(b)
}

func TestTheNewAdaptersVersionsParseFromTheirRealOutput(t *testing.T) {
	cases := []struct{ file, want string }{
		{"copilot-version.stdout", "1.0.102"},
		{"pi-version.stderr", "0.73.1"},
		{"droid-version-platform-0.225.2.stdout", "0.225.2"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, ParseVersion(capture(t, c.file)), c.file)
	}
	// Copilot's stderr banner carries a number but no version.
	assert.Equal(t, "", ParseVersion(capture(t, "copilot-version.stderr")))
}

func TestTheNewAdaptersAreDescribedByTheirRealNamesBinariesPinsAndPackages(t *testing.T) {
	cases := []struct {
		id, name, bin, pin, npm string
		ro                      api.ReadOnlyEnforcement
	}{
		{agent.Copilot, "GitHub Copilot CLI", "copilot", "CAR_COPILOT_BIN", "@github/copilot", api.EnforcedByAllowlist},
		{agent.Droid, "Factory Droid", "droid", "CAR_DROID_BIN", "@factory/cli", api.EnforcedByAgentDefault},
		{agent.Pi, "Pi", "pi", "CAR_PI_BIN", "@mariozechner/pi-coding-agent", api.NotEnforced},
	}
	for _, c := range cases {
		d, ok := Lookup(c.id)
		require.True(t, ok, c.id)
		assert.Equal(t, c.name, d.DisplayName)
		assert.Equal(t, c.bin, d.Binary)
		assert.Equal(t, c.pin, d.PinEnv)
		assert.Contains(t, d.InstallHint, c.npm)
		assert.Equal(t, c.ro, d.ReadOnly)
	}
}

// Pi prints its version on stderr with nothing on stdout; a probe that read
// stdout alone would report Pi without a version.
func TestPiVersionOnStderrIsDetected(t *testing.T) {
	dir := t.TempDir()
	fakeCLI(t, dir, "pi", `echo 0.73.1 >&2`)
	d := newTestDetector(t, "", dir)
	s, ok := specByID(d.Detect(ctx, false), agent.Pi)
	require.True(t, ok)
	assert.Equal(t, "0.73.1", s.Version)
	assert.True(t, s.Execution.IsRunnable())
	assert.Equal(t, api.NotEnforced, s.ReadOnlyEnforcement)
}

// The Droid npm launcher without its platform package exits 1 with the
// message below (captured from the real launcher). Detection must report it
// unusable with that cause, not runnable with no version.
func TestDroidLauncherWithoutItsPlatformBinaryIsUnusableWithTheLaunchersCause(t *testing.T) {
	dir := t.TempDir()
	msg := filepath.Join(t.TempDir(), "stderr")
	must(t, os.WriteFile(msg, []byte(capture(t, "droid-missing-platform-binary.stderr")), 0o600))
	fakeCLI(t, dir, "droid", "cat "+msg+" >&2; exit 1")
	d := newTestDetector(t, "", dir)
	s, ok := specByID(d.Detect(ctx, false), agent.Droid)
	require.True(t, ok)
	reason, bad := s.UnusableReason()
	require.True(t, bad, "%+v", s)
	assert.Contains(t, reason, "Could not find the droid binary for linux-x64")
	assert.Contains(t, reason, filepath.Join(dir, "droid"))
	h, err := d.Health(ctx, agent.Droid, false)
	require.NoError(t, err)
	assert.Equal(t, api.StatusNotExecutable, h.Status)
	assert.Contains(t, h.Reason, "Could not find the droid binary")
}

func TestANewAdapterPinThatDoesNotResolveNamesThePin(t *testing.T) {
	d := newDetectorWith(t, Options{Env: testEnv("CAR_COPILOT_BIN=/nonexistent/copilot")}, t.TempDir())
	s, ok := specByID(d.Detect(ctx, false), agent.Copilot)
	require.True(t, ok)
	reason, bad := s.UnusableReason()
	require.True(t, bad)
	assert.Contains(t, reason, "CAR_COPILOT_BIN")
	assert.Equal(t, api.SourcePin, s.Source)
}

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o700))
	must(t, os.WriteFile(path, []byte(content), 0o600))
}

const fakeSecret = "ghp_SECRETVALUEthatmustneverleak0123456789"

// Each case: a home laid out by setup, an environment, and the status the
// adapter must decide. Every reason says how it was decided, and no secret
// value from env or files reaches the verdict.
func TestNewAdapterHealthIsDecidedFromEnvAndFilesByPresenceOnly(t *testing.T) {
	cases := []struct {
		name   string
		id     string
		env    []string
		files  map[string]string
		want   api.HealthStatus
		reason string
		kind   api.AuthKind
	}{
		{"copilot empty home", agent.Copilot, nil, nil, api.StatusNotConfigured, "not signed in", api.AuthUnauthenticated},
		{"copilot token env", agent.Copilot, []string{"GH_TOKEN=" + fakeSecret}, nil, api.StatusReady, "GH_TOKEN", api.AuthSubscription},
		{"copilot token precedence", agent.Copilot, []string{"GITHUB_TOKEN=" + fakeSecret, "COPILOT_GITHUB_TOKEN=" + fakeSecret}, nil, api.StatusReady, "COPILOT_GITHUB_TOKEN", api.AuthSubscription},
		{"copilot byok", agent.Copilot, []string{"COPILOT_PROVIDER_BASE_URL=http://127.0.0.1:1", "COPILOT_MODEL=m", "COPILOT_PROVIDER_API_KEY=" + fakeSecret}, nil, api.StatusReady, "custom provider", api.AuthAPIKey},
		{"copilot byok without model", agent.Copilot, []string{"COPILOT_PROVIDER_BASE_URL=http://127.0.0.1:1"}, nil, api.StatusNotConfigured, "COPILOT_MODEL", api.AuthAPIKey},
		{"copilot /login recorded", agent.Copilot, nil, map[string]string{".copilot/config.json": `{"last_logged_in_user":{"host":"https://github.com","login":"u"}}`}, api.StatusReady, "/login", api.AuthSubscription},
		{"copilot gh cli", agent.Copilot, nil, map[string]string{".config/gh/hosts.yml": "github.com:\n    oauth_token: " + fakeSecret + "\n    user: u\n"}, api.StatusReady, "GitHub CLI", api.AuthSubscription},
		{"copilot broken config", agent.Copilot, nil, map[string]string{".copilot/config.json": `{`}, api.StatusUnknown, "could not be read", api.AuthKindUnknown},

		{"droid empty home", agent.Droid, nil, nil, api.StatusNotConfigured, "not signed in", api.AuthUnauthenticated},
		{"droid api key", agent.Droid, []string{"FACTORY_API_KEY=fk-" + fakeSecret}, nil, api.StatusReady, "FACTORY_API_KEY", api.AuthAPIKey},
		{"droid saved login", agent.Droid, nil, map[string]string{".factory/auth.v2.file": "ciphertext " + fakeSecret}, api.StatusReady, "auth.v2.file", api.AuthSubscription},
		{"droid byok custom model", agent.Droid, nil, map[string]string{".factory/settings.json": `{"customModels":[{"model":"m","apiKey":"` + fakeSecret + `"}]}`}, api.StatusReady, "custom:", api.AuthAPIKey},
		{"droid settings without models", agent.Droid, nil, map[string]string{".factory/settings.json": `{"customModels":[]}`}, api.StatusNotConfigured, "not signed in", api.AuthUnauthenticated},
		{"droid broken settings", agent.Droid, nil, map[string]string{".factory/settings.json": `nope`}, api.StatusUnknown, "could not be read", api.AuthKindUnknown},

		{"pi empty home", agent.Pi, nil, nil, api.StatusNotConfigured, "no provider credentials", api.AuthUnauthenticated},
		{"pi provider env", agent.Pi, []string{"ANTHROPIC_API_KEY=sk-ant-" + fakeSecret}, nil, api.StatusReady, "ANTHROPIC_API_KEY", api.AuthAPIKey},
		{"pi oauth login", agent.Pi, nil, map[string]string{".pi/agent/auth.json": `{"anthropic":{"type":"oauth","refresh":"` + fakeSecret + `"}}`}, api.StatusReady, "anthropic", api.AuthSubscription},
		{"pi api key login", agent.Pi, nil, map[string]string{".pi/agent/auth.json": `{"openai":{"type":"api_key","key":"` + fakeSecret + `"}}`}, api.StatusReady, "openai", api.AuthAPIKey},
		{"pi custom provider", agent.Pi, nil, map[string]string{".pi/agent/models.json": `{"providers":{"local":{"baseUrl":"http://127.0.0.1:1","apiKey":"` + fakeSecret + `"}}}`}, api.StatusReady, "models.json", api.AuthAPIKey},
		{"pi broken auth", agent.Pi, nil, map[string]string{".pi/agent/auth.json": `[`}, api.StatusUnknown, "could not be read", api.AuthKindUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			for p, content := range c.files {
				writeFile(t, filepath.Join(home, p), content)
			}
			desc, _ := Lookup(c.id)
			getenv := envOf(c.env...)
			v := desc.Health(ctx, HealthInput{Home: home, Getenv: getenv, Now: func() int64 { return 0 }})
			assert.Equal(t, c.want, v.Status, v.Reason)
			assert.Contains(t, v.Reason, c.reason)
			assert.Contains(t, v.Reason, "decided from", "the reason says how it was decided")
			b, err := json.Marshal(Redact(v.Details))
			require.NoError(t, err)
			assert.NotContains(t, string(b)+v.Reason, "SECRETVALUE")
			assert.Equal(t, "files", v.Details["decided_from"])
			assert.Equal(t, c.kind, desc.AuthKind(AuthInput{Home: home, Getenv: getenv, GOOS: "linux"}))
		})
	}
}

// The health check runs nothing: none of the three has a status command
// that works offline, so a counting fake binary must never be started.
func TestNewAdapterHealthNeverRunsTheBinary(t *testing.T) {
	dir := t.TempDir()
	cnt, runs := counter(t)
	for _, b := range []string{"copilot", "droid", "pi"} {
		fakeCLI(t, dir, b, `case "$1" in --version) echo 1.2.3;; *) echo x >> `+cnt+`;; esac`)
	}
	d := newTestDetector(t, "", dir)
	for _, id := range []string{agent.Copilot, agent.Droid, agent.Pi} {
		h, err := d.Health(ctx, id, true)
		require.NoError(t, err)
		assert.Equal(t, api.StatusNotConfigured, h.Status, "%s in an empty home: %s", id, h.Reason)
	}
	assert.Equal(t, 0, runs())
}
