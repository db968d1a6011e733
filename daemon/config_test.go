package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNoConfigFileMeansTheEmbeddedDefaults(t *testing.T) {
	cfg, err := LoadConfig(t.TempDir() + "/card.toml")
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig(), cfg)
	assert.Equal(t, "127.0.0.1:0", cfg.Addr)
	assert.EqualValues(t, 4<<20, cfg.MaxMessageBytes)
}

func TestConfigRefusals(t *testing.T) {
	cases := []struct {
		name, text, wantInError string
	}{
		{"unknown top-level key is named", "adr = \"127.0.0.1:0\"\n", "adr"},
		{"unknown nested key is named", "[substrate]\nreadonly = true\n", "substrate.readonly"},
		{"non-loopback listen needs an explicit opt-in", "addr = \"0.0.0.0:7000\"\n", "allow_non_loopback"},
		{"origin null is never allowed", "allowed_origins = [\"null\"]\n", "null"},
		{"wildcard origin is never allowed", "allowed_origins = [\"*\"]\n", "*"},
		{"a forbidden flag in operator extras", "[adapters.claude-code]\nargs = [\"--dangerously-skip-permissions\"]\n", "--dangerously-skip-permissions"},
		{"a forbidden flag hidden in a value", "[adapters.gemini]\nargs = [\"--approval-mode=yolo\"]\n", "yolo"},
		{"an unknown adapter table", "[adapters.clod]\nargs = []\n", "clod"},
		{"an arg codex app-server does not take", "[adapters.codex]\nargs = [\"-c\", \"model_provider=\\\"p\\\"\", \"--oss\"]\n",
			`[adapters.codex] args[2]: "--oss" is not taken by codex app-server (ask runs, sessions and ACP sessions)`},
		{"an arg Claude Code's sessions do not take", "[adapters.claude-code]\nargs = [\"--input-format\", \"text\"]\n",
			"claude -p --input-format stream-json (sessions and ACP sessions)"},
		{"an arg pi's rpc mode does not take", "[adapters.pi]\nargs = [\"--print\"]\n", "pi --mode rpc"},
		{"a tiny frame limit", "max_message_bytes = 10\n", "max_message_bytes"},
		{"an MCP bridge with neither command nor url", "[substrate.mcp]\ntimeout = \"3s\"\n", "substrate.mcp"},
		{"bad log level", "log_level = \"loud\"\n", "log_level"},
		{"more API retries than the bound", "max_api_retries = 11\n", "max_api_retries"},
		{"negative API retries", "max_api_retries = -1\n", "max_api_retries"},
		{"no silence before a stall", "stall_secs = 0\n", "stall_secs"},
		{"a stall warning past any deadline", "stall_secs = 3601\n", "stall_secs"},
		{"a stall kill before the warning", "stall_secs = 60\nstall_kill_secs = 60\n", "stall_kill_secs"},
		{"a negative stall kill", "stall_kill_secs = -1\n", "stall_kill_secs"},
		{"a stall key with a typo", "stal_secs = 60\n", "stal_secs"},
		{"an age that overflows a duration", "max_age_days = 106752\n", "max_age_days = 106752 is above the maximum of 36500"},
		{"a grace that overflows a duration", "shutdown_grace_secs = 9300000000\n", "shutdown_grace_secs"},
		{"a probe deadline that overflows a duration", "probe_timeout_secs = 9300000000\n", "probe_timeout_secs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("card.toml", tc.text)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantInError)
		})
	}
}

func TestOperatorExtrasThatPointAtAProviderAreAccepted(t *testing.T) {
	cfg, err := ParseConfig("card.toml", `
[adapters.codex]
args = ["-c", "model_providers.local={name=\"local\", base_url=\"http://127.0.0.1:9/v1\", env_key=\"LOCAL_KEY\", wire_api=\"responses\"}", "-c", "model_provider=\"local\""]
env = { LOCAL_KEY = "x" }
`)
	require.NoError(t, err)
	assert.Len(t, cfg.Adapters["codex"].Args, 4)
}

func TestEachBooleanKeyIsIndependent(t *testing.T) {
	cfg, err := ParseConfig("card.toml", "login_shell_path = false\n")
	require.NoError(t, err)
	assert.False(t, *cfg.LoginShellPath)
	assert.True(t, *cfg.RecordTasks, "turning one default off must not turn another off")
	cfg, err = ParseConfig("card.toml", "record_tasks = false\n")
	require.NoError(t, err)
	assert.False(t, *cfg.RecordTasks)
	assert.True(t, *cfg.LoginShellPath)
}
