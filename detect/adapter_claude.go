package detect

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
)

// claudeAuthKind looks at ~/.claude/.credentials.json: an OAuth block means a
// subscription login, an API-key field an API key. Without the file, macOS
// keeps the login in the keychain (unknown), elsewhere there is none.
func claudeAuthKind(in AuthInput) AuthKind {
	keys, exists, err := readJSONShape(filepath.Join(in.Home, ".claude", ".credentials.json"))
	switch {
	case err != nil:
		return AuthKindUnknown
	case exists && rawPresent(keys, "claudeAiOauth"):
		return AuthSubscription
	case exists && (rawPresent(keys, "apiKey") || rawPresent(keys, "primaryApiKey")):
		return AuthAPIKey
	case exists:
		return AuthKindUnknown
	case in.Getenv("ANTHROPIC_API_KEY") != "":
		return AuthAPIKey
	case in.GOOS == "darwin":
		return AuthKindUnknown
	default:
		return AuthUnauthenticated
	}
}

const claudeLoginHint = "run `claude auth login` to sign in with a subscription, or set ANTHROPIC_API_KEY in the daemon's environment"

// claudeHealth runs `claude auth status`, which prints JSON with loggedIn,
// authMethod, apiProvider, apiKeySource and exits 1 when logged out.
func claudeHealth(ctx context.Context, in HealthInput) HealthVerdict {
	out := in.Run(ctx, "auth", "status")
	if v, done := commonHealthFailure("claude auth status", out); done {
		return v
	}
	return claudeVerdict(out)
}

// claudeVerdict is the pure decision over the status command's output.
func claudeVerdict(out ProbeOutput) HealthVerdict {
	var status map[string]any
	text := out.Stdout
	if i := strings.IndexByte(text, '{'); i >= 0 {
		text = text[i:]
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &status); err != nil {
		lower := strings.ToLower(out.Stdout + out.Stderr)
		if strings.Contains(lower, "expired") {
			return HealthVerdict{Status: StatusExpired, Reason: "Claude Code's login has expired: " + claudeLoginHint}
		}
		return HealthVerdict{Status: StatusUnknown, Reason: "`claude auth status` printed something card cannot read (exit " + itoa(out.ExitCode) + "): " + firstLine(out.Stderr, out.Stdout) + "; update Claude Code or run the command by hand"}
	}
	loggedIn, _ := status["loggedIn"].(bool)
	if loggedIn && out.ExitCode == 0 {
		return HealthVerdict{Status: StatusReady, Details: status}
	}
	lower := strings.ToLower(out.Stdout + out.Stderr)
	if strings.Contains(lower, "expired") {
		return HealthVerdict{Status: StatusExpired, Reason: "Claude Code's login has expired: " + claudeLoginHint, Details: status}
	}
	if !loggedIn {
		return HealthVerdict{Status: StatusNotConfigured, Reason: "Claude Code is not signed in: " + claudeLoginHint, Details: status}
	}
	return HealthVerdict{Status: StatusUnknown, Reason: "`claude auth status` says logged in but exited " + itoa(out.ExitCode) + ": " + firstLine(out.Stderr), Details: status}
}

// claudePackage: @anthropic-ai/claude-code's install script copies the
// native binary for this machine over bin/claude.exe (a placeholder until
// then), and the wrapper's version is the binary's.
var claudePackage = &npmPackage{Name: "@anthropic-ai/claude-code", Native: true}
