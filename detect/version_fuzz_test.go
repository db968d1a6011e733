package detect

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseVersion holds ParseVersion to what clients rely on when they
// compare versions: it never panics on whatever a CLI prints, and what it
// returns is empty or a bare dotted number (major.minor at least) that
// occurs in the output and parses back to itself.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{
		"", "2.1.197 (Claude Code)\n", "codex-cli 0.171.0", "GitHub Copilot CLI 1.0.102.\n",
		"v0.20.1-nightly.20250101+abc\n", "gemini 0.1\nextra 9.9", "1.", ".1.2", "version: 1.2.3.4.5.6",
		"\xff\xfe1.2", "abc1.2", "x-1.2.3-", "1.2-", "10.20.30+", strings.Repeat("1.", 1000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		v := ParseVersion(out)
		if v == "" {
			return
		}
		if !strings.Contains(out, v) {
			t.Fatalf("version %q is not in the output %q", v, out)
		}
		if !utf8.ValidString(v) || strings.ContainsAny(v, " \t\r\n") {
			t.Fatalf("version %q from %q is not a bare token", v, out)
		}
		if v[0] < '0' || v[0] > '9' || strings.Count(v, ".") < 1 {
			t.Fatalf("version %q from %q is not major.minor at least", v, out)
		}
		if again := ParseVersion(v); again != v {
			t.Fatalf("ParseVersion(%q) = %q, not itself", v, again)
		}
	})
}
