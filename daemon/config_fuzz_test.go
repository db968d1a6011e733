package daemon

import (
	"strings"
	"testing"
)

// FuzzLoadConfig holds the config loader to two promises: no card.toml, however
// broken, panics the daemon at startup (an operator's typo must become a
// message, not a stack trace), and a config ParseConfig accepts always passes
// Validate, so nothing it lets through can widen the listener or an agent's
// boundary behind the validator's back.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{
		"",
		"addr = \"127.0.0.1:0\"\n",
		"addr = \"0.0.0.0:7000\"\n",
		"addr = \"0.0.0.0:7000\"\nallow_non_loopback = true\nallowed_hosts = [\"box.lan\"]\n",
		"addr = \"[::1]:0\"\nlog_level = \"debug\"\n",
		"allowed_origins = [\"https://app.example\"]\n",
		"allowed_origins = [\"null\"]\n",
		"allowed_origins = [\"*\"]\n",
		"max_message_bytes = 0\n",
		"max_message_bytes = -9223372036854775808\n",
		"max_connections = 1\nmax_inflight_per_connection = 1\n",
		"record_tasks = false\nlogin_shell_path = false\n",
		"bogus = 1\n",
		"[adapters.claude]\nbin = \"/usr/bin/claude\"\n",
		"[adapters.codex]\nargs = [\"--dangerously-bypass-approvals-and-sandbox\"]\n",
		"[adapters.nope]\nbin = \"x\"\n",
		"[adapters.gemini]\nenv = { GEMINI_API_KEY = \"x\" }\n",
		"[substrate]\nread_only = true\n[substrate.mcp]\ncommand = [\"bridge\"]\n",
		"[substrate.mcp]\ncommand = [\"bridge\"]\nurl = \"http://127.0.0.1:1\"\n",
		"[substrate.mcp]\n",
		"addr = \"\xff\"\n",
		"a = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
		"[[adapters]]\n",
		"adapters = 1\n",
		"shutdown_grace_secs = 1e99\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := ParseConfig("card.toml", text)
		if err != nil {
			if !strings.Contains(err.Error(), "card.toml") {
				t.Fatalf("an error that does not name the file: %v", err)
			}
			return
		}
		if verr := cfg.Validate(); verr != nil {
			t.Fatalf("ParseConfig accepted %q but Validate refuses it: %v", text, verr)
		}
		if !cfg.AllowNonLoopback && !strings.Contains(text, "allow_non_loopback") {
			host := cfg.Addr[:strings.LastIndex(cfg.Addr, ":")]
			if !isLoopbackHost(strings.Trim(host, "[]")) {
				t.Fatalf("a non-loopback addr %q accepted without allow_non_loopback", cfg.Addr)
			}
		}
		for _, o := range cfg.AllowedOrigins {
			if o == "*" || o == "null" {
				t.Fatalf("allowed_origins accepted %q", o)
			}
		}
	})
}
