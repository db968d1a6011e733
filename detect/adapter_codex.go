package detect

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
)

func itoa(n int) string { return strconv.Itoa(n) }

func codexHome(in AuthInput) string {
	if h := in.Getenv("CODEX_HOME"); h != "" {
		return h
	}
	return filepath.Join(in.Home, ".codex")
}

// codexAuthKind reads $CODEX_HOME/auth.json's auth_mode (a mode name, not a
// secret) and otherwise which of the token or API-key fields is present.
func codexAuthKind(in AuthInput) AuthKind {
	keys, exists, err := readJSONShape(filepath.Join(codexHome(in), "auth.json"))
	if err != nil {
		return AuthKindUnknown
	}
	if !exists {
		return AuthUnauthenticated
	}
	switch strings.ToLower(rawString(keys, "auth_mode")) {
	case "chatgpt":
		return AuthSubscription
	case "apikey", "api_key":
		return AuthAPIKey
	}
	switch {
	case rawPresent(keys, "tokens"):
		return AuthSubscription
	case rawPresent(keys, "OPENAI_API_KEY"):
		return AuthAPIKey
	}
	return AuthKindUnknown
}

const codexLoginHint = "run `codex login` to sign in with ChatGPT, or `printenv OPENAI_API_KEY | codex login --with-api-key`"

// codexHealth runs `codex login status`, which prints one line on stderr and
// exits 1 when logged out.
func codexHealth(ctx context.Context, in HealthInput) HealthVerdict {
	out := in.Run(ctx, "login", "status")
	if v, done := commonHealthFailure("codex login status", out); done {
		return v
	}
	return codexVerdict(out)
}

// codexVerdict is the pure decision over the status line. Codex prints
// warnings (for example about a HOME under /tmp) on the same stream, so the
// status line is found by content, not position.
func codexVerdict(out ProbeOutput) HealthVerdict {
	var line string
	for _, l := range strings.Split(out.Stderr+"\n"+out.Stdout, "\n") {
		l = strings.TrimSpace(l)
		low := strings.ToLower(l)
		if strings.Contains(low, "logged in") || strings.Contains(low, "expired") {
			line = l
			break
		}
	}
	// "Logged in using an API key - sk-…abcd": the part after the dash is a
	// masked key; it is not kept.
	summary, _, _ := strings.Cut(line, " - ")
	details := map[string]any{}
	if summary != "" {
		details["status_line"] = summary
	}
	low := strings.ToLower(line)
	switch {
	case strings.HasPrefix(low, "not logged in"):
		return HealthVerdict{Status: StatusNotConfigured, Reason: "Codex CLI is not signed in: " + codexLoginHint, Details: details}
	case strings.Contains(low, "expired"):
		return HealthVerdict{Status: StatusExpired, Reason: "Codex CLI's login has expired: " + codexLoginHint, Details: details}
	case strings.HasPrefix(low, "logged in using chatgpt") && out.ExitCode == 0:
		details["auth_method"] = "chatgpt"
		return HealthVerdict{Status: StatusReady, Details: details}
	case strings.HasPrefix(low, "logged in using an api key") && out.ExitCode == 0:
		details["auth_method"] = "api_key"
		return HealthVerdict{Status: StatusReady, Details: details}
	case strings.HasPrefix(low, "logged in") && out.ExitCode == 0:
		return HealthVerdict{Status: StatusReady, Details: details}
	}
	return HealthVerdict{Status: StatusUnknown, Reason: "`codex login status` gave an answer card does not recognise (exit " + itoa(out.ExitCode) + "): " + firstLine(out.Stderr, out.Stdout), Details: details}
}

// codexPackage: bin/codex.js is a Node launcher that runs the native binary
// of the @openai/codex-<platform>-<arch> package (an npm alias whose own
// version reads "0.171.0-linux-x64"), or of its own vendor directory; the
// launcher's version is the one `codex --version` prints.
var codexPackage = &npmPackage{Name: "@openai/codex", Platform: func(goos, goarch string) []platformBinary {
	triple := map[string]string{
		"linux/amd64":  "x86_64-unknown-linux-musl",
		"linux/arm64":  "aarch64-unknown-linux-musl",
		"darwin/amd64": "x86_64-apple-darwin",
		"darwin/arm64": "aarch64-apple-darwin",
	}[goos+"/"+goarch]
	if triple == "" {
		return nil
	}
	bin := "vendor/" + triple + "/bin/codex"
	return []platformBinary{
		{Package: "@openai/codex-" + nodePlatform[goos] + "-" + nodeArch[goarch], Binary: bin},
		{Binary: bin},
	}
}}
