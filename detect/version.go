package detect

import (
	"regexp"
	"strings"
)

// versionToken matches the first dotted version: at least major.minor, an
// optional leading "v", and an optional semver pre-release/build suffix. A
// trailing sentence dot ("GitHub Copilot CLI 1.0.102.") is not part of it.
var versionToken = regexp.MustCompile(`(?:^|[^0-9A-Za-z.])v?(\d+\.\d+(?:\.\d+)*(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?:\+[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?)`)

// ParseVersion returns the first version-like token in a CLI's `--version`
// output, or "" when there is none. CLIs decorate their version differently
// ("2.1.197 (Claude Code)", "codex-cli 0.171.0"), and clients compare the bare
// number, so the decoration is dropped rather than passed through.
func ParseVersion(output string) string {
	for _, line := range strings.Split(output, "\n") {
		if m := versionToken.FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}
