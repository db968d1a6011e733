package standin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/card-dev/card/internal/testskip"
)

// BinDirEnv names the directory holding the real CLIs when they are not in
// the repository's e2e/agents/node_modules/.bin.
const BinDirEnv = "CARD_E2E_BIN_DIR"

// CLI returns the path of the real agent CLI name ("claude", "codex",
// "gemini", "copilot", "pi", "droid", and the ACP agents card has no
// adapter for yet, "opencode" and "qwen") for an end-to-end test, so every
// package's e2e tests share one rule for finding, skipping and failing:
//
//   - Real-CLI runs take seconds each, so they run only when CARD_E2E=1 or
//     CARD_E2E_REQUIRED=1; otherwise the test is skipped and says how to run it.
//   - The CLI is looked up in $CARD_E2E_BIN_DIR, else in e2e/agents/node_modules/.bin
//     of the enclosing repository (found by walking up from the working dir).
//   - A missing CLI skips loudly, or fails when CARD_E2E_REQUIRED=1 (CI), so
//     CI can never go green by skipping.
//   - Either skip is counted in the package's summary line (testskip), which
//     `go test ./...` shows without -v.
func CLI(t testing.TB, name string) string {
	t.Helper()
	if os.Getenv("CARD_E2E") != "1" && !testskip.Required() {
		testskip.Skip(t, testskip.RealCLIsOff, "real-CLI end-to-end test against "+name+" skipped")
	}
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		dir = findBinDir()
	}
	p := filepath.Join(dir, name)
	if dir == "" {
		p = name
	}
	if _, err := os.Stat(p); dir == "" || err != nil {
		testskip.Skip(t, testskip.RealCLIsMissing, "REAL CLI MISSING: "+p+"; end-to-end test NOT RUN")
	}
	return p
}

// findBinDir walks up from the working directory to the repository's
// e2e/agents/node_modules/.bin; "" when there is none.
func findBinDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := wd; ; d = filepath.Dir(d) {
		cand := filepath.Join(d, "e2e", "agents", "node_modules", ".bin")
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return cand
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// AdapterEnv turns a helper's complete environment (ClaudeEnv, CopilotEnv,
// PiSetup, …) into the env of a card.toml [adapters.<id>] table: HOME and
// PATH are the daemon's own, everything else is the adapter's.
func AdapterEnv(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if k != "HOME" && k != "PATH" {
			out[k] = v
		}
	}
	return out
}
